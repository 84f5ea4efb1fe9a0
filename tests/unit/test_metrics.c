/*
 * test_metrics.c — the metrics registry and its HTTP endpoint.
 *
 * Every rendering is checked line by line by a small validator of the
 * Prometheus text exposition format (0.0.4): HELP/TYPE before the samples,
 * one TYPE per family, families contiguous, legal names and label escapes,
 * parseable values, no duplicate series, counters ending in _total,
 * histogram buckets cumulative with +Inf == _count. Then the values are
 * checked to move as calls are made, the readiness rules, concurrent
 * writers against a renderer, and the HTTP endpoint over a real socket.
 */
#include "outbox_relay/metrics.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* ---------------------------------------------------------------------
 * A validator of the exposition format
 * --------------------------------------------------------------------- */

#define MAX_FAMILIES 128
#define MAX_SERIES 2048

struct family {
    char name[128];
    char type[16];
    bool help, closed;
};

struct expo {
    struct family fam[MAX_FAMILIES];
    int nfam;
    char *series[MAX_SERIES]; /* "name{labels}" as rendered */
    int nseries;
    int cur;                  /* family whose samples we are in, -1 none */
    char err[256];
    /* histogram bookkeeping for the family in progress */
    double last_bucket, inf_bucket;
    bool have_inf;
};

static bool name_char(int c, bool first)
{
    return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

static int find_family(struct expo *e, const char *name)
{
    for (int i = 0; i < e->nfam; i++)
        if (strcmp(e->fam[i].name, name) == 0)
            return i;
    return -1;
}

static int add_family(struct expo *e, const char *name)
{
    int i = find_family(e, name);
    if (i >= 0)
        return i;
    if (e->nfam == MAX_FAMILIES)
        return -1;
    snprintf(e->fam[e->nfam].name, sizeof e->fam[0].name, "%s", name);
    return e->nfam++;
}

/* The family a sample name belongs to (histogram suffixes stripped when the
 * stripped name is a declared histogram). */
static int family_of(struct expo *e, const char *name, const char **suffix)
{
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    *suffix = "";
    for (size_t k = 0; k < 3; k++) {
        size_t n = strlen(name), s = strlen(sfx[k]);
        if (n > s && strcmp(name + n - s, sfx[k]) == 0) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int) (n - s), name);
            int i = find_family(e, base);
            if (i >= 0 && strcmp(e->fam[i].type, "histogram") == 0) {
                *suffix = sfx[k];
                return i;
            }
        }
    }
    return find_family(e, name);
}

static bool parse_value(const char *s, double *out)
{
    if (strcmp(s, "+Inf") == 0 || strcmp(s, "Inf") == 0) {
        *out = INFINITY;
        return true;
    }
    if (strcmp(s, "-Inf") == 0) {
        *out = -INFINITY;
        return true;
    }
    if (strcmp(s, "NaN") == 0) {
        *out = NAN;
        return true;
    }
    char *end;
    *out = strtod(s, &end);
    return end != s && *end == '\0';
}

static int fail(struct expo *e, int lineno, const char *what, const char *line)
{
    snprintf(e->err, sizeof e->err, "line %d: %s: %.120s", lineno, what, line);
    return -1;
}

/* Ends the histogram checks of family e->cur, if any. */
static int close_family(struct expo *e, int lineno)
{
    if (e->cur >= 0) {
        e->fam[e->cur].closed = true;
        if (strcmp(e->fam[e->cur].type, "histogram") == 0 && !e->have_inf)
            return fail(e, lineno, "histogram without a +Inf bucket", e->fam[e->cur].name);
    }
    e->cur = -1;
    return 0;
}

static int sample_line(struct expo *e, int lineno, char *line)
{
    char name[128], labels[1024] = "", le[256] = "";
    const char *p = line;
    size_t n = 0;
    if (!name_char((unsigned char) *p, true))
        return fail(e, lineno, "bad metric name", line);
    while (name_char((unsigned char) *p, false) && n < sizeof name - 1)
        name[n++] = *p++;
    name[n] = '\0';

    if (*p == '{') {
        const char *lstart = p;
        p++;
        while (*p != '}') {
            char lname[128];
            size_t ln = 0;
            if (!name_char((unsigned char) *p, true) || *p == ':')
                return fail(e, lineno, "bad label name", line);
            while ((isalnum((unsigned char) *p) || *p == '_') && ln < sizeof lname - 1)
                lname[ln++] = *p++;
            lname[ln] = '\0';
            if (p[0] != '=' || p[1] != '"')
                return fail(e, lineno, "label without =\"", line);
            p += 2;
            char val[256];
            size_t vn = 0;
            while (*p != '"') {
                if (*p == '\0' || *p == '\n')
                    return fail(e, lineno, "unterminated label value", line);
                if (*p == '\\') {
                    if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                        return fail(e, lineno, "bad escape in label value", line);
                    p++;
                }
                if (vn < sizeof val - 1)
                    val[vn++] = *p;
                p++;
            }
            val[vn] = '\0';
            p++;
            if (strcmp(lname, "le") == 0)
                snprintf(le, sizeof le, "%s", val);
            if (*p == ',')
                p++;
            else if (*p != '}')
                return fail(e, lineno, "expected , or } after a label", line);
        }
        p++;
        snprintf(labels, sizeof labels, "%.*s", (int) (p - lstart), lstart);
    }
    if (*p != ' ')
        return fail(e, lineno, "expected one space before the value", line);
    p++;
    char valtext[64];
    size_t vt = 0;
    while (*p && *p != ' ' && vt < sizeof valtext - 1)
        valtext[vt++] = *p++;
    valtext[vt] = '\0';
    double v;
    if (!parse_value(valtext, &v))
        return fail(e, lineno, "value is not a number", line);
    if (*p == ' ') { /* optional timestamp: an integer */
        p++;
        char *end;
        strtoll(p, &end, 10);
        if (end == p || *end != '\0')
            return fail(e, lineno, "bad timestamp", line);
    } else if (*p != '\0') {
        return fail(e, lineno, "trailing garbage", line);
    }

    if (strncmp(name, "outbox_relay_", 13) != 0)
        return fail(e, lineno, "name without the outbox_relay_ prefix", line);
    const char *suffix;
    int f = family_of(e, name, &suffix);
    if (f < 0 || e->fam[f].type[0] == '\0')
        return fail(e, lineno, "sample before its # TYPE", line);
    if (f != e->cur) {
        if (e->fam[f].closed)
            return fail(e, lineno, "samples of a family are not contiguous", line);
        if (close_family(e, lineno) < 0)
            return -1;
        e->cur = f;
        e->last_bucket = 0;
        e->have_inf = false;
    }
    if (strcmp(e->fam[f].type, "counter") == 0) {
        size_t nl = strlen(name);
        if (nl < 6 || strcmp(name + nl - 6, "_total") != 0)
            return fail(e, lineno, "counter name does not end in _total", line);
        if (v < 0)
            return fail(e, lineno, "negative counter", line);
    }
    if (strcmp(e->fam[f].type, "histogram") == 0) {
        if (strcmp(suffix, "_bucket") == 0) {
            double bound;
            if (le[0] == '\0' || !parse_value(le, &bound))
                return fail(e, lineno, "bucket without a numeric le", line);
            if (v < e->last_bucket)
                return fail(e, lineno, "histogram buckets not cumulative", line);
            e->last_bucket = v;
            if (isinf(bound)) {
                e->have_inf = true;
                e->inf_bucket = v;
            }
        } else if (strcmp(suffix, "_count") == 0) {
            if (!e->have_inf || e->inf_bucket != v)
                return fail(e, lineno, "_count differs from the +Inf bucket", line);
        } else if (suffix[0] == '\0') {
            return fail(e, lineno, "histogram sample without _bucket/_sum/_count", line);
        }
    }
    char key[1200];
    snprintf(key, sizeof key, "%s%s", name, labels);
    for (int i = 0; i < e->nseries; i++)
        if (strcmp(e->series[i], key) == 0)
            return fail(e, lineno, "duplicate series", line);
    if (e->nseries < MAX_SERIES)
        e->series[e->nseries++] = strdup(key);
    return 0;
}

static int comment_line(struct expo *e, int lineno, char *line)
{
    bool help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
    if (!help && !type)
        return 0; /* other comments are allowed */
    const char *p = line + 7;
    char name[128];
    size_t n = 0;
    if (!name_char((unsigned char) *p, true))
        return fail(e, lineno, "bad name in HELP/TYPE", line);
    while (name_char((unsigned char) *p, false) && n < sizeof name - 1)
        name[n++] = *p++;
    name[n] = '\0';
    if (*p != ' ' || p[1] == '\0')
        return fail(e, lineno, "HELP/TYPE without text", line);
    p++;
    int f = add_family(e, name);
    if (f < 0)
        return fail(e, lineno, "too many families", line);
    if (f != e->cur && close_family(e, lineno) < 0)
        return -1;
    if (e->fam[f].closed)
        return fail(e, lineno, "HELP/TYPE after the family's samples", line);
    if (help) {
        if (e->fam[f].help)
            return fail(e, lineno, "second HELP", line);
        e->fam[f].help = true;
        for (const char *q = p; *q; q++) {
            if (*q != '\\')
                continue;
            if (q[1] != '\\' && q[1] != 'n')
                return fail(e, lineno, "bad escape in HELP", line);
            q++;
        }
        return 0;
    }
    if (e->fam[f].type[0] != '\0')
        return fail(e, lineno, "second TYPE", line);
    if (strcmp(p, "counter") && strcmp(p, "gauge") && strcmp(p, "histogram") &&
        strcmp(p, "summary") && strcmp(p, "untyped"))
        return fail(e, lineno, "unknown TYPE", line);
    snprintf(e->fam[f].type, sizeof e->fam[f].type, "%s", p);
    return 0;
}

static void expo_free(struct expo *e)
{
    for (int i = 0; i < e->nseries; i++)
        free(e->series[i]);
    e->nseries = 0;
}

/* Validates text; returns 0 or -1 with the reason in e->err. */
static int expo_validate(struct expo *e, const char *text)
{
    memset(e, 0, sizeof *e);
    e->cur = -1;
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return fail(e, 0, "text does not end with a newline", "");
    char *copy = strdup(text), *save = NULL;
    int lineno = 0, rc = 0;
    for (char *line = strtok_r(copy, "\n", &save); line && rc == 0;
         line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (line[0] == '#')
            rc = comment_line(e, lineno, line);
        else
            rc = sample_line(e, lineno, line);
    }
    if (rc == 0)
        rc = close_family(e, lineno);
    for (int i = 0; rc == 0 && i < e->nfam; i++)
        if (!e->fam[i].help || e->fam[i].type[0] == '\0')
            rc = fail(e, 0, "family without HELP or TYPE", e->fam[i].name);
    if (strstr(text, "\n\n") != NULL && rc == 0)
        rc = fail(e, 0, "empty line", "");
    free(copy);
    return rc;
}

/* The value of the series written exactly as `series` ("name{labels}"),
 * NAN when absent. */
static double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return NAN;
}

/* Renders, validates, and returns the text (caller frees). */
static char *render_valid(struct metrics *m)
{
    struct expo e;
    char *text = metrics_render(m);
    CHECK(text != NULL);
    if (text == NULL)
        return strdup("");
    int rc = expo_validate(&e, text);
    if (rc != 0)
        fprintf(stderr, "invalid exposition: %s\n--- text ---\n%s\n", e.err, text);
    CHECK_EQ_INT(rc, 0);
    expo_free(&e);
    return text;
}

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

static void test_values_move(void)
{
    struct metrics *m = metrics_new("s1");
    char *t;

    metrics_event_produced(m, "orders");
    metrics_event_produced(m, "orders");
    metrics_event_produced(m, "pay\"ments"); /* escaping, even if Kafka forbids it */
    metrics_event_delivered(m, "orders", 0.0005);
    metrics_event_delivered(m, "orders", 0.2);
    metrics_event_delivered(m, "pay\"ments", -1); /* unknown latency */
    metrics_event_delivered(m, "orders", 120);     /* beyond the last bucket */
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
        metrics_event_delivered(a->m, topic, (double) (i % 100) / 1000.0);
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

/* ---------------------------------------------------------------------
 * HTTP
 * --------------------------------------------------------------------- */

/* Sends one request to 127.0.0.1:port; returns the status code and the
 * body in a malloc'ed string (*body), or -1. */
static int http(int port, const char *method, const char *path, char **body)
{
    *body = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t) port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
    if (write(fd, req, (size_t) n) != n) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t) r;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[len] = '\0';
    int status = -1;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    char *sep = strstr(buf, "\r\n\r\n");
    *body = strdup(sep ? sep + 4 : "");
    if (strstr(buf, "text/plain") == NULL)
        status = -2;
    free(buf);
    return status;
}

static void test_http(void)
{
    struct metrics *m = metrics_new("s");
    char err[256];
    char *body;

    CHECK(metrics_http_start(m, "nonsense", 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "HOST:PORT") != NULL);
    CHECK(metrics_http_start(m, "127.0.0.1:99999", 0, err, sizeof err) == NULL);

    struct metrics_http *h = metrics_http_start(m, "127.0.0.1:0", 1000, err, sizeof err);
    CHECK(h != NULL);
    if (h == NULL) {
        fprintf(stderr, "metrics_http_start: %s\n", err);
        metrics_free(m);
        return;
    }
    int port = metrics_http_port(h);
    CHECK(port > 0);

    /* The same port again: refused with a message. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    CHECK(metrics_http_start(m, addr, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "cannot listen") != NULL);

    metrics_event_delivered(m, "orders", 0.01);
    CHECK_EQ_INT(http(port, "GET", "/metrics", &body), 200);
    struct expo e;
    CHECK_EQ_INT(expo_validate(&e, body ? body : ""), 0);
    expo_free(&e);
    CHECK(value_of(body, "outbox_relay_events_delivered_total{topic=\"orders\"}") == 1);
    free(body);
    metrics_event_delivered(m, "orders", 0.01);
    CHECK_EQ_INT(http(port, "GET", "/metrics", &body), 200);
    CHECK(value_of(body, "outbox_relay_events_delivered_total{topic=\"orders\"}") == 2);
    free(body);

    CHECK_EQ_INT(http(port, "GET", "/healthz", &body), 200);
    free(body);
    CHECK_EQ_INT(http(port, "GET", "/readyz", &body), 503);
    CHECK(strstr(body, "not ready: starting") != NULL);
    free(body);
    metrics_set_state(m, true, true, true);
    metrics_set_slot(m, 10, "reserved", -1);
    CHECK_EQ_INT(http(port, "GET", "/readyz", &body), 200);
    free(body);
    metrics_set_slot(m, 5000, "reserved", -1); /* above max_lag_bytes = 1000 */
    CHECK_EQ_INT(http(port, "GET", "/readyz", &body), 503);
    CHECK(strstr(body, "5000") != NULL);
    free(body);
    CHECK_EQ_INT(http(port, "GET", "/nope", &body), 404);
    free(body);
    CHECK_EQ_INT(http(port, "POST", "/metrics", &body), 405);
    free(body);

    metrics_http_stop(h);
    CHECK_EQ_INT(http(port, "GET", "/healthz", &body), -1);
    free(body);
    metrics_http_stop(NULL);
    metrics_free(m);
}

int main(void)
{
    test_validator_rejects();
    test_empty_registry();
    test_values_move();
    test_topic_cap();
    test_ready();
    test_concurrent();
    test_http();
    CHECK_DONE();
}
