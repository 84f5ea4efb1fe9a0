/*
 * layout.c — the outbox table's columns against the column map (see
 * layout.h).
 */
#include "outbox_relay/pg/layout.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/slot.h"
#include "outbox_relay/pg/stream_rc.h"

static const struct layout_column *find(const struct layout_column *cols, size_t n,
                                        const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cols[i].name, name) == 0)
            return &cols[i];
    return NULL;
}

static bool type_in(const char *type, const char *const *names)
{
    for (; *names; names++)
        if (strcmp(type, *names) == 0)
            return true;
    return false;
}

static const char *const INTEGER_TYPES[] = {"bigint", "integer", "smallint", NULL};
static const char *const TEXT_ID_TYPES[] = {"uuid", "text", "character varying", "character",
                                            NULL};
static const char *const PAYLOAD_TYPES[] = {"jsonb", "json", "text", "character varying",
                                            "bytea", NULL};

int layout_apply(struct outbox_columns_map *map, const struct layout_column *cols, size_t n,
                 const char *table, char *err, size_t errlen)
{
    static const char *const options[] = {"--column-id", "--column-key", "--column-type",
                                          "--column-payload", "--column-created-at"};
    const char *names[] = {map->id, map->aggregate_id, map->type, map->payload,
                           map->created_at};
    const struct layout_column *found[5];

    for (int c = 0; c < 5; c++) {
        found[c] = names[c] != NULL ? find(cols, n, names[c]) : NULL;
        if (names[c] != NULL && found[c] == NULL) {
            snprintf(err, errlen, "the outbox table %s has no column \"%s\" (%s): name the "
                     "column that holds it with %s COLUMN%s, or pick the table's layout with "
                     "--layout", table, names[c], options[c], options[c],
                     c == 1 || c == 4 ? " (or none)" : "");
            return -1;
        }
    }
    for (size_t i = 0; i < map->nextra && i < OUTBOX_MAX_EXTRA; i++) {
        if (find(cols, n, map->extra[i].column) == NULL) {
            snprintf(err, errlen, "the outbox table %s has no column \"%s\" (named by %s): add "
                     "it or fix the name", table, map->extra[i].column,
                     map->extra[i].header != NULL ? "--header-column" : "a {column} of --topic");
            return -1;
        }
    }
    const char *id_type = found[0]->type;
    if (type_in(id_type, INTEGER_TYPES) || strcmp(id_type, "numeric") == 0) {
        map->id_kind = OUTBOX_ID_INTEGER;
    } else if (type_in(id_type, TEXT_ID_TYPES)) {
        map->id_kind = OUTBOX_ID_TEXT;
    } else {
        snprintf(err, errlen, "the outbox table %s: id column \"%s\" (--column-id) is of type "
                 "%s; the relayer takes bigint, integer, uuid or text ids", table, map->id,
                 id_type);
        return -1;
    }
    const char *pay_type = found[3]->type;
    if (!type_in(pay_type, PAYLOAD_TYPES)) {
        snprintf(err, errlen, "the outbox table %s: payload column \"%s\" (--column-payload) is "
                 "of type %s; the relayer publishes jsonb, json, text or bytea payloads", table,
                 map->payload, pay_type);
        return -1;
    }
    map->payload_bytea = strcmp(pay_type, "bytea") == 0;
    map->payload_text = strcmp(pay_type, "text") == 0 || strcmp(pay_type, "character varying") == 0;
    if (strcmp(found[2]->type, "bytea") == 0) {
        snprintf(err, errlen, "the outbox table %s: type column \"%s\" (--column-type) is "
                 "bytea; event types are text", table, map->type);
        return -1;
    }
    if (found[4] != NULL && strcmp(found[4]->type, "timestamp with time zone") != 0) {
        snprintf(err, errlen, "the outbox table %s: created-at column \"%s\" "
                 "(--column-created-at) is of type %s, not timestamp with time zone "
                 "(timestamptz); name another column, or none", table, map->created_at,
                 found[4]->type);
        return -1;
    }
    /* W3C trace context, picked up by OpenTelemetry consumers. */
    static const char *const trace[] = {"traceparent", "tracestate"};
    for (int t = 0; t < 2; t++)
        if (find(cols, n, trace[t]) != NULL && outbox_columns_extra_index(map, trace[t]) < 0)
            (void) outbox_columns_add_extra(map, trace[t], trace[t]); /* full: left out */
    return 0;
}

int layout_check(struct slot *s, struct outbox_columns_map *map)
{
    char *schema = PQescapeLiteral(s->conn, s->table_schema, strlen(s->table_schema));
    char *table = PQescapeLiteral(s->conn, s->table_name, strlen(s->table_name));
    char sql[1024], name[300];
    snprintf(sql, sizeof sql,
             "SELECT a.attname, format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype "
             "ELSE a.atttypid END, NULL) FROM pg_attribute a JOIN pg_class c ON c.oid = "
             "a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON "
             "t.oid = a.atttypid WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 "
             "AND NOT a.attisdropped ORDER BY a.attnum",
             schema ? schema : "''", table ? table : "''");
    PQfreemem(schema);
    PQfreemem(table);
    snprintf(name, sizeof name, "%s.%s", s->table_schema, s->table_name);
    PGresult *res = slot_exec(s, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        char msg[512];
        pgconn_failure(s->conn, res, msg, sizeof msg);
        int rc = slot_fail(s, PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY,
                           "slot=%s: reading the columns of %s failed: %s", s->name, name, msg);
        PQclear(res);
        return rc;
    }
    size_t n = (size_t) PQntuples(res);
    struct layout_column *cols = calloc(n + 1, sizeof *cols);
    int rc = STREAM_OK;
    char err[768];
    if (cols == NULL) {
        rc = slot_fail(s, STREAM_FATAL, "slot=%s: out of memory", s->name);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        cols[i] = (struct layout_column){PQgetvalue(res, (int) i, 0), PQgetvalue(res, (int) i, 1)};
    if (layout_apply(map, cols, n, name, err, sizeof err) < 0) {
        rc = slot_fail(s, STREAM_FATAL, "slot=%s: %s", s->name, err);
    }
done:
    free(cols);
    PQclear(res);
    return rc;
}
