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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox_relay/backfill.h"
#include "outbox_relay/decoder.h"
#include "outbox_relay/log.h"
#include "outbox_relay/metrics.h"
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

enum session_rc { SESSION_STOP = 1 };

struct relay {
    const struct relay_config *cfg;
    volatile sig_atomic_t *stop;
    struct stream *stream;
    struct sink *sink;
    struct tracker *tracker;
    struct w2j_record *rec;
    struct w2j_scratch scratch;
    struct relay_stats stats;
    struct metrics *metrics; /* borrowed, may be NULL */
    lsn_t sent_flush;   /* flush position in our last status update */
    double last_status; /* monotonic seconds */
    bool force_status;
    int64_t tx_commit_us; /* commit time of the open transaction, 0 unknown */
    struct partition_map *partitions; /* membership of a partitioned outbox */
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

/* Sends a poison event to the dead-letter topic under the same token, so
 * that its delivery report acks the original event. Returns 0 or -1. */
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
        if (rc == SINK_FULL)
            sink_poll(r->sink, 100);
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
        tracker_ack(r->tracker, token);
        return;
    }
    r->stats.delivery_errors++;
    if (r->metrics)
        metrics_delivery_error(r->metrics);
    lsn_t lsn = report_lsn(r, token);
    if (r->cfg->on_poison == POISON_DEAD_LETTER && rep->poison &&
        strcmp(rep->topic, r->cfg->dead_letter_topic) != 0 &&
        dead_letter(r, token, report_lsn(r, token), rep->event_id, rep->event_type, rep->topic,
                    rep->key,
                    rep->key_len, rep->value, rep->value_len, rep->errstr) == 0)
        return;
    set_fatal(r,
              "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT ": %s; the slot "
              "stays at " LSN_FMT " and nothing after this event is confirmed. %s",
              rep->event_id, rep->event_type, rep->topic, LSN_ARGS(lsn), rep->errstr,
              LSN_ARGS(tracker_confirmed(r->tracker)),
              rep->poison && r->cfg->on_poison == POISON_HALT
                  ? "Fix the cause and restart, or run with --on-poison dead-letter"
              : rep->poison ? "The dead-letter topic refused it too: fix the cause and restart"
                          : "Restart to send it again (if message.timeout.ms is set, leave it "
                            "at 0 so outages make deliveries wait instead of fail)");
}

static bool window_open(const struct relay *r);
static void produce_event(struct relay *r, const struct outbox_event *ev, uint64_t token);

/* Backfill: one row of the snapshot, produced like a streamed event but
 * outside the tracker (token 0): the slot starts streaming only after every
 * backfilled event has been delivered. */
static int backfill_emit(void *ctx, const struct outbox_event *ev)
{
    struct relay *r = ctx;
    while (!window_open(r) && !*r->stop && !r->fatal)
        sink_poll(r->sink, 100);
    if (*r->stop || r->fatal)
        return -1;
    produce_event(r, ev, 0);
    return r->fatal ? -1 : 0;
}

static int on_slot_created(void *ctx, const char *snapshot)
{
    struct relay *r = ctx;
    char err[RELAY_ERRLEN];
    uint64_t rows = 0;
    log_info("slot=%s: backfill: publishing the outbox rows not yet dispatched, as of the "
             "slot's consistent point (snapshot %s)", r->cfg->slot, snapshot);
    if (backfill_run(r->cfg->dsn, snapshot, r->cfg->table_schema, r->cfg->table_name,
                     backfill_emit, r, &rows, err, sizeof err) < 0) {
        if (!*r->stop)
            set_fatal(r, "slot=%s: %s", r->cfg->slot, err);
        return -1;
    }
    while (sink_inflight(r->sink) > 0 && !*r->stop && !r->fatal)
        sink_poll(r->sink, 100);
    if (*r->stop || r->fatal)
        return -1;
    log_info("slot=%s: backfill: %llu rows published and delivered; streaming from the slot's "
             "consistent point", r->cfg->slot, (unsigned long long) rows);
    return 0;
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
                                .on_created = cfg->backfill_pending ? on_slot_created : NULL,
                                .on_created_ctx = r};
    r->stream = stream_new(&so);
    r->tracker = tracker_new(TRACKER_GROUPS, 0);
    r->rec = malloc(sizeof *r->rec);
    r->partitions = partition_map_new(cfg->dsn, cfg->slot, cfg->table_schema, cfg->table_name);
    if (r->stream == NULL || r->tracker == NULL || r->rec == NULL || r->partitions == NULL) {
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
    stream_free(r->stream);
    tracker_free(r->tracker);
    w2j_scratch_free(&r->scratch);
    partition_map_free(r->partitions);
    free(r->rec);
    free(r);
}

const struct relay_stats *relay_stats(const struct relay *r)
{
    return &r->stats;
}

static bool window_open(const struct relay *r)
{
    return sink_inflight(r->sink) < (size_t) r->cfg->max_inflight &&
           sink_inflight_bytes(r->sink) < (size_t) r->cfg->max_inflight_bytes;
}

static int send_status(struct relay *r, double now)
{
    lsn_t flush = tracker_confirmed(r->tracker);
    lsn_t write = r->stats.received_lsn > flush ? r->stats.received_lsn : flush;
    int rc = stream_send_status(r->stream, write, flush, false);
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

/* Produces one event, waiting out a full librdkafka queue. Poison events are
 * dead-lettered or halt the relay, by policy. */
static void produce_event(struct relay *r, const struct outbox_event *ev, uint64_t token)
{
    int rc = SINK_FULL;
    while (rc == SINK_FULL && !*r->stop) {
        rc = sink_produce(r->sink, ev, token);
        if (rc == SINK_FULL)
            sink_poll(r->sink, 100);
    }
    if (rc == SINK_OK) {
        r->stats.events_produced++;
        if (r->tx_commit_us)
            tracker_stamp(r->tracker, token, r->tx_commit_us);
        if (r->metrics)
            metrics_event_produced(r->metrics, sink_last_topic(r->sink));
        return;
    }
    if (rc == SINK_FULL)
        return; /* stopping; unconfirmed, so it is sent again next run */
    if (rc == SINK_POISON && r->cfg->on_poison == POISON_DEAD_LETTER) {
        char *type = strndup(ev->type ? ev->type : "", ev->type_len);
        int dl = type ? dead_letter(r, token, ev->lsn, ev->event_id, type,
                                    sink_last_topic(r->sink), ev->aggregate_id,
                                    ev->aggregate_id_len, ev->payload, ev->payload_len,
                                    sink_errstr(r->sink))
                      : -1;
        free(type);
        if (dl == 0)
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
                        why) == 0)
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

    uint64_t token = tracker_in_tx(r->tracker) ? tracker_add(r->tracker)
                                               : tracker_add_single(r->tracker, msg->wal_start);
    if (token == 0) {
        set_fatal(r, "slot=%s lsn=" LSN_FMT ": change outside a transaction", r->cfg->slot,
                  LSN_ARGS(msg->wal_start));
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
}

/* Streams until stop, a fatal error or a lost connection. */
static int session(struct relay *r)
{
    struct wire_msg msg;
    if (send_status(r, now_s()) < 0)
        return STREAM_RETRY;
    for (;;) {
        if (*r->stop)
            return SESSION_STOP;
        sink_poll(r->sink, 0);
        if (r->fatal)
            return STREAM_FATAL;
        if (sink_fatal(r->sink)) {
            set_fatal(r, "%s", sink_errstr(r->sink));
            return STREAM_FATAL;
        }

        bool reading = window_open(r);
        for (int n = 1; reading && !r->fatal; n++) {
            int rc = stream_read(r->stream, &msg);
            if (rc == 0)
                break;
            if (rc < 0)
                return rc;
            handle_frame(r, &msg);
            if (n % READ_BATCH == 0) {
                sink_poll(r->sink, 0);
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
        double due = status_due_in(r, now, !reading);
        if (due == 0) {
            if (send_status(r, now) < 0)
                return STREAM_RETRY;
            due = status_due_in(r, now, !reading);
        }

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
        sink_poll(r->sink, left > 0.2 ? 200 : (int) (left * 1000) + 1);
    }
}

static double jitter(double base)
{
    return base * (0.5 + (double) rand() / RAND_MAX / 2); /* 50-100 % of base */
}

/* Stops cleanly: no more reading; wait (bounded) for outstanding deliveries
 * while acking them; tell the server the final confirmed position. */
static void finish(struct relay *r)
{
    int timeout_ms = (int) (r->cfg->shutdown_timeout * 1000);
    if (sink_inflight(r->sink) > 0)
        log_info("waiting up to %.0f s for %zu outstanding deliveries",
                 r->cfg->shutdown_timeout, sink_inflight(r->sink));
    if (sink_flush(r->sink, timeout_ms) < 0)
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
    bool streamed = false, waiting_logged = false;
    int exit_code = 0;

    srand((unsigned) time(NULL) ^ (unsigned) getpid());
    while (!*r->stop) {
        lsn_t slot_confirmed = 0;
        bool created = false;
        int rc = stream_start(r->stream, tracker_confirmed(r->tracker), &slot_confirmed, &created);
        if (rc == STREAM_FATAL) {
            if (!*r->stop) /* a stop during backfill is not an error */
                set_fatal(r, "%s", stream_errstr(r->stream));
            break;
        }
        if (cfg->backfill_pending && !created && !streamed && rc == STREAM_OK)
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

        if (created && cfg->backfill_pending)
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
        streamed = true;
        waiting_logged = false;
        backoff = 0.5;
        stream_set_create_slot(r->stream, false);

        rc = session(r);
        if (rc == SESSION_STOP)
            break;
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
