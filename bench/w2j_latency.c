/*
 * w2j_latency.c — the latency floor under outbox-relay: how long after its
 * commit a change reaches a replication client that does nothing with it.
 *
 * Reads pg_recvlogical's output (wal2json format-version 2 with
 * include-timestamp, the relayer's options) on stdin; for every outbox
 * insert ("I") records now - the commit timestamp of its transaction (the
 * "B" line's timestamp, the stamp the relayer's latency histogram starts
 * from). On EOF or SIGTERM prints one line of key=value pairs: how many,
 * p50/p95/p99/max in ms. pg_recvlogical writes each message as it arrives
 * (no buffering on a pipe), so the reading time is the arrival time within
 * a pipe hop.
 *
 * Usage: pg_recvlogical ... -f - | bench-w2j-latency
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/decoder.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    stop = 1;
}

static int64_t now_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
    return (x > y) - (x < y);
}

static double pct_ms(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return -1;
    size_t rank = (size_t) (p / 100.0 * (double) n + 0.999999);
    rank = rank < 1 ? 1 : rank > n ? n : rank;
    return (double) v[rank - 1] / 1000.0;
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL); /* no SA_RESTART: getline returns */
    sigaction(SIGINT, &sa, NULL);
    static struct w2j_record rec;
    char err[W2J_ERRLEN];
    char *line = NULL;
    size_t cap = 0, n = 0, lcap = 1 << 16;
    int64_t *lat = malloc(sizeof *lat * lcap), commit_us = 0;
    ssize_t len;
    while (!stop && lat != NULL && (len = getline(&line, &cap, stdin)) > 0) {
        int64_t now = now_unix_us();
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (w2j_parse(line, (size_t) len, &rec, err, sizeof err) < 0)
            continue;
        if (rec.action == 'B' && w2j_timestamp_us(&rec.timestamp, &commit_us) < 0)
            commit_us = 0;
        if (rec.action != 'I' || commit_us == 0)
            continue;
        if (n == lcap) {
            int64_t *grown = realloc(lat, sizeof *lat * lcap * 2);
            if (grown == NULL)
                break;
            lat = grown;
            lcap *= 2;
        }
        lat[n++] = now - commit_us;
    }
    if (lat == NULL)
        return 1;
    qsort(lat, n, sizeof *lat, cmp_i64);
    printf("lat_n=%zu lat_p50_ms=%.2f lat_p95_ms=%.2f lat_p99_ms=%.2f lat_max_ms=%.2f\n", n,
           pct_ms(lat, n, 50), pct_ms(lat, n, 95), pct_ms(lat, n, 99), pct_ms(lat, n, 100));
    free(line);
    free(lat);
    return 0;
}
