/*
 * progress.c — rows done, rate, time left and when to say so (see
 * progress.h). Pure: time comes from the caller.
 */
#include "outbox_relay/core/progress.h"

#include <stdio.h>
#include <string.h>

#include "outbox_relay/base/human.h"

void progress_start(struct progress *p, const char *what, int64_t total, bool exact,
                    double interval, bool quiet_start, double now)
{
    memset(p, 0, sizeof *p);
    snprintf(p->what, sizeof p->what, "%s", what ? what : "");
    p->total = total < 0 ? -1 : total;
    p->exact = exact;
    p->quiet_start = quiet_start;
    p->interval = interval > 0 ? interval : PROGRESS_INTERVAL;
    p->started = p->last_t = now;
    p->next_line = quiet_start ? now + p->interval : now;
    p->s[0] = (struct progress_sample){.t = now, .done = 0};
    p->ns = 1;
}

static const struct progress_sample *newest(const struct progress *p)
{
    return &p->s[(p->head + p->ns - 1) % PROGRESS_SAMPLES];
}

bool progress_update(struct progress *p, uint64_t done, double now)
{
    /* A clock that steps back (it should not: monotonic) counts as a
     * stall: time never runs backwards here. */
    if (now < p->last_t)
        now = p->last_t;
    p->last_t = now;
    p->done = done;
    if (now - newest(p)->t >= PROGRESS_SAMPLE_EVERY) {
        if (p->ns == PROGRESS_SAMPLES) {
            p->head = (p->head + 1) % PROGRESS_SAMPLES;
            p->ns--;
        }
        p->s[(p->head + p->ns) % PROGRESS_SAMPLES] =
            (struct progress_sample){.t = now, .done = done};
        p->ns++;
    }
    if (now < p->next_line)
        return false;
    p->lines++;
    /* The next one interval after this one, or after now when updates
     * came too rarely to keep the beat. */
    p->next_line += p->interval;
    if (p->next_line <= now)
        p->next_line = now + p->interval;
    return true;
}

double progress_rate(const struct progress *p)
{
    /* Over the oldest sample inside the window; when that spans too
     * little (updates rarer than the window), over the newest sample
     * before the window instead. */
    const struct progress_sample *old = NULL, *before = NULL;
    for (size_t i = 0; i < p->ns; i++) {
        const struct progress_sample *s = &p->s[(p->head + i) % PROGRESS_SAMPLES];
        if (p->last_t - s->t <= PROGRESS_WINDOW) {
            old = s;
            break;
        }
        before = s;
    }
    if (old == NULL || (p->last_t - old->t < PROGRESS_MIN_SPAN && before != NULL))
        old = before;
    double span = p->last_t - old->t;
    if (span < PROGRESS_MIN_SPAN)
        return -1;
    if (p->done <= old->done)
        return 0;
    return (double) (p->done - old->done) / span;
}

double progress_left(const struct progress *p)
{
    if (p->total < 0)
        return -1;
    uint64_t total = (uint64_t) p->total;
    if (p->done == total)
        return 0;
    if (p->done > total)
        return -1;
    double rate = progress_rate(p);
    if (rate <= 0)
        return -1;
    return (double) (total - p->done) / rate;
}

double progress_elapsed(const struct progress *p)
{
    return p->last_t - p->started;
}

bool progress_reported(const struct progress *p)
{
    return p->lines > 0;
}

char *progress_line(const struct progress *p, char *buf, size_t cap)
{
    char done[HUMAN_LEN], total[HUMAN_LEN], rate[HUMAN_LEN], left[HUMAN_LEN];
    char head[320], tail[128];
    human_count(p->done, done, sizeof done);
    if (p->total >= 0)
        human_count((uint64_t) p->total, total, sizeof total);
    if (p->total < 0)
        snprintf(head, sizeof head, "%s: %s rows (total unknown)", p->what, done);
    else if (p->done > (uint64_t) p->total)
        snprintf(head, sizeof head, "%s: %s rows, more than the %s %s at the start",
                 p->what, done, total, p->exact ? "counted" : "estimated");
    else
        snprintf(head, sizeof head, "%s: %s of %s%s rows (%.1f %%)", p->what, done,
                 p->exact ? "" : "about ", total,
                 p->total > 0 ? 100.0 * (double) p->done / (double) p->total : 100.0);
    double r = progress_rate(p), l = progress_left(p);
    if (r < 0)
        snprintf(tail, sizeof tail, "%s", p->done == 0 && progress_elapsed(p) < PROGRESS_MIN_SPAN
                                              ? "starting" : "rate not known yet");
    else if (l < 0)
        snprintf(tail, sizeof tail, "%s rows/s, time left unknown",
                 human_count((uint64_t) (r + 0.5), rate, sizeof rate));
    else
        snprintf(tail, sizeof tail, "%s rows/s, about %s left",
                 human_count((uint64_t) (r + 0.5), rate, sizeof rate),
                 human_duration(l, left, sizeof left));
    snprintf(buf, cap, "%s, %s", head, tail);
    return buf;
}

char *progress_final_line(const struct progress *p, char *buf, size_t cap)
{
    char done[HUMAN_LEN], took[HUMAN_LEN], rate[HUMAN_LEN];
    double e = progress_elapsed(p);
    human_count(p->done, done, sizeof done);
    human_duration(e, took, sizeof took);
    if (e > 0)
        snprintf(buf, cap, "%s: finished: %s rows in %s (%s rows/s)", p->what, done, took,
                 human_count((uint64_t) ((double) p->done / e + 0.5), rate, sizeof rate));
    else
        snprintf(buf, cap, "%s: finished: %s rows in %s", p->what, done, took);
    return buf;
}
