/*
 * consume_internal.h — what the consumer's files share, and nothing
 * the library's users see (their header is include/outbox_relay/consume/consumer.h).
 *
 *   consumer.c       the loop, the Kafka callbacks (errors, rebalances) and
 *                    the lifecycle: consumer_new/run/free
 *   consume_batch.c  the batch transaction: processed_events, the handler in
 *                    a savepoint, failed_events, COMMIT, retries, the offset
 *                    commit after COMMIT, the watchdog on a revoke or a stop
 *   consume_pipe.c   the same transaction pipelined (o.apply_stmt): one
 *                    statement for the batch's processed_events rows, the
 *                    apply statements and COMMIT in one round trip, no
 *                    savepoints; a data error falls back to consume_batch.c's
 *                    message-by-message form
 *   consume_msg.c    what both apply paths share: a message's view as
 *                    strings, the verdict on our own statements' failures
 *   consume_pg.c     the PostgreSQL connection: connect, the type of
 *                    processed_events.event_id, on_connect, loss, one
 *                    statement, how a failure is classified
 *   consume_ids.c    which event ids that column can hold (pure)
 *   consume_plan.c   key → apply worker, and the offset of each partition
 *                    that may be committed (pure; consume_plan.h)
 *
 * Dependencies, one way: consumer.c → consume_batch.c → consume_pipe.c
 * (first, when o.apply_stmt is set) → consume_msg.c → consume_pg.c →
 * consume_ids.c; consume_batch.c also calls consume_msg.c and consume_pg.c
 * directly. Nothing below calls back up.
 * One thread: every function here runs in the thread of consumer_run().
 */
#ifndef OUTBOX_RELAY_CONSUME_INTERNAL_H
#define OUTBOX_RELAY_CONSUME_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/consume/consumer.h"
#include "outbox_relay/pg/pg_watchdog.h"

/* What processed_events.event_id can hold (consume_ids.c). */
enum consume_idkind {
    IDCOL_TEXT = 0, /* every id (sql/002's text; also when the table is not there yet) */
    IDCOL_INTEGER,  /* decimal ids up to max (the seed article's bigint) */
    IDCOL_BAD,      /* no type the relayer's ids fit: refused at start */
};

struct consume_idcol {
    enum consume_idkind kind;
    int64_t max;   /* IDCOL_INTEGER: the largest id */
    char type[64]; /* the column's type as PostgreSQL prints it */
    char fix[320]; /* the ALTER TABLE that makes it text */
};

/* One extra PostgreSQL connection of the parallel apply (o.apply_workers >
 * 1; worker 0 is the consumer's own c->pg). Owned by the consumer (its
 * workers array); opened and closed by consume_pg.c only, used by
 * consume_pipe.c for one part of a batch at a time. */
struct consume_worker {
    PGconn *pg;          /* NULL while closed */
    bool prepared;       /* consume_pipe.c's statements prepared on pg */
    double next_connect; /* monotonic s: the next attempt while closed */
    double backoff;      /* s, the next reconnect pause */
};

struct consumer {
    struct consumer_options o;
    volatile sig_atomic_t *stop;
    rd_kafka_t *rk;
    PGconn *pg;
    struct pg_watchdog *watchdog; /* bounds the batch of a revoke or a stop */
    bool pg_ready;         /* connected and on_connect succeeded */
    bool pipe_prepared;    /* consume_pipe.c's statements prepared on pg */
    int nworkers;          /* apply workers, c->pg included (o.apply_workers, >= 1) */
    struct consume_worker *workers; /* nworkers - 1 extra connections, owned */
    uint64_t applied_ahead; /* events of the batch in progress committed by a part
                             * of the parallel apply before the batch was applied
                             * again on c->pg (which counted them as duplicates) */
    struct consume_idcol idcol; /* processed_events.event_id, read at each connect */
    bool setup_error;      /* fatal because the database can never work (CONSUMER_SETUP) */
    bool paused;           /* assigned partitions paused while PostgreSQL is away */
    bool subscribed;
    double backoff;        /* s, next reconnect pause */
    double next_connect;   /* monotonic s */
    rd_kafka_message_t **batch;
    size_t nbatch;
    size_t batch_cap;      /* grows past o.batch only for messages fetched while pausing */
    double batch_started;  /* monotonic s of the batch's first message */
    bool halted;
    bool fatal;
    int last_kafka_err;
    double last_kafka_err_at;
    rd_kafka_topic_partition_list_t *pending; /* applied, offsets not committed yet */
    double commit_retry_at; /* monotonic s: ask again for the pending commit from then */
    int commits_in_flight; /* asynchronous commits not answered yet */
    double commit_async_at; /* monotonic s of the last asynchronous commit */
    bool commit_sync;      /* inside a synchronous rd_kafka_commit() */
    struct consumer_stats stats;
    char errstr[CONSUMER_ERRLEN];
};

/* What applying a batch came to. APPLY_SLOW (the pipelined path only): a
 * message failed with a data error, the transaction is rolled back; apply
 * the batch message by message, in savepoints. */
enum apply_rc { APPLY_OK = 0, APPLY_CONN, APPLY_RETRY, APPLY_HALT, APPLY_FATAL, APPLY_SLOW };

/* A message's fields as NUL-terminated strings, owned by the view. */
struct msg_view {
    struct consumer_message m;
    char event_id[256];
    char *key;
    char *type;
    char *payload;
};

/* How a failed statement or handler is treated. */
enum failure_class { FAIL_DATA = 0, FAIL_CONN, FAIL_TRANSIENT };

/* ---- small helpers (monotonic clock, pauses, the error buffer) ---- */

static inline void consume_sleep(double s)
{
    struct timespec ts = {(time_t) s, (long) ((s - (double) (time_t) s) * 1e9)};
    nanosleep(&ts, NULL);
}

__attribute__((format(printf, 2, 3)))
static inline void consume_set_error(struct consumer *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
}

/* ---- consume_pg.c ---- */

/* Connects when due. Returns 0 (connected or not yet due / failed: check
 * c->pg_ready), or -1 when on_connect failed for good (c->fatal set). */
int consume_pg_connect(struct consumer *c);

/* Closes the connection (NULL is fine); c->pg_ready false. */
void consume_pg_close(struct consumer *c);

/* The connection is gone: close it, pause consumption, schedule a retry. */
void consume_pg_lost(struct consumer *c);

/* Whether a failure is a lost connection, a transient conflict or a data
 * error (SQLSTATE and the connection's status). */
enum failure_class consume_classify(const struct consumer *c, const struct consumer_failure *why);

/* The same judged on connection pg (an apply worker's). */
enum failure_class consume_classify_on(const PGconn *pg, const struct consumer_failure *why);

/* Opens the apply workers' connections that are closed and due (each with
 * on_connect, like c->pg). Returns true when all c->nworkers - 1 are open.
 * A failure is logged and retried later with backoff; never fatal (the
 * batch is then applied on c->pg alone). */
bool consume_workers_ready(struct consumer *c);

/* Worker w's (1 .. nworkers-1) connection is gone: close it, retry later. */
void consume_worker_lost(struct consumer *c, unsigned w);

/* Closes every worker connection (the consumer is being freed). */
void consume_workers_close(struct consumer *c);

/* Runs one statement; 0 when it succeeded (the affected row count in
 * *ntuples if asked), -1 with why filled. */
int consume_exec(struct consumer *c, const char *sql, int nparams, const char *const *params,
                 long *ntuples, struct consumer_failure *why);

/* ---- consume_ids.c (pure) ---- */

/* Judges processed_events.event_id from its base type's pg_type.typname
 * (a domain's base type), with type_shown (format_type) for messages and
 * qtable (the table, qualified and quoted) for the fix. */
void consume_idcol_judge(struct consume_idcol *col, const char *base_typname,
                         const char *type_shown, const char *qtable);

/* Whether the column can hold event id id (text: always; an integer
 * column: -?[0-9]+ without leading zeros, in its range). */
bool consume_id_fits(const struct consume_idcol *col, const char *id);

/* Fills why with the refusal of an id the column cannot hold: SQLSTATE
 * 22P02, the id, the column's type and the ALTER TABLE that fixes it. */
void consume_id_refusal(const struct consume_idcol *col, const char *id,
                        struct consumer_failure *why);

/* ---- consume_msg.c ---- */

/* Fills v from a Kafka message (the event id rules of consumer.h). Returns
 * 0, or -1 when out of memory (v then holds nothing to free). */
int consume_view_make(struct msg_view *v, const rd_kafka_message_t *km);

/* Frees what v owns; v can be made again. */
void consume_view_free(struct msg_view *v);

/* The failure of one of our own statements (BEGIN, processed_events,
 * COMMIT...): a lost connection or a transient conflict is retried;
 * anything else cannot be fixed by retrying (APPLY_FATAL, c->errstr set). */
enum apply_rc consume_own_failed(struct consumer *c, const char *what,
                                 const struct consumer_failure *why);

/* ---- consume_batch.c ---- */

/* Applies the batch in progress, retrying transient failures. Returns true
 * when the batch is done (applied and offsets committed, or halted/fatal);
 * false when PostgreSQL is away (the batch is kept) or, when bounded (a
 * revoke or a stop), when it could not be applied within o.revoke_timeout:
 * the caller then drops it, committing nothing for it. */
bool consume_batch_process(struct consumer *c, bool bounded);

/* Destroys the batch's messages from index from on. */
void consume_batch_drop(struct consumer *c, size_t from);

/* Commits the offsets applied and not yet confirmed committed (c->pending),
 * synchronously; a failure is retried later (see consume_batch.c). After a
 * batch outside a revoke or a stop the commit is asynchronous
 * (consume_on_commit). */
void consume_commit_pending(struct consumer *c);

/* From the main loop: when no asynchronous commit is in flight and
 * COMMIT_RETRY has passed since the last one, commits c->pending again,
 * asynchronously (never blocking the poll loop; see consume_batch.c). */
void consume_commit_retry(struct consumer *c);

/* The offset commit callback (asynchronous commits, and maybe synchronous
 * ones): drops from c->pending what the coordinator confirmed; a refusal is
 * logged and retried from the main loop after COMMIT_RETRY. */
void consume_on_commit(struct consumer *c, rd_kafka_resp_err_t err,
                       const rd_kafka_topic_partition_list_t *offsets);

/* Forgets pending offsets of partitions we no longer own (all when parts is
 * NULL): committing them now could move another owner's position. */
void consume_forget_pending(struct consumer *c, const rd_kafka_topic_partition_list_t *parts);

/* ---- consume_pipe.c ---- */

/* Applies the first n messages of the batch in one transaction through
 * libpq's pipeline mode, running o.apply_stmt per new event without
 * savepoints, and commits it. APPLY_OK: committed (stats counted);
 * APPLY_SLOW: a message failed with a data error or cannot be sent as text,
 * the transaction is rolled back; APPLY_CONN, APPLY_RETRY, APPLY_FATAL as
 * for the message-by-message path. Never APPLY_HALT. */
enum apply_rc consume_pipe_apply(struct consumer *c, size_t n);

/* Applies the first n messages of the batch split by key over
 * c->nworkers connections (consume_plan.h), each part one pipelined
 * transaction as consume_pipe_apply's, all parts in the server at once.
 * Every worker connection must be open (consume_workers_ready). APPLY_OK:
 * every part committed (stats counted). Otherwise applied[0..n) says which
 * messages are committed (their count added to c->applied_ahead) and the
 * caller applies the batch again on c->pg: APPLY_SLOW (a part failed or
 * cannot be pipelined; a worker whose connection was lost is closed),
 * APPLY_CONN (c->pg itself was lost), APPLY_FATAL (out of memory). */
enum apply_rc consume_pipe_apply_parallel(struct consumer *c, size_t n, bool *applied);

/* The event ids of v[0..n) as a PostgreSQL text[] literal, every element
 * quoted, '"' and '\\' escaped: {"a","b\\"c"}. malloc'd (the caller
 * frees it); NULL when out of memory. Pure. */
char *consume_ids_literal(const struct msg_view *v, size_t n);

#endif
