/*
 * relay.c — the main loop (see relay.h).
 *
 * One thread. Each turn: serve Kafka delivery reports (they ack the
 * tracker), read as many replication frames as the in-flight window allows,
 * send a status update when one is due, then wait on PostgreSQL's socket and
 * librdkafka's event pipe until the next deadline. When the window is full
 * the relayer stops reading WAL but keeps sending status updates, so the
 * server does not time the connection out while Kafka catches up.
 */
#include "outbox_relay/relay.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox_relay/backfill.h"
#include "outbox_relay/w2j.h"
#include "outbox_relay/liveness.h"
#include "outbox_relay/log.h"
#include "outbox_relay/metrics.h"
#include "outbox_relay/pgconn.h"
#include "outbox_relay/partition.h"
#include "outbox_relay/sink.h"
#include "outbox_relay/stream.h"
#include "outbox_relay/tracker.h"
#include "outbox_relay/wire.h"

#define RELAY_ERRLEN 2048
#define TRACKER_GROUPS 4096
#define STATUS_MIN_GAP 0.1  /* s between status updates for a moved position */
#define STATUS_BLOCKED 1.0  /* s between status updates while the window is full */
#define STANDBY_POLL 1.0    /* s between a standby's looks at the slot */
#define READ_BATCH 256      /* frames between delivery-report polls */
/* Backfilled rows are tracked apart from the stream (see backfill_emit):
 * their tokens carry this bit. The stream tracker's tokens count up from 1
 * and never reach it. */
#define BACKFILL_TOKEN ((uint64_t) 1 << 63)
static bool is_backfill(uint64_t token)
{
    return (token & BACKFILL_TOKEN) != 0;
}

#define REWIND_MIN 0.2      /* s before the first re-production after a rewind */
#define AUTH_GRACE 30.0     /* s an authorization refusal may last, without any
                               progress, before it counts as permanent */

enum session_rc { SESSION_STOP = 1, SESSION_REWIND = 2 };

/* A poison event's failed report, kept until the loop sends its dead letter
 * (the report's buffers die when the callback returns). */
struct dead_letter_job {
    struct dead_letter_job *next;
    uint64_t token;
    lsn_t lsn;
    char *event_id, *type, *topic, *error;
    char *key, *value; /* may be NULL */
    size_t key_len, value_len;
};

struct relay {
    const struct relay_config *cfg;
    volatile sig_atomic_t *stop;
    struct stream *stream;
    struct sink *sink;
    struct tracker *tracker;
    struct backfill *backfill;    /* the slot's backfill lock and marker */
    struct tracker *bf_tracker;   /* acks of backfilled rows: row n of a run
                                     is "LSN" bf_base + n */
    uint64_t bf_base;
    bool bf_at_creation; /* the slot was created with a finished backfill */
    bool bf_retry;       /* a backfilled row failed retriably: this run stops, resumed later */
    struct w2j_record *rec;
    struct w2j_scratch scratch;
    struct relay_stats stats;
    struct metrics *metrics; /* borrowed, may be NULL */
    lsn_t sent_flush;   /* flush position in our last status update */
    double last_status; /* monotonic seconds */
    bool force_status;
    struct liveness live; /* --wal-receiver-timeout of the current session */
    int64_t tx_commit_us; /* commit time of the open transaction, 0 unknown */
    struct partition_map *partitions; /* membership of a partitioned outbox */
    struct dead_letter_job *dl_head, *dl_tail; /* poison reports, oldest first */
    /* Rewind (see the top of the file): asked for by a delivery error that
     * is waited out, carried out once nothing is in flight. */
    bool rewind;
    enum kafka_err_class rewind_class;
    char rewind_why[RELAY_ERRLEN];
    double rewind_backoff;  /* s, the next pause before re-producing */
    lsn_t rewind_progress;  /* confirmed position at the previous rewind */
    double auth_since;      /* monotonic s of the first authorization rewind
                               without progress since; 0 = none */
    bool fatal;
    char errstr[RELAY_ERRLEN];
};

static int64_t now_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void set_fatal(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_fatal(struct relay *r, const char *fmt, ...)
{
    if (r->fatal)
        return; /* keep the first cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errstr, sizeof r->errstr, fmt, ap);
    va_end(ap);
    r->fatal = true;
}

static void keep_status(struct relay *r);
static void request_rewind(struct relay *r, enum kafka_err_class cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sends a poison event to the dead-letter topic under the same token, so
 * that its delivery report acks the original event. Returns 0, 1 when it
 * cannot be produced now but later can (a rewind was asked for), or -1. */
static int dead_letter(struct relay *r, uint64_t token, lsn_t event_lsn, const char *event_id,
                       const char *type, const char *topic, const char *key, size_t key_len,
                       const char *value, size_t value_len, const char *error)
{
    char lsn[32];
    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(event_lsn));
    char aggregate[128];
    snprintf(aggregate, sizeof aggregate, "%.*s", (int) key_len, key ? key : "");
    const char *headers[] = {"event_id",       event_id, "event_type", type,
                             "aggregate_id",   aggregate, "lsn",       lsn,
                             "original_topic", topic,     "error",     error};
    size_t max = sink_max_message_bytes(r->sink);
    if (value_len + key_len + 1024 > max)
        value = NULL, value_len = 0; /* the payload does not fit: headers only */
    int rc = SINK_FULL;
    while (rc == SINK_FULL && !*r->stop) {
        rc = sink_produce_raw(r->sink, r->cfg->dead_letter_topic, key, key_len, value,
                              value_len, headers, 6, token);
        if (rc == SINK_FULL) {
            sink_poll(r->sink, 100);
            keep_status(r);
        }
    }
    if (rc == SINK_RETRY && !is_backfill(token)) {
        request_rewind(r, sink_err_class(r->sink),
                       "event_id=%s type=%s lsn=%s: cannot produce its dead letter to %s now: %s",
                       event_id, type, lsn, r->cfg->dead_letter_topic, sink_errstr(r->sink));
        return 1;
    }
    if (rc != SINK_OK)
        return -1;
    r->stats.dead_lettered++;
    if (r->metrics)
        metrics_dead_lettered(r->metrics);
    log_warn("event_id=%s type=%s lsn=%s: poison event; producing it to dead-letter topic %s: %s",
             event_id, type, lsn, r->cfg->dead_letter_topic, error);
    return 0;
}

static void dead_letter_job_free(struct dead_letter_job *j)
{
    free(j->event_id);
    free(j->type);
    free(j->topic);
    free(j->error);
    free(j->key);
    free(j->value);
    free(j);
}

static char *dup_bytes(const char *p, size_t n)
{
    char *c = malloc(n + 1);
    if (c != NULL) {
        if (n)
            memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

/* Keeps a poison report for the loop. Returns 0 or -1 (out of memory). */
static int queue_dead_letter(struct relay *r, uint64_t token, lsn_t lsn,
                             const struct sink_report *rep)
{
    struct dead_letter_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return -1;
    j->token = token;
    j->lsn = lsn;
    j->event_id = strdup(rep->event_id);
    j->type = strdup(rep->event_type);
    j->topic = strdup(rep->topic);
    j->error = strdup(rep->errstr);
    j->key = rep->key ? dup_bytes(rep->key, rep->key_len) : NULL;
    j->key_len = rep->key ? rep->key_len : 0;
    j->value = rep->value ? dup_bytes(rep->value, rep->value_len) : NULL;
    j->value_len = rep->value ? rep->value_len : 0;
    if (!j->event_id || !j->type || !j->topic || !j->error || (rep->key && !j->key) ||
        (rep->value && !j->value)) {
        dead_letter_job_free(j);
        return -1;
    }
    if (r->dl_tail)
        r->dl_tail->next = j;
    else
        r->dl_head = j;
    r->dl_tail = j;
    return 0;
}

/* Sends the queued dead letters. A job whose token is no longer live (a
 * rewind or reconnect since: the event comes again from the server) or
 * that arrives while a rewind is pending is dropped, not sent: the event is
 * produced again anyway. Backfill's jobs (is_backfill) always go out. */
static void serve_dead_letters(struct relay *r)
{
    while (r->dl_head != NULL && !r->fatal) {
        struct dead_letter_job *j = r->dl_head;
        r->dl_head = j->next;
        if (r->dl_head == NULL)
            r->dl_tail = NULL;
        bool live = is_backfill(j->token) || (tracker_token_live(r->tracker, j->token) && !r->rewind);
        if (live && dead_letter(r, j->token, j->lsn, j->event_id, j->type, j->topic, j->key,
                                j->key_len, j->value, j->value_len, j->error) < 0)
            set_fatal(r,
                      "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT ": %s; "
                      "its dead letter cannot be produced to %s either: %s; the slot stays at "
                      LSN_FMT " and nothing after this event is confirmed. Fix the cause and "
                      "restart", j->event_id, j->type, j->topic, LSN_ARGS(j->lsn), j->error,
                      r->cfg->dead_letter_topic, sink_errstr(r->sink),
                      LSN_ARGS(tracker_confirmed(r->tracker)));
        dead_letter_job_free(j);
    }
}

static void drop_dead_letters(struct relay *r)
{
    while (r->dl_head != NULL) {
        struct dead_letter_job *j = r->dl_head;
        r->dl_head = j->next;
        dead_letter_job_free(j);
    }
    r->dl_tail = NULL;
}

/* Serves delivery reports for at most timeout_ms, then what they left for
 * the loop. Every wait of the relay goes through here. */
static int serve(struct relay *r, int timeout_ms)
{
    int n = sink_poll(r->sink, timeout_ms);
    serve_dead_letters(r);
    return n;
}

/* Asks for a rewind (see the top of the file); the first cause is kept. */
static void request_rewind(struct relay *r, enum kafka_err_class cls, const char *fmt, ...)
{
    if (r->rewind)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->rewind_why, sizeof r->rewind_why, fmt, ap);
    va_end(ap);
    r->rewind = true;
    r->rewind_class = cls;
    r->stats.rewinds++;
    if (r->metrics) {
        metrics_delivery_retried(r->metrics, kafka_err_class_name(cls));
        metrics_set_delivery_waiting(r->metrics, kafka_err_class_name(cls));
    }
    log_warn("%s; nothing past it is confirmed: once the %zu deliveries in flight have "
             "reported, everything after slot position " LSN_FMT " is produced again, in "
             "commit order (%s)", r->rewind_why, sink_inflight(r->sink),
             LSN_ARGS(tracker_confirmed(r->tracker)),
             cls == KAFKA_ERR_TOPIC_WAIT ? "waiting for the topic to exist; create it or "
                                           "enable auto-creation"
             : cls == KAFKA_ERR_AUTH ? "waiting for the authorization; grant the ACL"
                                     : "a retriable broker error");
}

/* The position to name for a reported event: its transaction's commit
 * end once that is known, else (the transaction is still being read) the
 * position reached inside it. */
static lsn_t report_lsn(const struct relay *r, uint64_t token)
{
    lsn_t lsn = tracker_token_lsn(r->tracker, token);
    return lsn ? lsn : r->stats.received_lsn;
}

static void on_report(void *ctx, uint64_t token, const struct sink_report *rep)
{
    struct relay *r = ctx;
    if (rep->err == 0) {
        r->stats.events_delivered++;
        if (r->metrics) {
            int64_t stamp = tracker_token_stamp(r->tracker, token);
            metrics_event_delivered(r->metrics, rep->topic,
                                    stamp ? (double) (now_unix_us() - stamp) / 1e6 : -1);
        }
        if (token & BACKFILL_TOKEN)
            tracker_ack(r->bf_tracker, token & ~BACKFILL_TOKEN);
        else
            tracker_ack(r->tracker, token);
        return;
    }
    r->stats.delivery_errors++;
    if (r->metrics)
        metrics_delivery_error(r->metrics);
    if (is_backfill(token) && !tracker_token_live(r->bf_tracker, token & ~BACKFILL_TOKEN))
        return; /* a row of an interrupted backfill run: the run now going sends it again */
    if (is_backfill(token) && kafka_err_waits(rep->cls)) {
        /* Retriable: the backfill run stops (backfill_emit/backfill_serve)
         * and is resumed after a backoff from its last acknowledged batch;
         * the slot is not streamed meanwhile. */
        if (!r->bf_retry)
            log_warn("slot=%s: backfill: delivery failed for event_id=%s topic=%s: %s (%s); "
                     "the backfill is resumed from its last acknowledged rows", r->cfg->slot,
                     rep->event_id, rep->topic, rep->errstr, kafka_err_class_name(rep->cls));
        r->bf_retry = true;
        return;
    }
    if (!is_backfill(token) && !tracker_token_live(r->tracker, token)) {
        /* From before a rewind or reconnect: the server sends the event
         * again (it was never confirmed), and that copy is tracked. */
        log_debug("event_id=%s topic=%s: delivery failed (%s) for an earlier round; produced "
                  "again since", rep->event_id, rep->topic, rep->errstr);
        return;
    }
    lsn_t lsn = report_lsn(r, token);
    if (!is_backfill(token) && kafka_err_waits(rep->cls)) {
        request_rewind(r, rep->cls,
                       "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT ": %s "
                       "(%s)", rep->event_id, rep->event_type, rep->topic, LSN_ARGS(lsn),
                       rep->errstr, kafka_err_class_name(rep->cls));
        return;
    }
    if (rep->poison && r->rewind)
        return; /* produced again after the rewind, and judged then */
    if (r->cfg->on_poison == POISON_DEAD_LETTER && rep->poison &&
        strcmp(rep->topic, r->cfg->dead_letter_topic) != 0 &&
        queue_dead_letter(r, token, lsn, rep) == 0)
        return;
    set_fatal(r,
              "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT ": %s; the slot "
              "stays at " LSN_FMT " and nothing after this event is confirmed. %s",
              rep->event_id, rep->event_type, rep->topic, LSN_ARGS(lsn), rep->errstr,
              LSN_ARGS(tracker_confirmed(r->tracker)),
              is_backfill(token) ? "It was a backfill delivery: the backfill stays "
                                   "unfinished and the next start redoes or resumes it"
              : rep->poison && r->cfg->on_poison == POISON_HALT
                  ? "Fix the cause and restart, or run with --on-poison dead-letter"
              : rep->poison ? "The dead-letter topic refused it too: fix the cause and restart"
                            : "The producer, not the event, failed: restart to send it again");
}

static bool window_open(const struct relay *r);
static void produce_event(struct relay *r, const struct outbox_event *ev, uint64_t token);

/* Backfill: one row of the backlog, produced like a streamed event but
 * tracked apart (BACKFILL_TOKEN): the backfill module learns from
 * backfill_acked how far every row is delivered, and the slot is streamed
 * only after all of them are. */
static int backfill_emit(void *ctx, const struct outbox_event *ev, uint64_t n)
{
    struct relay *r = ctx;
    while (!window_open(r) && !*r->stop && !r->fatal && !r->bf_retry)
        serve(r, 100);
    if (*r->stop || r->fatal || r->bf_retry)
        return -1;
    uint64_t token = tracker_add_single(r->bf_tracker, r->bf_base + n);
    if (token == 0) {
        set_fatal(r, "slot=%s: backfill: cannot track row id=%s", r->cfg->slot, ev->event_id);
        return -1;
    }
    produce_event(r, ev, token | BACKFILL_TOKEN);
    return r->fatal ? -1 : 0;
}

static uint64_t backfill_acked(void *ctx)
{
    struct relay *r = ctx;
    lsn_t confirmed = tracker_confirmed(r->bf_tracker);
    return confirmed > r->bf_base ? confirmed - r->bf_base : 0;
}

static int backfill_serve(void *ctx, int timeout_ms)
{
    struct relay *r = ctx;
    serve(r, timeout_ms); /* dead letters of backfilled rows ack them too */
    if (sink_fatal(r->sink))
        set_fatal(r, "%s", sink_errstr(r->sink));
    return *r->stop || r->fatal || r->bf_retry ? -1 : 0;
}

/* One backfill run (the first, with the exported snapshot, or a resume
 * with snapshot NULL) under the lock. Returns an enum backfill_rc. */
static int run_backfill(struct relay *r, const char *snapshot, lsn_t consistent)
{
    /* Row numbers of this run continue above every earlier one, so a late
     * report from an interrupted run cannot count for this one. */
    r->bf_base = tracker_confirmed(r->bf_tracker) + ((uint64_t) 1 << 32);
    tracker_reset(r->bf_tracker, r->bf_base);
    r->bf_retry = false;
    struct backfill_sink sink = {.emit = backfill_emit, .acked = backfill_acked,
                                 .serve = backfill_serve, .ctx = r};
    uint64_t rows = 0;
    int rc = backfill_run(r->backfill, snapshot, consistent, &sink, &rows);
    if (rc == BACKFILL_OK)
        log_info("slot=%s: backfill: %llu rows published and delivered; streaming from the "
                 "slot's consistent point", r->cfg->slot, (unsigned long long) rows);
    return rc;
}

static int on_slot_creating(void *ctx, bool *export_snapshot, char *err, size_t errlen)
{
    struct relay *r = ctx;
    bool want = r->cfg->backfill_pending;
    enum backfill_state st = BACKFILL_NONE;
    *export_snapshot = false;
    int rc = backfill_lock(r->backfill);
    if (rc == BACKFILL_OK)
        rc = backfill_read_state(r->backfill, &st);
    if (rc == BACKFILL_BUSY) {
        snprintf(err, errlen, "%s", backfill_errstr(r->backfill));
        return STREAM_BUSY;
    }
    if (rc != BACKFILL_OK && !want) {
        backfill_unlock(r->backfill); /* no marker can exist: create as always */
        return STREAM_OK;
    }
    if (rc == BACKFILL_OK && !want && st == BACKFILL_CREATING) {
        log_info("slot=%s: an earlier start with --backfill pending did not finish; "
                 "backfilling as it asked", r->cfg->slot);
        want = true;
    }
    if (rc == BACKFILL_OK && !want) {
        backfill_unlock(r->backfill);
        return STREAM_OK;
    }
    if (rc == BACKFILL_OK)
        rc = backfill_begin(r->backfill);
    if (rc != BACKFILL_OK) {
        snprintf(err, errlen, "%s", backfill_errstr(r->backfill));
        backfill_unlock(r->backfill);
        return rc == BACKFILL_BUSY ? STREAM_BUSY
             : rc == BACKFILL_FATAL ? STREAM_FATAL : STREAM_RETRY;
    }
    *export_snapshot = true; /* the lock stays held until stream_start returns */
    return STREAM_OK;
}

static int on_slot_created(void *ctx, const char *snapshot, lsn_t consistent, bool *drop_slot,
                           char *err, size_t errlen)
{
    struct relay *r = ctx;
    log_info("slot=%s: backfill: publishing the outbox rows not yet dispatched, as of the "
             "slot's consistent point " LSN_FMT " (snapshot %s)", r->cfg->slot,
             LSN_ARGS(consistent), snapshot);
    int rc = run_backfill(r, snapshot, consistent);
    r->bf_at_creation = rc == BACKFILL_OK;
    if (rc == BACKFILL_OK)
        return STREAM_OK;
    snprintf(err, errlen, "%s", backfill_errstr(r->backfill));
    /* The slot may go only once the marker says to create it again. */
    *drop_slot = backfill_abandon(r->backfill) == BACKFILL_OK;
    if (*r->stop || r->fatal || rc == BACKFILL_FATAL)
        return STREAM_FATAL;
    return STREAM_RETRY;
}

/* The slot exists and its marker says the backfill has not finished: take
 * the lock and finish it (or wait while another process holds the lock).
 * Returns an enum backfill_rc. */
static int resume_backfill(struct relay *r)
{
    enum backfill_state st;
    int rc = backfill_lock(r->backfill);
    if (rc != BACKFILL_OK)
        return rc;
    rc = backfill_read_state(r->backfill, &st);
    if (rc == BACKFILL_OK && (st == BACKFILL_CREATING || st == BACKFILL_RUNNING))
        rc = run_backfill(r, NULL, 0);
    backfill_unlock(r->backfill);
    return rc;
}

struct relay *relay_new(const struct relay_config *cfg, volatile sig_atomic_t *stop,
                        struct metrics *metrics, char *err, size_t errlen)
{
    struct relay *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->cfg = cfg;
    r->stop = stop;
    r->metrics = metrics;
    struct stream_options so = {.dsn = cfg->dsn, .slot = cfg->slot,
                                .table_schema = cfg->table_schema,
                                .table_name = cfg->table_name,
                                .message_prefix = cfg->message_prefix, .create_slot = true,
                                .failover_slot = cfg->failover_slot,
                                .recreate_slot = cfg->recreate_slot,
                                .takeover_after = cfg->takeover_after,
                                .query_timeout = cfg->wal_receiver_timeout,
                                .on_creating = on_slot_creating,
                                .on_created = on_slot_created, .on_created_ctx = r};
    struct backfill_options bo = {.dsn = cfg->dsn, .slot = cfg->slot,
                                  .table_schema = cfg->table_schema,
                                  .table_name = cfg->table_name};
    r->stream = stream_new(&so);
    r->tracker = tracker_new(TRACKER_GROUPS, 0);
    r->backfill = backfill_new(&bo);
    r->bf_tracker = tracker_new(TRACKER_GROUPS, 0);
    r->rec = malloc(sizeof *r->rec);
    r->partitions = partition_map_new(cfg->dsn, cfg->slot, cfg->table_schema, cfg->table_name);
    if (r->stream == NULL || r->tracker == NULL || r->backfill == NULL ||
        r->bf_tracker == NULL || r->rec == NULL || r->partitions == NULL) {
        snprintf(err, errlen, "out of memory");
        relay_free(r);
        return NULL;
    }
    r->sink = sink_new(cfg, on_report, r, err, errlen);
    if (r->sink == NULL) {
        relay_free(r);
        return NULL;
    }
    return r;
}

void relay_free(struct relay *r)
{
    if (r == NULL)
        return;
    sink_free(r->sink, 0);
    drop_dead_letters(r);
    stream_free(r->stream);
    backfill_free(r->backfill);
    tracker_free(r->tracker);
    tracker_free(r->bf_tracker);
    w2j_scratch_free(&r->scratch);
    partition_map_free(r->partitions);
    free(r->rec);
    free(r);
}

const struct relay_stats *relay_stats(const struct relay *r)
{
    return &r->stats;
}

/* Whether to read more WAL: not while a rewind waits for the deliveries in
 * flight (what would be read is read again after it). */
static bool window_open(const struct relay *r)
{
    return !r->rewind && sink_inflight(r->sink) < (size_t) r->cfg->max_inflight &&
           sink_inflight_bytes(r->sink) < (size_t) r->cfg->max_inflight_bytes;
}

static int send_status_asking(struct relay *r, double now, bool reply_requested)
{
    lsn_t flush = tracker_confirmed(r->tracker);
    lsn_t write = r->stats.received_lsn > flush ? r->stats.received_lsn : flush;
    int rc = stream_send_status(r->stream, write, flush, reply_requested);
    if (rc < 0)
        return rc;
    if (flush != r->sent_flush)
        log_debug("slot=%s lsn=" LSN_FMT ": confirmed", r->cfg->slot, LSN_ARGS(flush));
    r->sent_flush = flush;
    r->stats.confirmed_lsn = flush;
    r->last_status = now;
    r->force_status = false;
    return 0;
}

static int send_status(struct relay *r, double now)
{
    return send_status_asking(r, now, false);
}

/* --wal-receiver-timeout: asks the server for a reply at half of it, and
 * gives the connection up (STREAM_RETRY) after all of it without a frame.
 * A stalled path keeps the socket open and silent forever; without this the
 * relayer would wait on it forever. Returns 0 or a negative enum stream_rc. */
static int check_liveness(struct relay *r, double now)
{
    switch (liveness_check(&r->live, now)) {
    case LIVENESS_PING:
        log_debug("slot=%s: nothing from the server for %.1f s; asking for a reply",
                  r->cfg->slot, liveness_silence(&r->live, now));
        liveness_pinged(&r->live);
        return send_status_asking(r, now, true) < 0 ? STREAM_RETRY : 0;
    case LIVENESS_DEAD:
        return stream_timed_out(r->stream, liveness_silence(&r->live, now));
    case LIVENESS_OK:
    default:
        return 0;
    }
}

/* Seconds until the next status update is due (0 = now). */
static double status_due_in(const struct relay *r, double now, bool blocked)
{
    double interval = r->cfg->status_interval;
    if (blocked && interval > STATUS_BLOCKED)
        interval = STATUS_BLOCKED;
    if (r->force_status)
        return 0;
    if (tracker_confirmed(r->tracker) != r->sent_flush && interval > STATUS_MIN_GAP)
        interval = STATUS_MIN_GAP;
    double due = r->last_status + interval - now;
    return due > 0 ? due : 0;
}

/* For waits inside one step of the loop (a full librdkafka queue, the
 * shutdown flush): sends a status update when one is due, as the loop
 * would, so a long Kafka outage does not let wal_sender_timeout end the
 * connection. Only while replication runs (not during a backfill, whose
 * connection is busy exporting the snapshot). A failed send is left for
 * the loop's next read to find. */
static void keep_status(struct relay *r)
{
    if (!stream_streaming(r->stream))
        return;
    double now = now_s();
    if (status_due_in(r, now, true) > 0)
        return;
    if (send_status(r, now) < 0) {
        r->last_status = now; /* not again before the next interval */
        log_debug("%s", stream_errstr(r->stream));
    }
}

/* Produces one event, waiting out a full librdkafka queue (serving reports
 * and sending status updates meanwhile). Poison events are dead-lettered or
 * halt the relay, by policy; events that cannot be produced now (topic
 * unknown or unauthorized as far as the metadata says) start a rewind. */
static void produce_event(struct relay *r, const struct outbox_event *ev, uint64_t token)
{
    int rc = SINK_FULL;
    while (rc == SINK_FULL && !*r->stop) {
        rc = sink_produce(r->sink, ev, token);
        if (rc == SINK_FULL) {
            sink_poll(r->sink, 100);
            keep_status(r);
        }
    }
    if (rc == SINK_OK) {
        r->stats.events_produced++;
        if (r->tx_commit_us && !is_backfill(token))
            tracker_stamp(r->tracker, token, r->tx_commit_us);
        if (r->metrics)
            metrics_event_produced(r->metrics, sink_last_topic(r->sink));
        return;
    }
    if (rc == SINK_FULL)
        return; /* stopping; unconfirmed, so it is sent again next run */
    if (rc == SINK_RETRY && is_backfill(token)) {
        if (!r->bf_retry)
            log_warn("slot=%s: backfill: cannot produce row id=%s now: %s (%s); the backfill "
                     "is resumed from its last acknowledged rows", r->cfg->slot, ev->event_id,
                     sink_errstr(r->sink), kafka_err_class_name(sink_err_class(r->sink)));
        r->bf_retry = true;
        return;
    }
    if (rc == SINK_RETRY) {
        request_rewind(r, sink_err_class(r->sink), "slot=%s lsn=" LSN_FMT ": cannot produce "
                       "now: %s (%s)", r->cfg->slot, LSN_ARGS(ev->lsn), sink_errstr(r->sink),
                       kafka_err_class_name(sink_err_class(r->sink)));
        return; /* its group waits for an ack that never comes: not confirmed */
    }
    if (rc == SINK_POISON && r->rewind)
        return; /* produced again after the rewind, and judged then */
    if (rc == SINK_POISON && r->cfg->on_poison == POISON_DEAD_LETTER) {
        char *type = strndup(ev->type ? ev->type : "", ev->type_len);
        int dl = type ? dead_letter(r, token, ev->lsn, ev->event_id, type,
                                    sink_last_topic(r->sink), ev->aggregate_id,
                                    ev->aggregate_id_len, ev->payload, ev->payload_len,
                                    sink_errstr(r->sink))
                      : -1;
        free(type);
        if (dl >= 0)
            return;
    }
    set_fatal(r, "slot=%s lsn=" LSN_FMT ": cannot produce: %s; nothing from here on is "
              "confirmed", r->cfg->slot, LSN_ARGS(ev->lsn), sink_errstr(r->sink));
}

static bool span_eq(const struct w2j_value *v, const char *s)
{
    size_t n = strlen(s);
    return v->type == W2J_STRING && !v->escaped && v->len == n && memcmp(v->ptr, s, n) == 0;
}

/* An event the decoder could not map (missing type, bad id): it can never be
 * routed, so it is poison. */
static void undecodable(struct relay *r, uint64_t token, const struct wire_msg *msg,
                        const char *why)
{
    if (r->cfg->on_poison == POISON_DEAD_LETTER) {
        char id[40];
        snprintf(id, sizeof id, "lsn-" LSN_FMT, LSN_ARGS(msg->wal_start));
        if (dead_letter(r, token, msg->wal_start, id, "", "", NULL, 0, msg->data, msg->data_len,
                        why) >= 0)
            return;
    }
    set_fatal(r, "slot=%s lsn=" LSN_FMT ": undecodable outbox change: %s", r->cfg->slot,
              LSN_ARGS(msg->wal_start), why);
}

static void handle_change(struct relay *r, const struct wire_msg *msg)
{
    char err[W2J_ERRLEN];
    struct w2j_record *rec = r->rec;
    if (w2j_parse(msg->data, msg->data_len, rec, err, sizeof err) < 0) {
        set_fatal(r, "slot=%s lsn=" LSN_FMT ": cannot parse wal2json output: %s (line starts "
                  "%.80s)", r->cfg->slot, LSN_ARGS(msg->wal_start), err,
                  msg->data_len ? msg->data : "");
        return;
    }
    /* The options leave include-lsn out: the frame's header carries the
     * position. For a change or a message it is that record's LSN; for a
     * commit, the end of the commit record (PostgreSQL sets the write
     * location of a commit to the transaction's end_lsn), which is what
     * wal2json's "nextlsn" would say. A line that has them (another option
     * set) keeps its own. */
    if (rec->lsn == 0)
        rec->lsn = msg->wal_start;
    if (rec->action == 'C' && rec->nextlsn == 0)
        rec->nextlsn = msg->wal_start;
    switch (rec->action) {
    case 'B':
        if (w2j_timestamp_us(&rec->timestamp, &r->tx_commit_us) < 0)
            r->tx_commit_us = 0;
        if (tracker_begin(r->tracker) < 0)
            set_fatal(r, "slot=%s lsn=" LSN_FMT ": transaction begins inside another one",
                      r->cfg->slot, LSN_ARGS(msg->wal_start));
        if (stream_outbox_partitioned(r->stream))
            partition_tx_begin(r->partitions, rec->xid);
        return;
    case 'C':
        if (stream_outbox_partitioned(r->stream))
            partition_tx_commit(r->partitions, rec->xid, rec->nextlsn);
        if (tracker_commit(r->tracker, rec->nextlsn) < 0)
            set_fatal(r, "slot=%s lsn=" LSN_FMT ": commit without a transaction", r->cfg->slot,
                      LSN_ARGS(msg->wal_start));
        return;
    case 'I':
        if (!span_eq(&rec->schema, r->cfg->table_schema))
            return;
        if (!span_eq(&rec->table, r->cfg->table_name)) {
            if (!stream_outbox_partitioned(r->stream))
                return;
            /* Decided as of the row's commit, not by today's
             * catalog alone (partition.h). */
            char why[1536];
            int member = partition_member(r->partitions, rec, msg->wal_start, why, sizeof why);
            if (member == PARTITION_UNKNOWN)
                set_fatal(r, "slot=%s lsn=" LSN_FMT ": %s", r->cfg->slot,
                          LSN_ARGS(msg->wal_start), why);
            if (member != PARTITION_YES)
                return;
        }
        break;
    case 'M':
        if (!rec->transactional && w2j_timestamp_us(&rec->timestamp, &r->tx_commit_us) < 0)
            r->tx_commit_us = 0;
        if (!rec->transactional || *r->cfg->message_prefix == '\0' ||
            !span_eq(&rec->prefix, r->cfg->message_prefix))
            return; /* non-transactional or foreign messages are never relayed */
        break;
    default:
        return; /* updates, deletes, truncates: not events */
    }

    /* Only transactional changes get here (non-transactional messages
     * returned above), and logical decoding sends each inside its 'B'/'C'.
     * One outside a transaction means a broken stream: stop, never guess a
     * position for it. */
    uint64_t token = tracker_add(r->tracker);
    if (token == 0) {
        set_fatal(r, "slot=%s lsn=" LSN_FMT ": protocol violation: an outbox change outside "
                  "a transaction (no 'B' before it); nothing from here on is confirmed",
                  r->cfg->slot, LSN_ARGS(msg->wal_start));
        return;
    }
    struct outbox_event ev;
    if (w2j_event_decode(rec, &W2J_DEFAULT_COLUMNS, &r->scratch, &ev, err, sizeof err) < 0) {
        undecodable(r, token, msg, err);
        return;
    }
    produce_event(r, &ev, token);
}

static int handle_frame(struct relay *r, const struct wire_msg *msg)
{
    if (msg->kind == WIRE_KEEPALIVE) {
        if (msg->wal_end > r->stats.received_lsn)
            r->stats.received_lsn = msg->wal_end;
        tracker_idle(r->tracker, msg->wal_end);
        if (msg->reply_requested)
            r->force_status = true;
        return 0;
    }
    if (msg->wal_start > r->stats.received_lsn)
        r->stats.received_lsn = msg->wal_start;
    handle_change(r, msg);
    return 0;
}

/* Refreshes the gauges the metrics endpoint shows. */
static void publish_gauges(struct relay *r, bool streaming)
{
    if (r->metrics == NULL)
        return;
    metrics_set_inflight(r->metrics, sink_inflight(r->sink), sink_inflight_bytes(r->sink));
    metrics_set_confirmed_lsn(r->metrics, tracker_confirmed(r->tracker));
    metrics_set_received_lsn(r->metrics, r->stats.received_lsn);
    int64_t oldest = tracker_oldest_stamp(r->tracker);
    double age = oldest ? (double) (now_unix_us() - oldest) / 1e6 : 0;
    metrics_set_oldest_pending_age(r->metrics, age > 0 ? age : 0);
    metrics_set_state(r->metrics, stream_connected(r->stream), streaming,
                      sink_brokers_up(r->sink));
    if (!r->rewind && r->stats.rewinds && tracker_confirmed(r->tracker) > r->rewind_progress)
        metrics_set_delivery_waiting(r->metrics, NULL); /* got through again */
}

/* Streams until stop, a fatal error or a lost connection. */
static int session(struct relay *r)
{
    struct wire_msg msg;
    liveness_init(&r->live, r->cfg->wal_receiver_timeout, now_s());
    if (send_status(r, now_s()) < 0)
        return STREAM_RETRY;
    for (;;) {
        if (*r->stop)
            return SESSION_STOP;
        serve(r, 0);
        if (r->fatal)
            return STREAM_FATAL;
        if (sink_fatal(r->sink)) {
            set_fatal(r, "%s", sink_errstr(r->sink));
            return STREAM_FATAL;
        }
        if (r->rewind && sink_inflight(r->sink) == 0)
            return SESSION_REWIND;

        bool reading = window_open(r), heard = false;
        for (int n = 1; reading && !r->fatal; n++) {
            int rc = stream_read(r->stream, &msg);
            if (rc == 0)
                break;
            if (rc < 0)
                return rc;
            heard = true;
            handle_frame(r, &msg);
            if (n % READ_BATCH == 0) {
                serve(r, 0);
                if (*r->stop)
                    return SESSION_STOP;
                if (status_due_in(r, now_s(), false) == 0 && send_status(r, now_s()) < 0)
                    return STREAM_RETRY;
            }
            reading = window_open(r);
        }
        if (r->fatal)
            return STREAM_FATAL;

        double now = now_s();
        /* While the window is full nothing is read, so silence proves
         * nothing: the timeout counts only while the relayer reads. */
        if (heard || !reading)
            liveness_heard(&r->live, now);
        int lrc = check_liveness(r, now);
        if (lrc < 0)
            return lrc;
        double due = status_due_in(r, now, !reading);
        if (due == 0) {
            if (send_status(r, now) < 0)
                return STREAM_RETRY;
            due = status_due_in(r, now, !reading);
        }
        double live_due = liveness_due_in(&r->live, now);
        if (live_due < due)
            due = live_due;

        publish_gauges(r, true);
        struct pollfd pfd[2] = {
            {.fd = sink_fd(r->sink), .events = POLLIN},
            {.fd = stream_socket(r->stream), .events = reading ? POLLIN : 0},
        };
        int timeout = (int) (due * 1000) + 1;
        if (poll(pfd, 2, timeout) < 0 && errno != EINTR) {
            set_fatal(r, "poll failed: %s", strerror(errno));
            return STREAM_FATAL;
        }
        if (pfd[1].revents & (POLLIN | POLLERR | POLLHUP)) {
            int rc = stream_consume(r->stream);
            if (rc < 0)
                return rc;
            liveness_heard(&r->live, now_s()); /* bytes came, if not yet a whole frame */
        }
    }
}

/* Sleeps up to seconds while serving delivery reports; returns early on
 * stop. */
static void pause_serving(struct relay *r, double seconds)
{
    double end = now_s() + seconds;
    while (!*r->stop) {
        double left = end - now_s();
        if (left <= 0)
            break;
        serve(r, left > 0.2 ? 200 : (int) (left * 1000) + 1);
    }
}

static double jitter(double base)
{
    return base * (0.5 + (double) rand() / RAND_MAX / 2); /* 50-100 % of base */
}

/* Carries out a rewind once nothing is in flight: the final status update,
 * a clean end of the replication connection, a pause (REWIND_MIN, doubled
 * while no rewind in between made progress, capped at --reconnect-max),
 * and relay_run starts replication again from the confirmed position.
 * An authorization refusal that lasts AUTH_GRACE without any progress is
 * permanent: fatal, not poison (the event is not at fault). */
static void rewind_replication(struct relay *r)
{
    lsn_t confirmed = tracker_confirmed(r->tracker);
    double now = now_s();
    bool progress = confirmed > r->rewind_progress;
    r->rewind_progress = confirmed;
    if (progress || r->rewind_backoff == 0)
        r->rewind_backoff = REWIND_MIN;
    else if ((r->rewind_backoff *= 2) > r->cfg->reconnect_max)
        r->rewind_backoff = r->cfg->reconnect_max;
    if (progress || r->rewind_class != KAFKA_ERR_AUTH)
        r->auth_since = 0;
    if (r->rewind_class == KAFKA_ERR_AUTH && r->auth_since == 0)
        r->auth_since = now;
    if (stream_streaming(r->stream) && send_status(r, now) < 0)
        log_warn("%s", stream_errstr(r->stream));
    stream_stop(r->stream, 5000);
    drop_dead_letters(r);
    r->rewind = false;
    if (r->rewind_class == KAFKA_ERR_AUTH && now - r->auth_since >= AUTH_GRACE) {
        set_fatal(r, "%s; still refused after %.0f s without any delivery getting through: "
                  "a permanent authorization failure, not the event's fault, so it is not "
                  "dead-lettered. The slot stays at " LSN_FMT "; grant the ACL and restart",
                  r->rewind_why, now - r->auth_since, LSN_ARGS(confirmed));
        return;
    }
    log_info("slot=%s lsn=" LSN_FMT ": producing everything after the confirmed position "
             "again in about %.1f s", r->cfg->slot, LSN_ARGS(confirmed), r->rewind_backoff);
    publish_gauges(r, false);
    pause_serving(r, jitter(r->rewind_backoff));
}

/* Stops cleanly: no more reading; wait (bounded) for outstanding deliveries
 * while acking them; tell the server the final confirmed position. */
static void finish(struct relay *r)
{
    if (sink_inflight(r->sink) > 0)
        log_info("waiting up to %.0f s for %zu outstanding deliveries",
                 r->cfg->shutdown_timeout, sink_inflight(r->sink));
    /* In steps, so that status updates go on (a flush longer than
     * wal_sender_timeout would otherwise lose the connection and, with it,
     * the final confirmation) and dead letters go out. */
    if (r->fatal)
        drop_dead_letters(r); /* nothing more is confirmed anyway */
    double end = now_s() + r->cfg->shutdown_timeout;
    int flushed = -1;
    for (;;) {
        double left = end - now_s();
        flushed = sink_flush(r->sink, left <= 0 ? 0 : left > 0.2 ? 200 : (int) (left * 1000) + 1);
        serve_dead_letters(r);
        keep_status(r);
        if ((flushed == 0 && r->dl_head == NULL) || left <= 0)
            break;
    }
    if (flushed < 0 || r->dl_head != NULL)
        log_warn("%zu deliveries still outstanding after %.0f s; their events are not "
                 "confirmed and will be sent again by the next run",
                 sink_inflight(r->sink), r->cfg->shutdown_timeout);
    if (stream_streaming(r->stream)) {
        if (send_status(r, now_s()) < 0)
            log_warn("%s", stream_errstr(r->stream));
        stream_stop(r->stream, 5000);
    }
}

int relay_run(struct relay *r)
{
    const struct relay_config *cfg = r->cfg;
    double backoff = 0.5;
    bool streamed = false, waiting_logged = false, backfilled = false;
    int exit_code = 0;

    srand((unsigned) time(NULL) ^ (unsigned) getpid());
    while (!*r->stop) {
        lsn_t slot_confirmed = 0;
        bool created = false;
        int rc = stream_start(r->stream, tracker_confirmed(r->tracker), &slot_confirmed, &created);
        backfill_unlock(r->backfill); /* held from before creating the slot */
        if (rc == STREAM_FATAL) {
            if (!*r->stop) /* a stop during backfill is not an error */
                set_fatal(r, "%s", stream_errstr(r->stream));
            break;
        }
        if (rc == STREAM_BACKFILL) {
            int brc = resume_backfill(r);
            if (brc == BACKFILL_OK) {
                backfilled = true;
                waiting_logged = false;
                backoff = 0.5;
                continue;
            }
            publish_gauges(r, false);
            if (brc == BACKFILL_BUSY) {
                if (!waiting_logged)
                    log_info("%s", backfill_errstr(r->backfill));
                waiting_logged = true;
                pause_serving(r, jitter(STANDBY_POLL));
                continue;
            }
            if (*r->stop)
                break;
            if (brc == BACKFILL_FATAL || r->fatal) {
                set_fatal(r, "%s", backfill_errstr(r->backfill));
                break;
            }
            log_warn("%s; retrying in about %.1f s", backfill_errstr(r->backfill), backoff);
            pause_serving(r, jitter(backoff));
            backoff = backoff * 2 > cfg->reconnect_max ? cfg->reconnect_max : backoff * 2;
            continue;
        }
        if (cfg->backfill_pending && !created && !streamed && !backfilled && rc == STREAM_OK)
            log_info("slot=%s exists already: --backfill applies only when the slot is created",
                     cfg->slot);
        publish_gauges(r, false);
        if (rc == STREAM_BUSY) {
            if (!waiting_logged)
                log_info("%s", stream_errstr(r->stream));
            waiting_logged = true;
            pause_serving(r, jitter(STANDBY_POLL));
            continue;
        }
        if (rc != STREAM_OK) {
            log_warn("%s; retrying in about %.1f s", stream_errstr(r->stream), backoff);
            pause_serving(r, jitter(backoff));
            backoff = backoff * 2 > cfg->reconnect_max ? cfg->reconnect_max : backoff * 2;
            continue;
        }

        if (created && r->bf_at_creation)
            log_info("created replication slot %s with wal2json at " LSN_FMT " after "
                     "backfilling the rows committed before it", cfg->slot,
                     LSN_ARGS(slot_confirmed));
        else if (created)
            log_warn("created replication slot %s with wal2json at " LSN_FMT "; outbox events "
                     "committed before now are not relayed by it",
                     cfg->slot, LSN_ARGS(slot_confirmed));
        tracker_reset(r->tracker, slot_confirmed);
        if (r->stats.received_lsn < tracker_confirmed(r->tracker))
            r->stats.received_lsn = tracker_confirmed(r->tracker);
        r->sent_flush = 0;
        log_info("slot=%s lsn=" LSN_FMT ": streaming %s.%s to Kafka (walsender pid %d)",
                 cfg->slot, LSN_ARGS(tracker_confirmed(r->tracker)), cfg->table_schema,
                 cfg->table_name, stream_backend_pid(r->stream));
        backfill_close(r->backfill); /* streaming: no lock left to wait for */
        streamed = true;
        waiting_logged = false;
        backoff = 0.5;
        stream_set_create_slot(r->stream, false);
        r->rewind = false; /* this session starts at the confirmed position anyway */

        rc = session(r);
        if (rc == SESSION_STOP)
            break;
        if (rc == SESSION_REWIND) {
            rewind_replication(r);
            if (r->fatal)
                break;
            continue;
        }
        if (rc == STREAM_FATAL) {
            if (!r->fatal)
                set_fatal(r, "%s", stream_errstr(r->stream));
            break;
        }
        /* Connection lost: keep the producer, let in-flight deliveries
         * finish so their positions can be confirmed after reconnecting. */
        log_warn("%s; reconnecting (%zu deliveries in flight)", stream_errstr(r->stream),
                 sink_inflight(r->sink));
        stream_close(r->stream);
        r->stats.reconnects++;
        if (r->metrics)
            metrics_reconnected(r->metrics);
        publish_gauges(r, false);
        sink_flush(r->sink, 5000);
        if (r->fatal)
            break;
        pause_serving(r, jitter(backoff));
    }

    if (r->fatal) {
        log_error("%s", r->errstr);
        exit_code = 1;
    }
    finish(r);
    log_info("slot=%s lsn=" LSN_FMT ": stopped (%llu events delivered)", cfg->slot,
             LSN_ARGS(tracker_confirmed(r->tracker)),
             (unsigned long long) r->stats.events_delivered);
    return exit_code;
}
