/*
 * consumer.h — the idempotent consumer: apply Kafka events to PostgreSQL
 * exactly once, with a handler of your own, in the same transaction that
 * records the event as processed.
 *
 * Delivery from Kafka is at-least-once. The consumer turns it into
 * exactly-once effects: for each batch of messages it runs ONE PostgreSQL
 * transaction; per message it inserts (consumer, event_id) into
 * processed_events (ON CONFLICT DO NOTHING); when the row already existed the
 * message is a duplicate and is skipped, otherwise the handler runs inside a
 * SAVEPOINT. (With o.apply_stmt the same transaction is pipelined: one
 * INSERT for the batch's event ids, the statement per new event, no
 * savepoints; see apply_stmt below. With apply_workers > 1 the batch is
 * split by key into one such transaction per connection; see
 * apply_workers.) After COMMIT, and only then, the
 * batch's Kafka offsets are committed (asynchronously; synchronously at a
 * revoke or a stop; an offset commit refused or not confirmed is retried
 * every second and with the next batch while the partition stays ours). A
 * crash anywhere before COMMIT applies nothing;
 * a crash between COMMIT and the offset commit redelivers messages whose
 * event ids are already recorded, so they are skipped.
 *
 * processed_events.event_id may be text (sql/002, every id fits) or an
 * integer type (the seed article's BIGINT: only decimal ids fit; an event
 * whose id does not is refused as a data error, per on_error, and is not
 * recorded in processed_events). Its type is read at every connection; any
 * other type makes consumer_run() return CONSUMER_SETUP with the ALTER
 * TABLE that makes it text.
 *
 * The event id is the message's "event_id" header (what outbox-relay sets).
 * A message without one (or with one that is empty, longer than 255 bytes or
 * not valid UTF-8 text) gets "kafka-<topic>-<partition>-<offset>", which is
 * stable only while the topic is not recreated.
 *
 * A handler failure that is a data error (anything but a lost connection or
 * a transient conflict) is rolled back to the message's savepoint and then,
 * by on_error:
 *   CONSUMER_ON_ERROR_FAILED  the message is recorded in failed_events (and
 *                             in processed_events, so it is not retried
 *                             forever) and the batch goes on;
 *   CONSUMER_ON_ERROR_HALT    the whole batch is rolled back, the messages
 *                             before the failing one are applied and their
 *                             offsets committed, and consumer_run() returns
 *                             CONSUMER_HALTED with the event id,
 *                             topic/partition/offset and the SQL error in
 *                             consumer_errstr(). No offset at or past the
 *                             failing message is committed.
 * Transient errors (serialization failure 40001, deadlock 40P01, lock not
 * available 55P03, insufficient resources 53xxx) roll the batch back and
 * retry it. A lost PostgreSQL connection (PQstatus bad, SQLSTATE class 08,
 * 57P01-57P03) rolls back, reconnects with a capped exponential backoff and
 * seeks each partition of the batch back to its first message (the next
 * offset after the last commit), so nothing unapplied is skipped; while
 * PostgreSQL is away the assigned partitions are paused. Kafka errors are
 * logged and polling goes on: librdkafka reconnects by itself.
 *
 * Rebalances: the default (eager) assignment protocol is used, with a
 * rebalance callback. On revoke, the in-progress batch (collected, not yet
 * applied) is applied and its offsets committed while the partitions are
 * still ours; if that cannot be done (PostgreSQL away) it is dropped
 * unapplied and no offset is committed for it, so the next owner reads it
 * again. The cooperative protocol (partition.assignment.strategy =
 * cooperative-sticky) is handled the same way, with incremental
 * assign/unassign.
 *
 * A revoke (and a stop) never waits on PostgreSQL longer than
 * o.revoke_timeout: past it the connection is cut (pg_watchdog.h), so the
 * transaction is rolled back, the batch is dropped with no offset committed
 * and the group rebalances; the next owner applies the batch (a part that
 * did commit, if the cut met COMMIT, is in processed_events and skipped).
 * A batch applied outside a revoke is not cut: while it runs nobody polls,
 * so a rebalance waits for it, at most max.poll.interval.ms, after which
 * librdkafka leaves the group on our behalf.
 *
 * librdkafka defaults changed so that the defaults work from any start
 * (each can still be set with kafka[]): session.timeout.ms 10000 and
 * heartbeat.interval.ms 1000 (librdkafka: 45000 / 3000; a restarted
 * consumer waits a dead member's session out before it gets partitions),
 * topic.metadata.refresh.interval.ms 10000 (librdkafka: 300000, the delay
 * before a subscribed topic created, or partitions added, after the join
 * are consumed), auto.offset.reset earliest. PostgreSQL connections get
 * connect_timeout=5 and TCP keepalives unless the DSN sets them: nobody
 * polls Kafka while a connection attempt blocks.
 *
 * Each savepoint is a subtransaction; PostgreSQL tracks up to 64 per
 * transaction cheaply, so keep batches near 100 when other sessions are
 * busy (see docs/consumer.md). The pipelined path (apply_stmt) uses none.
 *
 * One thread: every callback runs in the thread that calls consumer_run().
 */
#ifndef OUTBOX_RELAY_CONSUMER_H
#define OUTBOX_RELAY_CONSUMER_H

#include <libpq-fe.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define CONSUMER_ERRLEN 1024

enum consumer_on_error { CONSUMER_ON_ERROR_HALT = 0, CONSUMER_ON_ERROR_FAILED };

/* consumer_run() results, and what handlers and on_connect return. */
enum consumer_result {
    CONSUMER_OK = 0,
    CONSUMER_FAIL = -1,   /* handler: this message failed (see consumer_failure) */
    CONSUMER_FATAL = -2,  /* unusable configuration or a fatal Kafka error */
    CONSUMER_HALTED = -3, /* on_error halt met a failing message */
    CONSUMER_SETUP = -4,  /* the database can never work as it is (processed_events.event_id
                           * of a type no event id fits): consumer_errstr() has the fix */
};

/* One Kafka message as the handler sees it. Every string is NUL-terminated
 * and valid only during the handler call. */
struct consumer_message {
    const char *event_id;     /* "event_id" header, or "kafka-<topic>-<p>-<o>" */
    const char *aggregate_id; /* the message key as text; NULL when there is none */
    const char *type;         /* "event_type" header; NULL when absent */
    const char *payload;      /* the value as text; NULL for an empty value */
    size_t payload_len;
    const char *topic;
    int32_t partition;
    int64_t offset;
};

/* What a failing handler reports: the SQLSTATE (5 characters, "" when the
 * failure is not an SQL error) and a message. */
struct consumer_failure {
    char sqlstate[6];
    char message[CONSUMER_ERRLEN];
};

/* Fills why from a failed PGresult (or from conn's error message when res
 * is NULL). Returns CONSUMER_FAIL, so a handler can end with
 *   return consumer_failure_from_result(why, res, conn); */
int consumer_failure_from_result(struct consumer_failure *why, const PGresult *res,
                                 const PGconn *conn);

/* The handler: apply msg using conn, which is inside the batch transaction
 * and a savepoint of its own. Do not COMMIT or ROLLBACK. Return CONSUMER_OK
 * when applied, CONSUMER_FAIL with why filled when not. Whether a failure
 * is a data error or a lost connection is decided by the consumer from
 * why->sqlstate and PQstatus(conn). */
typedef int (*consumer_handler_fn)(void *arg, PGconn *conn, const struct consumer_message *msg,
                                   struct consumer_failure *why);

/* Called after each (re)connection, before any batch: prepare statements
 * here. Return CONSUMER_OK; CONSUMER_FAIL with why filled (a lost
 * connection is retried, anything else is fatal: consumer_run() returns
 * CONSUMER_FATAL). */
typedef int (*consumer_connect_fn)(void *arg, PGconn *conn, struct consumer_failure *why);

struct consumer_kv {
    const char *key;
    const char *value;
};

/* Apply workers (consumer_options.apply_workers): the default, chosen by
 * measurement (docs/benchmarks.md, "Consumer throughput"), and the most. */
#define CONSUMER_APPLY_WORKERS_DEFAULT 1
#define CONSUMER_APPLY_WORKERS_DEFAULT_STR "1"
#define CONSUMER_APPLY_WORKERS_MAX 64

struct consumer_options {
    const char *brokers;            /* bootstrap.servers (or set it in kafka[]) */
    const char *group;              /* group.id, required */
    const char *const *topics;      /* names, or librdkafka regexes starting with '^' */
    size_t ntopics;
    const char *dsn;                /* libpq connection string */
    const char *consumer_name;      /* the processed_events.consumer value */
    enum consumer_on_error on_error;
    int batch;                      /* messages per transaction (default 100) */
    int batch_ms;                   /* wait for a batch to fill (default 100 ms) */
    double reconnect_max;           /* s, cap of the PostgreSQL backoff (default 30) */
    double revoke_timeout;          /* s a revoke or a stop waits on PostgreSQL (default 5) */
    const struct consumer_kv *kafka; /* librdkafka properties, applied after ours */
    size_t nkafka;
    consumer_handler_fn handler;    /* required */
    consumer_connect_fn on_connect; /* may be NULL */
    /* Optional: the name of a statement on_connect prepares on every
     * connection that applies one message as handler does, given its
     * parameters as text: $1 event_id, $2 aggregate_id, $3 type, $4 payload,
     * $5 topic. When set, a batch is applied in libpq pipeline mode, in two
     * round trips and without savepoints: BEGIN and one INSERT of the
     * batch's event ids into processed_events (ON CONFLICT DO NOTHING,
     * returning the new ones); then the statement once per new event and
     * COMMIT. When one of them fails with a data error (or a payload holds a
     * NUL byte), that transaction is rolled back and the batch applied again
     * message by message through handler, in savepoints, as above: a failing
     * event is treated the same either way. outbox-consume sets it to its
     * prepared --apply statement. */
    const char *apply_stmt;
    /* PostgreSQL connections a batch is applied over (0: the default,
     * CONSUMER_APPLY_WORKERS_DEFAULT), with apply_stmt only (the handler
     * path uses one). The batch is split by key (FNV-1a of the Kafka key;
     * a keyless message by its partition), each part one pipelined
     * transaction on its own connection, all parts at once; the next batch
     * starts when every part is concluded, so a key's events are applied
     * in their order. A part that does not commit (a data error, a lost
     * worker connection, a transient conflict) sends the batch to the main
     * connection, where the parts that did commit are skipped as already
     * processed and the rest is applied as with one connection. Offsets
     * are committed only below the lowest unapplied event of each
     * partition. A batch finished at a revoke or a stop uses the main
     * connection only (the watchdog guards that one). */
    int apply_workers;
    /* Optional, with apply_workers > 1: the name of a top-level member of
     * the JSON payload whose value (as written, a string's escapes kept)
     * is hashed instead of the Kafka key; a message whose payload is not
     * a JSON object with that member goes by its Kafka key. For workloads
     * whose rows are not the aggregate's (the loyalty example: the key is
     * the order, the row the customer): parts then update different rows.
     * Every event of one aggregate must carry the same value, or its order
     * is no longer kept. */
    const char *apply_key;
    void *arg;                      /* passed to handler and on_connect */
};

struct consumer_stats {
    uint64_t applied;    /* handler succeeded, committed */
    uint64_t duplicates; /* skipped: already in processed_events */
    uint64_t failed;     /* recorded in failed_events */
    uint64_t batches;    /* committed transactions */
    uint64_t retries;    /* batches rolled back and read again */
    uint64_t reconnects; /* PostgreSQL reconnections */
    uint64_t abandoned;  /* batches given up at a revoke or stop (revoke_timeout) */
    uint64_t pipelined;  /* of batches: committed through o.apply_stmt, pipelined */
    uint64_t one_by_one; /* pipelined batches applied again message by message
                          * after a data error */
};

struct consumer;

/* Creates the Kafka consumer (not yet subscribed) from o; the strings in o
 * must outlive the consumer. Returns NULL with a message in err on bad
 * options or librdkafka properties. Does not connect to PostgreSQL. */
struct consumer *consumer_new(const struct consumer_options *o, char *err, size_t errlen);

/* Subscribes and consumes until *stop is set (then finishes the batch in
 * progress, commits its offsets, closes the group membership and returns
 * CONSUMER_OK), on_error halt meets a failing message (CONSUMER_HALTED),
 * processed_events cannot work (CONSUMER_SETUP), or a fatal error
 * (CONSUMER_FATAL). Details of a non-zero result in
 * consumer_errstr(). */
int consumer_run(struct consumer *c, volatile sig_atomic_t *stop);

const char *consumer_errstr(const struct consumer *c);
const struct consumer_stats *consumer_stats(const struct consumer *c);

/* Closes the Kafka consumer (leaving the group) and the PostgreSQL
 * connection. NULL is fine. */
void consumer_free(struct consumer *c);

#endif
