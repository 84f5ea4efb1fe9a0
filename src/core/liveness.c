/*
 * liveness.c — ping at half the wal receiver timeout, give up at all of it
 * (see liveness.h).
 */
#include "outbox_relay/core/liveness.h"

#define LIVENESS_FAR 3600.0 /* s: "not before the next wakeup anyway" */

void liveness_init(struct liveness *l, double timeout, double now)
{
    l->timeout = timeout > 0 ? timeout : 0;
    l->last_heard = now;
    l->pinged = false;
}

void liveness_heard(struct liveness *l, double now)
{
    if (now > l->last_heard)
        l->last_heard = now;
    l->pinged = false;
}

double liveness_silence(const struct liveness *l, double now)
{
    double s = now - l->last_heard;
    return s > 0 ? s : 0;
}

enum liveness_verdict liveness_check(const struct liveness *l, double now)
{
    if (l->timeout <= 0)
        return LIVENESS_OK;
    double silent = liveness_silence(l, now);
    if (silent >= l->timeout)
        return LIVENESS_DEAD;
    if (silent >= l->timeout / 2 && !l->pinged)
        return LIVENESS_PING;
    return LIVENESS_OK;
}

void liveness_pinged(struct liveness *l)
{
    l->pinged = true;
}

double liveness_due_in(const struct liveness *l, double now)
{
    if (l->timeout <= 0)
        return LIVENESS_FAR;
    double silent = liveness_silence(l, now);
    double next = l->pinged ? l->timeout : l->timeout / 2; /* a due ping: 0 */
    double due = next - silent;
    return due > 0 ? due : 0;
}
