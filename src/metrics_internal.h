/*
 * metrics_internal.h — the registry's private parts, shared by metrics.c
 * (the registry and its setters) and metrics_render.c (the text
 * exposition). Not part of the interface: include metrics.h.
 */
#ifndef OUTBOX_RELAY_METRICS_INTERNAL_H
#define OUTBOX_RELAY_METRICS_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "outbox_relay/metrics.h"

/* Upper bounds (seconds) of the commit-to-delivery latency buckets: 1 ms to
 * 60 s, roughly 1-2.5-5 per decade. +Inf is implicit. */
static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,   1,      2.5,   5,    10,   30,    60};
#define NBUCKETS (sizeof latency_bounds / sizeof latency_bounds[0])

/* The WAL statuses pg_replication_slots can report (PostgreSQL 13+), plus
 * "missing" for a slot that does not exist. Each gets its own series so
 * that an alert can say wal_status{status="lost"} == 1. */
static const char *const wal_statuses[] = {"reserved", "extended", "unreserved", "lost",
                                           "missing"};
#define NSTATUSES (sizeof wal_statuses / sizeof wal_statuses[0])

/* Topic label cardinality guard: a topic template with {type} makes one
 * topic per event type; beyond this many, counts go to topic="_other". */
#define MAX_TOPICS 512
#define OTHER_TOPIC "_other"

/* Why deliveries are produced again (relay.c's rewinds, kafka_errors.h's
 * classes that are waited out): one series each, always present. */
static const char *const retry_reasons[] = {"retriable", "topic_missing", "authorization"};
#define NREASONS (sizeof retry_reasons / sizeof retry_reasons[0])

struct topic_counts {
    char *name;
    uint64_t published;
    uint64_t delivered;
};

struct metrics {
    pthread_mutex_t mu;
    char *slot;
    double started; /* unix seconds */

    struct topic_counts *topics;
    size_t ntopics, captopics;
    uint64_t delivery_errors;
    uint64_t dead_lettered;
    uint64_t reconnects;
    uint64_t retries[NREASONS];
    int waiting; /* index into retry_reasons, -1 = not waiting */

    uint64_t buckets[NBUCKETS]; /* per bucket, not cumulative */
    uint64_t latency_count;     /* observations, including those above 60 s */
    double latency_sum;

    size_t inflight_events, inflight_bytes;
    lsn_t confirmed_lsn, received_lsn;
    double oldest_pending_age;

    bool state_known;
    bool pg_connected, streaming, kafka_up;

    bool slot_known;
    int64_t lag_bytes;        /* < 0: unknown (missing slot, physical slot) */
    int status;               /* index in wal_statuses, -1: unrecognised */
    int64_t safe_wal_size;    /* < 0: NULL (no max_slot_wal_keep_size) */
    double slot_polled_at;    /* unix seconds */

    bool rows_known;
    int64_t table_rows;

    int64_t unlogged;     /* outbox tables writing no WAL; < 0 unknown */
    int publication_ok;   /* pgoutput: 1 serves the outbox, 0 not, -1 unknown */
    char publication_why[512];
    char unlogged_fix[256]; /* the ALTER TABLE … SET LOGGED to run */

    uint64_t reaped_rows, reap_batches, reap_runs;
    double reap_seconds;
    double reaped_at; /* unix seconds, 0 = never */

    struct work {
        bool known, active;
        uint64_t done;
        int64_t expected; /* < 0 unknown */
        double rate, left; /* < 0 unknown */
    } work[METRICS_WORKS];
};

/* Series name prefixes and what the work is, per enum metrics_work. */
static const char *const work_names[] = {"outbox_relay_backfill", "outbox_relay_reaper_run"};
static const char *const work_what[] = {"the backfill (--backfill pending)",
                                        "the current reaper run"};

#endif
