/*
 * sink.c — the Kafka producer (see sink.h).
 *
 * Shaped after librdkafka's examples/producer.c and idempotent_producer.c:
 * the delivery report callback runs from rd_kafka_poll() in our thread,
 * exactly once per message; QUEUE_FULL is handed back to the caller, who
 * polls and retries; ERR__FATAL from the error callback makes the sink
 * unusable. Pending reports are signalled on a pipe, so the main loop can
 * wait on PostgreSQL's socket and Kafka at once: librdkafka calls
 * on_queue_event() when its main queue becomes non-empty, which writes a
 * byte unless one is already waiting (wake.h says how no wake-up is lost).
 *
 * Lazy reports (sink_set_lazy): at a steady rate the main loop wakes for
 * the WAL anyway, about once per transaction; waking it a second time for
 * each delivery report cost a context switch per transaction. While lazy,
 * the callback writes nothing and the caller serves reports on its next
 * wake-up, within its own bound. What a report says about time must not
 * depend on when it is served, so each message's record (struct sink_msg,
 * the message's opaque) gets the time librdkafka's thread saw the broker's
 * acknowledgement, from an on_acknowledgement interceptor.
 *
 * A gap stops the at-least-once producer (enable.gapless.guarantee; a
 * transactional one aborts its transaction instead, sink_txn.c). When a broker
 * refuses a batch for good (a record too large for the topic, a policy),
 * librdkafka would otherwise bump the idempotent producer's epoch and go on
 * with the partition's next messages, which were queued or in flight behind
 * the refused batch: a later event of the same aggregate would reach Kafka
 * before the refused one is produced again, and a consumer that keeps the
 * first copy of each event would apply them out of order. Instead librdkafka
 * raises __GAPLESS_GUARANTEE as a fatal error; the broker refuses what was
 * in flight behind the gap (its sequence numbers skip one), the queues are
 * purged, and every message of the stopped producer is reported. The sink
 * is then "stopped at a gap" (not fatal): the caller rewinds, and the next
 * produce, once nothing of the old producer is in flight, replaces it
 * (stopped_at_gap, renew) from the configuration kept for that. A producer
 * that lost its sequence state (a fatal OUT_OF_ORDER_SEQUENCE_NUMBER,
 * UNKNOWN_PRODUCER_ID: renewable_fatal) is stopped and replaced the same
 * way, instead of the relayer exiting for a supervisor to restart it.
 *
 * A gap only stops what is behind it where the broker knows the producer:
 * a broker with no state for the producer id on a partition accepts any
 * first sequence number, so a new producer's first request there, refused,
 * would not stop a second one already in flight. The sink's partitioner
 * (gate_partitioner) asks partition_gate.h, which holds a partition's
 * second record until the first is delivered; sink_produce answers
 * SINK_FULL meanwhile, and the caller polls and tries again.
 *
 * The hot path is measured (bench/run.sh; the history is in
 * docs/benchmarks.md, "What was changed"): events go out through a topic
 * handle cached per event type (topic.h), and a successful delivery report
 * reads no headers.
 */
#include "outbox_relay/kafka/sink.h"
#include "sink_internal.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/kafka/event_headers.h"
#include "outbox_relay/kafka/kafka_conf.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/kafka/topic.h"
#include "outbox_relay/base/wake.h"

/* librdkafka before 2.13, when rd_kafka_new() refuses a configuration
 * that has interceptors, frees them but leaves them in the caller's
 * configuration, which a destroy then frees twice (librdkafka issue 4142):
 * the refused configuration is kept here instead, reachable until exit. A
 * refused configuration ends the relayer, so there is one at most. */
static rd_kafka_conf_t *refused_conf;


/* Copies a header value into dst as a NUL-terminated string. */
static void header_str(rd_kafka_headers_t *hdrs, const char *name, char *dst, size_t cap)
{
    const void *val = NULL;
    size_t size = 0;
    dst[0] = '\0';
    if (hdrs && rd_kafka_header_get_last(hdrs, name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        val != NULL) {
        if (size >= cap)
            size = cap - 1;
        memcpy(dst, val, size);
        dst[size] = '\0';
    }
}

/* A record for the next message, carrying token; NULL when out of memory,
 * with the error in sk->errstr naming the message (key=value: its event_id
 * or its topic). */
static struct sink_msg *msg_take(struct sink *sk, uint64_t token, const char *key,
                                 const char *value)
{
    if (sk->free_msgs == NULL) {
        struct sink_msg_chunk *c = malloc(sizeof *c);
        if (c == NULL) {
            snprintf(sk->errstr, sizeof sk->errstr, "%s=%s: out of memory", key, value);
            sk->err_class = KAFKA_ERR_FATAL;
            return NULL;
        }
        c->next = sk->chunks;
        sk->chunks = c;
        for (size_t i = 0; i < SINK_MSG_CHUNK; i++) {
            c->msg[i].next_free = sk->free_msgs;
            sk->free_msgs = &c->msg[i];
        }
    }
    struct sink_msg *msg = sk->free_msgs;
    sk->free_msgs = msg->next_free;
    msg->token = token;
    msg->gate = PARTITION_GATE_NOT_COUNTED;
    msg->gate_topic = -1;
    atomic_store_explicit(&msg->acked_us, 0, memory_order_relaxed);
    atomic_store_explicit(&msg->ack_latency_us, -1, memory_order_relaxed);
    return msg;
}

/* The record being produced on the caller's thread, while in
 * rd_kafka_producev(): librdkafka also partitions, from its own thread,
 * records queued before their topic's metadata came, and those must go
 * where the partitioner says (gate_partitioner). */
static _Thread_local struct sink *producing;

/* The partitioner of every topic of the at-least-once producer. Called
 * under the topic's lock: it calls no librdkafka function but the user's
 * partitioner. On the caller's thread (producing) it asks the gate, and a
 * record it holds gets an index past the last partition, for which
 * rd_kafka_producev() fails with __UNKNOWN_PARTITION before queueing it. */
static int32_t gate_partitioner(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
                                int32_t partition_cnt, void *rkt_opaque, void *msg_opaque)
{
    struct sink *sk = rkt_opaque;
    int32_t p = sk->partition_of(rkt, key, keylen, partition_cnt, NULL, msg_opaque);
    if (producing != sk || p < 0 || p >= partition_cnt)
        return p;
    sk->gate_part = p;
    if (!partition_gate_may_send(sk->gate, sk->gate_topic, p, sk->gate_now)) {
        sk->gate_held = true;
        return partition_cnt;
    }
    return p;
}

static const struct {
    const char *name;
    int32_t (*fn)(const rd_kafka_topic_t *, const void *, size_t, int32_t, void *, void *);
} partitioners[] = {
    {"consistent_random", rd_kafka_msg_partitioner_consistent_random},
    {"random", rd_kafka_msg_partitioner_random},
    {"consistent", rd_kafka_msg_partitioner_consistent},
    {"murmur2", rd_kafka_msg_partitioner_murmur2},
    {"murmur2_random", rd_kafka_msg_partitioner_murmur2_random},
    {"fnv1a", rd_kafka_msg_partitioner_fnv1a},
    {"fnv1a_random", rd_kafka_msg_partitioner_fnv1a_random},
};

/* Puts gate_partitioner in front of the partitioner conf names (the
 * "partitioner" property, librdkafka's default when unset): a topic made
 * with a partitioner callback ignores the property, so the sink calls the
 * function it names. Returns 0, or -1 with a message in err. */
static int gate_partitions(struct sink *sk, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    char name[64] = "consistent_random";
    size_t sz = sizeof name;
    if (rd_kafka_conf_get(conf, "partitioner", name, &sz) != RD_KAFKA_CONF_OK || !*name)
        snprintf(name, sizeof name, "consistent_random");
    for (size_t i = 0; i < sizeof partitioners / sizeof partitioners[0]; i++)
        if (strcmp(partitioners[i].name, name) == 0)
            sk->partition_of = partitioners[i].fn;
    if (sk->partition_of == NULL) {
        snprintf(err, errlen, "partitioner \"%s\" is not one the relayer knows", name);
        return -1;
    }
    rd_kafka_topic_conf_t *tconf = rd_kafka_conf_get_default_topic_conf(conf);
    if (tconf == NULL) {
        tconf = rd_kafka_topic_conf_new();
        if (tconf == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        rd_kafka_conf_set_default_topic_conf(conf, tconf); /* conf's now */
    }
    rd_kafka_topic_conf_set_partitioner_cb(tconf, gate_partitioner);
    rd_kafka_topic_conf_set_opaque(tconf, sk);
    sk->gate = partition_gate_new();
    if (sk->gate == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void msg_put(struct sink *sk, struct sink_msg *msg)
{
    msg->next_free = sk->free_msgs;
    sk->free_msgs = msg;
}

/* on_acknowledgement, on librdkafka's broker thread, for every message
 * whose fate is known (delivered or failed for good), before its report is
 * queued. It only stamps our record: the message itself is immutable. */
static rd_kafka_resp_err_t on_ack(rd_kafka_t *rk, rd_kafka_message_t *m, void *ic_opaque)
{
    struct sink_msg *msg = m->_private;
    if (msg != NULL) {
        atomic_store_explicit(&msg->acked_us, wall_now_us(), memory_order_relaxed);
        /* since rd_kafka_producev, on librdkafka's monotonic clock */
        atomic_store_explicit(&msg->ack_latency_us, rd_kafka_message_latency(m),
                              memory_order_relaxed);
    }
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque,
                                  char *errstr, size_t errstr_size)
{
    return rd_kafka_interceptor_add_on_acknowledgement(rk, "outbox-relay", on_ack, ic_opaque);
}

/* The fatal errors after which a new idempotent producer, sent everything
 * not yet confirmed again, is all a restart of the process would do: the
 * gapless guarantee's stop, and the producer's sequence state lost (librdkafka
 * 2.0.2 raises OUT_OF_ORDER_SEQUENCE_NUMBER for a "sequence
 * desynchronization", e.g. after NOT_ENOUGH_REPLICAS while a restarted
 * cluster refills its ISRs (librdkafka issue 4438), UNKNOWN_PRODUCER_ID
 * when the broker lost the producer's state, __INCONSISTENT for its own
 * bookkeeping). Anything else fatal stops the relayer, and so does any
 * fatal error of the transactional producer (sink_txn.c). */
static bool renewable_fatal(rd_kafka_resp_err_t code)
{
    return code == RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE ||
           code == RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER ||
           code == RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID ||
           code == RD_KAFKA_RESP_ERR__INCONSISTENT;
}

/* Whether the producer stopped at a gap: its first fatal error is the
 * gapless guarantee's, or a lost sequence state (renewable_fatal); set
 * before the reports of the refused batch and of everything behind it are
 * queued. */
static bool stopped_at_gap(const struct sink *sk, rd_kafka_t *rk)
{
    char buf[8];
    return !sk->txn && renewable_fatal(rd_kafka_fatal_error(rk, buf, sizeof buf));
}

/* The errors of the records behind a gap. */
static bool behind_gap(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER ||
           err == RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID || err == RD_KAFKA_RESP_ERR__FATAL ||
           err == RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct sink *sk = opaque;
    struct sink_msg *msg = m->_private;
    uint64_t token = msg->token;
    int32_t gate = msg->gate, gate_topic = msg->gate_topic;
    int64_t acked_us = atomic_load_explicit(&msg->acked_us, memory_order_relaxed);
    int64_t ack_latency_us = atomic_load_explicit(&msg->ack_latency_us, memory_order_relaxed);
    msg_put(sk, msg);
    size_t bytes = m->len + m->key_len;
    sk->reports++;
    sk->inflight--;
    sk->inflight_bytes -= bytes < sk->inflight_bytes ? bytes : sk->inflight_bytes;
    if (sk->closing)
        return;
    if (gate_topic >= 0)
        partition_gate_reported(sk->gate, gate_topic, gate, m->partition,
                                m->err == RD_KAFKA_RESP_ERR_NO_ERROR, sk->gate_now);
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
        sk->brokers_up = true;

    /* Only a failure is reported with the event's id and type: parsing the
     * headers of every delivered message would cost more than the rest of
     * the report. */
    char event_id[64] = "", event_type[256] = "";
    if (m->err) {
        rd_kafka_headers_t *hdrs = NULL;
        rd_kafka_message_headers(m, &hdrs);
        header_str(hdrs, "event_id", event_id, sizeof event_id);
        header_str(hdrs, "event_type", event_type, sizeof event_type);
        if (event_id[0] == '\0') /* --envelope cloudevents */
            header_str(hdrs, "ce_id", event_id, sizeof event_id);
        if (event_type[0] == '\0')
            header_str(hdrs, "ce_type", event_type, sizeof event_type);
    }

    /* Behind a gap, what fails for the gap is not the event's fault
     * (refused for its skipped sequence number, or failed with the
     * stopped producer; purged ones are retriable anyway): produced again
     * after the rewind, on a new producer. The refused batch's own records
     * keep their error and its class (poison, authorization, fatal). */
    enum kafka_err_class cls = kafka_err_classify(m->err);
    if (behind_gap(m->err) && (sk->at_gap || stopped_at_gap(sk, rk)))
        cls = KAFKA_ERR_RETRIABLE;
    /* A partition that leaves the metadata fails its messages with
     * __DESTROY (librdkafka's rd_kafka_topic_partition_cnt_update): a
     * broker whose metadata lags behind a topic auto-created a moment ago
     * reports it missing (seen in CI on the three-broker cluster). Not the
     * producer's failure: waited for as a missing topic is, and produced
     * again once it is back. No report is served while the sink closes. */
    if (m->err == RD_KAFKA_RESP_ERR__DESTROY && !sk->txn)
        cls = KAFKA_ERR_TOPIC_WAIT;
    struct sink_report rep = {
        .err = m->err,
        .errstr = m->err ? rd_kafka_err2str(m->err) : "",
        .cls = cls,
        .poison = cls == KAFKA_ERR_POISON,
        .event_id = event_id,
        .event_type = event_type,
        .topic = m->rkt ? rd_kafka_topic_name(m->rkt) : "",
        .partition = m->partition,
        .offset = m->offset,
        .bytes = bytes,
        .key = m->key,
        .key_len = m->key_len,
        .value = m->payload,
        .value_len = m->len,
        .acked_unix_us = acked_us,
        .ack_latency_us = ack_latency_us,
    };
    sk->on_report(sk->ctx, token, &rep);
}

/* Called by librdkafka, from any of its threads and under its queue lock,
 * when the main queue goes from empty to non-empty. One byte in the pipe is
 * enough to wake the main loop; sink_poll() drains it. The wake's lock is a
 * leaf lock, so taking it under librdkafka's queue lock cannot deadlock. */
static void on_queue_event(rd_kafka_t *rk, void *opaque)
{
    struct sink *sk = opaque;
    if (!atomic_load(&sk->lazy))
        wake_signal(&sk->wake);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct sink *sk = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[256];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof buf);
        if (orig == RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE) {
            sk->at_gap = true;
            log_warn("kafka: %s; the producer stops there so that nothing behind the refused "
                     "batch is written before it, and is replaced once its %zu deliveries in "
                     "flight have reported", buf, sk->inflight);
            return;
        }
        /* The transactional producer's fatal errors are sink_txn.c's. */
        if (!sk->txn && renewable_fatal(orig)) {
            sk->at_gap = true;
            log_warn("kafka: fatal idempotent producer error %s: %s; the producer has lost its "
                     "sequence state and is replaced by a new one once its %zu deliveries in "
                     "flight have reported; what was not confirmed is sent again (duplicates, "
                     "never a loss or a reorder)", rd_kafka_err2name(orig), buf, sk->inflight);
            return;
        }
        snprintf(sk->errstr, sizeof sk->errstr, "fatal Kafka producer error %s: %s",
                 rd_kafka_err2name(orig), buf);
        sk->fatal_code = orig;
        sk->fatal = true;
        log_error("%s", sk->errstr);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        sk->brokers_up = false;
        log_warn("all Kafka brokers are down (%s); deliveries wait, nothing is confirmed "
                 "until they are back", reason);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        /* librdkafka repeats it at every reconnect: once a minute is
         * enough to be seen. Its own line (reason) comes through the log
         * callback too. */
        double now = mono_now();
        if (sk->auth_logged_at != 0 && now - sk->auth_logged_at < AUTH_LOG_EVERY)
            return;
        sk->auth_logged_at = now;
        char advice[768];
        log_error("%s: %s", reason, kafka_conf_auth_advice_of(rk, advice, sizeof advice));
        return;
    }
    log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t) err), reason);
}

/* Makes sk's producer from sk->conf (a copy of it, with the interceptor,
 * which a copy does not carry). Returns 0, or -1 with a message in err. */
static int start_producer(struct sink *sk, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_dup(sk->conf);
    if (conf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (rd_kafka_conf_interceptor_add_on_new(conf, "outbox-relay", on_new, sk) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "cannot add the Kafka producer's acknowledgement interceptor");
        return -1;
    }
    char e[512];
    sk->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof e);
    if (sk->rk == NULL) {
        snprintf(err, errlen, "cannot create the Kafka producer: %s", e);
        refused_conf = conf; /* not destroyed: see refused_conf */
        return -1;
    }
    sk->mainq = rd_kafka_queue_get_main(sk->rk);
    rd_kafka_queue_cb_event_enable(sk->mainq, on_queue_event, sk);
    return 0;
}

static void release_topic(void *rkt)
{
    rd_kafka_topic_destroy(rkt);
}

/* Destroys sk's producer and the topic handles made by it. */
static void stop_producer(struct sink *sk)
{
    topic_cache_clear(&sk->topics, release_topic);
    sk->last_topic = sk->last_topic_buf;
    sk->last_topic_buf[0] = '\0';
    if (sk->mainq != NULL) {
        rd_kafka_queue_cb_event_enable(sk->mainq, NULL, NULL);
        rd_kafka_queue_destroy(sk->mainq);
        sk->mainq = NULL;
    }
    if (sk->rk != NULL)
        rd_kafka_destroy(sk->rk);
    sk->rk = NULL;
}

/* Replaces a producer stopped at a gap, once nothing of it is in flight
 * (the top of this file). Returns SINK_OK, SINK_RETRY while reports of the
 * old one are outstanding, or SINK_FATAL when no new one can be made; the
 * last two with sk->errstr and sk->err_class set. */
static int renew_at_gap(struct sink *sk)
{
    if (sk->inflight > 0) {
        snprintf(sk->errstr, sizeof sk->errstr,
                 "the Kafka producer stopped (a batch the broker refused, or its sequence "
                 "state lost), so that nothing is written out of order; it is replaced once "
                 "its %zu deliveries in flight have reported", sk->inflight);
        sk->err_class = KAFKA_ERR_RETRIABLE;
        return SINK_RETRY;
    }
    stop_producer(sk);
    char e[SINK_ERRLEN];
    if (start_producer(sk, e, sizeof e) < 0) {
        snprintf(sk->errstr, sizeof sk->errstr, "%s", e);
        sk->fatal = true;
        sk->err_class = KAFKA_ERR_FATAL;
        return SINK_FATAL;
    }
    sk->at_gap = false;
    sk->brokers_up = true;
    sk->renewals++;
    if (sk->gate != NULL)
        partition_gate_reset(sk->gate); /* a new producer id */
    log_info("kafka: the producer stopped at a refused batch or a lost sequence is replaced "
             "by a new one (%llu so far)", (unsigned long long) sk->renewals);
    return SINK_OK;
}

/* Whether sk can produce now: SINK_OK, or an enum sink_rc with sk->errstr
 * set (a fatal producer; one at a gap that cannot be replaced yet). */
static int sink_ready(struct sink *sk)
{
    if (sk->fatal) {
        sk->err_class = KAFKA_ERR_FATAL;
        return SINK_FATAL;
    }
    return sk->at_gap ? renew_at_gap(sk) : SINK_OK;
}

struct sink *sink_new(const struct sink_options *opts, sink_report_fn on_report, void *ctx,
                      char *err, size_t errlen)
{
    struct sink *sk = calloc(1, sizeof *sk);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (sk == NULL || conf == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    sk->topic_template = opts->topic_template;
    sk->columns = opts->columns;
    sk->headers = (struct event_headers_options){.map = opts->columns,
                                                 .id_header = opts->id_header,
                                                 .envelope = opts->envelope,
                                                 .ce_source = sk->ce_source};
    if (opts->ce_source != NULL)
        snprintf(sk->ce_source, sizeof sk->ce_source, "%s", opts->ce_source);
    sk->topic_by_type = topic_uses_type(opts->topic_template);
    {
        const char *pos = opts->topic_template;
        char name[64];
        while (sk->ntopic_cols < OUTBOX_MAX_EXTRA && topic_next_column(&pos, name, sizeof name) > 0) {
            int i = opts->columns != NULL ? outbox_columns_extra_index(opts->columns, name) : -1;
            if (i >= 0)
                sk->topic_cols[sk->ntopic_cols++] = i;
        }
    }
    sk->on_report = on_report;
    sk->ctx = ctx;
    sk->wake.fd[0] = sk->wake.fd[1] = -1;
    atomic_init(&sk->lazy, false);
    sk->brokers_up = true;
    sk->last_topic = sk->last_topic_buf;
    sk->last_gate_topic = -1;

    /* Our defaults first; the user's -X properties win. */
    if ((opts->brokers && *opts->brokers &&
         kafka_conf_set(conf, "bootstrap.servers", opts->brokers, err, errlen) < 0) ||
        kafka_conf_set(conf, "client.id", "outbox-relay", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.idempotence", "true", err, errlen) < 0 ||
        /* The gapless stop is at-least-once's (the top of this file); a
         * transactional producer's gap is an abortable error instead: the
         * whole transaction is aborted and produced again, and a stop would
         * replace the producer without initialising its transactions. */
        (opts->transactional_id == NULL &&
         kafka_conf_set(conf, "enable.gapless.guarantee", "true", err, errlen) < 0) ||
        kafka_conf_set(conf, "acks", "all", err, errlen) < 0 ||
        kafka_conf_set(conf, "message.timeout.ms", "0", err, errlen) < 0 ||
        /* Low latency without a slower drain; linger 0 needs Nagle off
         * (measured: docs/benchmarks.md). */
        kafka_conf_set(conf, "linger.ms", "0", err, errlen) < 0 ||
        kafka_conf_set(conf, "socket.nagle.disable", "true", err, errlen) < 0 ||
        /* A broker that is down is tried again with a backoff that doubles
         * up to this (librdkafka's default: 10 s). After a whole-cluster
         * outage, deliveries resume only once the client reconnects to the
         * leaders: with 10 s the brokers sat up to 10 s unused (seen in the
         * real-cluster chaos run, docs/failure-modes.md). One connection
         * attempt a second per broker while it is down costs nothing. */
        kafka_conf_set(conf, "reconnect.backoff.max.ms", "1000", err, errlen) < 0 ||
        kafka_conf_route_log(conf, err, errlen) < 0)
        goto fail;
    /* Exactly-once (sink_txn.c): the transactional producer. A message
     * timeout of 0 (infinite) is accepted with transactions too: an outage
     * makes the transaction wait until transaction.timeout.ms, after which
     * the broker aborts it and the relayer produces it again. */
    if (opts->transactional_id != NULL) {
        char ms[32];
        snprintf(ms, sizeof ms, "%d", opts->transaction_timeout_ms > 0
                                          ? opts->transaction_timeout_ms : 60000);
        if (kafka_conf_set(conf, "transactional.id", opts->transactional_id, err, errlen) < 0 ||
            kafka_conf_set(conf, "transaction.timeout.ms", ms, err, errlen) < 0)
            goto fail;
        sk->txn = true;
    }
    for (size_t i = 0; i < opts->nkafka; i++)
        if (kafka_conf_set(conf, opts->kafka[2 * i], opts->kafka[2 * i + 1], err, errlen) < 0)
            goto fail;
    if (!sk->txn && gate_partitions(sk, conf, err, errlen) < 0)
        goto fail;

    char buf[64];
    size_t sz = sizeof buf;
    sk->max_message_bytes = 1000000;
    if (rd_kafka_conf_get(conf, "message.max.bytes", buf, &sz) == RD_KAFKA_CONF_OK)
        sk->max_message_bytes = strtoull(buf, NULL, 10);

    rd_kafka_conf_set_opaque(conf, sk);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    kafka_conf_warn_scram(conf, "the Kafka producer");
    sk->conf = conf;
    conf = NULL; /* the sink's now */
    if (wake_init(&sk->wake) < 0) {
        snprintf(err, errlen, "cannot create a pipe for Kafka events");
        goto fail;
    }
    if (start_producer(sk, err, errlen) < 0)
        goto fail;
    return sk;

fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (sk != NULL) {
        if (sk->conf != NULL)
            rd_kafka_conf_destroy(sk->conf);
        wake_destroy(&sk->wake);
        partition_gate_free(sk->gate);
        free(sk);
    }
    return NULL;
}

static void free_chunks(struct sink *sk)
{
    while (sk->chunks != NULL) {
        struct sink_msg_chunk *c = sk->chunks;
        sk->chunks = c->next;
        free(c);
    }
    sk->free_msgs = NULL;
}

void sink_free(struct sink *sk, int timeout_ms)
{
    if (sk == NULL)
        return;
    sink_flush(sk, timeout_ms);
    sk->closing = true;
    if (sk->inflight > 0) {
        log_warn("%zu events were not delivered before shutdown; their position was not "
                 "confirmed, so the next run sends them again", sk->inflight);
        rd_kafka_purge(sk->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
                                   RD_KAFKA_PURGE_F_NON_BLOCKING);
        rd_kafka_poll(sk->rk, 0);
    }
    stop_producer(sk);
    rd_kafka_conf_destroy(sk->conf);
    wake_destroy(&sk->wake);
    free_chunks(sk);
    partition_gate_free(sk->gate);
    free(sk);
}

/* A refused rd_kafka_producev(): QUEUE_FULL is backpressure; a topic whose
 * metadata says unknown or unauthorized (librdkafka fails those at once
 * after its first look) is waited out; the record's own faults (too large,
 * invalid topic) are poison; the rest is the producer's. */
static int produce_err(struct sink *sk, rd_kafka_resp_err_t e, const char *topic,
                       const char *event_id)
{
    if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return SINK_FULL;
    snprintf(sk->errstr, sizeof sk->errstr, "event_id=%s topic=%s: produce failed: %s (%s)",
             event_id, topic, rd_kafka_err2str(e), rd_kafka_err2name(e));
    sk->err_class = kafka_err_classify(e);
    /* Stopped at a gap, and its error callback not served yet. */
    if (e == RD_KAFKA_RESP_ERR__FATAL && !sk->fatal && stopped_at_gap(sk, sk->rk)) {
        /* Said before the renewal, which frees the topic's name. */
        snprintf(sk->errstr, sizeof sk->errstr, "event_id=%s topic=%s: not produced: the Kafka "
                 "producer stopped (a batch the broker refused, or its sequence state lost), "
                 "and this event goes out again on a new one", event_id, topic);
        sk->at_gap = true;
        if (renew_at_gap(sk) == SINK_FATAL)
            return SINK_FATAL;
        sk->err_class = KAFKA_ERR_RETRIABLE;
        return SINK_RETRY;
    }
    if (e == RD_KAFKA_RESP_ERR__FATAL && !sk->fatal) {
        /* Fatal before its error callback was served (on_error sets the
         * same): the producer's first fatal error says what it was, so that
         * a fenced transactional producer is seen as fenced (a standby), not
         * as a failed produce that ends the relayer. */
        char buf[256];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(sk->rk, buf, sizeof buf);
        if (orig != RD_KAFKA_RESP_ERR_NO_ERROR) {
            sk->fatal_code = orig;
            sk->fatal = true;
        }
    }
    if (e == RD_KAFKA_RESP_ERR__FATAL || sk->fatal) {
        sk->err_class = KAFKA_ERR_FATAL;
        return SINK_FATAL;
    }
    switch (sk->err_class) {
    case KAFKA_ERR_POISON:
        return SINK_POISON;
    case KAFKA_ERR_RETRIABLE:
    case KAFKA_ERR_TOPIC_WAIT:
    case KAFKA_ERR_AUTH:
        return SINK_RETRY;
    default:
        return SINK_FATAL;
    }
}

/* The topic handle for ev's type, from the cache or created and cached;
 * NULL when the cache is full (the caller produces by name). Sets
 * sk->last_topic. Returns SINK_POISON when the template gives no valid
 * topic name for the type. */
/* What the topic cache is keyed by for ev: its type, or with {column}s in
 * the template their values (and the type when the template has it too),
 * each after a NUL; NULL when that does not fit in sk->topic_key (the
 * topic is then expanded and produced by name). */
static const char *topic_key(struct sink *sk, const struct outbox_event *ev, size_t *len)
{
    const char *type = ev->type ? ev->type : "";
    if (sk->ntopic_cols == 0) {
        *len = ev->type_len;
        return type;
    }
    size_t n = 0;
    if (sk->topic_by_type) {
        if (ev->type_len >= sizeof sk->topic_key)
            return NULL;
        memcpy(sk->topic_key, type, ev->type_len);
        n = ev->type_len;
    }
    for (size_t k = 0; k < sk->ntopic_cols; k++) {
        const struct outbox_field *f = &ev->extra[sk->topic_cols[k]];
        if (f->ptr == NULL || n + 1 + f->len > sizeof sk->topic_key)
            return NULL; /* NULL: no topic, said by topic_name_event */
        sk->topic_key[n++] = '\0';
        memcpy(sk->topic_key + n, f->ptr, f->len);
        n += f->len;
    }
    *len = n;
    return sk->topic_key;
}

/* A topic the producer has not met yet may be one the brokers create on
 * first use (auto.create.topics.enable). While they create it, Kafka
 * answers its metadata with LEADER_NOT_AVAILABLE or without partitions, and
 * librdkafka 2.0.2 fails what was queued for it then ("Local: Unknown
 * partition") instead of waiting; the relay rewinds, and everything after
 * the confirmed position goes out twice (seen on a loaded three-broker
 * Kafka 4.4). So the first time a topic is met, its metadata is asked for
 * (which creates it where the brokers do) until it has partitions, for at
 * most TOPIC_READY_MS. A topic the brokers say does not exist, or brokers
 * that do not answer, are left to the usual path (topic_missing: wait and
 * alert). */
#define TOPIC_READY_MS 3000

/* Whether another cached handle names the same topic (two types mapped to
 * one topic): then it was met before. */
static bool topic_met(const struct sink *sk, const rd_kafka_topic_t *rkt)
{
    const char *name = rd_kafka_topic_name(rkt);
    for (size_t i = 0; i < TOPIC_SLOTS; i++) {
        const struct topic_entry *t = &sk->topics.slots[i];
        if (t->type != NULL && t->handle != NULL && t->handle != rkt &&
            strcmp(rd_kafka_topic_name(t->handle), name) == 0)
            return true;
    }
    return false;
}

/* Each metadata request is bounded on its own (the relay loop sends no
 * status update meanwhile); brokers that are down, or do not answer in
 * time, end the wait at once. */
#define TOPIC_READY_ASK_MS 500

static void await_partitions(struct sink *sk, rd_kafka_topic_t *rkt)
{
    if (!sk->brokers_up || topic_met(sk, rkt))
        return;
    double until = mono_now() + TOPIC_READY_MS / 1000.0;
    int asked = 0;
    for (;;) {
        double left = until - mono_now();
        if (left <= 0)
            break;
        const struct rd_kafka_metadata *md = NULL;
        int ask_ms = left * 1000 < TOPIC_READY_ASK_MS ? (int) (left * 1000) + 1
                                                       : TOPIC_READY_ASK_MS;
        rd_kafka_resp_err_t e = rd_kafka_metadata(sk->rk, 0, rkt, &md, ask_ms);
        bool creating = false;
        asked++;
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1) {
            const struct rd_kafka_metadata_topic *t = &md->topics[0];
            creating = t->err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
                       (t->err == RD_KAFKA_RESP_ERR_NO_ERROR && t->partition_cnt == 0);
        }
        if (md != NULL)
            rd_kafka_metadata_destroy(md);
        if (!creating)
            break;
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (asked > 1)
        log_debug("topic=%s: waited for the brokers to create it (%d metadata requests)",
                  rd_kafka_topic_name(rkt), asked);
}

/* The topic handle for ev's type (and columns), from the cache or created
 * and cached; NULL when the cache is full (the caller produces by name).
 * Sets sk->last_topic. Returns SINK_POISON when the template gives no valid
 * topic name for the event. */
static int topic_for(struct sink *sk, const struct outbox_event *ev, rd_kafka_topic_t **rkt)
{
    size_t key_len = 0;
    const char *key = topic_key(sk, ev, &key_len);
    struct topic_entry *t = key != NULL ? topic_cache_find(&sk->topics, key, key_len) : NULL;
    *rkt = NULL;
    if (t != NULL && t->type != NULL) {
        *rkt = t->handle;
        sk->last_topic = rd_kafka_topic_name(*rkt);
        if (t->tag < 0 && sk->gate != NULL)
            t->tag = partition_gate_topic(sk->gate, sk->last_topic);
        sk->last_gate_topic = t->tag;
        return SINK_OK;
    }
    sk->last_topic = sk->last_topic_buf;
    sk->last_topic_buf[0] = '\0';
    if (topic_name_event(sk->topic_template, ev, sk->columns, sk->last_topic_buf,
                         sizeof sk->last_topic_buf) < 0) {
        snprintf(sk->errstr, sizeof sk->errstr,
                 "event_id=%s type=\"%.*s\": topic template \"%s\" gives no valid Kafka topic "
                 "name (1-249 of [A-Za-z0-9._-]%s)", ev->event_id, (int) ev->type_len,
                 ev->type ? ev->type : "", sk->topic_template,
                 sk->ntopic_cols > 0 ? "; a {column} that is NULL gives none" : "");
        return SINK_POISON;
    }
    sk->last_gate_topic = sk->gate != NULL ? partition_gate_topic(sk->gate, sk->last_topic_buf)
                                           : -1;
    if (t == NULL || topic_cache_full(&sk->topics))
        return SINK_OK;
    rd_kafka_topic_t *h = rd_kafka_topic_new(sk->rk, sk->last_topic_buf, NULL);
    if (h == NULL)
        return SINK_OK; /* by name, uncached */
    if (topic_cache_put(&sk->topics, t, key, key_len, h) < 0) {
        rd_kafka_topic_destroy(h); /* out of memory: by name, uncached */
        return SINK_OK;
    }
    t->tag = sk->last_gate_topic;
    await_partitions(sk, h);
    *rkt = h;
    sk->last_topic = rd_kafka_topic_name(h);
    return SINK_OK;
}

int sink_produce(struct sink *sk, const struct outbox_event *ev, uint64_t token)
{
    rd_kafka_topic_t *rkt;
    int ready = sink_ready(sk);
    if (ready != SINK_OK)
        return ready;
    if (topic_for(sk, ev, &rkt) != SINK_OK) {
        sk->err_class = KAFKA_ERR_POISON;
        return SINK_POISON;
    }
    const char *topic = sk->last_topic;
    size_t bytes = ev->aggregate_id_len + ev->payload_len;
    struct event_headers eh;
    event_headers_build(&sk->headers, ev, &eh);
    size_t hdr_bytes = eh.bytes + 16 * eh.n;
    if (bytes + hdr_bytes > sk->max_message_bytes) {
        snprintf(sk->errstr, sizeof sk->errstr,
                 "event_id=%s type=\"%.*s\" topic=%s: event of %zu bytes is larger than "
                 "message.max.bytes (%zu)", ev->event_id, (int) ev->type_len, ev->type, topic,
                 bytes + hdr_bytes, sk->max_message_bytes);
        sk->err_class = KAFKA_ERR_POISON;
        return SINK_POISON;
    }

    /* The headers: event_id, event_type, created_at when known, then the
     * configured ones (event_headers.h). */
    struct sink_msg *msg = msg_take(sk, token, "event_id", ev->event_id);
    if (msg == NULL)
        return SINK_FATAL;
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(eh.n);
    for (size_t i = 0; i < eh.n; i++)
        rd_kafka_header_add(hdrs, eh.h[i].name, -1, eh.h[i].value, (ssize_t) eh.h[i].len);
    /* A record of unknown partition in flight to the topic holds every
     * other (partition_gate.h); the partitioner asks about the rest. */
    int gt = sk->last_gate_topic; /* topic's, by topic_for */
    bool gated = gt >= 0;
    if (gated && !partition_gate_topic_clear(sk->gate, gt)) {
        rd_kafka_headers_destroy(hdrs);
        msg_put(sk, msg);
        return SINK_FULL;
    }
    sk->gate_topic = gt;
    sk->gate_part = -1;
    sk->gate_held = false;
    sk->gate_now = gated ? mono_now() : 0;
    producing = gated ? sk : NULL;
    rd_kafka_resp_err_t e;
    if (rkt != NULL)
        e = rd_kafka_producev(
            sk->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(ev->aggregate_id, ev->aggregate_id_len),
            RD_KAFKA_V_VALUE((void *) ev->payload, ev->payload_len), RD_KAFKA_V_HEADERS(hdrs),
            RD_KAFKA_V_OPAQUE(msg), RD_KAFKA_V_END);
    else
        e = rd_kafka_producev(
            sk->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(ev->aggregate_id, ev->aggregate_id_len),
            RD_KAFKA_V_VALUE((void *) ev->payload, ev->payload_len), RD_KAFKA_V_HEADERS(hdrs),
            RD_KAFKA_V_OPAQUE(msg), RD_KAFKA_V_END);
    producing = NULL;
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(hdrs); /* not taken over on failure */
        msg_put(sk, msg);
        if (sk->gate_held && e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
            log_debug("event_id=%s topic=%s partition=%d: held until the producer's first "
                      "record there is delivered", ev->event_id, topic, (int) sk->gate_part);
            return SINK_FULL;
        }
        return produce_err(sk, e, topic, ev->event_id);
    }
    if (gated) {
        msg->gate = partition_gate_sent(sk->gate, gt, sk->gate_part);
        msg->gate_topic = gt;
    }
    sk->inflight++;
    sk->inflight_bytes += bytes;
    return SINK_OK;
}

int sink_produce_raw(struct sink *sk, const char *topic, const char *key, size_t key_len,
                     const char *value, size_t value_len, const char *const *headers,
                     size_t nheaders, uint64_t token)
{
    return sink_produce_raw_to(sk, topic, RD_KAFKA_PARTITION_UA, key, key_len, value, value_len,
                               headers, nheaders, token);
}

int sink_produce_raw_to(struct sink *sk, const char *topic, int32_t partition, const char *key,
                        size_t key_len, const char *value, size_t value_len,
                        const char *const *headers, size_t nheaders, uint64_t token)
{
    int ready = sink_ready(sk);
    if (ready != SINK_OK)
        return ready;
    struct sink_msg *msg = msg_take(sk, token, "topic", topic);
    if (msg == NULL)
        return SINK_FATAL;
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(nheaders);
    for (size_t i = 0; i < nheaders; i++)
        rd_kafka_header_add(hdrs, headers[2 * i], -1, headers[2 * i + 1], -1);
    const char *event_id = "";
    for (size_t i = 0; i < nheaders; i++)
        if (strcmp(headers[2 * i], "event_id") == 0)
            event_id = headers[2 * i + 1];
    rd_kafka_resp_err_t e = rd_kafka_producev(
        sk->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *) value, value_len),
        RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(msg),
        RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(hdrs); /* not taken over on failure */
        msg_put(sk, msg);
        return produce_err(sk, e, topic, event_id);
    }
    sk->inflight++;
    sk->inflight_bytes += key_len + value_len;
    return SINK_OK;
}

int sink_poll(struct sink *sk, int timeout_ms)
{
    /* Drained before serving: a report queued before the drain is served
     * by the rd_kafka_poll() below, one queued after it signals again. */
    wake_drain(&sk->wake);
    /* Behind a gap, librdkafka sends nothing more, and what it queues
     * again for a retry would wait there for good: purged, so that every
     * message of the stopped producer is reported. */
    if ((sk->at_gap || stopped_at_gap(sk, sk->rk)) && sk->inflight > 0)
        rd_kafka_purge(sk->rk, RD_KAFKA_PURGE_F_QUEUE);
    return rd_kafka_poll(sk->rk, timeout_ms);
}

void sink_set_lazy(struct sink *sk, bool lazy)
{
    if (lazy == sk->lazy_set)
        return;
    sk->lazy_set = lazy;
    atomic_store(&sk->lazy, lazy);
    /* Reports queued while lazy made no wake-up, and the callback comes
     * only when the queue turns non-empty: the caller's next wait would
     * miss them. Whatever was queued before the store is counted here;
     * whatever comes after it signals by itself. */
    if (!lazy && rd_kafka_queue_length(sk->mainq) > 0)
        wake_signal(&sk->wake);
}

int sink_fd(const struct sink *sk)
{
    return wake_fd(&sk->wake);
}

int sink_flush(struct sink *sk, int timeout_ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (sk->inflight > 0 || rd_kafka_outq_len(sk->rk) > 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long elapsed = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (elapsed >= timeout_ms)
            return -1;
        long wait = timeout_ms - elapsed;
        sink_poll(sk, wait < 100 ? (int) wait : 100);
    }
    return 0;
}

size_t sink_inflight(const struct sink *sk)
{
    return sk->inflight;
}

unsigned long long sink_reports(const struct sink *sk)
{
    return sk->reports;
}

/* Appends to buf at *n what fits of the formatted text. */
__attribute__((format(printf, 4, 5)))
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
    if (*n >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0)
        *n += (size_t) k < cap - *n ? (size_t) k : cap - *n - 1;
}

const char *sink_describe(struct sink *sk, int timeout_ms, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    append(buf, cap, &n, "%d in librdkafka's queues", rd_kafka_outq_len(sk->rk));
    const struct rd_kafka_metadata *md = NULL;
    double t0 = mono_now();
    rd_kafka_resp_err_t e = rd_kafka_metadata(sk->rk, 0, NULL, &md, timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        append(buf, cap, &n, "; no broker answered a metadata request within %d ms (%s)",
               timeout_ms, rd_kafka_err2str(e));
        return buf;
    }
    append(buf, cap, &n, "; metadata from broker %d (%s) in %.0f ms: brokers", md->orig_broker_id,
           md->orig_broker_name, (mono_now() - t0) * 1000);
    for (int i = 0; i < md->broker_cnt; i++)
        append(buf, cap, &n, "%s %d %s:%d", i ? "," : "", md->brokers[i].id,
               md->brokers[i].host, md->brokers[i].port);
    /* Counted first, so that the count survives a truncated list. */
    int partitions = 0, leaderless = 0;
    rd_kafka_resp_err_t why = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int t = 0; t < md->topic_cnt; t++)
        for (int p = 0; md->topics[t].err == 0 && p < md->topics[t].partition_cnt; p++) {
            const struct rd_kafka_metadata_partition *mp = &md->topics[t].partitions[p];
            partitions++;
            if (mp->leader < 0 || mp->err != 0) {
                if (leaderless++ == 0)
                    why = mp->err;
            }
        }
    append(buf, cap, &n, "; %d topic(s), %d partition(s), %d without a leader", md->topic_cnt,
           partitions, leaderless);
    int listed = 0;
    for (int t = 0; t < md->topic_cnt; t++) {
        const struct rd_kafka_metadata_topic *tp = &md->topics[t];
        if (tp->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            append(buf, cap, &n, "; topic %s: %s", tp->topic, rd_kafka_err2str(tp->err));
            continue;
        }
        for (int p = 0; p < tp->partition_cnt && listed < 16; p++)
            if (tp->partitions[p].leader < 0 || tp->partitions[p].err != 0)
                append(buf, cap, &n, "%s%s [%d]", listed++ ? ", " : " (", tp->topic,
                       tp->partitions[p].id);
    }
    if (listed > 0)
        append(buf, cap, &n, "%s: %s)", listed < leaderless ? ", ..." : "",
               rd_kafka_err2str(why));
    rd_kafka_metadata_destroy(md);
    return buf;
}

size_t sink_inflight_bytes(const struct sink *sk)
{
    return sk->inflight_bytes;
}

size_t sink_max_message_bytes(const struct sink *sk)
{
    return sk->max_message_bytes;
}

bool sink_fatal(const struct sink *sk)
{
    return sk->fatal || sink_fenced(sk);
}

bool sink_brokers_up(const struct sink *sk)
{
    return sk->brokers_up;
}

const char *sink_last_topic(const struct sink *sk)
{
    return sk->last_topic;
}

bool sink_needs_ce_source(const struct sink *sk)
{
    return sk->headers.envelope == EVENT_ENVELOPE_CLOUDEVENTS && sk->ce_source[0] == '\0';
}

void sink_set_ce_source(struct sink *sk, const char *source)
{
    snprintf(sk->ce_source, sizeof sk->ce_source, "%s", source);
}

const char *sink_errstr(const struct sink *sk)
{
    return sk->errstr;
}

enum kafka_err_class sink_err_class(const struct sink *sk)
{
    return sk->err_class;
}
