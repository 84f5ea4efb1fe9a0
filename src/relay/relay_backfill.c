/*
 * relay_backfill.c — the relay's side of a backfill (see backfill.h): the
 * hooks stream_start calls around creating the slot, and the runs that
 * publish the backlog under the slot's backfill lock.
 *
 * One row of the backlog is produced like a streamed event but tracked
 * apart (BACKFILL_TOKEN): the backfill module learns from backfill_acked
 * how far every row is delivered, and the slot is streamed only after all
 * of them are.
 */
#include <stdio.h>
#include <string.h>

#include "relay_internal.h"

#include "outbox_relay/relay/backfill.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"
#include "outbox_relay/core/tracker.h"

static int backfill_emit(void *ctx, const struct outbox_event *ev, uint64_t n)
{
    struct relay *r = ctx;
    while (!relay_window_open(r) && !*r->stop && !r->fatal && !r->bf_retry) {
        relay_serve(r, 100);
        backfill_progress_tick(r->backfill);
    }
    if (*r->stop || r->fatal || r->bf_retry)
        return -1;
    uint64_t token = tracker_add_single(r->bf_tracker, r->bf_base + n);
    if (token == 0) {
        relay_set_fatal(r, "slot=%s: backfill: cannot track row id=%s", r->cfg->slot,
                        ev->event_id);
        return -1;
    }
    if (r->bf_isolating && r->bf_isolate_row == 0 && strcmp(ev->event_id, r->bf_isolate_id) == 0)
        r->bf_isolate_row = r->bf_base + n; /* alone up to this one */
    snprintf(r->bf_last_id, sizeof r->bf_last_id, "%s", ev->event_id);
    relay_produce(r, ev, token | BACKFILL_TOKEN);
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
    relay_serve(r, timeout_ms); /* dead letters of backfilled rows ack them too */
    if (sink_fatal(r->sink))
        relay_set_fatal(r, "%s", sink_errstr(r->sink));
    return *r->stop || r->fatal || r->bf_retry ? -1 : 0;
}

static void backfill_progress(void *ctx, const struct progress *p, bool active)
{
    struct relay *r = ctx;
    metrics_set_progress(r->metrics, METRICS_WORK_BACKFILL, p, active);
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
    r->bf_isolate_row = 0;
    struct backfill_sink sink = {.emit = backfill_emit, .acked = backfill_acked,
                                 .serve = backfill_serve, .progress = backfill_progress,
                                 .ctx = r};
    uint64_t rows = 0;
    int rc = backfill_run(r->backfill, snapshot, consistent, &sink, &rows);
    if (rc == BACKFILL_OK)
        r->bf_isolating = false;
    if (rc == BACKFILL_OK)
        log_info("slot=%s: backfill: %llu rows published and delivered; streaming from the "
                 "slot's consistent point", r->cfg->slot, (unsigned long long) rows);
    return rc;
}

int relay_on_slot_creating(void *ctx, bool *export_snapshot, char *err, size_t errlen)
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

int relay_on_slot_created(void *ctx, const char *snapshot, lsn_t consistent, bool *drop_slot,
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
 * the lock and finish it (or wait while another process holds the lock). */
int relay_resume_backfill(struct relay *r)
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
