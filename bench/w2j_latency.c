/*
 * w2j_latency.c — the latency floor under outbox-relay: how long after its
 * commit a change reaches a replication client that does nothing with it.
 *
 * Reads pg_recvlogical's output (wal2json format-version 2 with
 * include-timestamp, the relayer's options) on stdin; for every outbox
 * insert ("I") records now - the commit timestamp of its transaction (the
 * "B" line's timestamp, the stamp the relayer's latency histogram starts
 * from). On EOF or SIGTERM prints one line of key=value pairs: how many,
 * p50/p95/p99/max in ms; then the sample as a histogram with the relayer's
 * buckets (floor_latency_seconds, latency.h). pg_recvlogical writes each message as it arrives
 * (no buffering on a pipe), so the reading time is the arrival time within
 * a pipe hop.
 *
 * Usage: pg_recvlogical ... -f - | bench-w2j-latency
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "latency.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/decode/w2j.h"

int main(void)
{
    bench_catch_stop(0); /* no SA_RESTART: getline returns */
    static struct w2j_record rec;
    char err[W2J_ERRLEN];
    char *line = NULL;
    size_t cap = 0;
    struct bench_lat lat;
    int64_t commit_us = 0;
    ssize_t len;
    if (bench_lat_init(&lat, 1 << 16) < 0)
        return 1;
    while (!bench_stop && (len = getline(&line, &cap, stdin)) > 0) {
        int64_t now = bench_now_unix_us();
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (w2j_parse(line, (size_t) len, &rec, err, sizeof err) < 0)
            continue;
        if (rec.action == 'B' && w2j_timestamp_us(&rec.timestamp, &commit_us) < 0)
            commit_us = 0;
        if (rec.action != 'I' || commit_us == 0)
            continue;
        if (bench_lat_add(&lat, now - commit_us) < 0)
            break;
    }
    bench_lat_print(&lat);
    printf("\n");
    size_t nb = 0;
    const double *bounds = metrics_latency_bounds(&nb);
    bench_lat_print_hist(&lat, "floor_latency_seconds", bounds, nb);
    free(line);
    bench_lat_free(&lat);
    return 0;
}
