/*
 * test_clock.c — the one monotonic clock never goes back and advances with
 * a sleep; a deadline lies that far ahead, normalized; jitter stays within 50-100 % of its base and does spread.
 */
#include <time.h>

#include "check.h"
#include "outbox_relay/base/clock.h"

static void test_mono_now(void)
{
    double a = mono_now();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double b = mono_now();
    CHECK(a > 0);
    CHECK(b - a >= 0.019 && b - a < 5.0);
    for (int i = 0; i < 1000; i++) {
        double c = mono_now();
        CHECK(c >= b);
        b = c;
    }
}

static void test_mono_deadline(void)
{
    struct timespec now, d = mono_deadline(1.75);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double left = (double) (d.tv_sec - now.tv_sec) + (double) (d.tv_nsec - now.tv_nsec) / 1e9;
    CHECK(left > 1.7 && left <= 1.75);
    CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    d = mono_deadline(-3); /* the past is now */
    clock_gettime(CLOCK_MONOTONIC, &now);
    left = (double) (d.tv_sec - now.tv_sec) + (double) (d.tv_nsec - now.tv_nsec) / 1e9;
    CHECK(left <= 0 && left > -0.5);
    for (int i = 0; i < 100; i++) {
        d = mono_deadline(i * 0.0999);
        CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    }
}

static void test_jitter(void)
{
    double lo = 1e9, hi = 0;
    for (int i = 0; i < 10000; i++) {
        double j = jitter(2.0);
        CHECK(j >= 1.0 && j <= 2.0);
        if (j < lo)
            lo = j;
        if (j > hi)
            hi = j;
    }
    CHECK(hi - lo > 0.5); /* it spreads, not a constant */
    CHECK(jitter(0) == 0);
}

int main(void)
{
    test_mono_now();
    test_mono_deadline();
    test_jitter();
    CHECK_DONE();
}
