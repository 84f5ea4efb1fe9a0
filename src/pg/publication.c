/*
 * publication.c — the pgoutput publication's check and creation (see
 * publication.h), in plain SQL on the stream's replication connection.
 */
#include "outbox_relay/pg/publication.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/slot.h"

#define PUB_MSGLEN 1024
#define PUB_SQLLEN 1024
#define SQLSTATE_INSUFFICIENT_PRIVILEGE "42501"
#define SQLSTATE_DUPLICATE_OBJECT "42710"
#define SQLSTATE_UNIQUE_VIOLATION "23505" /* two creators at once: the catalog's index */

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
    pgconn_failure(s->conn, res, buf, cap);
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
static const char *missing_column(const struct outbox_columns_map *map, const char *list)
{
    if (list == NULL || *list == '\0')
        return NULL;
    const struct outbox_columns_map *m = map != NULL ? map : &OUTBOX_DEFAULT_COLUMNS;
    const char *need[] = {m->id, m->aggregate_id, m->type, m->payload, m->created_at};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i] != NULL && !listed(list, need[i]))
            return need[i];
    for (size_t i = 0; i < m->nextra && i < OUTBOX_MAX_EXTRA; i++)
        if (!listed(list, m->extra[i].column))
            return m->extra[i].column;
    return NULL;
}

enum publication_verdict publication_judge(bool pubinsert, bool viaroot, bool covers,
                                           bool partitioned,
                                           const struct outbox_columns_map *columns,
                                           const char *attnames, const char *rowfilter,
                                           const char **column)
{
    *column = NULL;
    if (!pubinsert)
        return PUBLICATION_NO_INSERT;
    if (partitioned && !viaroot)
        return PUBLICATION_NOT_VIA_ROOT;
    if (!covers)
        return PUBLICATION_NOT_COVERED;
    if ((*column = missing_column(columns, attnames)) != NULL)
        return PUBLICATION_COLUMN_LEFT_OUT;
    if (rowfilter != NULL && *rowfilter != '\0')
        return PUBLICATION_ROW_FILTER;
    return PUBLICATION_OK;
}

enum publication_filter_change publication_filter_change(bool known, const char *prev,
                                                         const char *cur)
{
    if (!known)
        return PUBLICATION_FILTER_SAME; /* the stream's connect said it */
    bool had = prev != NULL && *prev != '\0';
    bool has = cur != NULL && *cur != '\0';
    if (!had && has)
        return PUBLICATION_FILTER_ADDED;
    if (had && !has)
        return PUBLICATION_FILTER_REMOVED;
    if (had && has && strcmp(prev, cur) != 0)
        return PUBLICATION_FILTER_CHANGED;
    return PUBLICATION_FILTER_SAME;
}

int publication_build_lookup(PGconn *conn, const char *name, const char *schema,
                             const char *table, char *buf, size_t cap)
{
    char *lname = PQescapeLiteral(conn, name, strlen(name));
    char *lschema = PQescapeLiteral(conn, schema, strlen(schema));
    char *ltable = PQescapeLiteral(conn, table, strlen(table));
    int n = lname && lschema && ltable
                ? publication_build_query(PQserverVersion(conn), lname, lschema, ltable, buf,
                                          cap)
                : -1;
    PQfreemem(lname);
    PQfreemem(lschema);
    PQfreemem(ltable);
    return n;
}

int publication_build_query(int server_version, const char *lit_name, const char *lit_schema,
                            const char *lit_table, char *buf, size_t cap)
{
    bool v15 = server_version >= 150000;
    int n = snprintf(buf, cap,
                     "SELECT p.pubinsert, p.pubviaroot, t.tablename IS NOT NULL, %s, %s "
                     "FROM pg_publication p LEFT JOIN pg_publication_tables t ON t.pubname = "
                     "p.pubname AND t.schemaname = %s AND t.tablename = %s WHERE p.pubname = %s",
                     v15 ? "array_to_string(t.attnames, ',')" : "NULL",
                     v15 ? "t.rowfilter" : "NULL", lit_schema, lit_table, lit_name);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

void publication_read_state(const struct pg_result *cres, int row, struct publication_state *st)
{
    const PGresult *res = (const PGresult *) cres;
    *st = (struct publication_state){.exists = row >= 0 && row < PQntuples(res)};
    if (!st->exists)
        return;
    st->pubinsert = strcmp(PQgetvalue(res, row, 0), "t") == 0;
    st->viaroot = strcmp(PQgetvalue(res, row, 1), "t") == 0;
    st->covers = strcmp(PQgetvalue(res, row, 2), "t") == 0;
    st->attnames = PQgetisnull(res, row, 3) ? NULL : PQgetvalue(res, row, 3);
    st->rowfilter = PQgetisnull(res, row, 4) ? NULL : PQgetvalue(res, row, 4);
}

const char *publication_problem(const struct publication_state *st, const char *name,
                                const char *schema, const char *table, bool partitioned,
                                const struct outbox_columns_map *columns, char *buf, size_t cap)
{
    const char *gone = NULL;
    enum publication_verdict v =
        st->exists ? publication_judge(st->pubinsert, st->viaroot, st->covers, partitioned,
                                       columns, st->attnames, NULL, &gone)
                   : PUBLICATION_OK;
    if (!st->exists)
        snprintf(buf, cap, "publication %s does not exist", name);
    else if (v == PUBLICATION_NO_INSERT)
        snprintf(buf, cap, "publication %s does not publish inserts, so no outbox row would "
                 "reach the relayer: ALTER PUBLICATION \"%s\" SET (publish = 'insert')", name,
                 name);
    else if (v == PUBLICATION_NOT_VIA_ROOT)
        snprintf(buf, cap, "publication %s publishes the partitions of the partitioned outbox "
                 "%s.%s under their own names: the relayer needs them under the root, as of "
                 "each change: ALTER PUBLICATION \"%s\" SET (publish_via_partition_root = "
                 "true)", name, schema, table, name);
    else if (v == PUBLICATION_NOT_COVERED)
        snprintf(buf, cap, "publication %s does not publish the outbox table %s.%s: ALTER "
                 "PUBLICATION \"%s\" ADD TABLE \"%s\".\"%s\" (as its owner), or name another "
                 "with --publication", name, schema, table, name, schema, table);
    else if (v == PUBLICATION_COLUMN_LEFT_OUT)
        snprintf(buf, cap, "publication %s has a column list for %s.%s that leaves out \"%s\", "
                 "which every event needs: ALTER PUBLICATION \"%s\" SET TABLE \"%s\".\"%s\" "
                 "(without a column list)", name, schema, table, gone, name, schema, table);
    else
        return NULL;
    return buf;
}

int publication_inspect(PGconn *conn, const char *name, const char *schema, const char *table,
                        const char *slot, const struct outbox_columns_map *columns,
                        double timeout, bool *row_filter, char *why, size_t cap)
{
    const char *p[] = {schema, table, slot};
    char msg[PUB_MSGLEN], sql[PUB_SQLLEN];
    *row_filter = false;
    PGresult *res = pgconn_exec(conn,
                                "SELECT c.relkind = 'p', EXISTS (SELECT 1 FROM "
                                "pg_replication_slots WHERE slot_name = $3) FROM pg_class c "
                                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname "
                                "= $1 AND c.relname = $2",
                                3, p, timeout, msg, sizeof msg);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(why, cap, "looking up the outbox's kind failed: %s", msg);
        PQclear(res);
        return PUBLICATION_UNKNOWN;
    }
    bool partitioned = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool slot_exists = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    if (publication_build_lookup(conn, name, schema, table, sql, sizeof sql) < 0) {
        snprintf(why, cap, "cannot build the query of publication %s", name);
        return PUBLICATION_UNKNOWN;
    }
    res = pgconn_exec(conn, sql, 0, NULL, timeout, msg, sizeof msg);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(why, cap, "checking publication %s failed: %s", name, msg);
        PQclear(res);
        return PUBLICATION_UNKNOWN;
    }
    struct publication_state st;
    publication_read_state((const struct pg_result *) res, 0, &st);
    int health;
    if (!st.exists && !slot_exists) {
        snprintf(why, cap, "publication %s does not exist yet", name);
        health = PUBLICATION_NOT_MADE;
    } else if (publication_problem(&st, name, schema, table, partitioned, columns, why, cap)) {
        health = PUBLICATION_BROKEN;
    } else {
        *row_filter = st.rowfilter != NULL && *st.rowfilter != '\0';
        if (*row_filter)
            snprintf(why, cap, "%s", st.rowfilter);
        else
            snprintf(why, cap, "publication %s serves the outbox", name);
        health = PUBLICATION_SERVES;
    }
    PQclear(res);
    return health;
}

static int create(struct slot *s, const char *name, bool partitioned);

/* What the existing publication publishes of the outbox, or its absence. */
static int check(struct slot *s, const char *name, bool partitioned, bool slot_exists,
                 bool may_create)
{
    char sql[PUB_SQLLEN];
    if (publication_build_lookup(s->conn, name, s->table_schema, s->table_name, sql,
                                 sizeof sql) < 0)
        return slot_fail(s, STREAM_FATAL, "slot=%s: cannot build the query of publication %s",
                         s->name, name);
    PGresult *res = slot_exec(s, sql);
    char msg[PUB_MSGLEN];
    int rc = STREAM_OK;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        error_text(s, res, msg, sizeof msg);
        rc = slot_fail(s, conn_rc(s), "slot=%s: looking up publication %s failed: %s", s->name,
                       name, msg);
        goto done;
    }
    struct publication_state st;
    publication_read_state((const struct pg_result *) res, 0, &st);
    if (!st.exists) {
        if (slot_exists) {
            char create_sql[PUB_SQLLEN];
            publication_build_create(name, s->table_schema, s->table_name, create_sql,
                                     sizeof create_sql);
            rc = slot_fail(
                s, STREAM_FATAL,
                "slot=%s exists but its publication %s does not (dropped?): pgoutput "
                "cannot decode changes written before a publication existed, so it is "
                "not recreated under a running slot. Run %s; then drop the slot and "
                "start with --recreate-slot --backfill pending (docs/operations.md, \"Choosing "
                "and switching the output plugin\")",
                s->name, name, create_sql);
            goto done;
        }
        if (!may_create) {
            rc = slot_fail(s, STREAM_RETRY,
                           "slot=%s: publication %s vanished while being created; "
                           "will look again",
                           s->name, name);
            goto done;
        }
        PQclear(res);
        return create(s, name, partitioned);
    }
    char why[PUB_MSGLEN];
    if (publication_problem(&st, name, s->table_schema, s->table_name, partitioned, s->columns,
                            why, sizeof why) != NULL) {
        rc = slot_fail(s, STREAM_FATAL, "slot=%s: %s%s", s->name, why,
                       slot_exists ? "; rows committed while it did not were skipped by the server "
                                     "and are not in Kafka: drop the slot and start with "
                                     "--recreate-slot --backfill pending to publish the rows still "
                                     "in the table"
                                   : "");
    } else if (st.rowfilter != NULL && *st.rowfilter != '\0') {
        log_warn("slot=%s: publication %s has a row filter on %s.%s: WHERE %s. Rows it filters "
                 "out are never sent to the relayer and never reach Kafka", s->name, name,
                 s->table_schema, s->table_name, st.rowfilter);
    }
done:
    PQclear(res);
    return rc;
}

static int create(struct slot *s, const char *name, bool partitioned)
{
    char sql[PUB_SQLLEN];
    if (publication_build_create(name, s->table_schema, s->table_name, sql, sizeof sql) < 0)
        return slot_fail(s, STREAM_FATAL, "slot=%s: publication name %s is too long", s->name,
                         name);
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
    if (state != NULL && (strcmp(state, SQLSTATE_DUPLICATE_OBJECT) == 0 ||
                          strcmp(state, SQLSTATE_UNIQUE_VIOLATION) == 0)) {
        rc = check(s, name, partitioned, false, false); /* another relayer made it just now */
    } else if (state != NULL && strcmp(state, SQLSTATE_INSUFFICIENT_PRIVILEGE) == 0) {
        rc = slot_fail(
            s, STREAM_FATAL,
            "slot=%s: publication %s does not exist and this role may "
            "not create it (%s). Have the owner of %s.%s run: %s; (sql/008_publication.sql "
            "does the same), then start again",
            s->name, name, msg, s->table_schema, s->table_name, sql);
    } else {
        rc = slot_fail(s, conn_rc(s), "slot=%s: %s failed: %s", s->name, sql, msg);
    }
    PQclear(res);
    return rc;
}

int publication_ensure(struct slot *s, const char *name, bool partitioned, bool slot_exists)
{
    if (PQserverVersion(s->conn) < 140000)
        return slot_fail(s, STREAM_FATAL,
                         "--plugin pgoutput needs PostgreSQL 14 or later (logical "
                         "messages, publish_via_partition_root); this server is %d: use --plugin "
                         "wal2json",
                         PQserverVersion(s->conn));
    return check(s, name, partitioned, slot_exists, true);
}
