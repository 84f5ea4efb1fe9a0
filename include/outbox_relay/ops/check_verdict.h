/*
 * check_verdict.h — the verdicts of `outbox-relay check` (check.h): what a
 * setting, a column type, an existing slot, a record limit or a topic's
 * replication means for the relayer, as PASS, WARN or FAIL. Pure: the
 * checks (check_pg.c, check_table.c, check_kafka.c) read the values and
 * ask these; unit-tested in tests/unit/test_check.c. Why each threshold is
 * what it is: docs/operations.md, "outbox-relay check".
 */
#ifndef OUTBOX_RELAY_CHECK_VERDICT_H
#define OUTBOX_RELAY_CHECK_VERDICT_H

#include <stdbool.h>
#include <stddef.h>

#include "outbox_relay/config/config.h"
#include "outbox_relay/ops/check_report.h"

/* max_slot_wal_keep_size in MB (-1: unlimited). */
enum check_status check_classify_keep_size(long long mb);

/* wal_sender_timeout in ms (0: off) against --status-interval in s: FAIL
 * when the status interval is not below the timeout (the server ends a
 * connection that says nothing for that long, which is what a relayer
 * waiting for Kafka does between status updates), WARN above half of it
 * (the server asks for a reply at half, so nothing is left for a slow
 * path) or when the timeout is off, PASS otherwise. */
enum check_status check_classify_sender_timeout(long long timeout_ms, double status_interval);

/* Free slots or WAL senders: max of them, used ones, and whether the
 * relayer needs a new one (a slot it must still create). */
enum check_status check_classify_free(long max, long used, bool need_new);

/* The columns the relayer reads. */
enum check_column { CHECK_COL_ID = 0, CHECK_COL_AGGREGATE_ID, CHECK_COL_TYPE,
                    CHECK_COL_PAYLOAD, CHECK_COL_CREATED_AT, CHECK_NCOLUMNS };

/* The column's name in the outbox table (OUTBOX_DEFAULT_COLUMNS). */
const char *check_column_name(enum check_column c);

/* The column's name under the relayer's mapping m (--layout, --column-*):
 * what the relayer reads as column c; NULL when the mapping has none (no
 * key, no timestamp column). Pure. */
const char *check_mapped_column(const struct outbox_columns_map *m, enum check_column c);

/* The SQL expression of the size the relayer sends for a payload column
 * qcolumn (a quoted identifier) of type `type` (format_type without typmod):
 * the raw bytes of a bytea (octet_length(col), not its "\x..." text, twice
 * as long), the text of anything else (jsonb as PostgreSQL prints it, json
 * and text as written). Into buf; returns the length, -1 when cap is too
 * small. Pure. */
int check_payload_size_sql(const char *qcolumn, const char *type, char *buf, size_t cap);

/* The type sql/001_outbox.sql gives the column (for an ADD COLUMN fix). */
const char *check_column_type(enum check_column c);

/* Whether a column of type `type` (as PostgreSQL's format_type prints it,
 * e.g. "bigint", "timestamp with time zone") works as column c with the
 * output plugin: PASS, WARN (works with a caveat, said in why), FAIL (an
 * event of such a row cannot be relayed). why gets one sentence. */
enum check_status check_classify_column(enum check_column c, const char *type,
                                        enum relay_plugin plugin, char *why, size_t whylen);

/* An existing slot as pg_replication_slots shows it. */
struct check_slot_row {
    const char *slot_type;  /* "logical" / "physical" */
    const char *plugin;     /* NULL for a physical slot */
    bool same_database;
    const char *database;
    bool active;
    const char *active_pid; /* NULL when inactive */
    const char *wal_status; /* reserved, extended, unreserved, lost (NULL: unknown) */
    long long lag_bytes;    /* -1: unknown */
    const char *invalidation_reason; /* PostgreSQL 17+: why the server invalidated
                                        it (idle_timeout, wal_removed, …); NULL: valid */
};

/* The verdict on an existing slot for the relayer (plugin: "wal2json" or
 * "pgoutput", max_lag_bytes: --max-lag-bytes), with detail and fix. */
enum check_status check_classify_slot(const struct check_slot_row *row, const char *slot,
                                      const char *plugin, long max_lag_bytes, char *detail,
                                      size_t dlen, char *fix, size_t flen);

/* Kafka's limit on a record against the largest payload: bytes a record
 * needs beyond its value (key, headers, batch framing), a generous bound. */
#define CHECK_RECORD_OVERHEAD 1024

/* The topics the outbox's events go to: needed of them known (from the
 * types in the table, a fixed --topic, the dead-letter topic), missing of
 * those not in the cluster; auto_create is the brokers'
 * auto.create.topics.enable (1, 0, -1 unknown). Missing topics PASS only
 * when the brokers create them, FAIL when they do not, WARN when unknown;
 * none known (an empty outbox) is a WARN unless they create them. */
enum check_status check_classify_topics(size_t needed, size_t missing, int auto_create);

/* The smallest record limit of those known (-1: unknown): the producer's
 * message.max.bytes, the broker's and the topics' max.message.bytes;
 * *which names it. */
long long check_record_limit(long long client_max, long long broker_max, long long topic_max,
                             const char **which);

/* FAIL when a record with max_payload bytes of value (and
 * CHECK_RECORD_OVERHEAD) exceeds limit. */
enum check_status check_record_fits(long long max_payload, long long limit);

/* Whether the relayer's acks=all keeps an acknowledged event through the
 * loss of one broker, for a topic whose partitions have rf replicas (the
 * fewest of its partitions) and whose min.insync.replicas is min_isr.
 * FAIL when min_isr > rf (every write is refused: NOT_ENOUGH_REPLICAS);
 * WARN when rf < 3 (one broker down leaves one copy, or stops writes) or
 * min_isr < 2 (an acknowledged record may live on one broker only); PASS
 * otherwise. */
enum check_status check_classify_replication(int rf, int min_isr);

/* --delivery exactly-once: the producer's transaction.timeout.ms against
 * the brokers' transaction.max.timeout.ms (-1: unknown → WARN). Above it
 * the broker refuses init_transactions (FAIL); within a tenth of it, WARN
 * (a later lowering of the broker's setting stops the relayer). */
enum check_status check_classify_txn_timeout(long long ours_ms, long long broker_max_ms);
/* The progress topic's cleanup.policy: "compact" (or "compact,delete")
 * PASS, anything else FAIL; NULL (the topic does not exist) PASS, as the
 * relayer creates it compacted. */
enum check_status check_classify_progress_policy(const char *policy);

#endif
