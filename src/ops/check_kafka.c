/*
 * check_kafka.c — the preflight's checks of Kafka (see check.h): the
 * cluster answers a metadata request in time (with the user's -X
 * properties: TLS and SASL are part of "reachable"), the topics the
 * outbox's events go to exist or the broker creates them, and the largest
 * payload fits the smallest of the producer's, the broker's and the
 * topics' record limits, and that the existing topics' replication factor
 * and min.insync.replicas let acks=all survive the loss of a broker. The
 * broker's settings come from DescribeConfigs when the cluster offers it
 * (and the principal may describe); otherwise they are said to be unknown
 * (and replication, which needs a topic's min.insync.replicas, is not
 * reported).
 *
 * The metadata request asks for all topics: naming one would make a broker
 * with auto.create.topics.enable create it, and a preflight creates
 * nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <pthread.h>

#include "check_internal.h"
#include "outbox_relay/kafka/kafka_conf.h"

#define KAFKA_TIMEOUT_MS 10000
#define MAX_DESCRIBED 8 /* topics whose max.message.bytes is read */

struct broker_conf {
    int auto_create;       /* 1 true, 0 false, -1 unknown */
    long long broker_max;  /* message.max.bytes, -1 unknown */
    long long topic_max;   /* smallest max.message.bytes of the described topics, -1 */
    char topic_min_name[256];
    int min_isr[MAX_DESCRIBED]; /* min.insync.replicas of the described topics, -1 */
    char why_unknown[300];
};

static const char *brokers_of(const struct relay_config *cfg)
{
    if (cfg->brokers != NULL && *cfg->brokers != '\0')
        return cfg->brokers;
    return config_kafka_get(cfg, "bootstrap.servers");
}

/* The first error librdkafka reported, for the FAIL's detail (served by
 * rd_kafka_poll; the lock in case a future librdkafka calls it from one of
 * its own threads). */
struct first_error {
    pthread_mutex_t lock;
    char text[400];
    char advice[768]; /* a refused SASL login: what to check (kafka_conf.h) */
};

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct first_error *le = opaque;
    pthread_mutex_lock(&le->lock);
    if (le->text[0] == '\0') /* the first is the cause; "all brokers are down" follows */
        snprintf(le->text, sizeof le->text, "%s", reason ? reason : "");
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION && le->advice[0] == '\0')
        kafka_conf_auth_advice_of(rk, le->advice, sizeof le->advice);
    pthread_mutex_unlock(&le->lock);
}

/* The configuration of the producer the relayer would build, without its
 * delivery machinery. *client_max gets its message.max.bytes. NULL with
 * err. */
static rd_kafka_conf_t *client_conf(const struct relay_config *cfg, long long *client_max,
                                    char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *b = cfg->brokers;
    if (kafka_conf_route_log(conf, err, errlen) < 0 ||
        kafka_conf_set(conf, "client.id", "outbox-relay-check", err, errlen) < 0 ||
        (b != NULL && *b != '\0' && kafka_conf_set(conf, "bootstrap.servers", b, err, errlen) < 0))
        goto fail;
    for (size_t i = 0; i < cfg->nkafka; i++)
        if (kafka_conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, err, errlen) < 0)
            goto fail;
    char v[32];
    size_t vlen = sizeof v;
    *client_max = rd_kafka_conf_get(conf, "message.max.bytes", v, &vlen) == RD_KAFKA_CONF_OK
                      ? atoll(v)
                      : 1000000;
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

/* The client on that configuration (taken over, also on failure). */
static rd_kafka_t *client_new(rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    char e[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof e);
    if (rk == NULL) {
        snprintf(err, errlen, "cannot create a Kafka client: %s", e);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* DescribeConfigs of the broker that answered and of up to MAX_DESCRIBED
 * existing topics. Leaves bc's fields unknown when it cannot. */
static void describe(rd_kafka_t *rk, int broker_id, char *const *topics, size_t ntopics,
                     struct broker_conf *bc)
{
    rd_kafka_ConfigResource_t *res[1 + MAX_DESCRIBED];
    size_t n = 0;
    char id[16];
    snprintf(id, sizeof id, "%d", broker_id);
    res[n++] = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_BROKER, id);
    for (size_t i = 0; i < ntopics && n < 1 + MAX_DESCRIBED; i++)
        res[n++] = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topics[i]);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    char e[256];
    rd_kafka_AdminOptions_set_request_timeout(opt, KAFKA_TIMEOUT_MS, e, sizeof e);
    rd_kafka_DescribeConfigs(rk, res, n, opt, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, KAFKA_TIMEOUT_MS + 2000);
    if (ev == NULL) {
        snprintf(bc->why_unknown, sizeof bc->why_unknown, "DescribeConfigs got no answer");
    } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(bc->why_unknown, sizeof bc->why_unknown, "DescribeConfigs failed: %s",
                 rd_kafka_event_error_string(ev));
    } else {
        const rd_kafka_DescribeConfigs_result_t *r = rd_kafka_event_DescribeConfigs_result(ev);
        size_t nr = 0;
        const rd_kafka_ConfigResource_t **rs = rd_kafka_DescribeConfigs_result_resources(r, &nr);
        for (size_t i = 0; i < nr; i++) {
            if (rd_kafka_ConfigResource_error(rs[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
                snprintf(bc->why_unknown, sizeof bc->why_unknown, "DescribeConfigs of %s: %s",
                         rd_kafka_ConfigResource_name(rs[i]),
                         rd_kafka_ConfigResource_error_string(rs[i]));
                continue;
            }
            bool broker = rd_kafka_ConfigResource_type(rs[i]) == RD_KAFKA_RESOURCE_BROKER;
            size_t nc = 0;
            const rd_kafka_ConfigEntry_t **cs = rd_kafka_ConfigResource_configs(rs[i], &nc);
            for (size_t j = 0; j < nc; j++) {
                const char *name = rd_kafka_ConfigEntry_name(cs[j]);
                const char *value = rd_kafka_ConfigEntry_value(cs[j]);
                if (value == NULL)
                    continue;
                if (!broker && strcmp(name, "min.insync.replicas") == 0) {
                    for (size_t k = 0; k < ntopics && k < MAX_DESCRIBED; k++)
                        if (strcmp(topics[k], rd_kafka_ConfigResource_name(rs[i])) == 0)
                            bc->min_isr[k] = atoi(value);
                } else if (broker && strcmp(name, "auto.create.topics.enable") == 0)
                    bc->auto_create = strcmp(value, "true") == 0;
                else if (broker && strcmp(name, "message.max.bytes") == 0)
                    bc->broker_max = atoll(value);
                else if (!broker && strcmp(name, "max.message.bytes") == 0 &&
                         (bc->topic_max < 0 || atoll(value) < bc->topic_max)) {
                    bc->topic_max = atoll(value);
                    snprintf(bc->topic_min_name, sizeof bc->topic_min_name, "%s",
                             rd_kafka_ConfigResource_name(rs[i]));
                }
            }
        }
    }
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_queue_destroy(q);
    for (size_t i = 0; i < n; i++)
        rd_kafka_ConfigResource_destroy(res[i]);
}

/* Appends name to a comma-separated list in buf. */
static void list_add(char *buf, size_t cap, const char *name)
{
    size_t n = strlen(buf);
    if (n + strlen(name) + 3 < cap)
        snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", name);
}

static void check_topics(struct check_ctx *c, const struct rd_kafka_metadata *md,
                         const struct broker_conf *bc)
{
    const struct relay_config *cfg = c->cfg;
    bool templated = strchr(cfg->topic, '{') != NULL;
    char present[1024] = "", missing[1024] = "";
    size_t npresent = 0, nmissing = 0, nneeded = 0;
    const char *need[CHECK_MAX_TOPICS + 2];
    for (size_t i = 0; i < c->ntopics; i++)
        need[nneeded++] = c->topics[i];
    if (!templated && c->ntopics == 0)
        need[nneeded++] = cfg->topic;
    if (cfg->on_poison == POISON_DEAD_LETTER)
        need[nneeded++] = cfg->dead_letter_topic;
    for (size_t i = 0; i < nneeded; i++) {
        bool found = false;
        for (int t = 0; t < md->topic_cnt && !found; t++)
            found = strcmp(md->topics[t].topic, need[i]) == 0 &&
                    md->topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR;
        if (found)
            npresent++, list_add(present, sizeof present, need[i]);
        else
            nmissing++, list_add(missing, sizeof missing, need[i]);
    }
    const char *ac = bc->auto_create == 1   ? "auto.create.topics.enable = true"
                     : bc->auto_create == 0 ? "auto.create.topics.enable = false"
                                            : "auto.create.topics.enable unknown";
    char fix[1400];
    snprintf(fix, sizeof fix, "create the topic(s) with the partitions and replication you "
             "want (kafka-topics.sh --create --topic NAME), or set auto.create.topics.enable "
             "= true on the brokers");
    enum check_status st = check_classify_topics(nneeded, nmissing, bc->auto_create);
    if (nmissing > 0) {
        check_report_addf(c->report, "topics", st, st == CHECK_PASS ? NULL : fix,
                          "missing: %s (%s%s%s)%s%s", missing, ac,
                          bc->auto_create < 0 && *bc->why_unknown ? ": " : "",
                          bc->auto_create < 0 ? bc->why_unknown : "",
                          npresent ? "; present: " : "", present);
    } else if (nneeded == 0) {
        check_report_addf(c->report, "topics", st, st == CHECK_PASS ? NULL : fix,
                          "%s, so the topics of --topic %s cannot be listed yet (%s%s%s)",
                          c->topics_known ? "the outbox holds no event" : "cannot read the "
                                                                          "outbox's types",
                          cfg->topic, ac, bc->auto_create < 0 && *bc->why_unknown ? ": " : "",
                          bc->auto_create < 0 ? bc->why_unknown : "");
    } else {
        check_report_addf(c->report, "topics", st, NULL,
                          "%zu topic(s) the outbox's events go to exist: %s%s", npresent,
                          present,
                          templated && bc->auto_create == 0
                              ? " (auto.create.topics.enable = false: create the topic of a "
                                "new event type before its first event)"
                              : "");
    }
}

static void check_message_size(struct check_ctx *c, long long client_max,
                               const struct broker_conf *bc)
{
    const char *which;
    long long limit = check_record_limit(client_max, bc ? bc->broker_max : -1,
                                         bc ? bc->topic_max : -1, &which);
    char fix[600];
    snprintf(fix, sizeof fix, "raise message.max.bytes on the brokers (and max.message.bytes "
             "of the topics) and -X message.max.bytes to at least %lld, or make the payloads "
             "smaller", c->max_payload + CHECK_RECORD_OVERHEAD);
    const char *broker_note = bc == NULL || bc->broker_max >= 0 ? ""
                              : "; the broker's limit is unknown";
    if (c->max_payload < 0) {
        check_report_addf(c->report, "message_size", CHECK_WARN,
                          "make the outbox readable (see the checks above)",
                          "largest payload unknown (%s); limit %lld bytes (%s)",
                          *c->payload_scope ? c->payload_scope : "no payload column", limit,
                          which);
    } else if (c->payload_rows == 0) {
        check_report_addf(c->report, "message_size", CHECK_PASS, NULL,
                          "the outbox is empty: no payload to measure; records up to %lld bytes "
                          "(%s)%s", limit, which, broker_note);
    } else if (check_record_fits(c->max_payload, limit) == CHECK_FAIL) {
        check_report_addf(c->report, "message_size", CHECK_FAIL, fix,
                          "the largest payload (%lld bytes, of %s) with a record's key, "
                          "headers and framing exceeds %lld bytes (%s): such an event can "
                          "never be delivered", c->max_payload, c->payload_scope, limit, which);
    } else {
        check_report_addf(c->report, "message_size", CHECK_PASS, NULL,
                          "the largest payload (%lld bytes, of %s) fits %lld bytes (%s)%s",
                          c->max_payload, c->payload_scope, limit, which, broker_note);
    }
}

/* Replication of the existing topics that were described (topics[i]'s
 * min.insync.replicas in bc->min_isr[i]); the replication factor is the
 * fewest replicas of any of its partitions. The worst verdict of them;
 * nothing when no topic's min.insync.replicas is known. */
static void check_replication(struct check_ctx *c, const struct rd_kafka_metadata *md,
                              char *const *topics, size_t ntopics, const struct broker_conf *bc)
{
    char detail[1400] = "";
    enum check_status worst = CHECK_PASS;
    size_t judged = 0;
    for (size_t i = 0; i < ntopics; i++) {
        if (bc->min_isr[i] < 0)
            continue;
        int rf = -1;
        for (int t = 0; t < md->topic_cnt; t++) {
            if (strcmp(md->topics[t].topic, topics[i]) != 0)
                continue;
            for (int p = 0; p < md->topics[t].partition_cnt; p++)
                if (rf < 0 || md->topics[t].partitions[p].replica_cnt < rf)
                    rf = md->topics[t].partitions[p].replica_cnt;
        }
        if (rf < 0)
            continue;
        enum check_status st = check_classify_replication(rf, bc->min_isr[i]);
        if (st > worst)
            worst = st;
        char one[400];
        snprintf(one, sizeof one, "%s (replication factor %d, min.insync.replicas %d%s)",
                 topics[i], rf, bc->min_isr[i],
                 st == CHECK_FAIL   ? ": every write is refused"
                 : st == CHECK_WARN ? (rf < 3 ? ": one broker down leaves one copy or none"
                                              : ": an acknowledged event may be on one broker "
                                                "only")
                                    : "");
        list_add(detail, sizeof detail, one);
        judged++;
    }
    if (judged == 0)
        return;
    check_report_addf(c->report, "replication", worst,
                      worst == CHECK_PASS ? NULL
                                          : "give the topics replication factor 3 and "
                                            "min.insync.replicas 2 (kafka-configs.sh --alter "
                                            "--entity-type topics --add-config "
                                            "min.insync.replicas=2; more replicas: "
                                            "kafka-reassign-partitions.sh)",
                      "%s: %s",
                      worst == CHECK_PASS   ? "acks=all survives the loss of one broker"
                      : worst == CHECK_WARN ? "acks=all does not survive the loss of one broker"
                                            : "acks=all cannot be met, the relayer would wait "
                                              "forever",
                      detail);
}

void check_kafka(struct check_ctx *c)
{
    const struct relay_config *cfg = c->cfg;
    char err[512];
    long long client_max = 1000000;
    const char *brokers = brokers_of(cfg);
    if (brokers == NULL || *brokers == '\0') {
        check_report_add(c->report, "kafka", CHECK_WARN,
                         "skipped: no --brokers given, so Kafka (reachable, topics, the "
                         "broker's record limit) was not checked",
                         "run check with --brokers HOST:PORT (and the -X properties the "
                         "relayer uses)");
        rd_kafka_conf_t *conf = client_conf(cfg, &client_max, err, sizeof err);
        if (conf != NULL)
            rd_kafka_conf_destroy(conf);
        if (c->table_exists)
            check_message_size(c, client_max, NULL);
        return;
    }
    struct first_error le = {.lock = PTHREAD_MUTEX_INITIALIZER};
    rd_kafka_conf_t *conf = client_conf(cfg, &client_max, err, sizeof err);
    if (conf != NULL) {
        rd_kafka_conf_set_opaque(conf, &le);
        rd_kafka_conf_set_error_cb(conf, on_error);
    }
    rd_kafka_t *rk = conf != NULL ? client_new(conf, err, sizeof err) : NULL;
    if (rk == NULL) {
        check_report_add(c->report, "kafka", CHECK_FAIL, err, "fix the -X properties");
        return;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, KAFKA_TIMEOUT_MS);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_poll(rk, 0);  /* serves the queued errors to on_error */
        rd_kafka_destroy(rk); /* its threads are gone: le is ours again */
        check_report_addf(c->report, "kafka", CHECK_FAIL,
                          *le.advice ? le.advice
                                     : "check --brokers, that the brokers run and that this "
                                       "host may reach them; with TLS or SASL, the -X security "
                                       "properties",
                          "no metadata from Kafka at %s within %d s: %s%s%s", brokers,
                          KAFKA_TIMEOUT_MS / 1000, rd_kafka_err2str(e), *le.text ? "; " : "",
                          le.text);
        if (c->table_exists)
            check_message_size(c, client_max, NULL);
        return;
    }
    check_report_addf(c->report, "kafka", CHECK_PASS, NULL,
                      "Kafka at %s answered: %d broker(s), %d topic(s)", brokers,
                      md->broker_cnt, md->topic_cnt);
    struct broker_conf bc = {.auto_create = -1, .broker_max = -1, .topic_max = -1};
    for (size_t i = 0; i < MAX_DESCRIBED; i++)
        bc.min_isr[i] = -1;
    char *existing[MAX_DESCRIBED];
    size_t nexisting = 0;
    for (size_t i = 0; i < c->ntopics && nexisting < MAX_DESCRIBED; i++)
        for (int t = 0; t < md->topic_cnt; t++)
            if (strcmp(md->topics[t].topic, c->topics[i]) == 0 && md->topics[t].err == 0) {
                existing[nexisting++] = c->topics[i];
                break;
            }
    describe(rk, md->orig_broker_id, existing, nexisting, &bc);
    check_topics(c, md, &bc);
    if (c->table_exists)
        check_message_size(c, client_max, &bc);
    check_replication(c, md, existing, nexisting, &bc);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
}
