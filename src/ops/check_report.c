/*
 * check_report.c — the report of `outbox-relay check` and its two formats
 * (see check_report.h). Pure.
 */
#include "outbox_relay/ops/check_report.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_TEXT_MAX 4096

const char *check_status_name(enum check_status s)
{
    return s == CHECK_FAIL ? "FAIL" : s == CHECK_WARN ? "WARN" : "PASS";
}

char *check_scrub(const char *src, const char *const *secrets, size_t nsecrets, char *dst,
                  size_t cap)
{
    size_t o = 0;
    if (cap == 0)
        return dst;
    for (const char *p = src; *p && o + 1 < cap;) {
        size_t hit = 0;
        for (size_t i = 0; i < nsecrets && hit == 0; i++) {
            size_t n = secrets[i] ? strlen(secrets[i]) : 0;
            if (n > 0 && strncmp(p, secrets[i], n) == 0)
                hit = n;
        }
        if (hit > 0) {
            for (const char *s = "***"; *s && o + 1 < cap; s++)
                dst[o++] = *s;
            p += hit;
        } else {
            dst[o++] = *p++;
        }
    }
    dst[o] = '\0';
    return dst;
}

void check_report_secret(struct check_report *r, const char *secret)
{
    if (secret != NULL && *secret != '\0' && r->nsecrets < CHECK_MAX_SECRETS)
        r->secrets[r->nsecrets++] = secret;
}

static char *scrubbed_copy(const struct check_report *r, const char *s)
{
    if (s == NULL || *s == '\0')
        return NULL;
    char buf[CHECK_TEXT_MAX];
    check_scrub(s, r->secrets, r->nsecrets, buf, sizeof buf);
    return strdup(buf);
}

int check_report_add(struct check_report *r, const char *name, enum check_status status,
                     const char *detail, const char *fix)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        struct check_item *items = realloc(r->items, cap * sizeof *items);
        if (items == NULL)
            return -1;
        r->items = items;
        r->cap = cap;
    }
    struct check_item *it = &r->items[r->n];
    it->name = strdup(name);
    it->status = status;
    it->detail = scrubbed_copy(r, detail ? detail : "");
    if (it->detail == NULL)
        it->detail = strdup("");
    it->fix = scrubbed_copy(r, fix);
    if (it->name == NULL || it->detail == NULL || (fix && *fix && it->fix == NULL)) {
        free(it->name);
        free(it->detail);
        free(it->fix);
        return -1;
    }
    r->n++;
    return 0;
}

int check_report_addf(struct check_report *r, const char *name, enum check_status status,
                      const char *fix, const char *fmt, ...)
{
    char detail[CHECK_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return check_report_add(r, name, status, detail, fix);
}

void check_report_free(struct check_report *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->items[i].name);
        free(r->items[i].detail);
        free(r->items[i].fix);
    }
    free(r->items);
    r->items = NULL;
    r->n = r->cap = 0;
}

const struct check_item *check_report_find(const struct check_report *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].name, name) == 0)
            return &r->items[i];
    return NULL;
}

int check_report_exit_code(const struct check_report *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->items[i].status == CHECK_FAIL)
            return 1;
    return 0;
}

/* s with every control character (a server message's tab or newline) as
 * a space: one check, one line. */
static void put_line(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *) s; *p; p++)
        fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, out);
}

void check_format_text(const struct check_report *r, FILE *out)
{
    size_t count[3] = {0, 0, 0};
    for (size_t i = 0; i < r->n; i++) {
        const struct check_item *it = &r->items[i];
        count[it->status]++;
        fprintf(out, "%s %-22s ", check_status_name(it->status), it->name);
        put_line(out, it->detail);
        if (it->fix != NULL) {
            fputs("  fix: ", out);
            put_line(out, it->fix);
        }
        fputc('\n', out);
    }
    fprintf(out, "check: %zu passed, %zu warning%s, %zu failed\n", count[CHECK_PASS],
            count[CHECK_WARN], count[CHECK_WARN] == 1 ? "" : "s", count[CHECK_FAIL]);
}

void check_json_escape(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
}

void check_format_json(const struct check_report *r, FILE *out)
{
    fputc('[', out);
    for (size_t i = 0; i < r->n; i++) {
        const struct check_item *it = &r->items[i];
        fputs(i ? ",\n {\"check\": \"" : "\n {\"check\": \"", out);
        check_json_escape(out, it->name);
        fprintf(out, "\", \"status\": \"%s\", \"detail\": \"", check_status_name(it->status));
        check_json_escape(out, it->detail);
        if (it->fix != NULL) {
            fputs("\", \"fix\": \"", out);
            check_json_escape(out, it->fix);
            fputs("\"}", out);
        } else {
            fputs("\", \"fix\": null}", out);
        }
    }
    fputs(r->n ? "\n]\n" : "]\n", out);
}
