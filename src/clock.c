/*
 * clock.c — the monotonic clock and the retry jitter (see clock.h).
 */
#include "outbox_relay/clock.h"

#include <stdlib.h>
#include <time.h>

double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

double jitter(double base)
{
    return base * (0.5 + (double) rand() / RAND_MAX / 2); /* 50-100 % of base */
}
