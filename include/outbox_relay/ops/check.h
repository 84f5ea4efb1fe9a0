/*
 * check.h — `outbox-relay check`: a preflight of everything the relayer
 * needs from PostgreSQL and Kafka, for a person before the first deployment
 * and a CI pipeline before each one.
 *
 * Each check is a row of a table (check.c) that adds PASS, WARN or FAIL
 * items to a report, each with what was seen and, when it is not PASS, the
 * fix to apply. The checks only read: the one thing they create is a
 * temporary logical slot to prove the output plugin loads (wal2json), which
 * the server drops when the session ends, however it ends. The report is
 * printed one line per check (`--format text`, the default) or as a JSON
 * array of {check, status, detail, fix}; the exit code is 1 when anything
 * FAILed, 0 otherwise.
 *
 * What is checked, and why, is docs/operations.md, "outbox-relay check".
 * This header is the command; its pure parts have their own: the report
 * and its formats (check_report.h), the verdicts on what the checks read
 * (check_verdict.h), both unit-tested without I/O. check_run does the I/O
 * through the checks of check_pg.c, check_table.c and check_kafka.c.
 */
#ifndef OUTBOX_RELAY_PREFLIGHT_CHECK_H
#define OUTBOX_RELAY_PREFLIGHT_CHECK_H

#include <stdio.h>

#include "outbox_relay/config/config.h"

/* Runs every check with cfg (--dsn required; --brokers optional: without
 * it the Kafka checks are reported as skipped, WARN) and prints the report
 * to out in format (--format). Returns the exit code: 1 when a check FAILed, else 0. */
int check_run(const struct relay_config *cfg, enum report_format format, FILE *out);

#endif
