/*
 * test_layout.c — the outbox table's columns against the column map
 * (layout_apply, layout.h): the types it reads, the columns it refuses and
 * how it names them, the trace context columns it picks up.
 */
#include "outbox_relay/pg/layout.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

static const struct layout_column OURS[] = {
    {"id", "bigint"}, {"aggregate_id", "uuid"}, {"type", "text"},
    {"payload", "jsonb"}, {"created_at", "timestamp with time zone"},
    {"dispatched_at", "timestamp with time zone"}};
static const struct layout_column DEBEZIUM[] = {
    {"id", "uuid"}, {"aggregatetype", "character varying"},
    {"aggregateid", "character varying"}, {"type", "character varying"},
    {"payload", "bytea"}, {"traceparent", "text"}, {"tracestate", "text"}};

#define N(a) (sizeof (a) / sizeof (a)[0])

static void test_apply(void)
{
    char err[512];
    struct outbox_columns_map m = OUTBOX_DEFAULT_COLUMNS;
    CHECK_EQ_INT(layout_apply(&m, OURS, N(OURS), "public.events_outbox", err, sizeof err), 0);
    CHECK_EQ_INT(m.id_kind, OUTBOX_ID_INTEGER);
    CHECK(!m.payload_bytea);
    CHECK_EQ_INT(m.nextra, 0);

    /* our layout on Debezium's table: the first missing column, its option */
    m = OUTBOX_DEFAULT_COLUMNS;
    CHECK_EQ_INT(layout_apply(&m, DEBEZIUM, N(DEBEZIUM), "public.outbox", err, sizeof err), -1);
    CHECK(strstr(err, "public.outbox has no column \"aggregate_id\" (--column-key)") != NULL);
    CHECK(strstr(err, "--layout") != NULL);

    /* Debezium's names: a uuid id, a bytea payload, the trace headers */
    struct outbox_columns_map d = {.id = "id", .aggregate_id = "aggregateid", .type = "type",
                                .payload = "payload"};
    CHECK_EQ_INT(outbox_columns_add_extra(&d, "aggregatetype", NULL), 0);
    CHECK_EQ_INT(layout_apply(&d, DEBEZIUM, N(DEBEZIUM), "public.outbox", err, sizeof err), 0);
    CHECK_EQ_INT(d.id_kind, OUTBOX_ID_TEXT);
    CHECK(d.payload_bytea);
    CHECK_EQ_INT(d.nextra, 3);
    CHECK(strcmp(d.extra[1].column, "traceparent") == 0 &&
          strcmp(d.extra[1].header, "traceparent") == 0);
    CHECK(strcmp(d.extra[2].header, "tracestate") == 0);
    /* again (a reconnect): nothing added twice */
    CHECK_EQ_INT(layout_apply(&d, DEBEZIUM, N(DEBEZIUM), "public.outbox", err, sizeof err), 0);
    CHECK_EQ_INT(d.nextra, 3);

    /* an extra column the table lacks: named, with where it came from */
    CHECK_EQ_INT(outbox_columns_add_extra(&d, "tenant", NULL), 3);
    CHECK_EQ_INT(layout_apply(&d, DEBEZIUM, N(DEBEZIUM), "public.outbox", err, sizeof err), -1);
    CHECK(strstr(err, "no column \"tenant\" (named by a {column} of --topic)") != NULL);
    d.extra[3].header = "x-tenant";
    CHECK_EQ_INT(layout_apply(&d, DEBEZIUM, N(DEBEZIUM), "public.outbox", err, sizeof err), -1);
    CHECK(strstr(err, "named by --header-column") != NULL);

    /* types it cannot relay */
    static const struct layout_column bad_id[] = {
        {"id", "jsonb"}, {"aggregate_id", "text"}, {"type", "text"}, {"payload", "jsonb"},
        {"created_at", "timestamp with time zone"}};
    m = OUTBOX_DEFAULT_COLUMNS;
    CHECK_EQ_INT(layout_apply(&m, bad_id, N(bad_id), "s.t", err, sizeof err), -1);
    CHECK(strstr(err, "id column \"id\" (--column-id) is of type jsonb") != NULL);
    static const struct layout_column bad_payload[] = {
        {"id", "integer"}, {"aggregate_id", "text"}, {"type", "text"}, {"payload", "xml"},
        {"created_at", "timestamp with time zone"}};
    CHECK_EQ_INT(layout_apply(&m, bad_payload, N(bad_payload), "s.t", err, sizeof err), -1);
    CHECK(strstr(err, "payload column \"payload\" (--column-payload) is of type xml") != NULL);
    static const struct layout_column bad_ts[] = {
        {"id", "integer"}, {"aggregate_id", "text"}, {"type", "text"}, {"payload", "text"},
        {"created_at", "timestamp without time zone"}};
    CHECK_EQ_INT(layout_apply(&m, bad_ts, N(bad_ts), "s.t", err, sizeof err), -1);
    CHECK(strstr(err, "(--column-created-at) is of type timestamp without time zone") != NULL);
    /* without a created-at column mapped, that one does not matter */
    m.created_at = NULL;
    CHECK_EQ_INT(layout_apply(&m, bad_ts, N(bad_ts), "s.t", err, sizeof err), 0);
}

int main(void)
{
    test_apply();
    CHECK_DONE();
}
