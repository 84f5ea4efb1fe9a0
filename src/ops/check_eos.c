/*
 * check_eos.c — the preflight's checks of what --delivery exactly-once
 * needs from Kafka (see check.h and docs/how-it-works.md): the transaction
 * coordinator answers an init_transactions, the brokers'
 * transaction.max.timeout.ms admits the producer's transaction.timeout.ms,
 * and the progress topic is compacted (or missing: the relayer creates it
 * so). Only with --delivery exactly-once and --brokers.
 *
 * The coordinator is asked with a transactional id of the check's own,
 * "outbox-relay.<slot>.check", never the relayer's: initialising the
 * relayer's id (outbox-relay.<system id>.<slot>) would fence a running
 * relayer. It fits an ACL on the prefix outbox-relay., and the coordinator forgets it after
 * transactional.id.expiration.ms (7 days by default). The metadata request
 * asks for all topics, so no broker auto-creates the progress topic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "check_internal.h"
#include "outbox_relay/core/progress_record.h"
#include "outbox_relay/kafka/kafka_conf.h"

#define EOS_TIMEOUT_MS 10000

/* The relayer's transaction.timeout.ms: -X, else librdkafka's 60000 (what
 * the sink uses). */
static long long our_txn_timeout(const struct relay_config *cfg)
{
    const char *v = config_kafka_get(cfg, "transaction.timeout.ms");
    return v != NULL ? atoll(v) : 60000;
}

/* DescribeConfigs of broker `broker_id` and of the progress topic (when it
 * exists): transaction.max.timeout.ms into *max_ms (-1 unknown), the
 * topic's cleanup.policy into policy. */
static void describe(rd_kafka_t *rk, int broker_id, const char *topic, bool exists,
                     long long *max_ms, char *policy, size_t cap, char *why, size_t whylen)
{
    rd_kafka_ConfigResource_t *res[2];
    size_t n = 0;
    char id[16];
    snprintf(id, sizeof id, "%d", broker_id);
    res[n++] = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_BROKER, id);
    if (exists)
        res[n++] = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_AdminOptions_set_request_timeout(opt, EOS_TIMEOUT_MS, NULL, 0);
    rd_kafka_DescribeConfigs(rk, res, n, opt, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, EOS_TIMEOUT_MS + 2000);
    if (ev == NULL || rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(why, whylen, "DescribeConfigs: %s",
                 ev ? rd_kafka_event_error_string(ev) : "no answer");
    } else {
        size_t nr = 0;
        const rd_kafka_ConfigResource_t **rs = rd_kafka_DescribeConfigs_result_resources(
            rd_kafka_event_DescribeConfigs_result(ev), &nr);
        for (size_t i = 0; i < nr; i++) {
            if (rd_kafka_ConfigResource_error(rs[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
                snprintf(why, whylen, "DescribeConfigs of %s: %s",
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
                if (broker && strcmp(name, "transaction.max.timeout.ms") == 0)
                    *max_ms = atoll(value);
                else if (!broker && strcmp(name, "cleanup.policy") == 0)
                    snprintf(policy, cap, "%s", value);
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

/* A transactional producer on the relayer's settings with the check's own
 * id; NULL with err. */
static rd_kafka_t *client_new(const struct relay_config *cfg, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char id[PROGRESS_NAME_MAX + 8], e[256];
    int n = progress_transactional_id(NULL, cfg->slot, id, sizeof id - 6);
    if (n < 0)
        snprintf(id, sizeof id, "outbox-relay.check");
    else
        strcat(id, ".check");
    if (kafka_conf_route_log(conf, err, errlen) < 0 ||
        kafka_conf_set(conf, "client.id", "outbox-relay-check", err, errlen) < 0 ||
        (cfg->brokers && *cfg->brokers &&
         kafka_conf_set(conf, "bootstrap.servers", cfg->brokers, err, errlen) < 0))
        goto fail;
    for (size_t i = 0; i < cfg->nkafka; i++)
        if (kafka_conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, err, errlen) < 0)
            goto fail;
    if (kafka_conf_set(conf, "transactional.id", id, err, errlen) < 0)
        goto fail;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof e);
    if (rk == NULL) {
        snprintf(err, errlen, "cannot create a Kafka client: %s", e);
        goto fail;
    }
    return rk;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

void check_exactly_once(struct check_ctx *c)
{
    const struct relay_config *cfg = c->cfg;
    const char *brokers = cfg->brokers && *cfg->brokers ? cfg->brokers
                                                         : config_kafka_get(cfg, "bootstrap.servers");
    if (cfg->delivery != DELIVERY_EXACTLY_ONCE || brokers == NULL || *brokers == '\0')
        return; /* check_kafka said why Kafka was not checked */
    char err[512];
    rd_kafka_t *rk = client_new(cfg, err, sizeof err);
    if (rk == NULL) {
        check_report_add(c->report, "transactions", CHECK_FAIL, err, "fix the -X properties");
        return;
    }
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 1, NULL, &md, EOS_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        return; /* check_kafka's FAIL says it */
    }
    bool exists = false;
    for (int t = 0; t < md->topic_cnt; t++)
        if (strcmp(md->topics[t].topic, cfg->progress_topic) == 0 && md->topics[t].err == 0)
            exists = true;

    /* the coordinator */
    rd_kafka_error_t *e = rd_kafka_init_transactions(rk, EOS_TIMEOUT_MS);
    if (e == NULL)
        check_report_addf(c->report, "transactions", CHECK_PASS, NULL,
                          "the transaction coordinator answered init_transactions (with the "
                          "check's own transactional id, so no relayer is fenced)");
    else {
        check_report_addf(c->report, "transactions", CHECK_FAIL,
                          "--delivery exactly-once needs a transaction coordinator: the "
                          "brokers' transaction.state.log.replication.factor and "
                          "transaction.state.log.min.isr must be satisfiable, and the principal "
                          "needs WRITE and DESCRIBE on the transactional ids prefixed "
                          "outbox-relay. (the relayer's outbox-relay.<system id>.<slot>, the "
                          "check's outbox-relay.<slot>.check)",
                          "init_transactions failed: %s (%s)", rd_kafka_error_string(e),
                          rd_kafka_error_name(e));
        rd_kafka_error_destroy(e);
    }

    /* the timeout and the progress topic */
    long long max_ms = -1;
    char policy[128] = "", why[400] = "";
    describe(rk, md->orig_broker_id, cfg->progress_topic, exists, &max_ms, policy,
             sizeof policy, why, sizeof why);
    long long ours = our_txn_timeout(cfg);
    switch (check_classify_txn_timeout(ours, max_ms)) {
    case CHECK_PASS:
        check_report_addf(c->report, "transaction_timeout", CHECK_PASS, NULL,
                          "transaction.timeout.ms %lld is within the brokers' "
                          "transaction.max.timeout.ms %lld", ours, max_ms);
        break;
    case CHECK_WARN:
        if (max_ms < 0)
            check_report_addf(c->report, "transaction_timeout", CHECK_WARN,
                              "make sure the brokers' transaction.max.timeout.ms is at least "
                              "the producer's transaction.timeout.ms",
                              "the brokers' transaction.max.timeout.ms is unknown (%s)", why);
        else
            check_report_addf(c->report, "transaction_timeout", CHECK_WARN,
                              "lower -X transaction.timeout.ms or raise the brokers' "
                              "transaction.max.timeout.ms",
                              "transaction.timeout.ms %lld is close to the brokers' "
                              "transaction.max.timeout.ms %lld", ours, max_ms);
        break;
    case CHECK_FAIL:
        check_report_addf(c->report, "transaction_timeout", CHECK_FAIL,
                          "lower -X transaction.timeout.ms or raise the brokers' "
                          "transaction.max.timeout.ms",
                          "transaction.timeout.ms %lld is above the brokers' "
                          "transaction.max.timeout.ms %lld: the brokers refuse the producer",
                          ours, max_ms);
        break;
    }
    if (!exists)
        check_report_addf(c->report, "progress_topic", CHECK_PASS, NULL,
                          "%s does not exist yet: the relayer creates it with "
                          "cleanup.policy=compact (it needs CREATE on it, or create it so "
                          "yourself)", cfg->progress_topic);
    else if (policy[0] == '\0')
        check_report_addf(c->report, "progress_topic", CHECK_WARN,
                          "make sure its cleanup.policy is compact",
                          "%s: cleanup.policy unknown (%s)", cfg->progress_topic, why);
    else if (check_classify_progress_policy(policy) == CHECK_PASS)
        check_report_addf(c->report, "progress_topic", CHECK_PASS, NULL,
                          "%s has cleanup.policy=%s", cfg->progress_topic, policy);
    else
        check_report_addf(c->report, "progress_topic", CHECK_FAIL,
                          "kafka-configs.sh --alter --entity-type topics --entity-name <topic> "
                          "--add-config cleanup.policy=compact",
                          "%s has cleanup.policy=%s: retention would delete the progress "
                          "records and the relayer refuses to start", cfg->progress_topic,
                          policy);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
}
