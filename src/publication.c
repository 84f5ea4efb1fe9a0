/*
 * publication.c — the pgoutput publication's check and creation (see
 * publication.h), in plain SQL on the stream's replication connection.
 */
#include "outbox_relay/publication.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/log.h"
#include "outbox_relay/outbox_event.h"
#include "outbox_relay/pgconn.h"
#include "outbox_relay/slot.h"

#define PUB_MSGLEN 1024
#define PUB_SQLLEN 1024
#define SQLSTATE_INSUFFICIENT_PRIVILEGE "42501"
#define SQLSTATE_DUPLICATE_OBJECT "42710"

static int fail(struct slot *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct slot *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
    return rc;
}

int publication_build_create(const char *name, const char *schema, const char *table,
                             char *buf, size_t cap)
{
    /* Every name passed config.c's checks: no double quote to escape. */
    if (strchr(name, '"') || strchr(schema, '"') || strchr(table, '"'))
        return -1;
    int n = snprintf(buf, cap,
                     "CREATE PUBLICATION \"%s\" FOR TABLE \"%s\".\"%s\" WITH (publish = "
                     "'insert', publish_via_partition_root = true)",
                     name, schema, table);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

/* The server's message for res (NULL: the connection's). */
static void error_text(const struct slot *s, const PGresult *res, char *buf, size_t cap)
{
    if (res != NULL && PQresultStatus(res) == PGRES_FATAL_ERROR)
        pgconn_result_error(res, buf, cap);
    else
        pgconn_error(s->conn, buf, cap);
}

static int conn_rc(const struct slot *s)
{
    return PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY;
}

/* Whether a column list (comma-separated names) has name. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        p += len + (end != NULL);
    }
    return false;
}

/* The first of the relayer's columns (the map's, extra ones included) that
 * a column list ("" or NULL: none) leaves out, or NULL. */
static const char *missing_column(const struct w2j_columns_map *map, const char *list)
{
    if (list == NULL || *list == '\0')
        return NULL;
    const struct w2j_columns_map *m = map != NULL ? map : &W2J_DEFAULT_COLUMNS;
    const char *need[] = {m->id, m->aggregate_id, m->type, m->payload, m->created_at};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i] != NULL && !listed(list, need[i]))
            return need[i];
    for (size_t i = 0; i < m->nextra && i < OUTBOX_MAX_EXTRA; i++)
        if (!listed(list, m->extra[i].column))
            return m->extra[i].column;
    return NULL;
}

static int create(struct slot *s, const char *name, bool partitioned);

/* What the existing publication publishes of the outbox, or its absence. */
static int check(struct slot *s, const char *name, bool partitioned, bool slot_exists,
                 bool may_create)
{
    char *lname = PQescapeLiteral(s->conn, name, strlen(name));
    char *lschema = PQescapeLiteral(s->conn, s->table_schema, strlen(s->table_schema));
    char *ltable = PQescapeLiteral(s->conn, s->table_name, strlen(s->table_name));
    bool v15 = PQserverVersion(s->conn) >= 150000;
    char sql[PUB_SQLLEN];
    snprintf(sql, sizeof sql,
             "SELECT p.pubinsert, p.pubviaroot, t.tablename IS NOT NULL, %s, %s "
             "FROM pg_publication p LEFT JOIN pg_publication_tables t ON t.pubname = "
             "p.pubname AND t.schemaname = %s AND t.tablename = %s WHERE p.pubname = %s",
             v15 ? "array_to_string(t.attnames, ',')" : "NULL",
             v15 ? "t.rowfilter" : "NULL", lschema ? lschema : "''",
             ltable ? ltable : "''", lname ? lname : "''");
    PQfreemem(lname);
    PQfreemem(lschema);
    PQfreemem(ltable);
    PGresult *res = slot_exec(s, sql);
    char msg[PUB_MSGLEN];
    int rc = STREAM_OK;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        error_text(s, res, msg, sizeof msg);
        rc = fail(s, conn_rc(s), "slot=%s: looking up publication %s failed: %s", s->name, name,
                  msg);
        goto done;
    }
    const char *lost = slot_exists
        ? "; rows committed while it did not were skipped by the server and are not in Kafka: "
          "drop the slot and start with --recreate-slot --backfill pending to publish the rows "
          "still in the table"
        : "";
    if (PQntuples(res) == 0) {
        if (slot_exists) {
            char create_sql[PUB_SQLLEN];
            publication_build_create(name, s->table_schema, s->table_name, create_sql,
                                     sizeof create_sql);
            rc = fail(s, STREAM_FATAL,
                      "slot=%s exists but its publication %s does not (dropped?): pgoutput "
                      "cannot decode changes written before a publication existed, so it is "
                      "not recreated under a running slot. Run %s; then drop the slot and "
                      "start with --recreate-slot --backfill pending (or see docs/operations.md, "
                      "\"Switching the output plugin\")", s->name, name, create_sql);
            goto done;
        }
        if (!may_create) {
            rc = fail(s, STREAM_RETRY, "slot=%s: publication %s vanished while being created; "
                      "will look again", s->name, name);
            goto done;
        }
        PQclear(res);
        return create(s, name, partitioned);
    }
    bool pubinsert = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool viaroot = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    bool covers = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    const char *attnames = PQgetisnull(res, 0, 3) ? NULL : PQgetvalue(res, 0, 3);
    const char *rowfilter = PQgetisnull(res, 0, 4) ? NULL : PQgetvalue(res, 0, 4);
    const char *gone;
    if (!pubinsert) {
        rc = fail(s, STREAM_FATAL, "slot=%s: publication %s does not publish inserts, so no "
                  "outbox row would reach the relayer: ALTER PUBLICATION \"%s\" SET (publish = "
                  "'insert')%s", s->name, name, name, lost);
    } else if (partitioned && !viaroot) {
        rc = fail(s, STREAM_FATAL, "slot=%s: publication %s publishes the partitions of the "
                  "partitioned outbox %s.%s under their own names: the relayer needs them under "
                  "the root, as of each change: ALTER PUBLICATION \"%s\" SET "
                  "(publish_via_partition_root = true)%s", s->name, name, s->table_schema,
                  s->table_name, name, lost);
    } else if (!covers) {
        rc = fail(s, STREAM_FATAL, "slot=%s: publication %s does not publish the outbox table "
                  "%s.%s: ALTER PUBLICATION \"%s\" ADD TABLE \"%s\".\"%s\" (as its owner), or "
                  "name another with --publication%s", s->name, name, s->table_schema,
                  s->table_name, name, s->table_schema, s->table_name, lost);
    } else if ((gone = missing_column(s->columns, attnames)) != NULL) {
        rc = fail(s, STREAM_FATAL, "slot=%s: publication %s has a column list for %s.%s that "
                  "leaves out \"%s\", which every event needs: ALTER PUBLICATION \"%s\" SET "
                  "TABLE \"%s\".\"%s\" (without a column list)%s", s->name, name,
                  s->table_schema, s->table_name, gone, name, s->table_schema, s->table_name,
                  lost);
    } else if (rowfilter != NULL && *rowfilter != '\0') {
        log_warn("slot=%s: publication %s has a row filter on %s.%s: WHERE %s. Rows it filters "
                 "out are never sent to the relayer and never reach Kafka", s->name, name,
                 s->table_schema, s->table_name, rowfilter);
    }
done:
    PQclear(res);
    return rc;
}

static int create(struct slot *s, const char *name, bool partitioned)
{
    char sql[PUB_SQLLEN];
    if (publication_build_create(name, s->table_schema, s->table_name, sql, sizeof sql) < 0)
        return fail(s, STREAM_FATAL, "slot=%s: publication name %s is too long", s->name, name);
    PGresult *res = slot_exec(s, sql);
    if (PQresultStatus(res) == PGRES_COMMAND_OK) {
        PQclear(res);
        log_info("slot=%s: created publication %s for %s.%s (inserts%s)", s->name, name,
                 s->table_schema, s->table_name,
                 partitioned ? ", partitions under the root" : "");
        return STREAM_OK;
    }
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    char msg[PUB_MSGLEN];
    error_text(s, res, msg, sizeof msg);
    int rc;
    if (state != NULL && strcmp(state, SQLSTATE_DUPLICATE_OBJECT) == 0) {
        rc = check(s, name, partitioned, false, false); /* another relayer made it just now */
    } else if (state != NULL && strcmp(state, SQLSTATE_INSUFFICIENT_PRIVILEGE) == 0) {
        rc = fail(s, STREAM_FATAL, "slot=%s: publication %s does not exist and this role may "
                  "not create it (%s). Have the owner of %s.%s run: %s; (sql/008_publication.sql "
                  "does the same), then start again", s->name, name, msg, s->table_schema,
                  s->table_name, sql);
    } else {
        rc = fail(s, conn_rc(s), "slot=%s: %s failed: %s", s->name, sql, msg);
    }
    PQclear(res);
    return rc;
}

int publication_ensure(struct slot *s, const char *name, bool partitioned, bool slot_exists)
{
    if (PQserverVersion(s->conn) < 140000)
        return fail(s, STREAM_FATAL, "--plugin pgoutput needs PostgreSQL 14 or later (logical "
                    "messages, publish_via_partition_root); this server is %d: use --plugin "
                    "wal2json", PQserverVersion(s->conn));
    return check(s, name, partitioned, slot_exists, true);
}
