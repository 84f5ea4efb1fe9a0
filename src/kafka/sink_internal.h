/*
 * sink_internal.h — the sink's state, shared by sink.c (the producer,
 * produce, delivery reports) and sink_txn.c (its transactions, for
 * --delivery exactly-once). Not a public header.
 */
#ifndef OUTBOX_RELAY_SINK_INTERNAL_H
#define OUTBOX_RELAY_SINK_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "outbox_relay/base/wake.h"
#include "outbox_relay/core/partition_gate.h"
#include "outbox_relay/kafka/event_headers.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/kafka/topic.h"

/* One produced message's record, handed to librdkafka as its opaque: the
 * caller's token, when librdkafka's thread saw the broker acknowledge the
 * message (on_ack; CLOCK_REALTIME µs, 0 until then) and how long after
 * sink_produce that was (µs, -1 until then). Records live in
 * chunks owned by the sink, freed only after the producer is destroyed
 * (its threads may still acknowledge while it is), and are recycled through
 * a free list that only the caller's thread touches: it takes one in
 * sink_produce and gives it back when the report is served. The ack time is
 * written before librdkafka queues the report under its queue lock and read
 * after the caller dequeued it under the same lock. */
struct sink_msg {
    uint64_t token;
    int32_t gate;      /* what partition_gate_sent counted it as */
    int32_t gate_topic; /* its topic's number in the gate; -1: not gated */
    _Atomic int64_t acked_us;
    _Atomic int64_t ack_latency_us;
    struct sink_msg *next_free;
};

#define SINK_MSG_CHUNK 1024
#define AUTH_LOG_EVERY 60.0 /* s between two logs of a refused SASL login */

struct sink_msg_chunk {
    struct sink_msg_chunk *next;
    struct sink_msg msg[SINK_MSG_CHUNK];
};

struct sink {
    const char *topic_template;
    const struct outbox_columns_map *columns; /* extra columns: headers, topic */
    struct event_headers_options headers;
    char ce_source[512];
    /* The template's {column}s as extra indexes: the topic cache is then
     * keyed by their values (and the type when {type}/{prefix} is used). */
    bool topic_by_type;
    size_t ntopic_cols;
    int topic_cols[OUTBOX_MAX_EXTRA];
    char topic_key[1024];
    rd_kafka_t *rk;
    rd_kafka_conf_t *conf; /* what every producer of this sink is made from
                              (renew), without the interceptor, which
                              rd_kafka_conf_dup does not copy */
    rd_kafka_queue_t *mainq;
    struct wake wake; /* readable while reports wait (on_queue_event) */
    atomic_bool lazy; /* read by on_queue_event: no wake-up while set */
    bool lazy_set;    /* the caller's copy */
    struct sink_msg *free_msgs;
    struct sink_msg_chunk *chunks;
    sink_report_fn on_report;
    void *ctx;
    size_t inflight;
    size_t inflight_bytes;
    unsigned long long reports; /* delivery reports served, any outcome */
    size_t max_message_bytes;
    bool fatal;
    int fatal_code;   /* rd_kafka_fatal_error's code once fatal */
    bool txn;         /* transactional (sink_options.transactional_id) */
    bool txn_open;    /* a transaction is begun and not yet ended */
    bool at_gap; /* the producer stopped at a refused batch: replaced once
                    nothing of it is in flight (see the top of sink.c) */
    bool closing;
    unsigned long long renewals; /* producers replaced at a gap or a lost sequence */
    bool brokers_up;
    double auth_logged_at; /* monotonic s of the last authentication error logged */
    const char *last_topic; /* a cached handle's name, or last_topic_buf */
    char last_topic_buf[256];
    struct topic_cache topics; /* handles: rd_kafka_topic_t, one application
                                  reference each, dropped in sink_free */
    /* The at-least-once producer's hold on a partition's second record
     * until a new producer's first there is delivered (partition_gate.h);
     * NULL for the transactional producer, whose refused batch aborts the
     * whole transaction. partition_of is the partitioner the user chose
     * (-X partitioner, librdkafka's default otherwise), which the sink's
     * own partitioner (gate_partitioner) calls and then asks the gate. */
    struct partition_gate *gate;
    int32_t (*partition_of)(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
                            int32_t partition_cnt, void *rkt_opaque, void *msg_opaque);
    int gate_topic;    /* the gate's number of the record's topic */
    int last_gate_topic; /* the gate's number of last_topic (topic_for), -1: none */
    int32_t gate_part; /* the partition of the record being produced; -1: unassigned */
    bool gate_held;    /* the gate held the record being produced */
    double gate_now;   /* monotonic s of the record being produced, or of the
                          last one: a report takes it for its time, late by
                          the time since, which only shortens what it opens */
    enum kafka_err_class err_class; /* of the last refused produce */
    char errstr[SINK_ERRLEN];
};

#endif
