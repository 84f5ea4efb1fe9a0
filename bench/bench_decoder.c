/*
 * bench_decoder.c — how many typical wal2json insert lines one core turns
 * into outbox events per second (w2j_parse + w2j_event_decode).
 *
 * Usage: bench-decoder [LINE_FILE [ITERATIONS [RUNS]]]
 *   LINE_FILE   one wal2json line (default: the captured fixture
 *               tests/fixtures/wal2json/typical_insert.jsonl, an
 *               "order.created" insert with a ~300-byte jsonb payload)
 *   ITERATIONS  lines per run (default 2,000,000)
 *   RUNS        timed runs; the median is reported (default 5)
 *
 * Rates are per second of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
 * so that other work on a shared machine does not count against the
 * decoder; each run also prints the wall-clock rate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/decode/w2j.h"

#ifndef FIXTURES_DIR
#define FIXTURES_DIR "tests/fixtures"
#endif

static struct w2j_record rec;

static double now_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : FIXTURES_DIR "/wal2json/typical_insert.jsonl";
    long iterations = argc > 2 ? atol(argv[2]) : 2000000;
    int runs = argc > 3 ? atoi(argv[3]) : 5;
    char line[65536], err[W2J_ERRLEN];
    struct outbox_scratch scratch = {0};
    struct outbox_event ev;
    volatile size_t sink = 0;
    double rates[64];
    FILE *f;
    size_t len;

    if (iterations <= 0 || runs <= 0 || runs > 64) {
        fprintf(stderr, "usage: %s [LINE_FILE [ITERATIONS [RUNS<=64]]]\n", argv[0]);
        return 2;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    len = fread(line, 1, sizeof line, f);
    fclose(f);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;

    if (w2j_parse(line, len, &rec, err, sizeof err) < 0 ||
        w2j_event_decode(&rec, &OUTBOX_DEFAULT_COLUMNS, &scratch, &ev, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        return 1;
    }
    printf("line: %zu bytes, payload %zu bytes, event_id %s\n", len, ev.payload_len,
           ev.event_id);

    for (int r = 0; r < runs; r++) {
        double t0 = now_s(CLOCK_THREAD_CPUTIME_ID), w0 = now_s(CLOCK_MONOTONIC);
        for (long i = 0; i < iterations; i++) {
            if (w2j_parse(line, len, &rec, err, sizeof err) < 0 ||
                w2j_event_decode(&rec, &OUTBOX_DEFAULT_COLUMNS, &scratch, &ev, err,
                                 sizeof err) < 0) {
                fprintf(stderr, "failed: %s\n", err);
                return 1;
            }
            sink += ev.payload_len;
        }
        double dt = now_s(CLOCK_THREAD_CPUTIME_ID) - t0, wall = now_s(CLOCK_MONOTONIC) - w0;
        rates[r] = (double) iterations / dt;
        printf("run %d: %.0f lines/s (%.1f MB/s, %.0f ns/line; wall clock %.0f lines/s)\n",
               r + 1, rates[r], rates[r] * (double) len / 1e6, 1e9 / rates[r],
               (double) iterations / wall);
    }
    qsort(rates, (size_t) runs, sizeof rates[0], cmp_double);
    printf("median of %d runs: %.0f lines/s per CPU-second\n", runs, rates[runs / 2]);
    outbox_scratch_free(&scratch);
    return sink == 0;
}
