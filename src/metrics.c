/*
 * metrics.c — the metrics registry and its text exposition (see metrics.h).
 *
 * One mutex guards the whole registry: writers take it for a few stores,
 * metrics_render() takes it once and copies everything out while formatting.
 * Scrapes are rare (seconds apart) and writes are a handful of integer
 * updates, so a finer scheme would buy nothing.
 *
 * What is rendered, and why it looks the way it does, is listed in
 * docs/operations.md. In short: names are outbox_relay_<thing>_<unit>,
 * counters end in _total, values are in seconds and bytes, and a series
 * whose value is not known yet (the slot before the first poll, the table
 * size before the first estimate) is left out rather than shown as 0, so
 * that an alert on it cannot fire on a number nobody measured.
 *
 * No I/O: the HTTP endpoint that serves this is metrics_http.c.
 */
#include "outbox_relay/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/progress.h"

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

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

struct metrics *metrics_new(const char *slot)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->slot = strdup(slot ? slot : "");
    if (m->slot == NULL || pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m->slot);
        free(m);
        return NULL;
    }
    m->started = wall_now();
    m->waiting = -1;
    m->status = -1;
    m->unlogged = -1;
    m->publication_ok = -1;
    return m;
}

void metrics_free(struct metrics *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->ntopics; i++)
        free(m->topics[i].name);
    free(m->topics);
    free(m->slot);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The counters of topic, created on first use. Called with mu held.
 * Returns NULL only when even the "_other" entry cannot be allocated. */
static struct topic_counts *topic_entry(struct metrics *m, const char *topic)
{
    if (topic == NULL)
        topic = "";
    for (size_t i = 0; i < m->ntopics; i++)
        if (strcmp(m->topics[i].name, topic) == 0)
            return &m->topics[i];
    if (m->ntopics >= MAX_TOPICS && strcmp(topic, OTHER_TOPIC) != 0)
        return topic_entry(m, OTHER_TOPIC);
    if (m->ntopics == m->captopics) {
        size_t cap = m->captopics ? m->captopics * 2 : 8;
        struct topic_counts *t = realloc(m->topics, cap * sizeof *t);
        if (t == NULL)
            return NULL;
        m->topics = t;
        m->captopics = cap;
    }
    char *name = strdup(topic);
    if (name == NULL)
        return NULL;
    m->topics[m->ntopics] = (struct topic_counts){.name = name};
    return &m->topics[m->ntopics++];
}

void metrics_event_produced(struct metrics *m, const char *topic)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    struct topic_counts *t = topic_entry(m, topic);
    if (t != NULL)
        t->published++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_event_delivered(struct metrics *m, const char *topic, double latency_s)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    struct topic_counts *t = topic_entry(m, topic);
    if (t != NULL)
        t->delivered++;
    /* Unknown latency (< 0: no commit timestamp, or a database clock
     * ahead of ours) is not observed at all: a 0 would pull the quantiles
     * down. */
    if (latency_s >= 0) {
        for (size_t i = 0; i < NBUCKETS; i++)
            if (latency_s <= latency_bounds[i]) {
                m->buckets[i]++;
                break;
            }
        m->latency_count++;
        m->latency_sum += latency_s;
    }
    pthread_mutex_unlock(&m->mu);
}

#define COUNTER_FN(fn, field)               \
    void fn(struct metrics *m)              \
    {                                       \
        if (m == NULL)                      \
            return;                         \
        pthread_mutex_lock(&m->mu);         \
        m->field++;                         \
        pthread_mutex_unlock(&m->mu);       \
    }

COUNTER_FN(metrics_delivery_error, delivery_errors)
COUNTER_FN(metrics_dead_lettered, dead_lettered)
COUNTER_FN(metrics_reconnected, reconnects)

static int reason_index(const char *reason)
{
    for (size_t i = 0; reason != NULL && i < NREASONS; i++)
        if (strcmp(retry_reasons[i], reason) == 0)
            return (int) i;
    return -1;
}

void metrics_delivery_retried(struct metrics *m, const char *reason)
{
    int i = reason_index(reason);
    if (m == NULL || i < 0)
        return;
    pthread_mutex_lock(&m->mu);
    m->retries[i]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_delivery_waiting(struct metrics *m, const char *reason)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->waiting = reason_index(reason);
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_inflight(struct metrics *m, size_t events, size_t bytes)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->inflight_events = events;
    m->inflight_bytes = bytes;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_confirmed_lsn(struct metrics *m, lsn_t lsn)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->confirmed_lsn = lsn;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_received_lsn(struct metrics *m, lsn_t lsn)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->received_lsn = lsn;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_oldest_pending_age(struct metrics *m, double seconds)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->oldest_pending_age = seconds > 0 ? seconds : 0;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_state(struct metrics *m, bool pg_connected, bool streaming, bool kafka_up)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->state_known = true;
    m->pg_connected = pg_connected;
    m->streaming = streaming;
    m->kafka_up = kafka_up;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_slot(struct metrics *m, int64_t lag_bytes, const char *wal_status,
                      int64_t safe_wal_size)
{
    if (m == NULL)
        return;
    int status = -1;
    const char *ws = wal_status ? wal_status : "missing";
    for (size_t i = 0; i < NSTATUSES; i++)
        if (strcmp(ws, wal_statuses[i]) == 0)
            status = (int) i;
    pthread_mutex_lock(&m->mu);
    m->slot_known = true;
    m->lag_bytes = lag_bytes;
    m->status = status;
    m->safe_wal_size = safe_wal_size;
    m->slot_polled_at = wall_now();
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_table_rows(struct metrics *m, int64_t estimate)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->rows_known = estimate >= 0;
    m->table_rows = estimate;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_unlogged(struct metrics *m, int64_t tables, const char *fix)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->unlogged = tables;
    snprintf(m->unlogged_fix, sizeof m->unlogged_fix, "%s", fix ? fix : "");
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_publication(struct metrics *m, int ok, const char *why)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->publication_ok = ok;
    snprintf(m->publication_why, sizeof m->publication_why, "%s", why ? why : "");
    pthread_mutex_unlock(&m->mu);
}

void metrics_reaped(struct metrics *m, uint64_t rows, uint64_t batches, double seconds)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->reaped_rows += rows;
    m->reap_batches += batches;
    m->reap_seconds += seconds > 0 ? seconds : 0;
    m->reap_runs++;
    m->reaped_at = wall_now();
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_progress(struct metrics *m, enum metrics_work w, const struct progress *p,
                          bool active)
{
    if (m == NULL || p == NULL || w < 0 || w >= METRICS_WORKS)
        return;
    struct work v = {.known = true, .active = active, .done = p->done, .expected = p->total,
                     .rate = progress_rate(p), .left = progress_left(p)};
    if (!active) {
        double e = progress_elapsed(p);
        v.expected = (int64_t) p->done;
        v.left = 0;
        v.rate = e > 0 ? (double) p->done / e : v.rate;
    }
    pthread_mutex_lock(&m->mu);
    m->work[w] = v;
    pthread_mutex_unlock(&m->mu);
}

/* ---------------------------------------------------------------------
 * Rendering
 * --------------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bprintf(struct buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t) n < b->cap - b->len) {
            b->len += (size_t) n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t) n;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Appends a label value with the exposition format's escapes (\\, \", \n). */
static void bescape(struct buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            bprintf(b, "\\\\");
        else if (*s == '"')
            bprintf(b, "\\\"");
        else if (*s == '\n')
            bprintf(b, "\\n");
        else
            bprintf(b, "%c", *s);
    }
}

static void header(struct buf *b, const char *name, const char *type, const char *help)
{
    bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Sample values: integers print exactly, the rest with enough digits to
 * round-trip. */
static void value_u(struct buf *b, uint64_t v)
{
    bprintf(b, " %llu\n", (unsigned long long) v);
}

static void value_i(struct buf *b, int64_t v)
{
    bprintf(b, " %lld\n", (long long) v);
}

static void value_d(struct buf *b, double v)
{
    bprintf(b, " %.17g\n", v);
}

static void slot_label(struct buf *b, const struct metrics *m)
{
    bprintf(b, "{slot=\"");
    bescape(b, m->slot);
    bprintf(b, "\"}");
}

static void render_topics(struct buf *b, const struct metrics *m, bool delivered)
{
    const char *name = delivered ? "outbox_relay_events_delivered_total"
                                 : "outbox_relay_events_published_total";
    header(b, name, "counter",
           delivered ? "Events Kafka acknowledged (successful delivery reports), by topic."
                     : "Events handed to the Kafka producer, by topic.");
    for (size_t i = 0; i < m->ntopics; i++) {
        bprintf(b, "%s{topic=\"", name);
        bescape(b, m->topics[i].name);
        bprintf(b, "\"}");
        value_u(b, delivered ? m->topics[i].delivered : m->topics[i].published);
    }
}

static void render_latency(struct buf *b, const struct metrics *m)
{
    const char *name = "outbox_relay_delivery_latency_seconds";
    header(b, name, "histogram",
           "Time from the transaction's commit (wal2json timestamp) to the event's delivery "
           "report.");
    uint64_t cum = 0;
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum += m->buckets[i];
        bprintf(b, "%s_bucket{le=\"%g\"}", name, latency_bounds[i]);
        value_u(b, cum);
    }
    bprintf(b, "%s_bucket{le=\"+Inf\"}", name);
    value_u(b, m->latency_count);
    bprintf(b, "%s_sum", name);
    value_d(b, m->latency_sum);
    bprintf(b, "%s_count", name);
    value_u(b, m->latency_count);
}

static void render_slot(struct buf *b, const struct metrics *m)
{
    if (!m->slot_known)
        return;
    if (m->lag_bytes >= 0) {
        header(b, "outbox_relay_slot_lag_bytes", "gauge",
               "pg_current_wal_lsn() - confirmed_flush_lsn of the slot: WAL the slot holds "
               "that the relayer has not confirmed.");
        bprintf(b, "outbox_relay_slot_lag_bytes");
        slot_label(b, m);
        value_i(b, m->lag_bytes);
    }
    header(b, "outbox_relay_slot_wal_status", "gauge",
           "1 for the slot's current wal_status (pg_replication_slots), 0 for the others; "
           "\"missing\" when the slot does not exist.");
    for (size_t i = 0; i < NSTATUSES; i++) {
        bprintf(b, "outbox_relay_slot_wal_status{slot=\"");
        bescape(b, m->slot);
        bprintf(b, "\",status=\"%s\"}", wal_statuses[i]);
        value_u(b, m->status == (int) i ? 1 : 0);
    }
    if (m->safe_wal_size >= 0) {
        header(b, "outbox_relay_slot_safe_wal_size_bytes", "gauge",
               "WAL that can still be written before the slot is in danger of being lost "
               "(absent when max_slot_wal_keep_size is unlimited).");
        bprintf(b, "outbox_relay_slot_safe_wal_size_bytes");
        slot_label(b, m);
        value_i(b, m->safe_wal_size);
    }
    header(b, "outbox_relay_slot_last_poll_timestamp_seconds", "gauge",
           "Unix time of the last successful poll of the slot on the maintenance connection.");
    bprintf(b, "outbox_relay_slot_last_poll_timestamp_seconds");
    slot_label(b, m);
    value_d(b, m->slot_polled_at);
}

/* The gauges of long work: 1 while it runs, rows done, expected, the
 * rate and the time left; the last three are left out while unknown. */
static void render_work(struct buf *b, const struct metrics *m)
{
    static const char *const suffix[] = {"active", "rows_done", "rows_expected",
                                         "rows_per_second", "seconds_left"};
    static const char *const help[] = {
        "1 while it runs, 0 once it ended (the other series keep its final numbers).",
        "rows done so far (backfill: delivered; reaper: deleted).",
        "rows expected at the start: a count, or the planner's estimate on a large table "
        "(rows done may pass it).",
        "rows per second over the last 20 s (once ended: over the whole work).",
        "time left at the current rate."};
    for (int w = 0; w < METRICS_WORKS; w++) {
        const struct work *v = &m->work[w];
        double val[] = {v->active, (double) v->done, (double) v->expected, v->rate, v->left};
        for (size_t i = 0; v->known && i < sizeof val / sizeof val[0]; i++) {
            if (val[i] < 0)
                continue;
            bprintf(b, "# HELP %s_%s %s: %s\n# TYPE %s_%s gauge\n%s_%s", work_names[w],
                    suffix[i], work_what[w], help[i], work_names[w], suffix[i], work_names[w],
                    suffix[i]);
            if (i == 1)
                value_u(b, v->done);
            else
                value_d(b, val[i]);
        }
    }
}

static void render(struct buf *b, const struct metrics *m)
{
    header(b, "outbox_relay_build_info", "gauge", "Always 1; the version is in the label.");
    bprintf(b, "outbox_relay_build_info{version=\"%s\"} 1\n", OUTBOX_RELAY_VERSION);
    header(b, "outbox_relay_start_time_seconds", "gauge", "Unix time the relayer started.");
    bprintf(b, "outbox_relay_start_time_seconds");
    value_d(b, m->started);

    render_topics(b, m, false);
    render_topics(b, m, true);
    header(b, "outbox_relay_delivery_errors_total", "counter",
           "Delivery reports that carried an error (each one halts the relay or dead-letters "
           "the event).");
    bprintf(b, "outbox_relay_delivery_errors_total");
    value_u(b, m->delivery_errors);
    header(b, "outbox_relay_events_dead_lettered_total", "counter",
           "Poison events sent to the dead-letter topic.");
    bprintf(b, "outbox_relay_events_dead_lettered_total");
    value_u(b, m->dead_lettered);
    header(b, "outbox_relay_delivery_retries_total", "counter",
           "Times the relayer re-produced everything unconfirmed after a delivery error that "
           "is waited out, by reason (retriable broker error, topic missing, authorization).");
    for (size_t i = 0; i < NREASONS; i++) {
        bprintf(b, "outbox_relay_delivery_retries_total{reason=\"%s\"}", retry_reasons[i]);
        value_u(b, m->retries[i]);
    }
    header(b, "outbox_relay_delivery_waiting", "gauge",
           "1 for the reason deliveries are stuck on (topic missing, authorization, "
           "retriable broker error) until one gets through again; nothing is confirmed past "
           "the event meanwhile.");
    for (size_t i = 0; i < NREASONS; i++)
        bprintf(b, "outbox_relay_delivery_waiting{reason=\"%s\"} %d\n", retry_reasons[i],
                m->waiting == (int) i ? 1 : 0);
    render_latency(b, m);

    header(b, "outbox_relay_inflight_events", "gauge",
           "Events produced to Kafka and not yet acknowledged.");
    bprintf(b, "outbox_relay_inflight_events");
    value_u(b, m->inflight_events);
    header(b, "outbox_relay_inflight_bytes", "gauge",
           "Key and payload bytes of the events in flight.");
    bprintf(b, "outbox_relay_inflight_bytes");
    value_u(b, m->inflight_bytes);
    header(b, "outbox_relay_oldest_pending_event_age_seconds", "gauge",
           "Age of the oldest event produced and not yet delivered (0 when none).");
    bprintf(b, "outbox_relay_oldest_pending_event_age_seconds");
    value_d(b, m->oldest_pending_age);

    header(b, "outbox_relay_confirmed_lsn", "gauge",
           "Last WAL position confirmed to the server, as a number (float: exact below 8 PiB "
           "of WAL).");
    bprintf(b, "outbox_relay_confirmed_lsn");
    slot_label(b, m);
    value_u(b, m->confirmed_lsn);
    header(b, "outbox_relay_received_lsn", "gauge",
           "Last WAL position received from the server, as a number.");
    bprintf(b, "outbox_relay_received_lsn");
    slot_label(b, m);
    value_u(b, m->received_lsn);
    header(b, "outbox_relay_reconnects_total", "counter",
           "Replication connections lost and re-established.");
    bprintf(b, "outbox_relay_reconnects_total");
    value_u(b, m->reconnects);

    if (m->state_known) {
        header(b, "outbox_relay_postgres_connected", "gauge",
               "1 while the replication connection is up.");
        bprintf(b, "outbox_relay_postgres_connected %d\n", m->pg_connected ? 1 : 0);
        header(b, "outbox_relay_streaming", "gauge",
               "1 while this relayer holds the slot and streams; 0 when it waits as a standby.");
        bprintf(b, "outbox_relay_streaming %d\n", m->streaming ? 1 : 0);
        header(b, "outbox_relay_kafka_connected", "gauge",
               "1 while the Kafka producer reaches the brokers.");
        bprintf(b, "outbox_relay_kafka_connected %d\n", m->kafka_up ? 1 : 0);
    }

    render_slot(b, m);

    if (m->rows_known) {
        header(b, "outbox_relay_table_rows_estimate", "gauge",
               "Rows in the outbox table, as the planner estimates them (pg_class.reltuples, "
               "summed over partitions).");
        bprintf(b, "outbox_relay_table_rows_estimate");
        value_i(b, m->table_rows);
    }

    if (m->unlogged >= 0) {
        header(b, "outbox_relay_outbox_unlogged_tables", "gauge",
               "Tables of the outbox (it or its partitions) that are UNLOGGED or temporary: "
               "they write no WAL, so their rows are never relayed. Must be 0.");
        bprintf(b, "outbox_relay_outbox_unlogged_tables");
        value_i(b, m->unlogged);
    }

    if (m->publication_ok >= 0) {
        header(b, "outbox_relay_publication_ok", "gauge",
               "--plugin pgoutput: 1 while the publication serves the outbox (covers it, "
               "publishes inserts, no column left out); 0: the server skips outbox rows. Must "
               "be 1.");
        bprintf(b, "outbox_relay_publication_ok");
        value_i(b, m->publication_ok);
    }

    header(b, "outbox_relay_reaper_rows_deleted_total", "counter",
           "Expired, delivered outbox rows the reaper deleted (for dropped partitions, the "
           "planner's estimate of their rows).");
    bprintf(b, "outbox_relay_reaper_rows_deleted_total");
    value_u(b, m->reaped_rows);
    header(b, "outbox_relay_reaper_batches_total", "counter",
           "Reaper transactions that deleted rows or dropped a partition.");
    bprintf(b, "outbox_relay_reaper_batches_total");
    value_u(b, m->reap_batches);
    header(b, "outbox_relay_reaper_runs_total", "counter", "Completed reaper runs.");
    bprintf(b, "outbox_relay_reaper_runs_total");
    value_u(b, m->reap_runs);
    header(b, "outbox_relay_reaper_seconds_total", "counter", "Time spent in reaper runs.");
    bprintf(b, "outbox_relay_reaper_seconds_total");
    value_d(b, m->reap_seconds);
    if (m->reaped_at > 0) {
        header(b, "outbox_relay_reaper_last_run_timestamp_seconds", "gauge",
               "Unix time the last reaper run finished.");
        bprintf(b, "outbox_relay_reaper_last_run_timestamp_seconds");
        value_d(b, m->reaped_at);
    }
    render_work(b, m);
}

char *metrics_render(struct metrics *m)
{
    struct buf b = {.cap = 8192};
    b.p = malloc(b.cap);
    if (b.p == NULL)
        return NULL;
    b.p[0] = '\0';
    pthread_mutex_lock(&m->mu);
    render(&b, m);
    pthread_mutex_unlock(&m->mu);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

bool metrics_ready(struct metrics *m, int64_t max_lag_bytes, char *why, size_t whylen)
{
    bool ok = false;
    pthread_mutex_lock(&m->mu);
    if (!m->state_known)
        snprintf(why, whylen, "starting: not connected yet");
    else if (!m->pg_connected)
        snprintf(why, whylen, "not connected to PostgreSQL");
    else if (!m->streaming)
        snprintf(why, whylen, "standby: waiting for slot %s, held by another process", m->slot);
    else if (!m->kafka_up)
        snprintf(why, whylen, "Kafka brokers unreachable");
    else if (m->unlogged > 0)
        snprintf(why, whylen, "the outbox has %lld UNLOGGED table(s): their rows write no WAL "
                 "and are never relayed; run %s", (long long) m->unlogged, m->unlogged_fix);
    else if (m->publication_ok == 0)
        snprintf(why, whylen, "%s", m->publication_why);
    else if (m->slot_known && m->status >= 0 && strcmp(wal_statuses[m->status], "lost") == 0)
        snprintf(why, whylen, "slot %s is lost (wal_status=lost)", m->slot);
    else if (m->slot_known && m->status >= 0 && strcmp(wal_statuses[m->status], "missing") == 0)
        snprintf(why, whylen, "slot %s does not exist", m->slot);
    else if (m->slot_known && max_lag_bytes > 0 && m->lag_bytes > max_lag_bytes)
        snprintf(why, whylen, "slot lag %lld bytes > --max-lag-bytes %lld",
                 (long long) m->lag_bytes, (long long) max_lag_bytes);
    else {
        snprintf(why, whylen, "ready");
        ok = true;
    }
    pthread_mutex_unlock(&m->mu);
    return ok;
}
