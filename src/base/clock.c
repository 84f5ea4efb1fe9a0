/*
 * clock.c — the monotonic clock and the retry jitter (see clock.h).
 */
#include "outbox_relay/base/clock.h"

#include <stdlib.h>
#include <time.h>

double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

int64_t wall_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct timespec mono_deadline(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (seconds < 0)
        seconds = 0;
    time_t whole = (time_t) seconds;
    ts.tv_sec += whole;
    ts.tv_nsec += (long) ((seconds - (double) whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

double jitter(double base)
{
    return base * (0.5 + (double) rand() / RAND_MAX / 2); /* 50-100 % of base */
}
