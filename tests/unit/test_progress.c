/*
 * test_progress.c — progress of long work without I/O: the rate over a
 * window, the time left, totals that are unknown, zero or passed while
 * rows arrive, a clock that stalls or steps back, and when lines are due
 * (start, every interval, quiet starts for short work).
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/core/progress.h"

#define CHECK_NEAR(a, b, eps) CHECK(fabs((double) (a) - (double) (b)) <= (eps))
#define CHECK_HAS(s, sub)                                                       \
    do {                                                                        \
        check_count++;                                                          \
        if (strstr((s), (sub)) == NULL) {                                       \
            check_failures++;                                                   \
            fprintf(stderr, "%s:%d: \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, (s), (sub)); \
        }                                                                       \
    } while (0)

static void test_steady_rate_and_left(void)
{
    struct progress p;
    char line[256];
    progress_start(&p, "backfill", 1000000, false, 0, false, 100.0);
    CHECK(progress_update(&p, 0, 100.0)); /* the start line */
    CHECK(progress_rate(&p) < 0);          /* nothing seen yet */
    CHECK(progress_left(&p) < 0);
    CHECK_HAS(progress_line(&p, line, sizeof line), "backfill: 0 of about 1,000,000 rows (0.0 %)");
    CHECK_HAS(line, "starting");
    /* 40,000 rows/s, updated every 0.1 s for 3 s */
    bool due = false;
    for (int i = 1; i <= 30; i++)
        due |= progress_update(&p, (uint64_t) i * 4000, 100.0 + i * 0.1);
    CHECK(!due); /* the next line is 5 s after the start */
    CHECK_NEAR(progress_rate(&p), 40000, 1);
    CHECK_NEAR(progress_left(&p), (1000000 - 120000) / 40000.0, 0.01);
    progress_line(&p, line, sizeof line);
    CHECK(strcmp(line, "backfill: 120,000 of about 1,000,000 rows (12.0 %), 40,000 rows/s, "
                       "about 22 s left") == 0);
    CHECK(progress_reported(&p));
}

static void test_lines_due_every_interval(void)
{
    struct progress p;
    progress_start(&p, "x", 100, true, 5, false, 0);
    int lines = 0;
    for (int i = 0; i <= 120; i++) /* 12 s in steps of 0.1 s */
        lines += progress_update(&p, (uint64_t) i, i * 0.1);
    CHECK_EQ_INT(lines, 3); /* at 0, 5 and 10 s */
    /* An update after a long silence is due at once, and the beat starts
     * again from there rather than firing a burst. */
    CHECK(progress_update(&p, 130, 40.0));
    CHECK(!progress_update(&p, 131, 41.0));
    CHECK(progress_update(&p, 140, 45.0));
}

static void test_quiet_start(void)
{
    struct progress p;
    progress_start(&p, "reaper", 50, true, 5, true, 10.0);
    CHECK(!progress_update(&p, 0, 10.0));
    CHECK(!progress_update(&p, 50, 11.0)); /* short work: never reported */
    CHECK(!progress_reported(&p));
    progress_start(&p, "reaper", 50, true, 5, true, 10.0);
    CHECK(!progress_update(&p, 10, 14.9));
    CHECK(progress_update(&p, 20, 15.0)); /* lasted one interval: reported */
    CHECK(progress_reported(&p));
}

static void test_window_forgets_the_past(void)
{
    struct progress p;
    progress_start(&p, "x", -1, false, 0, false, 0);
    /* 60 s at 100 rows/s, then 1000 rows/s for 30 s: the rate follows the
     * last PROGRESS_WINDOW seconds, not the average. */
    uint64_t done = 0;
    double t = 0;
    for (; t < 60; t += 0.25)
        progress_update(&p, done += 25, t);
    for (; t < 90; t += 0.25)
        progress_update(&p, done += 250, t);
    CHECK_NEAR(progress_rate(&p), 1000, 20);
    CHECK(progress_left(&p) < 0); /* no total */
    char line[256];
    CHECK_HAS(progress_line(&p, line, sizeof line), "rows (total unknown), 1,0");
    CHECK_HAS(line, "time left unknown");
}

static void test_rare_updates(void)
{
    struct progress p;
    progress_start(&p, "x", 1000, true, 0, false, 0);
    /* One update every 30 s: longer than the window. */
    progress_update(&p, 300, 30);
    CHECK_NEAR(progress_rate(&p), 10, 0.01);
    progress_update(&p, 900, 60);
    CHECK_NEAR(progress_rate(&p), 20, 0.01);
    CHECK_NEAR(progress_left(&p), 5, 0.01);
}

static void test_done_passes_the_estimate(void)
{
    struct progress p;
    char line[256];
    progress_start(&p, "backfill", 1000, false, 0, false, 0);
    progress_update(&p, 1000, 2);
    CHECK_NEAR(progress_left(&p), 0, 0);
    progress_update(&p, 1500, 3); /* rows arrived meanwhile */
    CHECK(progress_left(&p) < 0);
    CHECK_NEAR(progress_rate(&p), 500, 0.01);
    progress_line(&p, line, sizeof line);
    CHECK(strcmp(line, "backfill: 1,500 rows, more than the 1,000 estimated at the start, "
                       "500 rows/s, time left unknown") == 0);
    CHECK(!strstr(line, "%)")); /* no percentage above 100 */
}

static void test_zero_total(void)
{
    struct progress p;
    char line[256];
    progress_start(&p, "reaper", 0, true, 0, false, 0);
    CHECK(progress_update(&p, 0, 0));
    CHECK_NEAR(progress_left(&p), 0, 0);
    CHECK_HAS(progress_line(&p, line, sizeof line), "reaper: 0 of 0 rows (100.0 %)");
}

static void test_clock_stalls(void)
{
    struct progress p;
    progress_start(&p, "x", 100, true, 0, false, 5);
    CHECK(progress_update(&p, 0, 5));
    /* The clock does not move: no rate, no division by zero. */
    for (int i = 0; i < 100; i++)
        progress_update(&p, (uint64_t) i, 5);
    CHECK(progress_rate(&p) < 0);
    CHECK(progress_left(&p) < 0);
    /* ... or steps back: treated as standing still. */
    progress_update(&p, 50, 1);
    CHECK(progress_elapsed(&p) >= 0);
    CHECK(progress_rate(&p) < 0);
    progress_update(&p, 60, 7);
    CHECK_NEAR(progress_rate(&p), 30, 0.01);
    /* done going down (a restarted count) gives rate 0, never negative */
    progress_update(&p, 10, 8);
    CHECK(progress_rate(&p) >= 0);
    char line[256];
    progress_line(&p, line, sizeof line);
    CHECK(line[0] != '\0');
}

static void test_final_line(void)
{
    struct progress p;
    char line[256];
    progress_start(&p, "slot=s: backfill", 60000, true, 0, false, 0);
    progress_update(&p, 60000, 12);
    progress_final_line(&p, line, sizeof line);
    CHECK(strcmp(line, "slot=s: backfill: finished: 60,000 rows in 12 s (5,000 rows/s)") == 0);
    progress_start(&p, "x", 0, true, 0, false, 3);
    progress_final_line(&p, line, sizeof line);
    CHECK(strcmp(line, "x: finished: 0 rows in 0 ms") == 0);
    char tiny[8];
    progress_line(&p, tiny, sizeof tiny);
    CHECK(strlen(tiny) == 7);
}

int main(void)
{
    test_steady_rate_and_left();
    test_lines_due_every_interval();
    test_quiet_start();
    test_window_forgets_the_past();
    test_rare_updates();
    test_done_passes_the_estimate();
    test_zero_total();
    test_clock_stalls();
    test_final_line();
    CHECK_DONE();
}
