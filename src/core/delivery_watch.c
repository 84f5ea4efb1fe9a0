/*
 * delivery_watch.c — warn while deliveries are stuck, say when they
 * resume (see delivery_watch.h).
 */
#include "outbox_relay/core/delivery_watch.h"

void delivery_watch_init(struct delivery_watch *w, double now)
{
    *w = (struct delivery_watch){.since = now, .next = DELIVERY_WATCH_AFTER};
}

double delivery_watch_stalled(const struct delivery_watch *w, double now)
{
    double s = now - w->since;
    return s > 0 ? s : 0;
}

enum delivery_watch_verdict delivery_watch_check(struct delivery_watch *w, size_t inflight,
                                                 unsigned long long reports, double now)
{
    if (inflight == 0 || reports != w->reports) {
        /* Progress: a report came, or nothing waits for one. */
        bool was_stuck = w->stuck;
        w->stalled = delivery_watch_stalled(w, now);
        w->reports = reports;
        w->since = now;
        w->next = DELIVERY_WATCH_AFTER;
        w->stuck = false;
        return was_stuck ? DELIVERY_WATCH_RESUMED : DELIVERY_WATCH_OK;
    }
    double stalled = delivery_watch_stalled(w, now);
    if (stalled < w->next)
        return DELIVERY_WATCH_OK;
    w->stuck = true;
    w->next = stalled + DELIVERY_WATCH_REPEAT;
    return DELIVERY_WATCH_STUCK;
}
