/*
 * latency.h — what the benchmark's two readers, bench-consumer (consumer.c:
 * Kafka, transaction start to consumer) and bench-w2j-latency
 * (w2j_latency.c: commit to pg_recvlogical), share: a stop flag set by
 * SIGTERM/SIGINT, the wall clock in µs (both compare it with timestamps
 * PostgreSQL wrote), and a latency sample printed as nearest-rank
 * percentiles in the key=value form run.sh parses.
 *
 * Header-only, static functions: run.sh compiles each tool from its one
 * source file against the core library, and these are not the daemon's.
 */
#ifndef OUTBOX_BENCH_LATENCY_H
#define OUTBOX_BENCH_LATENCY_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 1 once SIGTERM or SIGINT arrived (after bench_catch_stop). */
static volatile sig_atomic_t bench_stop;

static inline void bench_on_signal(int sig)
{
    (void) sig;
    bench_stop = 1;
}

/* Makes SIGTERM and SIGINT set bench_stop. flags: SA_RESTART for a reader
 * that polls with a timeout anyway, 0 for one blocked in read(), which must
 * return (EINTR) to see the flag. */
static inline void bench_catch_stop(int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = bench_on_signal;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

static inline int64_t bench_now_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Latencies in µs; grows as needed. */
struct bench_lat {
    int64_t *v;
    size_t n, cap;
};

/* Room for cap samples up front. 0, or -1 when out of memory. */
static inline int bench_lat_init(struct bench_lat *l, size_t cap)
{
    l->n = 0;
    l->cap = cap > 0 ? cap : 1;
    l->v = malloc(sizeof *l->v * l->cap);
    return l->v != NULL ? 0 : -1;
}

/* 0, or -1 when the sample cannot grow (it keeps what it has). */
static inline int bench_lat_add(struct bench_lat *l, int64_t us)
{
    if (l->n == l->cap) {
        int64_t *grown = realloc(l->v, sizeof *l->v * l->cap * 2);
        if (grown == NULL)
            return -1;
        l->v = grown;
        l->cap *= 2;
    }
    l->v[l->n++] = us;
    return 0;
}

static inline int bench_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted sample, in ms; -1 when empty. */
static inline double bench_pct_ms(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return -1;
    size_t rank = (size_t) (p / 100.0 * (double) n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double) v[rank - 1] / 1000.0;
}

/* Sorts the sample and prints "lat_n=N lat_p50_ms=… lat_p95_ms=…
 * lat_p99_ms=… lat_max_ms=…" (no newline). */
static inline void bench_lat_print(struct bench_lat *l)
{
    qsort(l->v, l->n, sizeof *l->v, bench_cmp_i64);
    printf("lat_n=%zu lat_p50_ms=%.2f lat_p95_ms=%.2f lat_p99_ms=%.2f lat_max_ms=%.2f", l->n,
           bench_pct_ms(l->v, l->n, 50), bench_pct_ms(l->v, l->n, 95),
           bench_pct_ms(l->v, l->n, 99), bench_pct_ms(l->v, l->n, 100));
}

/* The same sample as a latency histogram with these bucket bounds (the
 * relayer's, metrics_latency_bounds()) would report it: prints
 * " lat_h50_ms=… lat_h95_ms=… lat_h99_ms=…" (quantiles interpolated
 * linearly within a bucket, as Prometheus' histogram_quantile and
 * bench/run.sh's hist_quantile do) and " lat_mean_ms=…" (exact, as a
 * histogram's sum / count is). So a floor measured exactly compares with
 * the relayer's histogram on equal terms. */
static inline void bench_lat_print_binned(const struct bench_lat *l, const double *bounds,
                                          size_t nb)
{
    size_t *cum = calloc(nb + 1, sizeof *cum), n = 0;
    double sum = 0;
    if (cum == NULL)
        return;
    for (size_t i = 0; i < l->n; i++) {
        double s = (double) l->v[i] / 1e6;
        if (s < 0)
            continue; /* the relayer does not observe these either */
        n++;
        size_t b = 0;
        while (b < nb && bounds[b] < s)
            b++;
        cum[b]++;
        sum += s;
    }
    for (size_t b = 1; b <= nb; b++)
        cum[b] += cum[b - 1];
    const double qs[] = {0.50, 0.95, 0.99};
    const char *names[] = {"h50", "h95", "h99"};
    for (size_t k = 0; k < 3; k++) {
        double v = -1, rank = qs[k] * (double) n, prev_b = 0, prev_c = 0;
        for (size_t b = 0; n > 0 && b <= nb; b++) {
            if ((double) cum[b] >= rank) {
                if (b == nb) {
                    v = prev_b;
                } else {
                    double c = (double) cum[b];
                    double f = c > prev_c ? (rank - prev_c) / (c - prev_c) : 1;
                    v = prev_b + (bounds[b] - prev_b) * f;
                }
                break;
            }
            prev_b = b < nb ? bounds[b] : prev_b;
            prev_c = (double) cum[b];
        }
        printf(" lat_%s_ms=%.2f", names[k], v < 0 ? -1 : v * 1000);
    }
    printf(" lat_mean_ms=%.3f", n > 0 ? sum * 1000 / (double) n : -1);
    free(cum);
}

static inline void bench_lat_free(struct bench_lat *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

#endif
