/*
 * test_metrics.c — the metrics registry and its text exposition.
 *
 * Every rendering is checked line by line by a small validator of the
 * Prometheus text exposition format (expo.h). Then the values are checked
 * to move as calls are made, the readiness rules, and concurrent writers
 * against a renderer. The HTTP endpoint is test_metrics_http.c.
 */
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/core/progress.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "expo.h"

/* ---------------------------------------------------------------------
 * The validator itself must reject what is wrong
 * --------------------------------------------------------------------- */

static void test_validator_rejects(void)
{
    static const char *const bad[] = {
        "outbox_relay_x 1\n",                                           /* no TYPE */
        "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x one\n",
        "# HELP outbox_relay_x h\n# TYPE outbox_relay_x counter\noutbox_relay_x 1\n",
        "# HELP outbox_relay_x_total h\n# TYPE outbox_relay_x_total counter\n"
        "outbox_relay_x_total{a=\"b\\q\"} 1\n",                          /* bad escape */
        "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x 1\n"
        "outbox_relay_x 2\n",                                           /* duplicate */
        "# HELP outbox_relay_h h\n# TYPE outbox_relay_h histogram\n"
        "outbox_relay_h_bucket{le=\"1\"} 2\noutbox_relay_h_bucket{le=\"+Inf\"} 1\n"
        "outbox_relay_h_sum 1\noutbox_relay_h_count 1\n",               /* not cumulative */
        "# HELP outbox_relay_h h\n# TYPE outbox_relay_h histogram\n"
        "outbox_relay_h_bucket{le=\"+Inf\"} 1\noutbox_relay_h_sum 1\noutbox_relay_h_count 2\n",
        "# HELP outbox_relay_a h\n# TYPE outbox_relay_a gauge\noutbox_relay_a 1\n"
        "# HELP outbox_relay_b h\n# TYPE outbox_relay_b gauge\noutbox_relay_b 1\n"
        "outbox_relay_a{x=\"y\"} 1\n",                                   /* not contiguous */
        "# HELP other_x h\n# TYPE other_x gauge\nother_x 1\n",           /* prefix */
        "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x 1",
        "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x{a=\"b} 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct expo e;
        int rc = expo_validate(&e, bad[i]);
        if (rc == 0)
            fprintf(stderr, "validator accepted bad case %zu\n", i);
        CHECK(rc != 0);
        expo_free(&e);
    }
    struct expo e;
    CHECK_EQ_INT(expo_validate(&e, "# HELP outbox_relay_x h \\\\ \\n\n# TYPE outbox_relay_x gauge\n"
                                   "outbox_relay_x{a=\"q\\\"\\\\\\n\",b=\"\"} -1.5e3 1700000000\n"),
                 0);
    expo_free(&e);
}

/* ---------------------------------------------------------------------
 * The registry
 * --------------------------------------------------------------------- */

static void test_empty_registry(void)
{
    struct metrics *m = metrics_new("outbox_relay");
    CHECK(m != NULL);
    char *t = render_valid(m);
    CHECK(strstr(t, "# TYPE outbox_relay_events_delivered_total counter\n") != NULL);
    CHECK(strstr(t, "# TYPE outbox_relay_delivery_latency_seconds histogram\n") != NULL);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_count") == 0);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"0.001\"}") == 0);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"60\"}") == 0);
    CHECK(value_of(t, "outbox_relay_reconnects_total") == 0);
    /* Nothing measured yet: no slot series, no row estimate, no state. */
    CHECK(strstr(t, "outbox_relay_slot_lag_bytes") == NULL);
    CHECK(strstr(t, "outbox_relay_table_rows_estimate") == NULL);
    CHECK(strstr(t, "outbox_relay_streaming") == NULL);
    char why[128];
    CHECK(!metrics_ready(m, 0, why, sizeof why));
    CHECK(strstr(why, "starting") != NULL);
    free(t);
    metrics_free(m);
    metrics_free(NULL);
}

/* The publication's row filter (pgoutput): no series until the
 * maintenance poll knows, then 1 / 0, readiness untouched (the owner's
 * choice, not a broken setup). */
static void test_publication_row_filter(void)
{
    struct metrics *m = metrics_new("s1");
    char *t = render_valid(m);
    CHECK(strstr(t, "outbox_relay_publication_row_filter") == NULL);
    free(t);
    metrics_set_publication(m, 1, NULL);
    metrics_set_publication_filter(m, 1);
    t = render_valid(m);
    CHECK(strstr(t, "# TYPE outbox_relay_publication_row_filter gauge\n") != NULL);
    CHECK(value_of(t, "outbox_relay_publication_row_filter") == 1);
    CHECK(value_of(t, "outbox_relay_publication_ok") == 1);
    free(t);
    metrics_set_publication_filter(m, 0);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_publication_row_filter") == 0);
    free(t);
    metrics_free(m);
}

static void test_values_move(void)
{
    struct metrics *m = metrics_new("s1");
    char *t;

    metrics_event_produced(m, "orders");
    metrics_event_produced(m, "orders");
    metrics_event_produced(m, "pay\"ments"); /* escaping, even if Kafka forbids it */
    metrics_event_delivered(m, "orders", 0.0005, 0.0002);
    metrics_event_delivered(m, "orders", 0.2, 0.0011);
    metrics_event_delivered(m, "pay\"ments", -1, 0.0025); /* unknown latency */
    metrics_event_delivered(m, "orders", 120, -1);         /* beyond the last bucket */
    metrics_delivery_error(m);
    metrics_dead_lettered(m);
    metrics_reconnected(m);
    metrics_reconnected(m);
    metrics_delivery_retried(m, "retriable");
    metrics_delivery_retried(m, "topic_missing");
    metrics_delivery_retried(m, "topic_missing");
    metrics_delivery_retried(m, "no such reason"); /* ignored */
    metrics_set_delivery_waiting(m, "topic_missing");
    metrics_set_inflight(m, 7, 4096);
    metrics_set_confirmed_lsn(m, ((lsn_t) 0x16 << 32) | 0xB374D848);
    metrics_set_received_lsn(m, ((lsn_t) 0x16 << 32) | 0xB374D900);
    metrics_set_oldest_pending_age(m, 2.5);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_events_published_total{topic=\"orders\"}") == 2);
    CHECK(value_of(t, "outbox_relay_events_published_total{topic=\"pay\\\"ments\"}") == 1);
    CHECK(value_of(t, "outbox_relay_events_delivered_total{topic=\"orders\"}") == 3);
    CHECK(value_of(t, "outbox_relay_events_delivered_total{topic=\"pay\\\"ments\"}") == 1);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"0.001\"}") == 1);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"0.25\"}") == 2);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"60\"}") == 2);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"+Inf\"}") == 3);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_count") == 3);
    CHECK(fabs(value_of(t, "outbox_relay_delivery_latency_seconds_sum") - 120.2005) < 1e-9);
    /* A bound is inclusive; each bucket counts what is at or below it. */
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"0.00025\"}") == 0);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"0.0005\"}") == 1);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_bucket{le=\"0.1\"}") == 1);
    /* The broker's share, its own histogram on the same bounds. */
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"0.00025\"}") == 1);
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"0.001\"}") == 1);
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"0.0015\"}") == 2);
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"0.0025\"}") == 3);
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"+Inf\"}") == 3);
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_count") == 3);
    CHECK(fabs(value_of(t, "outbox_relay_kafka_ack_latency_seconds_sum") - 0.0038) < 1e-9);
    CHECK(value_of(t, "outbox_relay_delivery_errors_total") == 1);
    CHECK(value_of(t, "outbox_relay_events_dead_lettered_total") == 1);
    CHECK(value_of(t, "outbox_relay_reconnects_total") == 2);
    CHECK(value_of(t, "outbox_relay_delivery_retries_total{reason=\"retriable\"}") == 1);
    CHECK(value_of(t, "outbox_relay_delivery_retries_total{reason=\"topic_missing\"}") == 2);
    CHECK(value_of(t, "outbox_relay_delivery_retries_total{reason=\"authorization\"}") == 0);
    CHECK(value_of(t, "outbox_relay_delivery_waiting{reason=\"topic_missing\"}") == 1);
    CHECK(value_of(t, "outbox_relay_delivery_waiting{reason=\"retriable\"}") == 0);
    CHECK(value_of(t, "outbox_relay_inflight_events") == 7);
    CHECK(value_of(t, "outbox_relay_inflight_bytes") == 4096);
    CHECK(value_of(t, "outbox_relay_confirmed_lsn{slot=\"s1\"}") ==
          (double) (((uint64_t) 0x16 << 32) | 0xB374D848));
    CHECK(value_of(t, "outbox_relay_received_lsn{slot=\"s1\"}") > 0);
    CHECK(value_of(t, "outbox_relay_oldest_pending_event_age_seconds") == 2.5);
    free(t);
    metrics_set_delivery_waiting(m, NULL);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_delivery_waiting{reason=\"topic_missing\"}") == 0);
    free(t);

    metrics_set_slot(m, 123456, "reserved", 1 << 30);
    metrics_set_table_rows(m, 42);
    metrics_reaped(m, 5000, 2, 0.75);
    metrics_reaped(m, 10, 1, 0.25);
    metrics_set_state(m, true, true, true);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_slot_lag_bytes{slot=\"s1\"}") == 123456);
    CHECK(value_of(t, "outbox_relay_slot_wal_status{slot=\"s1\",status=\"reserved\"}") == 1);
    CHECK(value_of(t, "outbox_relay_slot_wal_status{slot=\"s1\",status=\"lost\"}") == 0);
    CHECK(value_of(t, "outbox_relay_slot_safe_wal_size_bytes{slot=\"s1\"}") == 1 << 30);
    CHECK(value_of(t, "outbox_relay_slot_last_poll_timestamp_seconds{slot=\"s1\"}") > 1.6e9);
    CHECK(value_of(t, "outbox_relay_table_rows_estimate") == 42);
    CHECK(value_of(t, "outbox_relay_reaper_rows_deleted_total") == 5010);
    CHECK(value_of(t, "outbox_relay_reaper_batches_total") == 3);
    CHECK(value_of(t, "outbox_relay_reaper_runs_total") == 2);
    CHECK(value_of(t, "outbox_relay_reaper_seconds_total") == 1.0);
    CHECK(value_of(t, "outbox_relay_reaper_last_run_timestamp_seconds") > 1.6e9);
    CHECK(value_of(t, "outbox_relay_streaming") == 1);
    free(t);

    /* Status changes: exactly one series is 1; NULL safe_wal_size drops the
     * series; an unknown lag drops the lag series. */
    metrics_set_slot(m, -1, "lost", -1);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_slot_wal_status{slot=\"s1\",status=\"reserved\"}") == 0);
    CHECK(value_of(t, "outbox_relay_slot_wal_status{slot=\"s1\",status=\"lost\"}") == 1);
    CHECK(strstr(t, "outbox_relay_slot_safe_wal_size_bytes{") == NULL);
    CHECK(strstr(t, "outbox_relay_slot_lag_bytes{") == NULL);
    free(t);
    metrics_set_slot(m, -1, NULL, -1);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_slot_wal_status{slot=\"s1\",status=\"missing\"}") == 1);
    CHECK(value_of(t, "outbox_relay_slot_wal_status{slot=\"s1\",status=\"lost\"}") == 0);
    free(t);
    metrics_free(m);
}

/* Long work: nothing before it starts, every gauge while it runs (the
 * unknown ones left out), final numbers once it ended. */
static void test_progress_gauges(void)
{
    struct metrics *m = metrics_new("s1");
    struct progress p;
    char *t = render_valid(m);
    CHECK(strstr(t, "outbox_relay_backfill_") == NULL);
    CHECK(strstr(t, "outbox_relay_reaper_run_") == NULL);
    free(t);

    progress_start(&p, "backfill", 60000, true, 0, false, 10.0);
    progress_update(&p, 0, 10.0);
    metrics_set_progress(m, METRICS_WORK_BACKFILL, &p, true);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_backfill_active") == 1);
    CHECK(value_of(t, "outbox_relay_backfill_rows_done") == 0);
    CHECK(value_of(t, "outbox_relay_backfill_rows_expected") == 60000);
    CHECK(strstr(t, "outbox_relay_backfill_rows_per_second") == NULL); /* not known yet */
    CHECK(strstr(t, "outbox_relay_backfill_seconds_left") == NULL);
    CHECK(strstr(t, "# HELP outbox_relay_backfill_rows_done the backfill") != NULL);
    CHECK(strstr(t, "outbox_relay_reaper_run_") == NULL);
    free(t);

    progress_update(&p, 20000, 14.0);
    metrics_set_progress(m, METRICS_WORK_BACKFILL, &p, true);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_backfill_rows_done") == 20000);
    CHECK(value_of(t, "outbox_relay_backfill_rows_per_second") == 5000);
    CHECK(value_of(t, "outbox_relay_backfill_seconds_left") == 8);
    free(t);

    progress_update(&p, 61000, 22.0); /* rows arrived meanwhile */
    metrics_set_progress(m, METRICS_WORK_BACKFILL, &p, false);
    /* a reaper run with no total */
    struct progress r;
    progress_start(&r, "reaper", -1, false, 0, true, 0);
    progress_update(&r, 5000, 2.0);
    metrics_set_progress(m, METRICS_WORK_REAPER, &r, true);
    t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_backfill_active") == 0);
    CHECK(value_of(t, "outbox_relay_backfill_rows_done") == 61000);
    CHECK(value_of(t, "outbox_relay_backfill_rows_expected") == 61000);
    CHECK(value_of(t, "outbox_relay_backfill_seconds_left") == 0);
    CHECK(fabs(value_of(t, "outbox_relay_backfill_rows_per_second") - 61000 / 12.0) < 1e-6);
    CHECK(value_of(t, "outbox_relay_reaper_run_active") == 1);
    CHECK(value_of(t, "outbox_relay_reaper_run_rows_done") == 5000);
    CHECK(strstr(t, "outbox_relay_reaper_run_rows_expected") == NULL);
    CHECK(strstr(t, "outbox_relay_reaper_run_seconds_left") == NULL);
    free(t);
    metrics_set_progress(NULL, METRICS_WORK_REAPER, &r, true); /* no registry: ignored */
    metrics_free(m);
}

static void test_topic_cap(void)
{
    struct metrics *m = metrics_new("s");
    char topic[32];
    for (int i = 0; i < 600; i++) {
        snprintf(topic, sizeof topic, "t%d", i);
        metrics_event_produced(m, topic);
    }
    char *t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_events_published_total{topic=\"t0\"}") == 1);
    CHECK(isnan(value_of(t, "outbox_relay_events_published_total{topic=\"t599\"}")));
    CHECK(value_of(t, "outbox_relay_events_published_total{topic=\"_other\"}") > 0);
    free(t);
    metrics_free(m);
}

static void test_ready(void)
{
    struct metrics *m = metrics_new("s");
    char why[256];

    metrics_set_state(m, false, false, true);
    CHECK(!metrics_ready(m, 100, why, sizeof why));
    CHECK(strstr(why, "PostgreSQL") != NULL);
    metrics_set_state(m, true, false, true);
    CHECK(!metrics_ready(m, 100, why, sizeof why));
    CHECK(strstr(why, "standby") != NULL);
    metrics_set_state(m, true, true, false);
    CHECK(!metrics_ready(m, 100, why, sizeof why));
    CHECK(strstr(why, "Kafka") != NULL);
    metrics_set_state(m, true, true, true);
    CHECK(metrics_ready(m, 100, why, sizeof why)); /* slot not polled yet: no lag check */
    metrics_set_slot(m, 101, "reserved", -1);
    CHECK(!metrics_ready(m, 100, why, sizeof why));
    CHECK(strstr(why, "101") != NULL);
    CHECK(metrics_ready(m, 0, why, sizeof why)); /* 0 = no lag threshold */
    metrics_set_slot(m, 100, "extended", -1);
    CHECK(metrics_ready(m, 100, why, sizeof why));
    metrics_set_slot(m, 0, "lost", -1);
    CHECK(!metrics_ready(m, 100, why, sizeof why));
    CHECK(strstr(why, "lost") != NULL);
    metrics_set_slot(m, -1, NULL, -1);
    CHECK(!metrics_ready(m, 100, why, sizeof why));
    CHECK(strstr(why, "does not exist") != NULL);
    metrics_free(m);
}

/* ---------------------------------------------------------------------
 * Concurrency: writers on several threads while another renders
 * --------------------------------------------------------------------- */

#define WRITERS 4
#define WRITES 20000

struct writer_arg {
    struct metrics *m;
    int id;
};

static void *writer(void *p)
{
    struct writer_arg *a = p;
    char topic[16];
    snprintf(topic, sizeof topic, "w%d", a->id % 2);
    for (int i = 0; i < WRITES; i++) {
        metrics_event_produced(a->m, topic);
        metrics_event_delivered(a->m, topic, (double) (i % 100) / 1000.0, 0.0001);
        metrics_set_inflight(a->m, (size_t) i, (size_t) i * 10);
        metrics_set_slot(a->m, i, i % 2 ? "reserved" : "extended", i);
        if (i % 1000 == 0)
            metrics_reaped(a->m, 1, 1, 0.001);
    }
    return NULL;
}

static void test_concurrent(void)
{
    struct metrics *m = metrics_new("s");
    pthread_t th[WRITERS];
    struct writer_arg args[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        args[i] = (struct writer_arg){m, i};
        pthread_create(&th[i], NULL, writer, &args[i]);
    }
    int renders = 0;
    for (int i = 0; i < 200; i++) {
        char *t = render_valid(m);
        double ones = value_of(t, "outbox_relay_slot_wal_status{slot=\"s\",status=\"reserved\"}") +
                      value_of(t, "outbox_relay_slot_wal_status{slot=\"s\",status=\"extended\"}");
        if (!isnan(ones))
            CHECK(ones == 1);
        free(t);
        renders++;
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(th[i], NULL);
    char *t = render_valid(m);
    CHECK(value_of(t, "outbox_relay_events_published_total{topic=\"w0\"}") == 2 * WRITES);
    CHECK(value_of(t, "outbox_relay_events_delivered_total{topic=\"w1\"}") == 2 * WRITES);
    CHECK(value_of(t, "outbox_relay_delivery_latency_seconds_count") == WRITERS * WRITES);
    CHECK(value_of(t, "outbox_relay_reaper_runs_total") == WRITERS * (WRITES / 1000));
    CHECK(renders == 200);
    free(t);
    metrics_free(m);
}

/* Every bound, observed exactly and just above: at or below a bound
 * counts in its bucket, just above it in the next (the bucket search),
 * and the bounds ascend with the old 1-2.5-5 series among them. */
static void test_bucket_bounds(void)
{
    size_t n = 0;
    const double *b = metrics_latency_bounds(&n);
    CHECK(n >= 15);
    for (size_t i = 1; i < n; i++)
        CHECK(b[i] > b[i - 1]);
    const double old[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                          0.5,   1,      2.5,   5,    10,   30,    60};
    for (size_t k = 0; k < sizeof old / sizeof old[0]; k++) {
        bool found = false;
        for (size_t i = 0; i < n; i++)
            found = found || b[i] == old[k];
        CHECK(found);
    }
    struct metrics *m = metrics_new("s");
    for (size_t i = 0; i < n; i++) {
        metrics_event_delivered(m, "t", b[i], b[i] * 1.0001);
    }
    char *t = render_valid(m);
    for (size_t i = 0; i < n; i++) {
        char series[128];
        snprintf(series, sizeof series, "outbox_relay_delivery_latency_seconds_bucket{le=\"%g\"}",
                 b[i]);
        CHECK(value_of(t, series) == (double) (i + 1));
        snprintf(series, sizeof series, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"%g\"}",
                 b[i]);
        CHECK(value_of(t, series) == (double) i);
    }
    CHECK(value_of(t, "outbox_relay_kafka_ack_latency_seconds_bucket{le=\"+Inf\"}") == (double) n);
    free(t);
    metrics_free(m);
}

int main(void)
{
    test_validator_rejects();
    test_publication_row_filter();
    test_empty_registry();
    test_values_move();
    test_bucket_bounds();
    test_progress_gauges();
    test_topic_cap();
    test_ready();
    test_concurrent();
    CHECK_DONE();
}
