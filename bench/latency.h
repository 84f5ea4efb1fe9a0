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

/* Prints the sample as a Prometheus histogram NAME with these bucket
 * bounds (the relayer's, metrics_latency_bounds()): cumulative
 * NAME_bucket{le="…"} lines, NAME_sum and NAME_count, one per line. So
 * bench/run.sh reads a floor measured exactly with the same hist_quantile
 * and hist_mean as the relayer's own histogram. Negative samples (a clock
 * ahead) are left out, as the relayer leaves them out. */
static inline void bench_lat_print_hist(const struct bench_lat *l, const char *name,
                                        const double *bounds, size_t nb)
{
    size_t *in = calloc(nb + 1, sizeof *in), n = 0; /* in[nb]: above the last */
    double sum = 0;
    if (in == NULL)
        return;
    for (size_t i = 0; i < l->n; i++) {
        double s = (double) l->v[i] / 1e6;
        if (s < 0)
            continue;
        size_t b = 0;
        while (b < nb && bounds[b] < s)
            b++;
        in[b]++;
        n++;
        sum += s;
    }
    size_t cum = 0;
    for (size_t b = 0; b < nb; b++) {
        cum += in[b];
        printf("%s_bucket{le=\"%g\"} %zu\n", name, bounds[b], cum);
    }
    printf("%s_bucket{le=\"+Inf\"} %zu\n%s_sum %.9g\n%s_count %zu\n", name, n, name, sum, name,
           n);
    free(in);
}

static inline void bench_lat_free(struct bench_lat *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

#endif
