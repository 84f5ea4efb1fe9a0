/*
 * delivery_watch.h — when to say that deliveries are stuck.
 *
 * A producer that waits (brokers down or not answering, partitions without
 * a leader, an idempotent producer without its producer id, a connection
 * in its reconnect backoff) reports nothing: librdkafka retries for as long
 * as message.timeout.ms allows, which the sink sets to forever. Successful
 * deliveries are not logged, so without this a relayer that delivers
 * nothing for minutes says nothing either (seen in the real-cluster chaos
 * run at load ~50: 90 s of silence after the brokers' return).
 *
 * Stuck means: events are in flight and no delivery report, of any
 * outcome, came for DELIVERY_WATCH_AFTER seconds. Then DELIVERY_WATCH_STUCK
 * is answered once, and again every DELIVERY_WATCH_REPEAT seconds while it
 * lasts; the first report after that (or nothing left in flight) answers
 * DELIVERY_WATCH_RESUMED once, with the length of the stall. Pure: the
 * caller passes a monotonic clock in seconds, the number of events in
 * flight and the count of reports served so far (sink_reports).
 */
#ifndef OUTBOX_RELAY_DELIVERY_WATCH_H
#define OUTBOX_RELAY_DELIVERY_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#define DELIVERY_WATCH_AFTER 15.0  /* s without a report before the first warning */
#define DELIVERY_WATCH_REPEAT 30.0 /* s between the warnings while it lasts */

struct delivery_watch {
    unsigned long long reports; /* the count at the last look */
    double since;               /* monotonic s of the last progress */
    double next;                /* s of stall at which to answer STUCK next */
    bool stuck;                 /* STUCK was answered since the last progress */
    double stalled;             /* s the last stall lasted (for RESUMED) */
};

enum delivery_watch_verdict {
    DELIVERY_WATCH_OK,
    DELIVERY_WATCH_STUCK,   /* warn: delivery_watch_stalled says for how long */
    DELIVERY_WATCH_RESUMED, /* a stall that was warned about ended: w->stalled */
};

/* Starts watching at now. */
void delivery_watch_init(struct delivery_watch *w, double now);

/* What is due at now, given the events in flight and the reports served so
 * far. */
enum delivery_watch_verdict delivery_watch_check(struct delivery_watch *w, size_t inflight,
                                                 unsigned long long reports, double now);

/* Seconds since the last progress (0 while nothing waits). */
double delivery_watch_stalled(const struct delivery_watch *w, double now);

#endif
