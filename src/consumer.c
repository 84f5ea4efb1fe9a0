/*
 * consumer.c — the idempotent consumer (see consumer.h).
 *
 * One thread. The loop collects a batch (at most o.batch messages, or what
 * arrived within o.batch_ms of the first one), applies it in one PostgreSQL
 * transaction, commits the transaction, then commits the Kafka offsets of
 * the batch synchronously. Nothing else commits offsets: auto commit and
 * the offset store are off.
 *
 * When PostgreSQL goes away mid-batch, the batch stays in memory (the
 * rd_kafka_message_t references are kept), every assigned partition is
 * paused so no more messages are fetched, and the loop keeps polling so that
 * rebalances are served. After reconnecting the same batch is applied again
 * (duplicates of a transaction that did commit are skipped by
 * processed_events) and the partitions resume where the batch ended. If the
 * partitions are revoked meanwhile, the batch is dropped without committing
 * anything for it: the next owner reads it again from the last committed
 * offsets.
 *
 * A batch applied from the rebalance callback or at a stop runs under the
 * watchdog (pg_watchdog.h) with o.revoke_timeout: a lock wait, a hung server
 * or a silent network cannot hold the group's rebalance (or the exit) for
 * longer than that. A cut batch is handled like a lost connection.
 */
#include "outbox_relay/consumer.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox_relay/kafka_conf.h"
#include "outbox_relay/log.h"
#include "outbox_relay/pgconn.h"
#include "outbox_relay/pg_watchdog.h"

#define SAVEPOINT_SQL "SAVEPOINT outbox_consume_msg"
#define RELEASE_SQL "RELEASE SAVEPOINT outbox_consume_msg"
#define ROLLBACK_TO_SQL "ROLLBACK TO SAVEPOINT outbox_consume_msg"
#define PROCESSED_SQL                                                            \
    "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) "         \
    "ON CONFLICT DO NOTHING"
#define FAILED_SQL                                                                \
    "INSERT INTO failed_events (consumer, event_id, topic, \"partition\", \"offset\", key, " \
    "event_type, payload, error, sqlstate) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) " \
    "ON CONFLICT (consumer, event_id) DO UPDATE SET topic = EXCLUDED.topic, "     \
    "\"partition\" = EXCLUDED.\"partition\", \"offset\" = EXCLUDED.\"offset\", "  \
    "key = EXCLUDED.key, event_type = EXCLUDED.event_type, payload = EXCLUDED.payload, " \
    "error = EXCLUDED.error, sqlstate = EXCLUDED.sqlstate, failed_at = now()"

#define POLL_MS 100           /* longest wait in one poll: how fast a stop is seen */
#define TRANSIENT_RETRIES_ON_STOP 3
#define KAFKA_ERR_LOG_GAP 10.0 /* s between two log lines of the same Kafka error */
#define COMMIT_RETRY 1.0       /* s between retries of a failed offset commit */

/* How a failed statement or handler is treated. */
enum failure_class { FAIL_DATA = 0, FAIL_CONN, FAIL_TRANSIENT };

/* What applying a batch came to. */
enum apply_rc { APPLY_OK = 0, APPLY_CONN, APPLY_RETRY, APPLY_HALT, APPLY_FATAL };

struct consumer {
    struct consumer_options o;
    volatile sig_atomic_t *stop;
    rd_kafka_t *rk;
    PGconn *pg;
    struct pg_watchdog *watchdog; /* bounds the batch of a revoke or a stop */
    bool pg_ready;         /* connected and on_connect succeeded */
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
    double commit_retry_at;
    struct consumer_stats stats;
    char errstr[CONSUMER_ERRLEN];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t) s, (long) ((s - (double) (time_t) s) * 1e9)};
    nanosleep(&ts, NULL);
}

static double jitter(double base)
{
    return base * (0.5 + (double) rand() / RAND_MAX / 2); /* 50-100 % of base */
}

static void set_error(struct consumer *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_error(struct consumer *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
}

/* Copies text without a trailing newline (libpq's messages end in one). */
static void copy_trimmed(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
    size_t n = strlen(dst);
    while (n > 0 && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
        dst[--n] = '\0';
}

int consumer_failure_from_result(struct consumer_failure *why, const PGresult *res,
                                 const PGconn *conn)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : NULL;
    if (msg == NULL || *msg == '\0')
        msg = conn ? PQerrorMessage(conn) : "unknown error";
    snprintf(why->sqlstate, sizeof why->sqlstate, "%s", state ? state : "");
    copy_trimmed(why->message, sizeof why->message, msg);
    return CONSUMER_FAIL;
}

static enum failure_class classify(const struct consumer *c, const struct consumer_failure *why)
{
    const char *s = why->sqlstate;
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK)
        return FAIL_CONN;
    if (strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 ||
        strcmp(s, "57P03") == 0)
        return FAIL_CONN;
    if (strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0 || strcmp(s, "55P03") == 0 ||
        strncmp(s, "53", 2) == 0)
        return FAIL_TRANSIENT;
    return FAIL_DATA;
}

/* Runs one statement; 0 when it succeeded (the affected row count in
 * *ntuples if asked), -1 with why filled. */
static int exec_sql(struct consumer *c, const char *sql, int nparams, const char *const *params,
                    long *ntuples, struct consumer_failure *why)
{
    PGresult *res = nparams > 0 || params != NULL
                        ? PQexecParams(c->pg, sql, nparams, NULL, params, NULL, NULL, 0)
                        : PQexec(c->pg, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        consumer_failure_from_result(why, res, c->pg);
        PQclear(res);
        return -1;
    }
    if (ntuples != NULL)
        *ntuples = strtol(PQcmdTuples(res), NULL, 10);
    PQclear(res);
    return 0;
}

/* The failure of one of our own statements: a lost connection or a
 * transient conflict is retried; anything else (processed_events missing,
 * no privilege) cannot be fixed by retrying. */
static enum apply_rc own_statement_failed(struct consumer *c, const char *what,
                                          const struct consumer_failure *why)
{
    switch (classify(c, why)) {
    case FAIL_CONN:
        log_warn("PostgreSQL connection lost during %s: %s", what, why->message);
        return APPLY_CONN;
    case FAIL_TRANSIENT:
        log_warn("%s: %s (SQLSTATE %s); the batch is retried", what, why->message,
                 why->sqlstate);
        return APPLY_RETRY;
    default:
        set_error(c, "%s failed: %s (SQLSTATE %s)%s", what, why->message, why->sqlstate,
                  strcmp(why->sqlstate, "42P01") == 0
                      ? "; load sql/002_processed_events.sql and sql/006_failed_events.sql"
                      : "");
        return APPLY_FATAL;
    }
}

/* ---- messages ---------------------------------------------------------- */

/* A message's fields as NUL-terminated strings, owned here. */
struct msg_view {
    struct consumer_message m;
    char event_id[256];
    char *key;
    char *type;
    char *payload;
};

static char *dup_span(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        if (n > 0)
            memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* True when p[0..n) is valid UTF-8 without control characters: what an
 * event id must be to be stored as text (else the message gets the
 * kafka-<topic>-<p>-<o> id instead of poisoning the batch). */
static bool id_text_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char b = p[i];
        size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3
                   : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || i + len > n || (len == 1 && (b < 0x20 || b == 0x7f)) ||
            (len == 2 && b < 0xC2) || (len == 4 && b > 0xF4))
            return false;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        if ((len == 3 && b == 0xE0 && p[i + 1] < 0xA0) ||   /* overlong */
            (len == 3 && b == 0xED && p[i + 1] >= 0xA0) ||  /* surrogates */
            (len == 4 && b == 0xF0 && p[i + 1] < 0x90) ||   /* overlong */
            (len == 4 && b == 0xF4 && p[i + 1] >= 0x90))    /* > U+10FFFF */
            return false;
        i += len;
    }
    return true;
}

static void view_free(struct msg_view *v)
{
    free(v->key);
    free(v->type);
    free(v->payload);
    v->key = v->type = v->payload = NULL;
}

/* Fills v from a Kafka message. Returns 0, or -1 when out of memory. */
static int view_make(struct msg_view *v, const rd_kafka_message_t *km)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val;
    size_t size;
    memset(v, 0, sizeof *v);
    const char *topic = rd_kafka_topic_name(km->rkt);

    rd_kafka_message_headers(km, &hdrs);
    if (hdrs && rd_kafka_header_get_last(hdrs, "event_id", &val, &size) ==
                    RD_KAFKA_RESP_ERR_NO_ERROR &&
        val != NULL && size > 0 && size < sizeof v->event_id && id_text_ok(val, size)) {
        memcpy(v->event_id, val, size);
        v->event_id[size] = '\0';
    } else {
        snprintf(v->event_id, sizeof v->event_id, "kafka-%s-%" PRId32 "-%" PRId64, topic,
                 km->partition, km->offset);
    }
    if (hdrs && rd_kafka_header_get_last(hdrs, "event_type", &val, &size) ==
                    RD_KAFKA_RESP_ERR_NO_ERROR && val != NULL) {
        if ((v->type = dup_span(val, size)) == NULL)
            goto oom;
    }
    if (km->key != NULL && (v->key = dup_span(km->key, km->key_len)) == NULL)
        goto oom;
    if (km->payload != NULL && (v->payload = dup_span(km->payload, km->len)) == NULL)
        goto oom;

    v->m.event_id = v->event_id;
    v->m.aggregate_id = v->key;
    v->m.type = v->type;
    v->m.payload = v->payload;
    v->m.payload_len = v->payload ? km->len : 0;
    v->m.topic = topic;
    v->m.partition = km->partition;
    v->m.offset = km->offset;
    return 0;
oom:
    view_free(v);
    return -1;
}

/* ---- PostgreSQL -------------------------------------------------------- */

static void pg_close(struct consumer *c)
{
    if (c->pg != NULL)
        PQfinish(c->pg);
    c->pg = NULL;
    c->pg_ready = false;
}

/* Pauses (or resumes) every assigned partition. */
static void pause_all(struct consumer *c, bool pause)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(c->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR || parts == NULL)
        return;
    if (parts->cnt > 0) {
        if (pause)
            rd_kafka_pause_partitions(c->rk, parts);
        else
            rd_kafka_resume_partitions(c->rk, parts);
    }
    rd_kafka_topic_partition_list_destroy(parts);
    c->paused = pause;
}

/* The connection is gone: close it, pause consumption, schedule a retry. */
static void pg_lost(struct consumer *c)
{
    pg_close(c);
    c->stats.reconnects++;
    if (c->subscribed)
        pause_all(c, true);
    c->next_connect = now_s() + jitter(c->backoff);
}

/* Server notices (WARNING: terminating connection ...) go through our log,
 * not straight to stderr. */
static void on_notice(void *arg, const char *message)
{
    char buf[CONSUMER_ERRLEN];
    copy_trimmed(buf, sizeof buf, message);
    log_info("postgres: %s", buf);
}

/* Connects when due. Returns 0 (connected or not yet due / failed: check
 * c->pg_ready), or -1 when on_connect failed for good (c->fatal set). */
static int pg_connect(struct consumer *c)
{
    if (c->pg_ready || now_s() < c->next_connect)
        return 0;
    /* Our defaults, then the DSN (expanded from "dbname"), which overrides
     * them. Nobody polls Kafka while this blocks, so a server that accepts
     * and never answers must not hold it (and a rebalance) for long; the
     * keepalives find a connection whose peer vanished silently. */
    const char *keys[] = {"connect_timeout", "keepalives_idle", "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout", "dbname",
                          "fallback_application_name", NULL};
    const char *vals[] = {"5", "10", "5", "3", PGCONN_TCP_USER_TIMEOUT_MS, c->o.dsn,
                          "outbox-consume", NULL};
    c->pg = PQconnectdbParams(keys, vals, 1);
    if (c->pg != NULL)
        PQsetNoticeProcessor(c->pg, on_notice, NULL);
    struct consumer_failure why = {{0}, {0}};
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK) {
        copy_trimmed(why.message, sizeof why.message,
                     c->pg ? PQerrorMessage(c->pg) : "out of memory");
        log_warn("cannot connect to PostgreSQL: %s; retrying in about %.1f s", why.message,
                 c->backoff);
        goto retry;
    }
    if (c->o.on_connect != NULL && c->o.on_connect(c->o.arg, c->pg, &why) != CONSUMER_OK) {
        if (classify(c, &why) == FAIL_CONN) {
            log_warn("PostgreSQL connection lost while preparing: %s", why.message);
            goto retry;
        }
        set_error(c, "%s", why.message);
        c->fatal = true;
        pg_close(c);
        return -1;
    }
    c->pg_ready = true;
    c->backoff = 0.5;
    log_info("connected to PostgreSQL (backend pid %d)", PQbackendPID(c->pg));
    if (c->paused)
        pause_all(c, false);
    return 0;

retry:
    pg_close(c);
    c->next_connect = now_s() + jitter(c->backoff);
    c->backoff = c->backoff * 2 > c->o.reconnect_max ? c->o.reconnect_max : c->backoff * 2;
    return 0;
}

/* ---- applying a batch -------------------------------------------------- */

/* Records a failing message in failed_events, after the savepoint was
 * rolled back. When key or payload are not storable as text (bad encoding,
 * NUL bytes), they are stored as NULL. */
static enum apply_rc record_failed(struct consumer *c, const struct consumer_message *m,
                                   const struct consumer_failure *err)
{
    char partition[16], offset[32];
    snprintf(partition, sizeof partition, "%" PRId32, m->partition);
    snprintf(offset, sizeof offset, "%" PRId64, m->offset);
    bool payload_text = m->payload && strlen(m->payload) == m->payload_len;
    const char *params[10] = {c->o.consumer_name, m->event_id, m->topic, partition, offset,
                              m->aggregate_id, m->type, payload_text ? m->payload : NULL,
                              err->message, err->sqlstate[0] ? err->sqlstate : NULL};
    struct consumer_failure why;
    if (exec_sql(c, FAILED_SQL, 10, params, NULL, &why) == 0)
        return APPLY_OK;
    if (classify(c, &why) != FAIL_DATA)
        return own_statement_failed(c, "INSERT INTO failed_events", &why);
    /* Probably the key or payload: keep the record without them. */
    if (exec_sql(c, ROLLBACK_TO_SQL, 0, NULL, NULL, &why) < 0)
        return own_statement_failed(c, "ROLLBACK TO SAVEPOINT", &why);
    params[5] = NULL; /* key */
    params[6] = NULL; /* type */
    params[7] = NULL; /* payload */
    struct consumer_failure why2;
    if (exec_sql(c, FAILED_SQL, 10, params, NULL, &why2) == 0) {
        log_warn("event_id=%s: key, type and payload not stored in failed_events: %s", m->event_id,
                 why.message);
        return APPLY_OK;
    }
    return own_statement_failed(c, "INSERT INTO failed_events", &why2);
}

/* Applies the first n messages of the batch in one transaction and commits
 * it. On APPLY_HALT, *fail_at is the index of the failing message and the
 * transaction is rolled back. On every other failure the transaction is
 * rolled back or the connection is gone. */
static enum apply_rc apply_batch(struct consumer *c, size_t n, size_t *fail_at)
{
    struct consumer_failure why;
    uint64_t applied = 0, dups = 0, failed = 0;
    enum apply_rc rc = APPLY_OK;
    struct msg_view v;
    bool have_view = false;

    if (exec_sql(c, "BEGIN", 0, NULL, NULL, &why) < 0)
        return own_statement_failed(c, "BEGIN", &why);

    for (size_t i = 0; i < n; i++) {
        if (view_make(&v, c->batch[i]) < 0) {
            set_error(c, "out of memory");
            rc = APPLY_FATAL;
            goto rollback;
        }
        have_view = true;
        const struct consumer_message *m = &v.m;
        const char *pparams[2] = {c->o.consumer_name, m->event_id};
        long inserted = 0;
        if (exec_sql(c, PROCESSED_SQL, 2, pparams, &inserted, &why) < 0) {
            rc = own_statement_failed(c, "INSERT INTO processed_events", &why);
            goto rollback;
        }
        if (inserted == 0) {
            log_debug("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                      ": already processed, skipped", m->event_id, m->topic, m->partition,
                      m->offset);
            dups++;
            view_free(&v);
            have_view = false;
            continue;
        }
        if (exec_sql(c, SAVEPOINT_SQL, 0, NULL, NULL, &why) < 0) {
            rc = own_statement_failed(c, "SAVEPOINT", &why);
            goto rollback;
        }
        memset(&why, 0, sizeof why);
        if (c->o.handler(c->o.arg, c->pg, m, &why) == CONSUMER_OK) {
            if (exec_sql(c, RELEASE_SQL, 0, NULL, NULL, &why) < 0) {
                rc = own_statement_failed(c, "RELEASE SAVEPOINT", &why);
                goto rollback;
            }
            applied++;
            view_free(&v);
            have_view = false;
            continue;
        }
        if (why.message[0] == '\0')
            snprintf(why.message, sizeof why.message, "the handler failed without a message");
        enum failure_class fc = classify(c, &why);
        if (fc == FAIL_CONN) {
            log_warn("PostgreSQL connection lost while applying event_id=%s: %s", m->event_id,
                     why.message);
            rc = APPLY_CONN;
            goto rollback;
        }
        if (fc == FAIL_TRANSIENT) {
            log_warn("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                     ": %s (SQLSTATE %s); the batch is retried", m->event_id, m->topic,
                     m->partition, m->offset, why.message, why.sqlstate);
            rc = APPLY_RETRY;
            goto rollback;
        }
        if (c->o.on_error == CONSUMER_ON_ERROR_HALT) {
            set_error(c, "event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                      " type=%s: apply failed: %s%s%s%s; stopped (--on-error halt): nothing "
                      "at or after this offset is committed. Fix the cause and restart, or run "
                      "with --on-error failed", m->event_id, m->topic, m->partition, m->offset,
                      m->type ? m->type : "(none)", why.message,
                      why.sqlstate[0] ? " (SQLSTATE " : "", why.sqlstate,
                      why.sqlstate[0] ? ")" : "");
            *fail_at = i;
            rc = APPLY_HALT;
            goto rollback;
        }
        /* --on-error failed: undo what the handler did, keep the
         * processed_events row (written before the savepoint), record why. */
        struct consumer_failure why2;
        if (exec_sql(c, ROLLBACK_TO_SQL, 0, NULL, NULL, &why2) < 0) {
            rc = own_statement_failed(c, "ROLLBACK TO SAVEPOINT", &why2);
            goto rollback;
        }
        rc = record_failed(c, m, &why);
        if (rc != APPLY_OK)
            goto rollback;
        if (exec_sql(c, RELEASE_SQL, 0, NULL, NULL, &why2) < 0) {
            rc = own_statement_failed(c, "RELEASE SAVEPOINT", &why2);
            goto rollback;
        }
        log_warn("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                 " type=%s: apply failed: %s%s%s%s; recorded in failed_events",
                 m->event_id, m->topic, m->partition, m->offset, m->type ? m->type : "(none)",
                 why.message, why.sqlstate[0] ? " (SQLSTATE " : "", why.sqlstate,
                 why.sqlstate[0] ? ")" : "");
        failed++;
        view_free(&v);
        have_view = false;
    }

    if (exec_sql(c, "COMMIT", 0, NULL, NULL, &why) < 0)
        return own_statement_failed(c, "COMMIT", &why);
    c->stats.applied += applied;
    c->stats.duplicates += dups;
    c->stats.failed += failed;
    c->stats.batches++;
    log_debug("batch of %zu committed: %" PRIu64 " applied, %" PRIu64 " duplicates, %" PRIu64
              " failed", n, applied, dups, failed);
    return APPLY_OK;

rollback:
    if (have_view)
        view_free(&v);
    if (rc != APPLY_CONN && c->pg != NULL && PQstatus(c->pg) == CONNECTION_OK &&
        exec_sql(c, "ROLLBACK", 0, NULL, NULL, &why) < 0 && classify(c, &why) == FAIL_CONN &&
        rc != APPLY_FATAL && rc != APPLY_HALT)
        rc = APPLY_CONN;
    return rc;
}

/* Commits the offsets applied and not yet committed (c->pending),
 * synchronously. A failure (typically "rebalance in progress") is logged,
 * not fatal: the events are applied, and the offsets stay pending, to be
 * committed with the next batch or by the retry in the main loop, unless the
 * partition is revoked first (its next owner then skips the redelivered
 * events as duplicates). */
static void commit_pending(struct consumer *c)
{
    if (c->pending == NULL || c->pending->cnt == 0)
        return;
    rd_kafka_resp_err_t err = rd_kafka_commit(c->rk, c->pending, 0);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("committing Kafka offsets failed: %s; retrying (the events are applied: "
                 "a redelivery is skipped as duplicate)", rd_kafka_err2str(err));
        c->commit_retry_at = now_s() + COMMIT_RETRY;
        return;
    }
    if (log_enabled(LOG_LEVEL_DEBUG))
        for (int i = 0; i < c->pending->cnt; i++)
            log_debug("committed %s[%" PRId32 "] offset %" PRId64, c->pending->elems[i].topic,
                      c->pending->elems[i].partition, c->pending->elems[i].offset);
    rd_kafka_topic_partition_list_destroy(c->pending);
    c->pending = NULL;
}

/* Adds offset+1 of the last of the first n batch messages of each
 * partition to the pending offsets, then commits them. */
static void commit_offsets(struct consumer *c, size_t n)
{
    if (n == 0)
        return;
    if (c->pending == NULL)
        c->pending = rd_kafka_topic_partition_list_new((int) n);
    for (size_t i = 0; i < n; i++) {
        const rd_kafka_message_t *m = c->batch[i];
        const char *topic = rd_kafka_topic_name(m->rkt);
        rd_kafka_topic_partition_t *p =
            rd_kafka_topic_partition_list_find(c->pending, topic, m->partition);
        if (p == NULL)
            p = rd_kafka_topic_partition_list_add(c->pending, topic, m->partition);
        if (m->offset + 1 > p->offset)
            p->offset = m->offset + 1;
    }
    commit_pending(c);
}

/* Forgets pending offsets of partitions we no longer own (all when parts is
 * NULL): committing them now could move another owner's position. */
static void pending_forget(struct consumer *c, const rd_kafka_topic_partition_list_t *parts)
{
    if (c->pending == NULL)
        return;
    for (int i = c->pending->cnt - 1; i >= 0; i--) {
        const rd_kafka_topic_partition_t *p = &c->pending->elems[i];
        if (parts == NULL || rd_kafka_topic_partition_list_find(parts, p->topic, p->partition))
            rd_kafka_topic_partition_list_del_by_idx(c->pending, i);
    }
}

static void batch_drop(struct consumer *c, size_t from)
{
    for (size_t i = from; i < c->nbatch; i++)
        rd_kafka_message_destroy(c->batch[i]);
    if (from < c->nbatch)
        c->nbatch = from;
}

/* on_error halt: roll back (done), apply and commit what came before the
 * failing message so the group's offset points exactly at it, then stop. */
static void halt_at(struct consumer *c, size_t fail_at)
{
    char saved[CONSUMER_ERRLEN];
    snprintf(saved, sizeof saved, "%s", c->errstr);
    size_t dummy;
    if (fail_at > 0) {
        enum apply_rc rc = apply_batch(c, fail_at, &dummy);
        if (rc == APPLY_OK)
            commit_offsets(c, fail_at);
        else
            log_warn("could not re-apply the %zu events before the failing one; they are "
                     "applied by the next run", fail_at);
    }
    snprintf(c->errstr, sizeof c->errstr, "%s", saved);
    c->halted = true;
    batch_drop(c, 0);
}

/* Applies the batch in progress, retrying transient failures. Returns true
 * when the batch is done (applied and offsets committed, or halted/fatal);
 * false when PostgreSQL is away (the batch is kept) or, when bounded (a
 * revoke or a stop), when it could not be applied within o.revoke_timeout:
 * the caller then drops it, committing nothing for it. */
static bool process_batch(struct consumer *c, bool bounded)
{
    double backoff = 0.1;
    int attempts = 0;
    double started = now_s();
    double deadline = started + c->o.revoke_timeout;
    while (c->nbatch > 0) {
        if (!c->pg_ready)
            return false;
        if (bounded) {
            double left = deadline - now_s();
            if (left <= 0) {
                log_warn("gave up on the batch in progress (%zu messages) after %.1f s of "
                         "transient failures (--revoke-timeout)", c->nbatch, now_s() - started);
                c->stats.abandoned++;
                return false;
            }
            pg_watchdog_arm(c->watchdog, c->pg, left);
        }
        size_t fail_at = 0;
        enum apply_rc rc = apply_batch(c, c->nbatch, &fail_at);
        if (rc == APPLY_HALT)
            halt_at(c, fail_at); /* still under the deadline when bounded */
        if (bounded && pg_watchdog_disarm(c->watchdog)) {
            /* The connection was cut: its transaction is rolled back, unless
             * the cut came after COMMIT returned (rc says so). */
            if (rc == APPLY_OK) {
                commit_offsets(c, c->nbatch);
                batch_drop(c, 0);
            } else if (rc != APPLY_HALT) {
                log_warn("gave up on the batch in progress (%zu messages) after %.1f s "
                         "(--revoke-timeout): PostgreSQL did not finish it, the connection "
                         "was cut and its transaction rolled back; no offset is committed "
                         "for it, the next owner of its partitions applies it",
                         c->nbatch, now_s() - started);
                c->stats.abandoned++;
            }
            pg_lost(c);
            return c->nbatch == 0;
        }
        switch (rc) {
        case APPLY_OK:
            commit_offsets(c, c->nbatch);
            batch_drop(c, 0);
            return true;
        case APPLY_CONN:
            pg_lost(c);
            return false;
        case APPLY_HALT:
            return true;
        case APPLY_FATAL:
            c->fatal = true;
            batch_drop(c, 0);
            return true;
        case APPLY_RETRY:
            c->stats.retries++;
            if (*c->stop && ++attempts >= TRANSIENT_RETRIES_ON_STOP) {
                log_warn("stopping: %zu unapplied messages dropped, their offsets are not "
                         "committed", c->nbatch);
                batch_drop(c, 0);
                return true;
            }
            double pause = jitter(backoff);
            if (bounded && now_s() + pause > deadline)
                pause = deadline - now_s() > 0 ? deadline - now_s() : 0;
            sleep_s(pause);
            backoff = backoff * 2 > 5 ? 5 : backoff * 2;
            break;
        }
    }
    return true;
}

/* ---- Kafka callbacks --------------------------------------------------- */

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct consumer *c = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[256];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof buf);
        set_error(c, "fatal Kafka consumer error %s: %s", rd_kafka_err2name(orig), buf);
        c->fatal = true;
        return;
    }
    double now = now_s();
    if (err == c->last_kafka_err && now - c->last_kafka_err_at < KAFKA_ERR_LOG_GAP)
        return;
    c->last_kafka_err = err;
    c->last_kafka_err_at = now;
    log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t) err), reason);
}

static bool in_list(const rd_kafka_topic_partition_list_t *parts, const rd_kafka_message_t *m)
{
    return rd_kafka_topic_partition_list_find(parts, rd_kafka_topic_name(m->rkt),
                                              m->partition) != NULL;
}

static void log_parts(const char *what, const rd_kafka_topic_partition_list_t *parts)
{
    char buf[1024];
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < parts->cnt && n < sizeof buf - 64; i++)
        n += (size_t) snprintf(buf + n, sizeof buf - n, "%s%s[%" PRId32 "]", i ? " " : "",
                               parts->elems[i].topic, parts->elems[i].partition);
    log_info("%s %d partition(s): %s", what, parts->cnt, buf);
}

/* Runs from rd_kafka_consumer_poll() in our thread. On revoke the batch in
 * progress is finished while the partitions are still ours, or dropped with
 * nothing committed for it. */
static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    struct consumer *c = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *e = NULL;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        log_parts("assigned", parts);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        if (!c->pg_ready && parts->cnt > 0) {
            rd_kafka_pause_partitions(rk, parts);
            c->paused = true;
        }
    } else {
        if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS)
            log_parts("revoked", parts);
        else
            log_warn("rebalance error: %s", rd_kafka_err2str(err));
        bool affected = !coop;
        for (size_t i = 0; i < c->nbatch && !affected; i++)
            affected = in_list(parts, c->batch[i]);
        if (affected && c->nbatch > 0 && !c->halted && !c->fatal) {
            log_info("finishing the batch in progress (%zu messages) before giving the "
                     "partitions up (at most %.1f s)", c->nbatch, c->o.revoke_timeout);
            process_batch(c, true);
        }
        if (affected && c->nbatch > 0) {
            /* Could not apply: keep what belongs to partitions we still own
             * (cooperative), drop the rest; no offset is committed for it. */
            size_t kept = 0, dropped = 0;
            for (size_t i = 0; i < c->nbatch; i++) {
                if (coop && !in_list(parts, c->batch[i])) {
                    c->batch[kept++] = c->batch[i];
                } else {
                    rd_kafka_message_destroy(c->batch[i]);
                    dropped++;
                }
            }
            c->nbatch = kept;
            log_warn("%zu unapplied messages of revoked partitions dropped; their offsets "
                     "were not committed, so the next owner reads them again", dropped);
        }
        pending_forget(c, coop ? parts : NULL);
        if (coop)
            e = rd_kafka_incremental_unassign(rk, parts);
        else
            rd_kafka_assign(rk, NULL);
    }
    if (e != NULL) {
        log_warn("rebalance: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

/* ---- lifecycle --------------------------------------------------------- */

struct consumer *consumer_new(const struct consumer_options *o, char *err, size_t errlen)
{
    struct consumer *c = calloc(1, sizeof *c);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (c == NULL || conf == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    c->o = *o;
    if (c->o.batch <= 0)
        c->o.batch = 100;
    if (c->o.batch_ms < 0)
        c->o.batch_ms = 100;
    if (c->o.reconnect_max <= 0)
        c->o.reconnect_max = 30;
    if (c->o.revoke_timeout <= 0)
        c->o.revoke_timeout = 5;
    c->backoff = 0.5;
    if (o->handler == NULL || o->group == NULL || *o->group == '\0' || o->ntopics == 0 ||
        o->dsn == NULL || o->consumer_name == NULL || *o->consumer_name == '\0') {
        snprintf(err, errlen, "consumer_new: handler, group, topics, dsn and consumer_name "
                 "are required");
        goto fail;
    }
    c->batch_cap = (size_t) c->o.batch;
    c->batch = calloc(c->batch_cap, sizeof *c->batch);
    c->watchdog = pg_watchdog_new();
    if (c->batch == NULL || c->watchdog == NULL) {
        snprintf(err, errlen, "out of memory (or no thread) for the consumer");
        goto fail;
    }

    /* Our defaults first; the user's properties win, except the three that
     * make the guarantee (consume_config refuses them; re-set after). Why
     * each differs from librdkafka's: consumer.h. */
    if ((o->brokers && *o->brokers &&
         kafka_conf_set(conf, "bootstrap.servers", o->brokers, err, errlen) < 0) ||
        kafka_conf_set(conf, "client.id", "outbox-consume", err, errlen) < 0 ||
        kafka_conf_set(conf, "auto.offset.reset", "earliest", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.partition.eof", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "session.timeout.ms", "10000", err, errlen) < 0 ||
        kafka_conf_set(conf, "heartbeat.interval.ms", "1000", err, errlen) < 0 ||
        kafka_conf_set(conf, "topic.metadata.refresh.interval.ms", "10000", err, errlen) < 0 ||
        kafka_conf_route_log(conf, err, errlen) < 0)
        goto fail;
    for (size_t i = 0; i < o->nkafka; i++)
        if (kafka_conf_set(conf, o->kafka[i].key, o->kafka[i].value, err, errlen) < 0)
            goto fail;
    if (kafka_conf_set(conf, "group.id", o->group, err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.commit", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.offset.store", "false", err, errlen) < 0)
        goto fail;

    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);

    char e[512];
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof e);
    if (c->rk == NULL) {
        snprintf(err, errlen, "cannot create the Kafka consumer: %s", e);
        goto fail;
    }
    conf = NULL; /* owned by rk now */
    rd_kafka_poll_set_consumer(c->rk);
    return c;

fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (c != NULL) {
        pg_watchdog_free(c->watchdog);
        free(c->batch);
        free(c);
    }
    return NULL;
}

static int subscribe(struct consumer *c)
{
    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new((int) c->o.ntopics);
    for (size_t i = 0; i < c->o.ntopics; i++)
        rd_kafka_topic_partition_list_add(topics, c->o.topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        set_error(c, "cannot subscribe: %s", rd_kafka_err2str(err));
        return -1;
    }
    c->subscribed = true;
    return 0;
}

/* A message or an error event from the consumer queue. */
static void take(struct consumer *c, rd_kafka_message_t *m)
{
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            double now = now_s();
            if ((int) m->err != c->last_kafka_err || now - c->last_kafka_err_at >= KAFKA_ERR_LOG_GAP) {
                c->last_kafka_err = (int) m->err;
                c->last_kafka_err_at = now;
                log_warn("kafka: %s%s%s", rd_kafka_message_errstr(m), m->rkt ? " topic=" : "",
                         m->rkt ? rd_kafka_topic_name(m->rkt) : "");
            }
        }
        rd_kafka_message_destroy(m);
        return;
    }
    if (c->nbatch == c->batch_cap) {
        /* Never drop a message: the consumer's position is already past it. */
        rd_kafka_message_t **grown = realloc(c->batch, 2 * c->batch_cap * sizeof *grown);
        if (grown == NULL) {
            set_error(c, "out of memory");
            c->fatal = true;
            rd_kafka_message_destroy(m);
            return;
        }
        c->batch = grown;
        c->batch_cap *= 2;
    }
    if (c->nbatch == 0)
        c->batch_started = now_s();
    c->batch[c->nbatch++] = m;
}

int consumer_run(struct consumer *c, volatile sig_atomic_t *stop)
{
    c->stop = stop;
    srand((unsigned) time(NULL) ^ (unsigned) getpid());
    while (!*stop && !c->pg_ready && !c->fatal) {
        pg_connect(c);
        if (!c->pg_ready && !c->fatal)
            sleep_s(0.05);
    }
    if (!c->fatal && !*stop && subscribe(c) < 0)
        c->fatal = true;
    if (!c->fatal && !*stop)
        log_info("consuming %zu topic(s) as group %s, consumer %s (batch %d, %d ms, on-error %s)",
                 c->o.ntopics, c->o.group, c->o.consumer_name, c->o.batch, c->o.batch_ms,
                 c->o.on_error == CONSUMER_ON_ERROR_HALT ? "halt" : "failed");

    while (!*stop && !c->halted && !c->fatal) {
        if (c->pending != NULL && now_s() >= c->commit_retry_at)
            commit_pending(c);
        if (!c->pg_ready) {
            pg_connect(c);
            if (c->fatal)
                break;
            if (!c->pg_ready) {
                /* Paused: serves rebalances; anything fetched before the
                 * pause took effect is kept in the batch. */
                rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, POLL_MS);
                if (m != NULL)
                    take(c, m);
                continue;
            }
        }
        double now = now_s();
        bool full = c->nbatch >= (size_t) c->o.batch;
        double left = c->batch_started + c->o.batch_ms / 1000.0 - now;
        if (c->nbatch > 0 && (full || left <= 0)) {
            process_batch(c, false);
            continue;
        }
        int timeout = POLL_MS;
        if (c->nbatch > 0 && left * 1000 < timeout)
            timeout = (int) (left * 1000) + 1;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, timeout);
        if (m != NULL)
            take(c, m);
    }

    /* Stopping: finish the batch in progress (stop set, halted or fatal:
     * only the first applies anything). */
    if (*stop && !c->halted && !c->fatal && c->nbatch > 0) {
        if (!c->pg_ready)
            pg_connect(c);
        if (!process_batch(c, true))
            log_warn("stopping: %zu unapplied messages dropped, their offsets are not "
                     "committed", c->nbatch);
    }
    batch_drop(c, 0);
    commit_pending(c);
    log_info("stopping: %" PRIu64 " events applied, %" PRIu64 " duplicates skipped, %" PRIu64
             " failed, %" PRIu64 " batches, %" PRIu64 " PostgreSQL reconnects, %" PRIu64
             " batches given up at a revoke or stop",
             c->stats.applied, c->stats.duplicates, c->stats.failed, c->stats.batches,
             c->stats.reconnects, c->stats.abandoned);
    if (c->halted)
        return CONSUMER_HALTED;
    if (c->fatal)
        return CONSUMER_FATAL;
    return CONSUMER_OK;
}

const char *consumer_errstr(const struct consumer *c)
{
    return c->errstr;
}

const struct consumer_stats *consumer_stats(const struct consumer *c)
{
    return &c->stats;
}

void consumer_free(struct consumer *c)
{
    if (c == NULL)
        return;
    batch_drop(c, 0);
    if (c->rk != NULL) {
        /* Leaves the group: the revoke callback runs with an empty batch. */
        rd_kafka_resp_err_t err = rd_kafka_consumer_close(c->rk);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
            log_warn("closing the Kafka consumer: %s", rd_kafka_err2str(err));
        rd_kafka_destroy(c->rk);
    }
    pg_close(c);
    pg_watchdog_free(c->watchdog);
    if (c->pending != NULL)
        rd_kafka_topic_partition_list_destroy(c->pending);
    free(c->batch);
    free(c);
}
