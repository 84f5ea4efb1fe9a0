/*
 * clock.h — the one monotonic clock, the one wall clock in microseconds
 * and the one retry jitter of the relayer and its tools, so that deadlines,
 * latencies and backoffs are computed the same way everywhere (no file
 * keeps its own copy).
 *
 * None holds state of its own: mono_now() reads CLOCK_MONOTONIC,
 * wall_now_us() CLOCK_REALTIME, jitter() draws from rand() (unseeded use
 * is fine: it only spreads retries).
 */
#ifndef OUTBOX_RELAY_CLOCK_H
#define OUTBOX_RELAY_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC (not wall time: immune to clock steps), for
 * deadlines and intervals only. */
double mono_now(void);

/* Microseconds since the Unix epoch on CLOCK_REALTIME: for timestamps
 * compared with the database's commit times, never for deadlines. */
int64_t wall_now_us(void);

/* The CLOCK_MONOTONIC time seconds from now (< 0: now) as a timespec, for
 * pthread_cond_timedwait on a condition variable whose clock is
 * CLOCK_MONOTONIC (pthread_condattr_setclock). */
struct timespec mono_deadline(double seconds);

/* A pause of 50-100 % of base, so that relayers (or connections) retrying
 * after the same failure do not all come back at the same instant. */
double jitter(double base);

#endif
