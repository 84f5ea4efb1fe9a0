/*
 * relay_session.c — one streaming session of the relay (see
 * relay_internal.h): from a started replication connection until a stop,
 * a fatal error, a rewind or a lost connection, which relay.c's loop then
 * deals with.
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
 * the sink; what the sink's answers mean is relay_sink.c's.
 *
 * Rewind: a delivery error that is waited out (kafka_errors.h) stops the
 * reading (the window closes); once nothing is in flight the session ends
 * with SESSION_REWIND and relay.c starts replication again from the
 * confirmed position.
 */
#include "relay_internal.h"

#include <errno.h>
#include <stdio.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/core/dispatch.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/decode/wire.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"

#define READ_BATCH 256      /* frames between delivery-report polls */
#define MID_TX_NAP_NS 100000 /* a nap inside a transaction: see refill() */
#define DRAIN_LAG_US 50000   /* read this long after its commit, a transaction is backlog */
#define DRAIN_NAP_NS 500000  /* a nap when the socket runs dry while draining: see refill() */
#define LAZY_REPORTS_MS 10  /* the longest a delivery report waits to be served
                               while the loop is reading: see wait_turn() */

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

/* A turn's first step: the delivery reports that came are served, then
 * whether the session ends here (a stop, a fatal error, a rewind that
 * nothing in flight holds up any more). Returns 0 to go on, or what
 * relay_session() returns. */
static int turn_begin(struct relay *r)
{
    if (*r->stop)
        return SESSION_STOP;
    relay_serve(r, 0);
    if (relay_eos_on(r)) {
        /* exactly-once (relay_eos.c): a doomed transaction is aborted, and
         * one open when a rewind is asked for, before the rewind waits for
         * what is in flight; a fenced producer ends the session */
        if (r->eos.abort_pending) {
            char why[RELAY_ERRLEN];
            snprintf(why, sizeof why, "%s", r->rewind_why);
            relay_eos_abort(r, why);
        } else if (r->rewind && sink_txn_open(r->sink)) {
            relay_eos_abort(r, NULL);
        }
        relay_eos_check_fenced(r);
        if (r->eos.fenced)
            return SESSION_FENCED;
    }
    if (r->fatal)
        return STREAM_FATAL;
    if (sink_fatal(r->sink)) {
        relay_set_fatal(r, "%s", sink_errstr(r->sink));
        return STREAM_FATAL;
    }
    if (r->rewind && sink_inflight(r->sink) == 0)
        return SESSION_REWIND;
    return 0;
}

/* Reads frames while *reading (the window is open) and there are any,
 * serving reports and sending due status updates every READ_BATCH frames;
 * *reading follows the window, *heard is set when a frame came. Returns 0,
 * or what relay_session() returns. */
static int read_frames(struct relay *r, bool *reading, bool *heard)
{
    struct wire_msg msg;
    for (int n = 0, tries = 0; *reading && !r->fatal;) {
        int rc = stream_read(r->stream, &msg);
        if (rc == 0 && (rc = refill(r, &tries)) > 0)
            continue;
        if (rc == 0)
            break;
        if (rc < 0)
            return rc;
        *heard = true;
        tries = 0;
        if (relay_eos_on(r)) {
            bool was_in_tx = tracker_in_tx(r->tracker);
            handle_frame(r, &msg);
            relay_eos_after_frame(r, was_in_tx, msg.wal_start);
            if (relay_eos_tick(r) < 0 || r->eos.fenced || r->rewind)
                break; /* turn_begin deals with it */
        } else {
            handle_frame(r, &msg);
        }
        if (++n % READ_BATCH == 0) {
            relay_serve(r, 0);
            if (*r->stop)
                return SESSION_STOP;
            if (relay_status_due_in(r, mono_now(), false) == 0 &&
                relay_send_status(r, mono_now(), false) < 0)
                return STREAM_RETRY;
        }
        *reading = relay_window_open(r);
    }
    return r->fatal ? STREAM_FATAL : 0;
}

/* The connection's upkeep after the reading: the liveness check and the
 * status update that is due. Returns 0 with *due the seconds until the
 * next of them, or a negative enum stream_rc. */
static int keep_alive(struct relay *r, bool reading, bool heard, double *due)
{
    double now = mono_now();
    /* While the window is full nothing is read, so silence proves
     * nothing: the timeout counts only while the relayer reads. */
    if (heard || !reading)
        liveness_heard(&r->live, now);
    int lrc = check_liveness(r, now);
    if (lrc < 0)
        return lrc;
    *due = relay_status_due_in(r, now, !reading);
    if (*due == 0) {
        if (relay_send_status(r, now, false) < 0)
            return STREAM_RETRY;
        *due = relay_status_due_in(r, now, !reading);
    }
    double live_due = liveness_due_in(&r->live, now);
    if (live_due < *due)
        *due = live_due;
    if (relay_eos_on(r)) {
        if (relay_eos_tick(r) < 0)
            return r->eos.fenced ? 0 : STREAM_FATAL; /* fenced: turn_begin ends the session */
        relay_eos_watch(r, mono_now());
        double txn_due = relay_eos_due_in(r, mono_now());
        if (txn_due < *due)
            *due = txn_due;
    }
    return 0;
}

/* A turn's wait: on librdkafka's event pipe and, while reading, on the
 * replication socket, for due seconds at most; what came on the socket is
 * taken in. Returns 0, or a negative enum stream_rc. */
static int wait_turn(struct relay *r, bool reading, double due)
{
    relay_publish_gauges(r, true);
    relay_watch_deliveries(r);
    /* Delivery reports lazily while reading: at a steady rate the
     * next transaction's WAL wakes the loop anyway, and a wake-up of
     * its own for each report cost a context switch per transaction.
     * They wait LAZY_REPORTS_MS at most, which confirms a little later
     * (status updates go at most every STATUS_MIN_GAP, relay_state.c,
     * anyway) and changes no latency the relayer reports: those are taken when the
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
    return 0;
}

/* Each turn: reports, then frames, then the connection's upkeep, then a
 * wait. */
int relay_session(struct relay *r)
{
    liveness_init(&r->live, r->cfg->wal_receiver_timeout, mono_now());
    r->seen_commit_us = 0;
    r->draining = false;
    if (relay_send_status(r, mono_now(), false) < 0)
        return STREAM_RETRY;
    for (;;) {
        int rc = turn_begin(r);
        if (rc != 0)
            return rc;
        bool reading = relay_window_open(r), heard = false;
        double due;
        if ((rc = read_frames(r, &reading, &heard)) != 0 ||
            (rc = keep_alive(r, reading, heard, &due)) != 0 ||
            (rc = wait_turn(r, reading, due)) != 0)
            return rc;
    }
}
