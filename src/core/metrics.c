/*
 * metrics.c — the metrics registry (see metrics.h); its text exposition is
 * metrics_render.c, the private parts both share metrics_internal.h.
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
#include "outbox_relay/core/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/core/progress.h"
#include "metrics_internal.h"


static double wall_now(void)
{
    return (double) wall_now_us() / 1e6;
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
    m->publication_row_filter = -1;
    m->failover_slot = -1;
    m->failover_protected = -1;
    m->failover_standby_lag = -1;
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

static void hist_observe(struct latency_hist *h, double s)
{
    /* Unknown latency (< 0: no commit timestamp, or a database clock
     * ahead of ours) is not observed at all: a 0 would pull the quantiles
     * down. */
    if (s < 0)
        return;
    size_t lo = 0, hi = NBUCKETS; /* the first bound >= s; NBUCKETS: +Inf */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (latency_bounds[mid] < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < NBUCKETS)
        h->buckets[lo]++;
    h->count++;
    h->sum += s;
}

void metrics_event_delivered(struct metrics *m, const char *topic, double latency_s,
                             double ack_s)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    struct topic_counts *t = topic_entry(m, topic);
    if (t != NULL)
        t->delivered++;
    hist_observe(&m->delivery, latency_s);
    hist_observe(&m->ack, ack_s);
    pthread_mutex_unlock(&m->mu);
}

const double *metrics_latency_bounds(size_t *n)
{
    *n = NBUCKETS;
    return latency_bounds;
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

void metrics_set_plugin_refused(struct metrics *m, const char *why)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->plugin_refused = why != NULL;
    snprintf(m->plugin_refused_why, sizeof m->plugin_refused_why, "%s", why ? why : "");
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_failover_refused(struct metrics *m, const char *why)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->failover_refused = why != NULL;
    snprintf(m->failover_refused_why, sizeof m->failover_refused_why, "%s", why ? why : "");
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_failover(struct metrics *m, int failover_slot, int protected_,
                          int64_t standby_slots, int64_t inactive, int64_t lag_bytes)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->failover_slot = failover_slot;
    m->failover_protected = protected_;
    m->failover_standby_slots = standby_slots;
    m->failover_standby_inactive = inactive;
    m->failover_standby_lag = lag_bytes;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_publication_filter(struct metrics *m, int filtered)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->publication_row_filter = filtered;
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

bool metrics_ready(struct metrics *m, int64_t max_lag_bytes, char *why, size_t whylen)
{
    bool ok = false;
    pthread_mutex_lock(&m->mu);
    if (!m->state_known)
        snprintf(why, whylen, "starting: not connected yet");
    else if (m->plugin_refused)
        snprintf(why, whylen, "not streaming: %s", m->plugin_refused_why);
    else if (m->failover_refused)
        snprintf(why, whylen, "not streaming: %s", m->failover_refused_why);
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
