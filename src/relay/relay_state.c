/*
 * relay_state.c — the bottom of the relay (see relay_internal.h): the small
 * helpers that every side of it uses on the shared state, the loop
 * (relay.c), the sink's side (relay_sink.c) and the backfill's
 * (relay_backfill.c) alike: the first fatal error, the in-flight window,
 * status updates with their timing, the warning while deliveries are
 * stuck, and the gauges of the metrics endpoint. It calls no other file of the
 * relay, so the others can all call down to it.
 */
#include "relay_internal.h"

#include <stdarg.h>
#include <stdio.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/core/delivery_watch.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/core/dispatch.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"

#define STATUS_MIN_GAP 0.1  /* s between status updates for a moved position */
#define STATUS_BLOCKED 1.0  /* s between status updates while the window is full */
#define DESCRIBE_MS 500     /* the longest a stuck warning waits for the brokers' metadata */

void relay_set_fatal(struct relay *r, const char *fmt, ...)
{
    if (r->fatal)
        return; /* keep the first cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errstr, sizeof r->errstr, fmt, ap);
    va_end(ap);
    r->fatal = true;
}

bool relay_isolating(const struct relay *r)
{
    return r->isolate_until != 0 && tracker_confirmed(r->tracker) <= r->isolate_until;
}

bool relay_bf_isolating(const struct relay *r)
{
    return r->bf_isolating &&
           (r->bf_isolate_row == 0 || tracker_confirmed(r->bf_tracker) < r->bf_isolate_row);
}

bool relay_window_open(const struct relay *r)
{
    bool one = relay_isolating(r) || relay_bf_isolating(r);
    struct dispatch_window w = {.inflight = sink_inflight(r->sink),
                                .inflight_bytes = sink_inflight_bytes(r->sink),
                                .max_inflight = one ? 1 : r->cfg->max_inflight,
                                .max_inflight_bytes = r->cfg->max_inflight_bytes,
                                .rewinding = r->rewind};
    return dispatch_window_open(&w);
}

int relay_send_status(struct relay *r, double now, bool reply_requested)
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

double relay_status_due_in(const struct relay *r, double now, bool blocked)
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
void relay_keep_status(struct relay *r)
{
    relay_watch_deliveries(r);
    if (!stream_streaming(r->stream))
        return;
    double now = mono_now();
    if (relay_status_due_in(r, now, true) > 0)
        return;
    if (relay_send_status(r, now, false) < 0) {
        r->last_status = now; /* not again before the next interval */
        log_debug("%s", stream_errstr(r->stream));
    }
}

/* Says so while deliveries are stuck (delivery_watch.h), with what the
 * producer can tell about why (sink_describe: it blocks up to DESCRIBE_MS,
 * once per warning), and when they resume. */
void relay_watch_deliveries(struct relay *r)
{
    double now = mono_now();
    size_t inflight = sink_inflight(r->sink);
    switch (delivery_watch_check(&r->dwatch, inflight, sink_reports(r->sink), now)) {
    case DELIVERY_WATCH_STUCK: {
        char why[1536];
        int64_t oldest = tracker_oldest_stamp(r->tracker);
        double age = oldest ? (double) (wall_now_us() - oldest) / 1e6 : 0;
        log_warn("kafka: %zu deliveries in flight and no delivery report for %.0f s; nothing "
                 "after slot position " LSN_FMT " is confirmed until they report (the oldest "
                 "unconfirmed event was committed %.0f s ago); librdkafka retries them "
                 "without end (message.timeout.ms=0): %s", inflight,
                 delivery_watch_stalled(&r->dwatch, now), LSN_ARGS(tracker_confirmed(r->tracker)),
                 age > 0 ? age : 0, sink_describe(r->sink, DESCRIBE_MS, why, sizeof why));
        break;
    }
    case DELIVERY_WATCH_RESUMED:
        log_info("kafka: delivery reports again after %.0f s without any; %zu in flight",
                 r->dwatch.stalled, inflight);
        break;
    case DELIVERY_WATCH_OK:
    default:
        break;
    }
}

/* Refreshes the gauges the metrics endpoint shows. */
void relay_publish_gauges(struct relay *r, bool streaming)
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
