/*
 * check_report.h — the report of `outbox-relay check` (check.h): PASS, WARN
 * and FAIL items, each with what was seen and the fix, the secrets scrubbed
 * out of them, and the report's two formats (`--format text`: one line per
 * check and a summary; `--format json`: an array of {check, status, detail,
 * fix}). Pure: no I/O but the FILE it prints to; unit-tested in
 * tests/unit/test_check.c.
 */
#ifndef OUTBOX_RELAY_CHECK_REPORT_H
#define OUTBOX_RELAY_CHECK_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum check_status { CHECK_PASS = 0, CHECK_WARN, CHECK_FAIL };

/* One line of the report. Every string is owned by the report. fix is
 * NULL when there is nothing to do. */
struct check_item {
    char *name;
    enum check_status status;
    char *detail;
    char *fix;
};

#define CHECK_MAX_SECRETS 8

/* Zero-initialised is empty. Secrets (the DSN's password, Kafka passwords)
 * registered with check_report_secret are replaced by "***" in every item
 * added after. Free with check_report_free. */
struct check_report {
    struct check_item *items;
    size_t n, cap;
    const char *secrets[CHECK_MAX_SECRETS]; /* borrowed */
    size_t nsecrets;
};

/* Adds an item (strings copied and scrubbed; fix NULL or "": none).
 * Returns 0, or -1 when out of memory (the item is dropped and the report
 * gets a FAIL saying so, when it can). */
int check_report_add(struct check_report *r, const char *name, enum check_status status,
                     const char *detail, const char *fix);

/* printf-style detail; fix as above. */
int check_report_addf(struct check_report *r, const char *name, enum check_status status,
                      const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Registers a secret (borrowed: it must outlive the report; NULL or "" is
 * ignored). */
void check_report_secret(struct check_report *r, const char *secret);

void check_report_free(struct check_report *r);

/* The item named name, or NULL. */
const struct check_item *check_report_find(const struct check_report *r, const char *name);

/* 1 when any item FAILed, else 0: the command's exit code. */
int check_report_exit_code(const struct check_report *r);

/* "PASS", "WARN", "FAIL". */
const char *check_status_name(enum check_status s);

/* One line per item: "STATUS name  detail" and, when there is one,
 * "  fix: ..." on the same line; then a summary line. */
void check_format_text(const struct check_report *r, FILE *out);

/* A JSON array of {"check","status","detail","fix"} (fix null when none),
 * one object per line. */
void check_format_json(const struct check_report *r, FILE *out);

/* Writes s JSON-escaped (without quotes) to out. */
void check_json_escape(FILE *out, const char *s);

/* Copies src to dst (capacity cap) with every occurrence of each secret
 * replaced by "***". Returns dst. */
char *check_scrub(const char *src, const char *const *secrets, size_t nsecrets, char *dst,
                  size_t cap);

#endif
