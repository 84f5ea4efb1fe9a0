/*
 * progress.h — how far a long piece of work is (the backfill, a reaper
 * run): rows done, the expected total, the rate, the time left, and when
 * the next log line is due. Pure: the caller passes the monotonic time
 * (mono_now()) and writes the lines and the gauges itself.
 *
 * The rate is taken over the last PROGRESS_WINDOW seconds (samples every
 * PROGRESS_SAMPLE_EVERY s in a ring), so a slow start or a stall long ago
 * does not weigh on it; it is unknown until PROGRESS_MIN_SPAN s of work
 * were seen. The total is what the caller expected at the start, often an
 * estimate: rows may arrive meanwhile, so done may pass it — the time left
 * is then unknown and the line says that the estimate was passed.
 *
 * Lines are due every `interval` seconds: one at the start (unless
 * quiet_start: only work that lasts longer than one interval is reported,
 * as for the reaper, which runs every minute), then every interval, then
 * the final one (progress_final_line) when any line was written or the
 * start was not quiet. A clock that stalls or steps back never divides by
 * zero nor makes a negative rate.
 *
 * Ownership: a struct progress is a plain value (no pointers); embed it.
 */
#ifndef OUTBOX_RELAY_PROGRESS_H
#define OUTBOX_RELAY_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROGRESS_INTERVAL 5.0      /* s between log lines, by default */
#define PROGRESS_WINDOW 20.0       /* s of history the rate is taken over */
#define PROGRESS_SAMPLE_EVERY 0.5  /* s between rate samples */
#define PROGRESS_MIN_SPAN 1.0      /* s of history before a rate is given */
#define PROGRESS_SAMPLES 64        /* covers PROGRESS_WINDOW at PROGRESS_SAMPLE_EVERY */

struct progress_sample {
    double t;
    uint64_t done;
};

struct progress {
    char what[96];       /* the line's prefix, e.g. "slot=outbox_relay: backfill" */
    int64_t total;       /* expected rows; < 0 unknown */
    bool exact;          /* total is a count, not an estimate */
    bool quiet_start;
    double interval;
    double started, last_t, next_line;
    uint64_t done;
    unsigned lines;      /* lines due so far */
    struct progress_sample s[PROGRESS_SAMPLES];
    size_t ns, head;     /* ring: s[head] is the oldest of ns */
};

/* Begins at now with nothing done. total < 0: unknown; exact: a count, not
 * an estimate (the line then says "of N" instead of "of about N").
 * interval <= 0 means PROGRESS_INTERVAL. */
void progress_start(struct progress *p, const char *what, int64_t total, bool exact,
                    double interval, bool quiet_start, double now);

/* Records that done rows are done at now. Returns true when a line is due
 * (the first call at the start when not quiet_start; then once per
 * interval), and books the next one. */
bool progress_update(struct progress *p, uint64_t done, double now);

/* Rows per second over the recent window; < 0 while unknown. */
double progress_rate(const struct progress *p);

/* Seconds left at the current rate; < 0 unknown (no total, no rate yet,
 * or done already past the estimate). 0 when done == total. */
double progress_left(const struct progress *p);

/* Seconds since the start, at the last update. */
double progress_elapsed(const struct progress *p);

/* The line for the current state, e.g. "backfill: 120,000 of 1,000,000
 * rows (12.0 %), 41,230 rows/s, about 21 s left". Returns buf. */
char *progress_line(const struct progress *p, char *buf, size_t cap);

/* Whether the work was reported at all, so that it must end with a final
 * line. */
bool progress_reported(const struct progress *p);

/* The last line, once the work is over: "backfill: finished: 60,000 rows
 * in 12 s (4,878 rows/s)". Returns buf. */
char *progress_final_line(const struct progress *p, char *buf, size_t cap);

#endif
