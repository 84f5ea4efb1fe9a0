/*
 * relay.c — the main loop (see relay.h).
 *
 * One thread. Each turn: serve Kafka delivery reports (they ack the
 * tracker), read as many replication frames as the in-flight window allows,
 * send a status update when one is due, then wait on PostgreSQL's socket and
 * librdkafka's event pipe until the next deadline. When the window is full
 * the relayer stops reading WAL but keeps sending status updates, so the
 * server does not time the connection out while Kafka catches up.
 *
 * Each frame goes to the output plugin's decoder and from there to
 * dispatch (dispatch.h), which decides what it means for the tracker and
 * the sink; what the sink's answers mean is relay_sink.c's, the backfill's
 * hooks are relay_backfill.c's.
 *
 * Rewind: a delivery error that is waited out (kafka_errors.h) stops the
 * reading; once nothing is in flight the replication connection is ended
 * and started again from the confirmed position, so everything after it is
 * produced again, in commit order (rewind_replication).
 */
#include "relay_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox_relay/relay/backfill.h"
#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/core/dispatch.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/pg/partition.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/decode/wire.h"

#define TRACKER_GROUPS 4096
#define STANDBY_POLL 1.0    /* s between a standby's looks at the slot */
#define REFUSED_POLL 5.0    /* s between tries while the server refuses the plugin */
#define REFUSED_LOG_EVERY 60.0 /* s between repeats of that error in the log */
#define READ_BATCH 256      /* frames between delivery-report polls */
#define MID_TX_NAP_NS 100000 /* a nap inside a transaction: see refill() */
#define DRAIN_LAG_US 50000   /* read this long after its commit, a transaction is backlog */
#define DRAIN_NAP_NS 500000  /* a nap when the socket runs dry while draining: see refill() */
#define LAZY_REPORTS_MS 10  /* the longest a delivery report waits to be served
                               while the loop is reading: see session() */
#define REWIND_MIN 0.2      /* s before the first re-production after a rewind */
#define AUTH_GRACE 30.0     /* s an authorization refusal may last, without any
                               progress, before it counts as permanent */

enum session_rc { SESSION_STOP = 1, SESSION_REWIND = 2 };

/* dispatch's world (dispatch.h): partitions (the sink's side: relay_sink.c). */
static int op_member(void *ctx, const struct decoder_record *rec, char *why, size_t whylen)
{
    struct relay *r = ctx;
    return decoder_member(r->decoder, rec, r->partitions, why, whylen);
}

static void op_tx_begin(void *ctx, int64_t xid)
{
    struct relay *r = ctx;
    partition_tx_begin(r->partitions, xid);
}

static void op_tx_commit(void *ctx, int64_t xid, lsn_t commit_end)
{
    struct relay *r = ctx;
    partition_tx_commit(r->partitions, xid, commit_end);
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
    r->columns = cfg->columns;
    /* PLUGIN_AUTO starts with wal2json; the stream says when the slot or
     * the server wants the other (STREAM_PLUGIN), and main.c starts over. */
    r->decoder = cfg->plugin == PLUGIN_PGOUTPUT ? decoder_pgoutput_new() : decoder_w2j_new();
    if (r->decoder != NULL)
        r->decoder->columns = &r->columns;
    struct stream_options so = {.decoder = r->decoder, .dsn = cfg->dsn, .slot = cfg->slot,
                                .columns = &r->columns,
                                .publication = cfg->publication,
                                .table_schema = cfg->table_schema,
                                .table_name = cfg->table_name,
                                .message_prefix = cfg->message_prefix, .create_slot = true,
                                .failover_slot = cfg->failover_slot,
                                .plugin_auto = cfg->plugin == PLUGIN_AUTO,
                                .recreate_slot = cfg->recreate_slot,
                                .takeover_after = cfg->takeover_after,
                                .query_timeout = cfg->wal_receiver_timeout,
                                .on_creating = relay_on_slot_creating,
                                .on_created = relay_on_slot_created, .on_created_ctx = r};
    struct backfill_options bo = {.dsn = cfg->dsn, .slot = cfg->slot,
                                  .columns = &r->columns,
                                  .table_schema = cfg->table_schema,
                                  .table_name = cfg->table_name};
    r->stream = stream_new(&so);
    r->tracker = tracker_new(TRACKER_GROUPS, 0);
    r->backfill = backfill_new(&bo);
    r->bf_tracker = tracker_new(TRACKER_GROUPS, 0);
    r->partitions = partition_map_new(cfg->dsn, cfg->slot, cfg->table_schema, cfg->table_name);
    if (r->partitions != NULL)
        partition_map_set_columns(r->partitions, &r->columns);
    struct dispatch_options dopts = {.slot = cfg->slot, .table_schema = cfg->table_schema,
                                     .table_name = cfg->table_name,
                                     .message_prefix = cfg->message_prefix,
                                     .dead_letter = cfg->on_poison == POISON_DEAD_LETTER};
    struct dispatch_ops ops = {.produce = relay_produce, .dead_letter = relay_dead_letter_change,
                               .member = op_member, .tx_begin = op_tx_begin,
                               .tx_commit = op_tx_commit, .ctx = r};
    if (r->tracker != NULL && r->decoder != NULL)
        r->dispatch = dispatch_new(&dopts, r->tracker, r->decoder, &ops);
    if (r->stream == NULL || r->tracker == NULL || r->backfill == NULL ||
        r->bf_tracker == NULL || r->decoder == NULL || r->dispatch == NULL ||
        r->partitions == NULL) {
        snprintf(err, errlen, "out of memory");
        relay_free(r);
        return NULL;
    }
    const char *kafka[2 * CONFIG_MAX_KAFKA_PROPS];
    for (size_t i = 0; i < cfg->nkafka; i++) {
        kafka[2 * i] = cfg->kafka[i].key;
        kafka[2 * i + 1] = cfg->kafka[i].value;
    }
    struct sink_options sko = {.brokers = cfg->brokers, .topic_template = cfg->topic,
                               .columns = &r->columns, .id_header = cfg->id_header,
                               .envelope = cfg->envelope, .ce_source = cfg->ce_source,
                               .kafka = kafka, .nkafka = cfg->nkafka};
    r->sink = sink_new(&sko, relay_on_report, r, err, errlen);
    if (r->sink == NULL) {
        relay_free(r);
        return NULL;
    }
    return r;
}

const char *relay_switch_plugin(const struct relay *r)
{
    return r->switch_plugin;
}

void relay_free(struct relay *r)
{
    if (r == NULL)
        return;
    sink_free(r->sink, 0);
    deadletter_queue_clear(&r->dlq);
    stream_free(r->stream);
    backfill_free(r->backfill);
    dispatch_free(r->dispatch);
    decoder_free(r->decoder);
    tracker_free(r->tracker);
    tracker_free(r->bf_tracker);
    partition_map_free(r->partitions);
    free(r);
}

const struct relay_stats *relay_stats(const struct relay *r)
{
    return &r->stats;
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
        return relay_send_status(r, now, true) < 0 ? STREAM_RETRY : 0;
    case LIVENESS_DEAD:
        return stream_timed_out(r->stream, liveness_silence(&r->live, now));
    case LIVENESS_OK:
    default:
        return 0;
    }
}

/* One frame: a keepalive, or XLogData for the decoder and dispatch. */
static void handle_frame(struct relay *r, const struct wire_msg *msg)
{
    int rc;
    if (msg->kind == WIRE_KEEPALIVE) {
        if (msg->wal_end > r->stats.received_lsn)
            r->stats.received_lsn = msg->wal_end;
        rc = dispatch_keepalive(r->dispatch, msg->wal_end, msg->reply_requested);
    } else {
        if (msg->wal_start > r->stats.received_lsn)
            r->stats.received_lsn = msg->wal_start;
        rc = dispatch_frame(r->dispatch, msg->data, msg->data_len, msg->wal_start);
        int64_t commit_us = dispatch_commit_us(r->dispatch);
        if (commit_us != r->seen_commit_us) { /* a new transaction: how late is it read? */
            r->seen_commit_us = commit_us;
            r->draining = commit_us > 0 && wall_now_us() - commit_us >= DRAIN_LAG_US;
        }
    }
    if (rc == DISPATCH_STATUS)
        r->force_status = true;
    else if (rc == DISPATCH_FATAL)
        relay_set_fatal(r, "%s", dispatch_errstr(r->dispatch));
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
    double age = oldest ? (double) (wall_now_us() - oldest) / 1e6 : 0;
    metrics_set_oldest_pending_age(r->metrics, age > 0 ? age : 0);
    metrics_set_state(r->metrics, stream_connected(r->stream), streaming,
                      sink_brokers_up(r->sink));
    if (!r->rewind && r->stats.rewinds && tracker_confirmed(r->tracker) > r->rewind_progress)
        metrics_set_delivery_waiting(r->metrics, NULL); /* got through again */
}

/* When the frames run out. The walsender sends a transaction as one frame
 * per change, each flushed on its own, all within tens of microseconds
 * once it decodes the commit; waking on each of them cost a context switch
 * per event at steady rates. So inside a transaction the loop first takes
 * in what the socket already holds: libpq's buffer (16 KiB or so) runs out
 * every few dozen frames while a backlog drains, and napping then, with the
 * socket full, cost a third of the drain speed (docs/benchmarks.md). Only
 * when that brings no whole frame does it nap MID_TX_NAP_NS and take in
 * whatever came meanwhile: the rest of the transaction, read in one go.
 *
 * While draining a backlog (the last transaction was read DRAIN_LAG_US or
 * more after its commit, so a fraction of a millisecond more is nothing)
 * the same goes between transactions, with a nap of DRAIN_NAP_NS: the
 * walsender fills the socket meanwhile, and the events of the next read
 * reach librdkafka together, in fewer and larger requests.
 *
 * The next time the frames run out without one read in between, the loop
 * hands over to poll(), which wakes on the next byte. *tries counts the
 * steps since the last frame read. Returns 1 when there may be frames to
 * read, 0 to poll, or a negative enum stream_rc. */
static int refill(struct relay *r, int *tries)
{
    if (*tries >= 2 || *r->stop || (!r->draining && !tracker_in_tx(r->tracker)))
        return 0;
    if ((*tries)++ == 1) {
        struct timespec nap = {.tv_sec = 0, .tv_nsec = r->draining ? DRAIN_NAP_NS : MID_TX_NAP_NS};
        nanosleep(&nap, NULL);
    }
    int rc = stream_consume(r->stream);
    return rc < 0 ? rc : 1;
}

/* Streams until stop, a fatal error or a lost connection. */
static int session(struct relay *r)
{
    struct wire_msg msg;
    liveness_init(&r->live, r->cfg->wal_receiver_timeout, mono_now());
    r->seen_commit_us = 0;
    r->draining = false;
    if (relay_send_status(r, mono_now(), false) < 0)
        return STREAM_RETRY;
    for (;;) {
        if (*r->stop)
            return SESSION_STOP;
        relay_serve(r, 0);
        if (r->fatal)
            return STREAM_FATAL;
        if (sink_fatal(r->sink)) {
            relay_set_fatal(r, "%s", sink_errstr(r->sink));
            return STREAM_FATAL;
        }
        if (r->rewind && sink_inflight(r->sink) == 0)
            return SESSION_REWIND;

        bool reading = relay_window_open(r), heard = false;
        for (int n = 0, tries = 0; reading && !r->fatal;) {
            int rc = stream_read(r->stream, &msg);
            if (rc == 0 && (rc = refill(r, &tries)) > 0)
                continue;
            if (rc == 0)
                break;
            if (rc < 0)
                return rc;
            heard = true;
            tries = 0;
            handle_frame(r, &msg);
            if (++n % READ_BATCH == 0) {
                relay_serve(r, 0);
                if (*r->stop)
                    return SESSION_STOP;
                if (relay_status_due_in(r, mono_now(), false) == 0 &&
                    relay_send_status(r, mono_now(), false) < 0)
                    return STREAM_RETRY;
            }
            reading = relay_window_open(r);
        }
        if (r->fatal)
            return STREAM_FATAL;

        double now = mono_now();
        /* While the window is full nothing is read, so silence proves
         * nothing: the timeout counts only while the relayer reads. */
        if (heard || !reading)
            liveness_heard(&r->live, now);
        int lrc = check_liveness(r, now);
        if (lrc < 0)
            return lrc;
        double due = relay_status_due_in(r, now, !reading);
        if (due == 0) {
            if (relay_send_status(r, now, false) < 0)
                return STREAM_RETRY;
            due = relay_status_due_in(r, now, !reading);
        }
        double live_due = liveness_due_in(&r->live, now);
        if (live_due < due)
            due = live_due;

        publish_gauges(r, true);
        /* Delivery reports lazily while reading: at a steady rate the
         * next transaction's WAL wakes the loop anyway, and a wake-up of
         * its own for each report cost a context switch per transaction.
         * They wait LAZY_REPORTS_MS at most, which confirms a little later
         * (status updates go at most every STATUS_MIN_GAP, relay_state.c,
         * anyway) and
         * changes no latency the relayer reports: those are taken when the
         * broker answered (sink.h). Promptly when they are what the loop
         * waits for: a full window, a rewind waiting for the reports of
         * what is in flight. */
        bool lazy = reading && !r->rewind && sink_inflight(r->sink) > 0;
        sink_set_lazy(r->sink, lazy);
        struct pollfd pfd[2] = {
            {.fd = sink_fd(r->sink), .events = POLLIN},
            {.fd = stream_socket(r->stream), .events = reading ? POLLIN : 0},
        };
        int timeout = (int) (due * 1000) + 1;
        if (lazy && timeout > LAZY_REPORTS_MS)
            timeout = LAZY_REPORTS_MS;
        if (poll(pfd, 2, timeout) < 0 && errno != EINTR) {
            relay_set_fatal(r, "poll failed: %s", strerror(errno));
            return STREAM_FATAL;
        }
        if (pfd[1].revents & (POLLIN | POLLERR | POLLHUP)) {
            int rc = stream_consume(r->stream);
            if (rc < 0)
                return rc;
            liveness_heard(&r->live, mono_now()); /* bytes came, if not yet a whole frame */
        }
    }
}

/* Sleeps up to seconds while serving delivery reports; returns early on
 * stop. */
static void pause_serving(struct relay *r, double seconds)
{
    double end = mono_now() + seconds;
    while (!*r->stop) {
        double left = end - mono_now();
        if (left <= 0)
            break;
        relay_serve(r, left > 0.2 ? 200 : (int) (left * 1000) + 1);
    }
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
    double now = mono_now();
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
    if (stream_streaming(r->stream) && relay_send_status(r, now, false) < 0)
        log_warn("%s", stream_errstr(r->stream));
    stream_stop(r->stream, 5000);
    deadletter_queue_clear(&r->dlq);
    r->rewind = false;
    if (r->rewind_class == KAFKA_ERR_AUTH && now - r->auth_since >= AUTH_GRACE) {
        relay_set_fatal(r, "%s; still refused after %.0f s without any delivery getting through: "
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
        deadletter_queue_clear(&r->dlq); /* nothing more is confirmed anyway */
    double end = mono_now() + r->cfg->shutdown_timeout;
    int flushed = -1;
    for (;;) {
        double left = end - mono_now();
        flushed = sink_flush(r->sink, left <= 0 ? 0 : left > 0.2 ? 200 : (int) (left * 1000) + 1);
        relay_serve_dead_letters(r);
        relay_keep_status(r);
        if ((flushed == 0 && deadletter_queue_empty(&r->dlq)) || left <= 0)
            break;
    }
    if (flushed < 0 || !deadletter_queue_empty(&r->dlq))
        log_warn("%zu deliveries still outstanding after %.0f s; their events are not "
                 "confirmed and will be sent again by the next run",
                 sink_inflight(r->sink), r->cfg->shutdown_timeout);
    if (stream_streaming(r->stream)) {
        if (relay_send_status(r, mono_now(), false) < 0)
            log_warn("%s", stream_errstr(r->stream));
        stream_stop(r->stream, 5000);
    }
}

int relay_run(struct relay *r)
{
    const struct relay_config *cfg = r->cfg;
    double backoff = 0.5;
    bool streamed = false, waiting_logged = false, backfilled = false;
    double refused_logged = -1e9;
    int exit_code = 0;

    srand((unsigned) time(NULL) ^ (unsigned) getpid());
    while (!*r->stop) {
        lsn_t slot_confirmed = 0;
        bool created = false;
        int rc = stream_start(r->stream, tracker_confirmed(r->tracker), &slot_confirmed, &created);
        backfill_unlock(r->backfill); /* held from before creating the slot */
        if (rc == STREAM_FATAL) {
            if (!*r->stop) /* a stop during backfill is not an error */
                relay_set_fatal(r, "%s", stream_errstr(r->stream));
            break;
        }
        if (rc == STREAM_PLUGIN) {
            log_info("%s: starting over with %s", stream_errstr(r->stream),
                     stream_switch_plugin(r->stream));
            snprintf(r->switch_plugin, sizeof r->switch_plugin, "%s",
                     stream_switch_plugin(r->stream));
            exit_code = RELAY_SWITCH_PLUGIN;
            break;
        }
        if (rc == STREAM_REFUSED) {
            /* Not fatal: a reload of the server's configuration cures it,
             * and a relayer that stays up can say why it does not stream. */
            if (r->metrics)
                metrics_set_plugin_refused(r->metrics, stream_errstr(r->stream));
            publish_gauges(r, false);
            if (mono_now() - refused_logged >= REFUSED_LOG_EVERY) {
                log_error("%s", stream_errstr(r->stream));
                refused_logged = mono_now();
            }
            pause_serving(r, jitter(REFUSED_POLL));
            continue;
        }
        if (r->metrics)
            metrics_set_plugin_refused(r->metrics, NULL);
        if (rc == STREAM_BACKFILL) {
            int brc = relay_resume_backfill(r);
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
                relay_set_fatal(r, "%s", backfill_errstr(r->backfill));
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
            log_info("created replication slot %s with %s at " LSN_FMT " after "
                     "backfilling the rows committed before it", cfg->slot,
                     decoder_plugin(r->decoder), LSN_ARGS(slot_confirmed));
        else if (created)
            log_warn("created replication slot %s with %s at " LSN_FMT "; outbox events "
                     "committed before now are not relayed by it",
                     cfg->slot, decoder_plugin(r->decoder), LSN_ARGS(slot_confirmed));
        tracker_reset(r->tracker, slot_confirmed);
        if (r->stats.received_lsn < tracker_confirmed(r->tracker))
            r->stats.received_lsn = tracker_confirmed(r->tracker);
        r->sent_flush = 0;
        log_info("slot=%s lsn=" LSN_FMT ": streaming %s.%s to Kafka (%s, walsender pid %d)",
                 cfg->slot, LSN_ARGS(tracker_confirmed(r->tracker)), cfg->table_schema,
                 cfg->table_name, decoder_plugin(r->decoder), stream_backend_pid(r->stream));
        backfill_close(r->backfill); /* streaming: no lock left to wait for */
        streamed = true;
        waiting_logged = false;
        backoff = 0.5;
        stream_set_create_slot(r->stream, false);
        r->rewind = false; /* this session starts at the confirmed position anyway */
        dispatch_set_partitioned(r->dispatch, stream_outbox_partitioned(r->stream) &&
                                                  !decoder_names_root(r->decoder));

        rc = session(r);
        sink_set_lazy(r->sink, false);
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
                relay_set_fatal(r, "%s", stream_errstr(r->stream));
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
    if (exit_code == RELAY_SWITCH_PLUGIN)
        return exit_code;
    log_info("slot=%s lsn=" LSN_FMT ": stopped (%llu events delivered)", cfg->slot,
             LSN_ARGS(tracker_confirmed(r->tracker)),
             (unsigned long long) r->stats.events_delivered);
    return exit_code;
}
