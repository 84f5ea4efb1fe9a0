/*
 * test_clock.c — the one monotonic clock never goes back and advances with
 * a sleep; jitter stays within 50-100 % of its base and does spread.
 */
#include <time.h>

#include "check.h"
#include "outbox_relay/clock.h"

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
    test_jitter();
    CHECK_DONE();
}
