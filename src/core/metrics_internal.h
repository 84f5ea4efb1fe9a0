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

#include "outbox_relay/core/metrics.h"

/* Upper bounds (seconds) of the latency buckets, shared by the
 * commit-to-delivery and the produce-to-acknowledgement histograms:
 * 0.25 ms to 60 s, fine below 25 ms (where a healthy pipeline lives, so
 * that quantiles interpolated within a bucket are off by a fraction of a
 * millisecond, not by the bucket's width), coarse above. Every bound of
 * the earlier 1-2.5-5 series is still one. +Inf is implicit. */
static const double latency_bounds[] = {
    0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.006,
    0.0075,  0.01,   0.0125,  0.015, 0.0175, 0.02,  0.025,  0.03,  0.04,  0.05,  0.075,
    0.1,     0.25,   0.5,     1,     2.5,    5,     10,     30,    60};
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
static const char *const retry_reasons[] = {"retriable", "topic_missing", "authorization",
                                             "batch_refused",
                                             /* --delivery exactly-once (relay_eos.c) */
                                             "transaction_aborted", "fenced"};
#define NREASONS (sizeof retry_reasons / sizeof retry_reasons[0])

struct topic_counts {
    char *name;
    uint64_t published;
    uint64_t delivered;
};

/* One latency histogram. */
struct latency_hist {
    uint64_t buckets[NBUCKETS]; /* per bucket, not cumulative */
    uint64_t count;             /* observations, including those above 60 s */
    double sum;
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

    struct latency_hist delivery; /* commit to delivery report */
    struct latency_hist ack;      /* handed to the producer to the broker's answer */

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
    bool plugin_refused;  /* the server refuses the slot's output plugin */
    char plugin_refused_why[1024];
    int publication_row_filter; /* pgoutput: 1 a row filter, 0 none, -1 unknown */
    bool failover_refused; /* after a promotion the slot cannot be streamed safely */
    char failover_refused_why[1024];
    int failover_slot;     /* the slot has failover = true: 1, 0, -1 unknown */
    int failover_protected; /* synchronized_standby_slots holds the relayer
                               back for a standby: 1, 0, -1 unknown / n.a. */
    int64_t failover_standby_slots; /* physical slots named there */
    int64_t failover_standby_inactive; /* of them, no standby connected */
    int64_t failover_standby_lag;      /* bytes; < 0 unknown */
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
