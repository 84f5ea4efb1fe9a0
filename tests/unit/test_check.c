/*
 * test_check.c — the pure parts of `outbox-relay check`: the report and its
 * text and JSON formats (escaping, fix null, exit code), scrubbing secrets,
 * the verdicts on settings (max_slot_wal_keep_size, wal_sender_timeout
 * against --status-interval, free slots and senders), on column types per
 * plugin and on an existing slot; publication_judge, which check and the
 * relayer share; and the `check` command word with --format.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/ops/check_report.h"
#include "outbox_relay/ops/check_verdict.h"
#include "outbox_relay/config/config.h"
#include "outbox_relay/pg/publication.h"

/* What fn printed for report r. Caller frees. */
static char *printed(void (*fn)(const struct check_report *, FILE *),
                     const struct check_report *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(r, f);
    fclose(f);
    return buf;
}

static void test_report_and_formats(void)
{
    struct check_report r = {0};
    CHECK_EQ_INT(check_report_exit_code(&r), 0);
    CHECK_EQ_INT(check_report_add(&r, "wal_level", CHECK_PASS, "wal_level = logical", NULL), 0);
    CHECK_EQ_INT(check_report_add(&r, "max_slot_wal_keep_size", CHECK_WARN, "unlimited", ""), 0);
    CHECK_EQ_INT(check_report_exit_code(&r), 0); /* a WARN is not a failure */
    CHECK_EQ_INT(check_report_addf(&r, "columns", CHECK_FAIL, "ALTER TABLE \"t\" ADD COLUMN x;",
                                   "\"%s\" is missing\n(tab\there)", "type"), 0);
    CHECK_EQ_INT(check_report_exit_code(&r), 1);
    CHECK(check_report_find(&r, "columns") != NULL);
    CHECK(check_report_find(&r, "nope") == NULL);
    CHECK(check_report_find(&r, "max_slot_wal_keep_size")->fix == NULL); /* "" is no fix */

    char *text = printed(check_format_text, &r);
    CHECK(strstr(text, "PASS wal_level ") == text);
    CHECK(strstr(text, "\nWARN max_slot_wal_keep_size unlimited\n") != NULL);
    CHECK(strstr(text, "\nFAIL columns") != NULL);
    /* one check, one line: control characters of a server message are spaces */
    CHECK(strstr(text, "\"type\" is missing (tab here)  fix:") != NULL);
    CHECK(strstr(text, "  fix: ALTER TABLE \"t\" ADD COLUMN x;\n") != NULL);
    CHECK(strstr(text, "check: 1 passed, 1 warning, 1 failed\n") != NULL);
    free(text);

    char *json = printed(check_format_json, &r);
    CHECK(strstr(json, "{\"check\": \"wal_level\", \"status\": \"PASS\", \"detail\": "
                       "\"wal_level = logical\", \"fix\": null}") != NULL);
    CHECK(strstr(json, "\"detail\": \"\\\"type\\\" is missing\\n(tab\\there)\"") != NULL);
    CHECK(strstr(json, "\"fix\": \"ALTER TABLE \\\"t\\\" ADD COLUMN x;\"") != NULL);
    CHECK(json[0] == '[');
    CHECK(strstr(json, "\n]\n") != NULL);
    free(json);
    check_report_free(&r);

    struct check_report empty = {0};
    json = printed(check_format_json, &empty);
    CHECK(strcmp(json, "[]\n") == 0);
    free(json);
}

static void test_scrub(void)
{
    const char *secrets[] = {"hunter2", "s3cr3t"};
    char out[128];
    check_scrub("password=hunter2 host=db hunter2s3cr3t", secrets, 2, out, sizeof out);
    CHECK(strcmp(out, "password=*** host=db ******") == 0);
    check_scrub("nothing here", secrets, 2, out, sizeof out);
    CHECK(strcmp(out, "nothing here") == 0);
    check_scrub("hunter2", secrets, 2, out, 3); /* truncates, stays terminated */
    CHECK(strcmp(out, "**") == 0);

    struct check_report r = {0};
    check_report_secret(&r, "hunter2");
    check_report_secret(&r, "");
    check_report_secret(&r, NULL);
    CHECK_EQ_INT(r.nsecrets, 1);
    check_report_add(&r, "server", CHECK_FAIL, "auth failed for password=hunter2",
                     "fix hunter2");
    CHECK(strcmp(r.items[0].detail, "auth failed for password=***") == 0);
    CHECK(strcmp(r.items[0].fix, "fix ***") == 0);
    check_report_free(&r);
}

static void test_settings(void)
{
    CHECK_EQ_INT(check_classify_keep_size(-1), CHECK_WARN);
    CHECK_EQ_INT(check_classify_keep_size(0), CHECK_PASS);
    CHECK_EQ_INT(check_classify_keep_size(51200), CHECK_PASS);

    /* PostgreSQL's default 60 s against our default 10 s */
    CHECK_EQ_INT(check_classify_sender_timeout(60000, 10), CHECK_PASS);
    CHECK_EQ_INT(check_classify_sender_timeout(20000, 10), CHECK_PASS); /* exactly half */
    CHECK_EQ_INT(check_classify_sender_timeout(15000, 10), CHECK_WARN);
    CHECK_EQ_INT(check_classify_sender_timeout(10000, 10), CHECK_FAIL); /* equal: not below */
    CHECK_EQ_INT(check_classify_sender_timeout(5000, 10), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_sender_timeout(0, 10), CHECK_WARN);     /* off */

    CHECK_EQ_INT(check_classify_free(10, 0, true), CHECK_PASS);
    CHECK_EQ_INT(check_classify_free(1, 1, true), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_free(1, 1, false), CHECK_PASS); /* ours is the one in use */
    CHECK_EQ_INT(check_classify_free(2, 3, true), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_free(0, 0, false), CHECK_FAIL);
}

static void test_kafka_verdicts(void)
{
    /* missing topics: the brokers' auto.create.topics.enable decides */
    CHECK_EQ_INT(check_classify_topics(2, 1, 1), CHECK_PASS);
    CHECK_EQ_INT(check_classify_topics(2, 1, 0), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_topics(2, 1, -1), CHECK_WARN);
    /* all present: whatever the setting */
    CHECK_EQ_INT(check_classify_topics(2, 0, 0), CHECK_PASS);
    CHECK_EQ_INT(check_classify_topics(2, 0, -1), CHECK_PASS);
    /* nothing to look for (an empty outbox) */
    CHECK_EQ_INT(check_classify_topics(0, 0, 1), CHECK_PASS);
    CHECK_EQ_INT(check_classify_topics(0, 0, 0), CHECK_WARN);
    CHECK_EQ_INT(check_classify_topics(0, 0, -1), CHECK_WARN);

    const char *which;
    CHECK_EQ_INT(check_record_limit(1000000, -1, -1, &which), 1000000);
    CHECK(strcmp(which, "the producer's message.max.bytes") == 0);
    CHECK_EQ_INT(check_record_limit(1000000, 500000, -1, &which), 500000);
    CHECK(strcmp(which, "the broker's message.max.bytes") == 0);
    CHECK_EQ_INT(check_record_limit(1000000, 1048588, 200000, &which), 200000);
    CHECK(strcmp(which, "max.message.bytes of a topic") == 0);
    CHECK_EQ_INT(check_record_limit(1000000, 2000000, 3000000, &which), 1000000);
    CHECK(strcmp(which, "the producer's message.max.bytes") == 0);

    CHECK_EQ_INT(check_record_fits(1000, 1000 + CHECK_RECORD_OVERHEAD), CHECK_PASS);
    CHECK_EQ_INT(check_record_fits(1001, 1000 + CHECK_RECORD_OVERHEAD), CHECK_FAIL);
    CHECK_EQ_INT(check_record_fits(0, 1000000), CHECK_PASS);

    /* acks=all through the loss of one broker: RF 3 and min ISR 2 */
    CHECK_EQ_INT(check_classify_replication(3, 2), CHECK_PASS);
    CHECK_EQ_INT(check_classify_replication(5, 3), CHECK_PASS);
    CHECK_EQ_INT(check_classify_replication(3, 1), CHECK_WARN); /* acked on one broker */
    CHECK_EQ_INT(check_classify_replication(3, 3), CHECK_PASS); /* durable; one down stops writes */
    CHECK_EQ_INT(check_classify_replication(2, 2), CHECK_WARN);
    CHECK_EQ_INT(check_classify_replication(2, 1), CHECK_WARN);
    CHECK_EQ_INT(check_classify_replication(1, 1), CHECK_WARN); /* a single broker */
    CHECK_EQ_INT(check_classify_replication(1, 2), CHECK_FAIL); /* never enough replicas */
    CHECK_EQ_INT(check_classify_replication(3, 4), CHECK_FAIL);
}

/* What check measures is what the relayer sends: a bytea's bytes (not its
 * hex text), the text of the rest; on the columns the mapping names. */
static void test_payload_measure(void)
{
    char buf[128];
    CHECK(check_payload_size_sql("\"body\"", "bytea", buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "octet_length(\"body\")") == 0);
    const char *texty[] = {"jsonb", "json", "text", "character varying", ""};
    for (size_t i = 0; i < 5; i++) {
        CHECK(check_payload_size_sql("payload", texty[i], buf, sizeof buf) > 0);
        CHECK(strcmp(buf, "octet_length(payload::text)") == 0);
    }
    CHECK(check_payload_size_sql("payload", "bytea", buf, 8) == -1);

    struct outbox_columns_map m = OUTBOX_DEFAULT_COLUMNS;
    for (int c = 0; c < CHECK_NCOLUMNS; c++)
        CHECK(strcmp(check_mapped_column(&m, (enum check_column) c),
                     check_column_name((enum check_column) c)) == 0);
    m.type = "kind";
    m.payload = "body";
    m.aggregate_id = NULL;
    m.created_at = "occurred_at";
    CHECK(strcmp(check_mapped_column(&m, CHECK_COL_TYPE), "kind") == 0);
    CHECK(strcmp(check_mapped_column(&m, CHECK_COL_PAYLOAD), "body") == 0);
    CHECK(check_mapped_column(&m, CHECK_COL_AGGREGATE_ID) == NULL);
    CHECK(strcmp(check_mapped_column(&m, CHECK_COL_CREATED_AT), "occurred_at") == 0);
}

static enum check_status col(enum check_column c, const char *type, enum relay_plugin p)
{
    char why[300];
    enum check_status st = check_classify_column(c, type, p, why, sizeof why);
    CHECK(strstr(why, check_column_name(c)) != NULL); /* always names the column */
    return st;
}

static void test_columns(void)
{
    CHECK(strcmp(check_column_name(CHECK_COL_ID), "id") == 0);
    CHECK(strcmp(check_column_name(CHECK_COL_CREATED_AT), "created_at") == 0);
    CHECK(strcmp(check_column_type(CHECK_COL_PAYLOAD), "jsonb") == 0);

    const enum relay_plugin W = PLUGIN_WAL2JSON, P = PLUGIN_PGOUTPUT;
    CHECK_EQ_INT(col(CHECK_COL_ID, "bigint", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_ID, "integer", P), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_ID, "text", W), CHECK_WARN);
    CHECK_EQ_INT(col(CHECK_COL_ID, "numeric(20,0)", W), CHECK_WARN);
    /* uuid and text ids are relayed as is since the layouts (layout.h) */
    CHECK_EQ_INT(col(CHECK_COL_ID, "uuid", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_ID, "point", W), CHECK_FAIL);

    CHECK_EQ_INT(col(CHECK_COL_AGGREGATE_ID, "uuid", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_AGGREGATE_ID, "character varying(64)", W), CHECK_PASS);
    /* wal2json sends a number, which the decoder refuses; pgoutput sends text */
    CHECK_EQ_INT(col(CHECK_COL_AGGREGATE_ID, "bigint", W), CHECK_FAIL);
    CHECK_EQ_INT(col(CHECK_COL_AGGREGATE_ID, "bigint", P), CHECK_PASS);

    CHECK_EQ_INT(col(CHECK_COL_TYPE, "text", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_TYPE, "jsonb", W), CHECK_FAIL);
    CHECK_EQ_INT(col(CHECK_COL_TYPE, "bytea", P), CHECK_FAIL);

    CHECK_EQ_INT(col(CHECK_COL_PAYLOAD, "jsonb", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_PAYLOAD, "json", P), CHECK_PASS);
    /* text as is, bytea as its bytes (layout.h) */
    CHECK_EQ_INT(col(CHECK_COL_PAYLOAD, "text", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_PAYLOAD, "bytea", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_PAYLOAD, "xml", W), CHECK_WARN);

    CHECK_EQ_INT(col(CHECK_COL_CREATED_AT, "timestamp with time zone", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_CREATED_AT, "timestamp(3) with time zone", W), CHECK_PASS);
    CHECK_EQ_INT(col(CHECK_COL_CREATED_AT, "timestamp without time zone", W), CHECK_WARN);
    CHECK_EQ_INT(col(CHECK_COL_CREATED_AT, "date", W), CHECK_FAIL);
    CHECK_EQ_INT(col(CHECK_COL_CREATED_AT, "text", P), CHECK_FAIL);
}

static enum check_status slot(struct check_slot_row row, const char *plugin, long max_lag,
                              char *detail, char *fix)
{
    return check_classify_slot(&row, "outbox_relay", plugin, max_lag, detail, 512, fix, 512);
}

static void test_slot(void)
{
    char d[512], f[512];
    struct check_slot_row ok = {.slot_type = "logical", .plugin = "wal2json",
                                .same_database = true, .database = "app", .active = true,
                                .active_pid = "4242", .wal_status = "reserved",
                                .lag_bytes = 1024};
    CHECK_EQ_INT(slot(ok, "wal2json", 1L << 30, d, f), CHECK_PASS);
    CHECK(strstr(d, "active (PID 4242)") != NULL);
    CHECK(strstr(d, "lag 1024 bytes") != NULL);

    CHECK_EQ_INT(slot(ok, "pgoutput", 1L << 30, d, f), CHECK_FAIL); /* another plugin */
    CHECK(strstr(d, "output plugin wal2json") != NULL);
    CHECK(strstr(f, "--plugin wal2json") != NULL);
    CHECK(strstr(f, "pg_drop_replication_slot('outbox_relay')") != NULL);

    struct check_slot_row r = ok;
    r.slot_type = "physical", r.plugin = NULL;
    CHECK_EQ_INT(slot(r, "wal2json", 0, d, f), CHECK_FAIL);
    r = ok, r.same_database = false, r.database = "other";
    CHECK_EQ_INT(slot(r, "wal2json", 0, d, f), CHECK_FAIL);
    CHECK(strstr(d, "database other") != NULL);
    r = ok, r.wal_status = "lost";
    CHECK_EQ_INT(slot(r, "wal2json", 0, d, f), CHECK_FAIL);
    CHECK(strstr(f, "--recreate-slot") != NULL);
    r = ok, r.invalidation_reason = "idle_timeout"; /* 18: wal_status may stay reserved */
    CHECK_EQ_INT(slot(r, "wal2json", 0, d, f), CHECK_FAIL);
    CHECK(strstr(d, "invalidation_reason idle_timeout") != NULL);
    CHECK(strstr(f, "idle_replication_slot_timeout") != NULL);
    CHECK(strstr(f, "--recreate-slot") != NULL);
    r = ok, r.wal_status = "unreserved";
    CHECK_EQ_INT(slot(r, "wal2json", 0, d, f), CHECK_WARN);
    r = ok, r.lag_bytes = 2048, r.active = false, r.active_pid = NULL;
    CHECK_EQ_INT(slot(r, "wal2json", 1000, d, f), CHECK_WARN);
    CHECK(strstr(d, "inactive") != NULL);
    CHECK(strstr(f, "--max-lag-bytes 1000") != NULL);
    r = ok, r.lag_bytes = -1, r.wal_status = NULL;
    CHECK_EQ_INT(slot(r, "wal2json", 1000, d, f), CHECK_PASS);
    CHECK(strstr(d, "lag unknown") != NULL);
}

/* The relayer's rules, in the order it applies them. */
static void test_publication_judge(void)
{
    const char *gone = "x";
    CHECK_EQ_INT(publication_judge(true, true, true, false, NULL, NULL, NULL, &gone), PUBLICATION_OK);
    CHECK(gone == NULL);
    CHECK_EQ_INT(publication_judge(false, false, false, true, NULL, NULL, NULL, &gone),
                 PUBLICATION_NO_INSERT);
    CHECK_EQ_INT(publication_judge(true, false, true, true, NULL, NULL, NULL, &gone),
                 PUBLICATION_NOT_VIA_ROOT);
    CHECK_EQ_INT(publication_judge(true, false, true, false, NULL, NULL, NULL, &gone),
                 PUBLICATION_OK); /* a plain table does not need via-root */
    CHECK_EQ_INT(publication_judge(true, true, false, false, NULL, NULL, NULL, &gone),
                 PUBLICATION_NOT_COVERED);
    CHECK_EQ_INT(publication_judge(true, true, true, false, NULL, "id,aggregate_id,type,payload",
                                   NULL, &gone), PUBLICATION_COLUMN_LEFT_OUT);
    CHECK(gone != NULL && strcmp(gone, "created_at") == 0);
    CHECK_EQ_INT(publication_judge(true, true, true, false, NULL,
                                   "created_at,payload,type,aggregate_id,id,extra", NULL, &gone),
                 PUBLICATION_OK);
    CHECK_EQ_INT(publication_judge(true, true, true, false, NULL, "", "(type <> 'x')", &gone),
                 PUBLICATION_ROW_FILTER);
    CHECK_EQ_INT(publication_judge(true, true, true, false, NULL, NULL, "", &gone), PUBLICATION_OK);
}

static enum config_result load(struct relay_config *cfg, char *err, int argc, ...)
{
    char *argv[16];
    char *envp[] = {NULL};
    va_list ap;
    va_start(ap, argc);
    argv[0] = "outbox-relay";
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    return config_load(cfg, argc, argv, envp, err, CONFIG_ERRLEN);
}

static void test_command(void)
{
    struct relay_config c;
    char err[CONFIG_ERRLEN];
    /* --brokers is optional for check (the Kafka checks are then skipped) */
    CHECK_EQ_INT(load(&c, err, 4, "check", "--dsn", "dbname=app"), CONFIG_OK);
    CHECK_EQ_INT(c.command, RELAY_CMD_CHECK);
    CHECK_EQ_INT(c.format, REPORT_FORMAT_TEXT);
    config_free(&c);
    CHECK_EQ_INT(load(&c, err, 6, "check", "--dsn", "dbname=app", "--format", "json"),
                 CONFIG_OK);
    CHECK_EQ_INT(c.format, REPORT_FORMAT_JSON);
    config_free(&c);
    CHECK_EQ_INT(load(&c, err, 6, "check", "--dsn", "dbname=app", "--format", "yaml"),
                 CONFIG_ERROR);
    CHECK(strstr(err, "--format") != NULL);
    config_free(&c);
    CHECK_EQ_INT(load(&c, err, 2, "check"), CONFIG_ERROR);
    CHECK(strstr(err, "--dsn is required") != NULL);
    config_free(&c);
    CHECK_EQ_INT(load(&c, err, 4, "chek", "--dsn", "dbname=app"), CONFIG_ERROR);
    CHECK(strstr(err, "status or check") != NULL);
    config_free(&c);
}

/* --delivery exactly-once: the transaction timeout against the brokers'
 * maximum, and the progress topic's cleanup policy. */
static void test_exactly_once_verdicts(void)
{
    CHECK_EQ_INT(check_classify_txn_timeout(60000, 900000), CHECK_PASS);
    CHECK_EQ_INT(check_classify_txn_timeout(900000, 900000), CHECK_WARN);
    CHECK_EQ_INT(check_classify_txn_timeout(850000, 900000), CHECK_WARN);
    CHECK_EQ_INT(check_classify_txn_timeout(60001, 60000), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_txn_timeout(60000, -1), CHECK_WARN);
    CHECK_EQ_INT(check_classify_progress_policy("compact"), CHECK_PASS);
    CHECK_EQ_INT(check_classify_progress_policy("compact,delete"), CHECK_PASS);
    CHECK_EQ_INT(check_classify_progress_policy("delete"), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_progress_policy(""), CHECK_FAIL);
    CHECK_EQ_INT(check_classify_progress_policy(NULL), CHECK_PASS);
}

int main(void)
{
    test_exactly_once_verdicts();
    test_report_and_formats();
    test_scrub();
    test_settings();
    test_kafka_verdicts();
    test_payload_measure();
    test_columns();
    test_slot();
    test_publication_judge();
    test_command();
    CHECK_DONE();
}
