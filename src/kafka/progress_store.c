/*
 * progress_store.c — the progress topic: its creation or check, and the
 * reader of the slot's last committed progress record (see
 * progress_store.h). The admin requests go through the sink's producer;
 * the reader is a short-lived consumer of its own with
 * isolation.level=read_committed, assigned one partition (no group, no
 * offsets committed), read from the beginning until librdkafka says the
 * partition's end (enable.partition.eof: for read_committed, the last
 * stable offset).
 */
#include "outbox_relay/kafka/progress_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_internal.h"

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/kafka/kafka_conf.h"

/* Whom to call while waiting on the brokers (progress_topic_ensure's tick):
 * every 100 ms of an admin request's wait, and between tries of a metadata
 * request (the first waits TICK_MS). */
struct waiting {
    void (*tick)(void *ctx);
    void *ctx;
};

#define TICK_MS 1000

static void tick(const struct waiting *w)
{
    if (w->tick != NULL)
        w->tick(w->ctx);
}

/* The topic's partition count from the metadata: > 0, 0 when it does not
 * exist, -1 when the metadata could not be had (err set). */
static int partitions_of(rd_kafka_t *rk, const char *topic, int timeout_ms,
                         const struct waiting *w, char *err, size_t errlen)
{
    /* All topics: a request for this one alone would have the broker
     * auto-create it (auto.create.topics.enable), with its default
     * cleanup.policy=delete. Asked with a wait of TICK_MS first, ticking
     * between the tries, each try waiting twice as long as the one before
     * (a broker slower than one try's wait still answers a later one). */
    const struct rd_kafka_metadata *md = NULL;
    double end = mono_now() + timeout_ms / 1000.0;
    int wait_ms = TICK_MS;
    rd_kafka_resp_err_t e;
    for (;;) {
        double left_ms = (end - mono_now()) * 1000;
        e = rd_kafka_metadata(rk, 1, NULL, &md,
                              left_ms < wait_ms ? (left_ms > 1 ? (int) left_ms : 1) : wait_ms);
        if (e != RD_KAFKA_RESP_ERR__TIMED_OUT || mono_now() >= end)
            break;
        tick(w);
        wait_ms *= 2;
    }
    int n = 0;
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "progress topic %s: metadata request failed: %s", topic,
                 rd_kafka_err2str(e));
        n = -1;
    }
    for (int i = 0; n == 0 && md != NULL && i < md->topic_cnt; i++) {
        if (strcmp(md->topics[i].topic, topic) != 0)
            continue;
        if (md->topics[i].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            break;
        if (md->topics[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            snprintf(err, errlen, "progress topic %s: %s", topic,
                     rd_kafka_err2str(md->topics[i].err));
            n = -1;
        } else {
            n = md->topics[i].partition_cnt;
        }
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    return n;
}

/* Waits for one admin result on q, ticking; NULL on timeout. */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q, int timeout_ms, const struct waiting *w)
{
    double end = mono_now() + timeout_ms / 1000.0;
    while (mono_now() < end) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 100);
        if (ev != NULL)
            return ev;
        tick(w);
    }
    return NULL;
}

static int create_topic(rd_kafka_t *rk, const char *topic, int timeout_ms,
                        const struct waiting *w, char *err, size_t errlen)
{
    char e[256];
    int rc = 0;
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, 1, -1, e, sizeof e);
    if (nt == NULL) {
        snprintf(err, errlen, "progress topic %s: %s", topic, e);
        return -1;
    }
    rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *ao = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_request_timeout(ao, timeout_ms, NULL, 0);
    rd_kafka_CreateTopics(rk, &nt, 1, ao, q);
    rd_kafka_event_t *ev = admin_wait(q, timeout_ms + 1000, w);
    if (ev == NULL) {
        snprintf(err, errlen, "progress topic %s: creating it timed out", topic);
    } else if (rd_kafka_event_error(ev)) {
        snprintf(err, errlen, "progress topic %s: cannot create it: %s", topic,
                 rd_kafka_event_error_string(ev));
    } else {
        size_t n = 0;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        rd_kafka_resp_err_t te = n == 1 ? rd_kafka_topic_result_error(res[0])
                                        : RD_KAFKA_RESP_ERR__FAIL;
        if (te == RD_KAFKA_RESP_ERR_NO_ERROR) {
            log_info("progress topic %s: created, cleanup.policy=compact", topic);
            rc = 1;
        } else if (te == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            snprintf(err, errlen, "progress topic %s: made by someone else meanwhile", topic);
            rc = 0; /* checked on the next try */
        } else {
            snprintf(err, errlen, "progress topic %s: cannot create it: %s%s", topic,
                     n == 1 && rd_kafka_topic_result_error_string(res[0])
                         ? rd_kafka_topic_result_error_string(res[0])
                         : rd_kafka_err2str(te),
                     te == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                             te == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED
                         ? "; create it yourself with cleanup.policy=compact, or grant CREATE"
                         : "");
            rc = te == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                         te == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ||
                         te == RD_KAFKA_RESP_ERR_INVALID_CONFIG ||
                         te == RD_KAFKA_RESP_ERR_POLICY_VIOLATION
                     ? -1
                     : 0;
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(ao);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

/* The topic's cleanup.policy into buf: 1, 0 retriable failure, -1. */
static int cleanup_policy(rd_kafka_t *rk, const char *topic, int timeout_ms,
                          const struct waiting *w, char *buf, size_t cap, char *err,
                          size_t errlen)
{
    int rc = 0;
    rd_kafka_ConfigResource_t *cr = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *ao =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_AdminOptions_set_request_timeout(ao, timeout_ms, NULL, 0);
    rd_kafka_DescribeConfigs(rk, &cr, 1, ao, q);
    rd_kafka_event_t *ev = admin_wait(q, timeout_ms + 1000, w);
    snprintf(err, errlen, "progress topic %s: cannot read its cleanup.policy: %s", topic,
             ev == NULL ? "timed out" : rd_kafka_event_error_string(ev));
    if (ev != NULL && !rd_kafka_event_error(ev)) {
        size_t n = 0;
        const rd_kafka_ConfigResource_t **res = rd_kafka_DescribeConfigs_result_resources(
            rd_kafka_event_DescribeConfigs_result(ev), &n);
        size_t nc = 0;
        const rd_kafka_ConfigEntry_t **ents =
            n == 1 ? rd_kafka_ConfigResource_configs(res[0], &nc) : NULL;
        for (size_t i = 0; i < nc; i++) {
            if (strcmp(rd_kafka_ConfigEntry_name(ents[i]), "cleanup.policy") == 0) {
                const char *v = rd_kafka_ConfigEntry_value(ents[i]);
                snprintf(buf, cap, "%s", v ? v : "");
                rc = 1;
            }
        }
        if (n == 1 && rc == 0 && rd_kafka_ConfigResource_error(res[0]))
            snprintf(err, errlen, "progress topic %s: cannot read its cleanup.policy: %s", topic,
                     rd_kafka_ConfigResource_error_string(res[0]));
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(ao);
    rd_kafka_queue_destroy(q);
    rd_kafka_ConfigResource_destroy(cr);
    return rc;
}

int progress_topic_ensure(struct sink *sk, const char *topic, int timeout_ms,
                          void (*tick_fn)(void *ctx), void *tick_ctx, char *err, size_t errlen)
{
    const struct waiting w = {tick_fn, tick_ctx};
    int n = partitions_of(sk->rk, topic, timeout_ms, &w, err, errlen);
    if (n < 0)
        return 0;
    if (n == 0) {
        int rc = create_topic(sk->rk, topic, timeout_ms, &w, err, errlen);
        if (rc <= 0)
            return rc;
        /* the metadata takes a moment to show it everywhere */
        for (int i = 0;
             i < 50 && (n = partitions_of(sk->rk, topic, timeout_ms, &w, err, errlen)) == 0; i++) {
            rd_kafka_poll(sk->rk, 100);
            tick(&w);
        }
        if (n <= 0) {
            if (n == 0)
                snprintf(err, errlen, "progress topic %s: created but not in the metadata yet",
                         topic);
            return 0;
        }
        return n;
    }
    char policy[128] = "";
    int rc = cleanup_policy(sk->rk, topic, timeout_ms, &w, policy, sizeof policy, err, errlen);
    if (rc <= 0)
        return rc;
    if (strstr(policy, "compact") == NULL) {
        snprintf(err, errlen, "progress topic %s has cleanup.policy=%s: retention would delete "
                 "the progress records and a restart would send events again. Run "
                 "kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config "
                 "cleanup.policy=compact, or name another --progress-topic", topic, policy, topic);
        return -1;
    }
    return n;
}

/* What the reader saw of records that are not ours. */
struct passed_over {
    size_t foreign;
    char foreign_id[PROGRESS_NAME_MAX];
    bool unknown;
    struct progress_record unknown_rec;
};

/* One record of the slot's keys: into *rec when ours and highest. Returns
 * 1 taken or passed over, -1 refused (err set). */
static int take(const rd_kafka_message_t *m, const char *topic,
                const struct progress_owner_id *who, struct progress_record *rec, bool *found,
                struct passed_over *po, char *err, size_t errlen)
{
    struct progress_record r;
    char perr[256];
    if (progress_record_parse(m->payload, m->len, &r, perr, sizeof perr) < 0) {
        snprintf(err, errlen, "progress topic %s [%d] offset %lld, key %.*s: %s", topic,
                 (int) m->partition, (long long) m->offset, (int) m->key_len,
                 (const char *) m->key, perr);
        return -1;
    }
    if (strcmp(r.slot, who->slot) != 0)
        return 1; /* under our key, yet of another slot: not ours to read */
    switch (progress_record_owner(&r, who->system_id, who->txn_id)) {
    case PROGRESS_FOREIGN:
        po->foreign++;
        snprintf(po->foreign_id, sizeof po->foreign_id, "%s",
                 r.system_id[0] ? r.system_id : r.transactional_id);
        return 1;
    case PROGRESS_UNKNOWN:
        if (!po->unknown || r.lsn > po->unknown_rec.lsn)
            po->unknown_rec = r;
        po->unknown = true;
        return 1;
    case PROGRESS_OURS:
    default:
        break;
    }
    if (who->database && *who->database && r.database[0] &&
        strcmp(r.database, who->database) != 0) {
        snprintf(err, errlen, "progress topic %s: the record of slot %s is of database "
                 "\"%s\", not \"%s\": two sources use the same slot name with one "
                 "progress topic; give one of them another --slot or --progress-topic",
                 topic, who->slot, r.database, who->database);
        return -1;
    }
    if (!*found || r.lsn > rec->lsn)
        *rec = r;
    *found = true;
    return 1;
}

int progress_read(const struct progress_reader_options *opts, const char *topic, int32_t nparts,
                  const struct progress_owner_id *who, int timeout_ms,
                  struct progress_record *rec, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk = NULL;
    rd_kafka_topic_partition_list_t *parts = NULL;
    int rc = -2;
    char key[PROGRESS_SYSID_MAX + PROGRESS_NAME_MAX];
    const char *slot = who->slot;
    size_t slot_len = strlen(slot);
    bool found = false;
    struct passed_over po = {0};
    char e[512];
    if (progress_record_key(who->system_id, slot, key, sizeof key) < 0) {
        snprintf(err, errlen, "progress topic %s: slot name %s too long for a key", topic, slot);
        return -1;
    }
    size_t key_len = strlen(key);
    /* The partition of the key, and of the slot's name alone (the key of
     * records written before the system identifier was added). */
    int32_t part[2] = {progress_partition(key, key_len, nparts),
                       progress_partition(slot, slot_len, nparts)};
    int nassigned = part[1] != part[0] ? 2 : 1;
    if ((opts->brokers && *opts->brokers &&
         kafka_conf_set(conf, "bootstrap.servers", opts->brokers, err, errlen) < 0) ||
        kafka_conf_set(conf, "client.id", "outbox-relay-progress", err, errlen) < 0 ||
        /* assign() wants a group even with nothing subscribed or committed */
        kafka_conf_set(conf, "group.id", "outbox-relay-progress-reader", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.partition.eof", "true", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.commit", "false", err, errlen) < 0 ||
        kafka_conf_route_log(conf, err, errlen) < 0) {
        rc = -1;
        goto done;
    }
    for (size_t i = 0; i < opts->nkafka; i++) {
        /* the producer's and the guarantees' own are not the reader's */
        const char *k = opts->kafka[2 * i];
        if (strcmp(k, "transactional.id") == 0 || strcmp(k, "enable.idempotence") == 0 ||
            strcmp(k, "isolation.level") == 0 || strcmp(k, "group.id") == 0)
            continue;
        if (rd_kafka_conf_set(conf, k, opts->kafka[2 * i + 1], e, sizeof e) != RD_KAFKA_CONF_OK)
            continue; /* a producer-only property */
    }
    if (kafka_conf_set(conf, "isolation.level", "read_committed", err, errlen) < 0) {
        rc = -1;
        goto done;
    }
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof e);
    if (rk == NULL) {
        snprintf(err, errlen, "cannot create the progress reader: %s", e);
        rc = -1;
        goto done;
    }
    conf = NULL;
    parts = rd_kafka_topic_partition_list_new(2);
    for (int i = 0; i < nassigned; i++)
        rd_kafka_topic_partition_list_add(parts, topic, part[i])->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t ae = rd_kafka_assign(rk, parts);
    if (ae != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "progress topic %s [%d]: cannot assign: %s", topic, (int) part[0],
                 rd_kafka_err2str(ae));
        goto done;
    }
    double end = mono_now() + timeout_ms / 1000.0;
    size_t records = 0;
    bool at_end[2] = {false, false};
    while (!at_end[0] || (nassigned == 2 && !at_end[1])) {
        if (mono_now() >= end) {
            snprintf(err, errlen, "progress topic %s [%d]: not read to its end within %d ms (%zu "
                     "records read)", topic, (int) part[0], timeout_ms, records);
            goto done;
        }
        if (opts->tick)
            opts->tick(opts->tick_ctx);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            at_end[m->partition == part[0] ? 0 : 1] = true;
            rd_kafka_message_destroy(m);
            continue;
        }
        if (m->err) {
            snprintf(err, errlen, "progress topic %s [%d]: %s", topic, (int) m->partition,
                     rd_kafka_message_errstr(m));
            rd_kafka_resp_err_t me = m->err;
            rd_kafka_message_destroy(m);
            if (me == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                me == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED) {
                rc = -1;
                goto done;
            }
            continue; /* transient: librdkafka goes on fetching */
        }
        records++;
        bool legacy_key = m->key_len == slot_len && memcmp(m->key, slot, slot_len) == 0;
        bool ours_key = legacy_key || (m->key_len == key_len && memcmp(m->key, key, key_len) == 0);
        if (legacy_key && m->len == 0)
            po.unknown = false; /* a tombstone: the old record deleted (the way out below) */
        int t = ours_key && m->len > 0 ? take(m, topic, who, rec, &found, &po, err, errlen) : 1;
        rd_kafka_message_destroy(m);
        if (t < 0) {
            rc = -1;
            goto done;
        }
    }
    if (po.foreign > 0)
        log_info("progress topic %s: %zu record(s) of slot %s from another PostgreSQL cluster "
                 "(%s) passed over; this one's system identifier is %s", topic, po.foreign,
                 slot, po.foreign_id, who->system_id ? who->system_id : "unknown");
    if (!found && po.unknown) {
        snprintf(err, errlen, "progress topic %s: the progress record of slot %s (lsn " LSN_FMT
                 ", transactional.id %s) was written by an older outbox-relay, without the "
                 "PostgreSQL system identifier, so it cannot be told apart from another "
                 "cluster's slot of the same name, and taking another cluster's progress would "
                 "skip events. If it is this cluster's (system identifier %s): delete it (an "
                 "empty value, a tombstone, with key %s), and the relayer starts from the "
                 "slot's confirmed position, sending again what Kafka may already hold after "
                 "it; or name another --progress-topic", topic, slot,
                 LSN_ARGS(po.unknown_rec.lsn), po.unknown_rec.transactional_id,
                 who->system_id ? who->system_id : "unknown", slot);
        rc = -1;
        goto done;
    }
    rc = found ? 1 : 0;
done:
    if (parts)
        rd_kafka_topic_partition_list_destroy(parts);
    if (rk) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    if (conf)
        rd_kafka_conf_destroy(conf);
    return rc;
}
