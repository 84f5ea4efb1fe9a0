/*
 * consumer.c — the benchmark's Kafka reader: reads the given topics from the
 * beginning of every partition until it has seen every event id of a known
 * range, and says when the last new one arrived.
 *
 * The backlog drains are timed "until a consumer has read every event"; this
 * is that consumer. Counting distinct event_id headers (a bitmap over
 * [min-id, min-id + count)) instead of messages means a duplicate can never
 * hide a missing event: exit status 1 when an id is still missing at the
 * deadline, which is what the CI smoke run fails on.
 *
 * It also says how much CPU it used (cpu_ms), for the benchmark's account
 * of where the cores went. With --latency it also keeps, per first sighting, now - created_at header
 * (the outbox row's created_at, i.e. the producing transaction's start) and
 * prints p50/p95/p99/max: an end-to-end latency that includes the rest of
 * the producing transaction, its commit flush, the relayer, the broker and
 * this consumer's fetch.
 *
 * Usage: bench-consumer --brokers HOST:PORT --topics T1[,T2...] --min-id A --count N
 *                       [--timeout SECONDS] [--ready FILE] [--latency]
 * Prints one line of key=value pairs on stdout.
 */
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "latency.h"
#include "outbox_relay/decode/w2j.h"

static int header_id(const rd_kafka_message_t *m, int64_t *id)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val;
    size_t size;
    char buf[32];
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, "event_id", &val, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        val == NULL || size == 0 || size >= sizeof buf)
        return -1;
    memcpy(buf, val, size);
    buf[size] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *id = v;
    return 0;
}

static int header_created_us(const rd_kafka_message_t *m, int64_t *us)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val;
    size_t size;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, "created_at", &val, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        val == NULL)
        return -1;
    struct w2j_value v = {.type = W2J_STRING, .escaped = false, .ptr = val, .len = size};
    return w2j_timestamp_us(&v, us);
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s --brokers HOST:PORT --topics T1[,T2...] --min-id A --count N "
            "[--timeout SECONDS] [--ready FILE] [--latency]\n", argv0);
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *ready = NULL;
    char *topics = NULL;
    long long min_id = -1, count = -1;
    double timeout = 300;
    bool latency = false;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--latency") == 0) {
            latency = true;
            continue;
        }
        if (v == NULL) {
            usage(argv[0]);
            return 2;
        }
        i++;
        if (strcmp(a, "--brokers") == 0)
            brokers = v;
        else if (strcmp(a, "--topics") == 0)
            topics = strdup(v);
        else if (strcmp(a, "--min-id") == 0)
            min_id = atoll(v);
        else if (strcmp(a, "--count") == 0)
            count = atoll(v);
        else if (strcmp(a, "--timeout") == 0)
            timeout = atof(v);
        else if (strcmp(a, "--ready") == 0)
            ready = v;
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (brokers == NULL || topics == NULL || min_id < 0 || count <= 0) {
        usage(argv[0]);
        return 2;
    }
    bench_catch_stop(SA_RESTART); /* as signal() sets it: the loop polls with a timeout */

    /* At most one sample per distinct id: count never needs to grow. */
    uint8_t *seen = calloc((size_t) (count + 7) / 8, 1);
    struct bench_lat lat = {0};
    if (seen == NULL || (latency && bench_lat_init(&lat, (size_t) count) < 0)) {
        fprintf(stderr, "bench-consumer: out of memory\n");
        return 1;
    }

    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *props[][2] = {
        {"bootstrap.servers", brokers},  {"group.id", "outbox-bench"},
        {"enable.auto.commit", "false"}, {"enable.partition.eof", "false"},
        {"fetch.wait.max.ms", "10"},     {"fetch.error.backoff.ms", "10"},
        {"queued.min.messages", "100000"}, {"log_level", "3"},
        /* an offset query refused for good falls back to this, not "latest" */
        {"auto.offset.reset", "earliest"},
    };
    for (size_t i = 0; i < sizeof props / sizeof props[0]; i++)
        if (rd_kafka_conf_set(conf, props[i][0], props[i][1], err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
            fprintf(stderr, "bench-consumer: %s: %s\n", props[i][0], err);
            return 2;
        }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "bench-consumer: %s\n", err);
        return 1;
    }

    /* Every partition of every topic, from the beginning. The topics must
     * exist (run.sh creates them on the mock broker first). */
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(16);
    char *save = NULL;
    for (char *t = strtok_r(topics, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, t, NULL);
        const struct rd_kafka_metadata *md = NULL;
        int n = -1;
        for (int attempt = 0; attempt < 50 && n <= 0 && !bench_stop; attempt++) {
            if (rd_kafka_metadata(rk, 0, rkt, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                if (md->topic_cnt == 1 && md->topics[0].err == 0)
                    n = md->topics[0].partition_cnt;
                rd_kafka_metadata_destroy(md);
            }
            if (n <= 0) {
                struct timespec ts = {0, 100000000};
                nanosleep(&ts, NULL);
            }
        }
        rd_kafka_topic_destroy(rkt);
        if (n <= 0) {
            fprintf(stderr, "bench-consumer: topic %s does not exist\n", t);
            goto out;
        }
        for (int p = 0; p < n; p++)
            rd_kafka_topic_partition_list_add(parts, t, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "bench-consumer: assign failed\n");
        goto out;
    }
    if (ready != NULL) {
        FILE *f = fopen(ready, "w");
        if (f != NULL)
            fclose(f);
    }

    int64_t start = bench_now_unix_us(), deadline = start + (int64_t) (timeout * 1e6);
    int64_t first_us = 0, last_us = 0;
    long long distinct = 0, messages = 0, duplicates = 0, foreign = 0;
    while (distinct < count && !bench_stop && bench_now_unix_us() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL)
            continue;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                fprintf(stderr, "bench-consumer: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        int64_t now = bench_now_unix_us(), id;
        messages++;
        if (header_id(m, &id) < 0 || id < min_id || id >= min_id + count) {
            foreign++;
        } else if (seen[(id - min_id) / 8] & (1u << ((id - min_id) % 8))) {
            duplicates++;
        } else {
            seen[(id - min_id) / 8] |= (uint8_t) (1u << ((id - min_id) % 8));
            distinct++;
            if (first_us == 0)
                first_us = now;
            last_us = now;
            int64_t created;
            if (latency && header_created_us(m, &created) == 0)
                bench_lat_add(&lat, now - created);
        }
        rd_kafka_message_destroy(m);
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("events=%lld distinct=%lld missing=%lld duplicates=%lld foreign=%lld "
           "first_unix_us=%" PRId64 " last_unix_us=%" PRId64 " cpu_ms=%ld",
           messages, distinct, count - distinct, duplicates, foreign, first_us, last_us,
           (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
               (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L);
    if (latency) {
        printf(" ");
        bench_lat_print(&lat);
    }
    printf("\n");
    fflush(stdout);
    if (distinct < count) {
        long long shown = 0;
        fprintf(stderr, "bench-consumer: %lld of %lld events missing, e.g. ids", count - distinct,
                count);
        for (long long i = 0; i < count && shown < 5; i++)
            if (!(seen[i / 8] & (1u << (i % 8)))) {
                fprintf(stderr, " %lld", min_id + i);
                shown++;
            }
        fprintf(stderr, "\n");
    } else {
        rc = 0;
    }
out:
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    free(seen);
    bench_lat_free(&lat);
    free(topics);
    return rc;
}
