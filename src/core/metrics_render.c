/*
 * metrics_render.c — the registry's Prometheus text exposition (0.0.4),
 * metrics_render() of metrics.h: what each series means is in
 * docs/operations.md, the rules (names, units, unknown series left out) in
 * metrics.c's header.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_internal.h"

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

/* One unlabelled gauge: its header and value. */
static void gauge_i(struct buf *b, const char *name, const char *help, int64_t v)
{
    header(b, name, "gauge", help);
    bprintf(b, "%s", name);
    value_i(b, v);
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

static void render_hist(struct buf *b, const char *name, const char *help,
                        const struct latency_hist *h)
{
    header(b, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum += h->buckets[i];
        bprintf(b, "%s_bucket{le=\"%g\"}", name, latency_bounds[i]);
        value_u(b, cum);
    }
    bprintf(b, "%s_bucket{le=\"+Inf\"}", name);
    value_u(b, h->count);
    bprintf(b, "%s_sum", name);
    value_d(b, h->sum);
    bprintf(b, "%s_count", name);
    value_u(b, h->count);
}

static void render_latency(struct buf *b, const struct metrics *m)
{
    render_hist(b, "outbox_relay_delivery_latency_seconds",
                "Time from the transaction's commit (its timestamp in the WAL) to the broker's "
                "acknowledgement of the event.",
                &m->delivery);
    render_hist(b, "outbox_relay_kafka_ack_latency_seconds",
                "Time from handing the event to the Kafka producer to the broker's "
                "acknowledgement, retries included: the broker's share of the delivery "
                "latency.",
                &m->ack);
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
        ("rows expected at the start: a count, or the planner's estimate on a large table "
         "(rows done may pass it)."),
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

    gauge_i(b, "outbox_relay_output_plugin_refused",
            "1 while the server refuses the slot's output plugin (output_plugin_libraries does "
            "not name it): nothing streams and the slot retains WAL until it is allowed. Must "
            "be 0.", m->plugin_refused ? 1 : 0);
    gauge_i(b, "outbox_relay_failover_refused",
            "1 while the relayer refuses to stream after a promotion (the slot is missing on "
            "the promoted server, or the old primary had no synchronized_standby_slots) or "
            "finds only a standby's synced copy of the slot: a human must act, the log and "
            "/readyz say what was found and the fix. Must be 0.", m->failover_refused ? 1 : 0);
    if (m->failover_slot >= 0)
        gauge_i(b, "outbox_relay_slot_failover",
                "1 when the slot has failover = true (PostgreSQL 17+: a standby with "
                "sync_replication_slots may keep a copy of it).", m->failover_slot);
    if (m->failover_protected >= 0) {
        gauge_i(b, "outbox_relay_failover_protected",
                "Failover slot: 1 while synchronized_standby_slots on the primary names "
                "physical slots that exist (changes reach the relayer only after that standby "
                "has their WAL); 0: a promotion may lose what was published. Must be 1. "
                "Whether the standby holds a synced copy is visible only on the standby.",
                m->failover_protected);
        gauge_i(b, "outbox_relay_failover_standby_slots",
                "Physical slots named in synchronized_standby_slots.",
                m->failover_standby_slots);
        gauge_i(b, "outbox_relay_failover_standby_slots_inactive",
                "Of them, slots no standby is connected to (the relayer waits for them).",
                m->failover_standby_inactive);
        if (m->failover_standby_lag >= 0)
            gauge_i(b, "outbox_relay_failover_standby_lag_bytes",
                    "The primary's WAL position minus the oldest restart_lsn of those "
                    "physical slots: how far the standby that syncs the slot is behind.",
                    m->failover_standby_lag);
    }
    if (m->publication_ok >= 0)
        gauge_i(b, "outbox_relay_publication_ok",
                "--plugin pgoutput: 1 while the publication serves the outbox (covers it, "
                "publishes inserts, no column left out); 0: the server skips outbox rows. Must "
                "be 1.", m->publication_ok);
    if (m->publication_row_filter >= 0)
        gauge_i(b, "outbox_relay_publication_row_filter",
                "--plugin pgoutput: 1 while the publication has a row filter on the outbox: "
                "the rows it filters out never reach Kafka (the owner's choice; the log names "
                "the filter).", m->publication_row_filter);

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

