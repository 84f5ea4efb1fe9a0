/*
 * sink.h — the Kafka sink: owns the librdkafka producer.
 *
 * Events go out with key = aggregate id, value = payload, headers event_id,
 * event_type, created_at and the configured ones (event_headers.h), to the
 * topic the template gives for the event's type and columns. The producer
 * is idempotent with acks=all and, unless the user says otherwise with -X,
 * never times a message out (message.timeout.ms=0): a broker outage makes
 * deliveries wait, it never turns into a skipped event.
 *
 * A batch the broker refuses for good stops the producer there
 * (enable.gapless.guarantee), so that nothing behind it in its partition is
 * written first: everything in flight then fails, the refused batch with its
 * own error and the rest as retriable, and the next produce after the last
 * report replaces the producer (until then it answers SINK_RETRY).
 *
 * Delivery reports come back through sink_poll(), which calls the report
 * callback exactly once per produced event, in the caller's thread, with the
 * token given to sink_produce() and the time the broker's answer came in.
 */
#ifndef OUTBOX_RELAY_SINK_H
#define OUTBOX_RELAY_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/decode/w2j.h"
#include "outbox_relay/kafka/kafka_errors.h"

#define SINK_ERRLEN 512

enum sink_rc {
    SINK_OK = 0,
    SINK_FULL = -1,   /* librdkafka's queue is full: poll, then try again */
    SINK_POISON = -2, /* this event can never be produced (bad topic, too big) */
    SINK_FATAL = -3,  /* the producer is unusable (fatal idempotence error, …) */
    SINK_RETRY = -4   /* not now, but not the event's fault either: the topic
                         is unknown (not created yet) or not authorized, as
                         librdkafka's metadata says; sink_err_class() tells
                         which. Produce it again later, in order */
};

struct sink_report {
    int err;                /* rd_kafka_resp_err_t; 0 = delivered */
    const char *errstr;     /* NUL-terminated */
    enum kafka_err_class cls; /* what the error means (kafka_errors.h) */
    bool poison;            /* cls == KAFKA_ERR_POISON: no retry can deliver
                               this record (too large, invalid topic name,
                               rejected by policy); every other error is not
                               the event's fault and must never dead-letter
                               it */
    const char *event_id;   /* failed deliveries only (err != 0): from the
                               event_id header, "" if absent; always "" for
                               a delivered event, whose headers are not
                               read (see on_delivery in sink.c) */
    const char *event_type; /* the same, from the event_type header */
    const char *topic;
    int32_t partition;
    int64_t offset;
    size_t bytes;           /* key + value bytes */
    const char *key;        /* the record as produced, for dead letters */
    size_t key_len;
    const char *value;
    size_t value_len;
    int64_t acked_unix_us;  /* when librdkafka's thread saw the broker's
                               answer (CLOCK_REALTIME µs), however late the
                               report is served; 0 when not known */
    int64_t ack_latency_us; /* from handing the message to the producer
                               (sink_produce) to that answer, retries
                               included (µs); < 0 when not known */
};

typedef void (*sink_report_fn)(void *ctx, uint64_t token, const struct sink_report *rep);

struct sink;

/* What the sink reads from the relayer's configuration. */
struct sink_options {
    const char *brokers;        /* bootstrap.servers; NULL or "": from kafka */
    const char *topic_template; /* {type} {prefix} {column}, or a fixed topic
                                   (topic.h); must outlive the sink */
    const struct outbox_columns_map *columns; /* extra columns: headers and the
                                   template's {column}s (NULL: none); must
                                   outlive the sink */
    const char *id_header;      /* the event id also under this header
                                   (NULL: only event_id) */
    int envelope;               /* enum event_envelope (event_headers.h) */
    const char *ce_source;      /* cloudevents: ce_source (copied); NULL:
                                   set later with sink_set_ce_source */
    const char *transactional_id; /* NULL: not transactional; else the
                                   producer's transactional.id (sink_txn_*) */
    int transaction_timeout_ms; /* with transactional_id: transaction.timeout.ms
                                   (0: 60000); -X may override both */
    const char *const *kafka;   /* -X properties: nkafka (key, value) pairs,
                                   in order given; read only by sink_new */
    size_t nkafka;
};

/* Creates the producer from opts (brokers, -X properties over the defaults
 * above). Returns NULL with a message in err when librdkafka refuses the
 * configuration. Free with sink_free(). */
struct sink *sink_new(const struct sink_options *opts, sink_report_fn on_report, void *ctx,
                      char *err, size_t errlen);

/* Flushes for at most timeout_ms, then destroys the producer. Events still
 * undelivered are reported to no one: their LSN was never confirmed, so the
 * next run sends them again. */
void sink_free(struct sink *sk, int timeout_ms);

/* Produces one event with `token` handed back in its report. Returns an
 * enum sink_rc; SINK_POISON/SINK_FATAL/SINK_RETRY leave a message in
 * sink_errstr() and the class in sink_err_class(). */
int sink_produce(struct sink *sk, const struct outbox_event *ev, uint64_t token);

/* Produces a raw record (dead letters): topic, key, value, headers as
 * name/value pairs (n pairs). Same return values as sink_produce. */
int sink_produce_raw(struct sink *sk, const char *topic, const char *key, size_t key_len,
                     const char *value, size_t value_len, const char *const *headers,
                     size_t nheaders, uint64_t token);

/* sink_produce_raw to one partition (RD_KAFKA_PARTITION_UA: the
 * partitioner's choice). */
int sink_produce_raw_to(struct sink *sk, const char *topic, int32_t partition, const char *key,
                        size_t key_len, const char *value, size_t value_len,
                        const char *const *headers, size_t nheaders, uint64_t token);

/* Transactions (--delivery exactly-once; sink_txn.c), for a sink made with
 * a transactional_id. Each returns an enum kafka_txn_verdict
 * (kafka_errors.h): KAFKA_TXN_OK, or what the failure means, with the
 * message in sink_errstr(). They block up to timeout_ms, serving delivery
 * reports meanwhile (the report callback may run inside them).
 *   init    once per producer, before anything is produced: fences every
 *           older producer with the same transactional.id and aborts its
 *           open transaction;
 *   begin   starts a transaction (local, does not block);
 *   commit  flushes what was produced since begin and commits it;
 *   abort   purges and aborts it: its messages' reports fail. */
int sink_txn_init(struct sink *sk, int timeout_ms);
int sink_txn_begin(struct sink *sk);
int sink_txn_commit(struct sink *sk, int timeout_ms);
int sink_txn_abort(struct sink *sk, int timeout_ms);
/* True between a successful begin and the end of the transaction. */
bool sink_txn_open(const struct sink *sk);
/* True once the producer was fenced by a newer one with its transactional
 * id (sink_fatal() is then true too): a replica that took over. */
bool sink_fenced(const struct sink *sk);

/* Serves delivery reports and producer events for at most timeout_ms.
 * Returns the number of events served. The event pipe (sink_fd) is drained
 * first, under the same lock as librdkafka's writes to it, so a report
 * queued during the call either is served by it or leaves a byte in the
 * pipe: no wake-up is lost. */
int sink_poll(struct sink *sk, int timeout_ms);

/* A file descriptor that becomes readable when reports are waiting;
 * sink_poll() drains it. */
int sink_fd(const struct sink *sk);

/* Lazy reports: while lazy, reports that come in leave sink_fd() as it is;
 * the caller serves them (sink_poll) when it wakes for something else, and
 * bounds its waits itself meanwhile. Turning it off makes sink_fd()
 * readable at once when reports are waiting, so a wait that starts after
 * it misses none. Off when created. sink_poll(timeout > 0) waits inside
 * librdkafka and is not affected. */
void sink_set_lazy(struct sink *sk, bool lazy);

/* Waits up to timeout_ms until every produced event has been reported.
 * Returns 0 when none is left, -1 on timeout. */
int sink_flush(struct sink *sk, int timeout_ms);

size_t sink_inflight(const struct sink *sk);
size_t sink_inflight_bytes(const struct sink *sk);

/* Delivery reports served so far, whatever their outcome: while events are
 * in flight and this does not move, nothing comes back from Kafka. */
unsigned long long sink_reports(const struct sink *sk);

/* What the producer can say about why deliveries wait, for a warning:
 * what librdkafka still holds, then a metadata request for the producer's
 * topics, bounded by timeout_ms (it blocks the caller that long at most):
 * the broker that answered and how fast, the brokers it lists, and the
 * partitions without a leader; or that no broker answered. The request
 * also refreshes librdkafka's own view of the leaders. Writes into buf
 * (truncated to cap) and returns it. */
const char *sink_describe(struct sink *sk, int timeout_ms, char *buf, size_t cap);

/* The largest message (key + value + headers) the producer accepts. */
size_t sink_max_message_bytes(const struct sink *sk);

/* True once librdkafka reported a fatal error; sink_errstr() says which. */
bool sink_fatal(const struct sink *sk);

/* True while at least one broker connection is up (as far as librdkafka's
 * last error/up events tell). */
bool sink_brokers_up(const struct sink *sk);

/* The topic the last sink_produce() was for (what the template gave, even
 * when it was refused as an invalid topic name). */
const char *sink_last_topic(const struct sink *sk);

const char *sink_errstr(const struct sink *sk);

/* Whether events need a ce_source the sink does not have yet
 * (--envelope cloudevents without --ce-source). */
bool sink_needs_ce_source(const struct sink *sk);

/* Sets ce_source (copied, truncated to 511 bytes). */
void sink_set_ce_source(struct sink *sk, const char *source);

/* The class of the error of the last refused sink_produce()/_raw(). */
enum kafka_err_class sink_err_class(const struct sink *sk);

#endif
