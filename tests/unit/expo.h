/*
 * expo.h — a validator of the Prometheus text exposition format (0.0.4) for
 * the metrics tests (test_metrics.c, test_metrics_http.c): HELP/TYPE before
 * the samples, one TYPE per family, families contiguous, legal names and
 * label escapes, parseable values, no duplicate series, counters ending in
 * _total, histogram buckets cumulative with +Inf == _count. Include after
 * check.h.
 */
#ifndef OUTBOX_RELAY_TEST_EXPO_H
#define OUTBOX_RELAY_TEST_EXPO_H

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/core/metrics.h"

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

static inline bool name_char(int c, bool first)
{
    return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

static inline int find_family(struct expo *e, const char *name)
{
    for (int i = 0; i < e->nfam; i++)
        if (strcmp(e->fam[i].name, name) == 0)
            return i;
    return -1;
}

static inline int add_family(struct expo *e, const char *name)
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
static inline int family_of(struct expo *e, const char *name, const char **suffix)
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

static inline bool parse_value(const char *s, double *out)
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

static inline int fail(struct expo *e, int lineno, const char *what, const char *line)
{
    snprintf(e->err, sizeof e->err, "line %d: %s: %.120s", lineno, what, line);
    return -1;
}

/* Ends the histogram checks of family e->cur, if any. */
static inline int close_family(struct expo *e, int lineno)
{
    if (e->cur >= 0) {
        e->fam[e->cur].closed = true;
        if (strcmp(e->fam[e->cur].type, "histogram") == 0 && !e->have_inf)
            return fail(e, lineno, "histogram without a +Inf bucket", e->fam[e->cur].name);
    }
    e->cur = -1;
    return 0;
}

static inline int sample_line(struct expo *e, int lineno, char *line)
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

static inline int comment_line(struct expo *e, int lineno, char *line)
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

static inline void expo_free(struct expo *e)
{
    for (int i = 0; i < e->nseries; i++)
        free(e->series[i]);
    e->nseries = 0;
}

/* Validates text; returns 0 or -1 with the reason in e->err. */
static inline int expo_validate(struct expo *e, const char *text)
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
static inline double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return NAN;
}

/* Renders, validates, and returns the text (caller frees). */
static inline char *render_valid(struct metrics *m)
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

#endif
