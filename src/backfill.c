/*
 * backfill.c — publish the rows a polling relayer left undispatched (see
 * backfill.h). The rows are read through a cursor in batches so a large
 * backlog never sits in memory at once.
 */
#include "outbox_relay/backfill.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/pgconn.h"

#define BACKFILL_FETCH 1000

static bool exec_ok(PGconn *conn, const char *sql, ExecStatusType want, char *err,
                    size_t errlen, const char *what)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = PQresultStatus(res) == want;
    if (!ok)
        snprintf(err, errlen, "backfill: %s failed: %s", what, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

/* Fills ev from one row (id, aggregate_id, type, payload, created_at). */
static int row_event(PGresult *res, int row, struct outbox_event *ev)
{
    memset(ev, 0, sizeof *ev);
    snprintf(ev->event_id, sizeof ev->event_id, "%s", PQgetvalue(res, row, 0));
#define FIELD(col, ptr, len)                                                  \
    do {                                                                      \
        if (!PQgetisnull(res, row, col)) {                                    \
            ev->ptr = PQgetvalue(res, row, col);                              \
            ev->len = (size_t) PQgetlength(res, row, col);                    \
        }                                                                     \
    } while (0)
    FIELD(1, aggregate_id, aggregate_id_len);
    FIELD(2, type, type_len);
    FIELD(3, payload, payload_len);
    FIELD(4, created_at, created_at_len);
#undef FIELD
    return ev->type != NULL && ev->type_len > 0 ? 0 : -1;
}

int backfill_run(const char *dsn, const char *snapshot, const char *schema, const char *table,
                 backfill_emit_fn emit, void *ctx, uint64_t *rows, char *err, size_t errlen)
{
    char *snap = NULL, *qschema = NULL, *qtable = NULL, *lit = NULL;
    char sql[1024];
    int rc = -1;
    *rows = 0;

    PGconn *conn = pgconn_connectdb(dsn, "outbox-relay-backfill", NULL);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "backfill: cannot connect to PostgreSQL: %s", PQerrorMessage(conn));
        goto done;
    }
    snap = PQescapeLiteral(conn, snapshot, strlen(snapshot));
    qschema = PQescapeIdentifier(conn, schema, strlen(schema));
    qtable = PQescapeIdentifier(conn, table, strlen(table));
    if (snap == NULL || qschema == NULL || qtable == NULL) {
        snprintf(err, errlen, "backfill: cannot quote names: %s", PQerrorMessage(conn));
        goto done;
    }
    if (!exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", PGRES_COMMAND_OK, err,
                 errlen, "BEGIN"))
        goto done;
    snprintf(sql, sizeof sql, "SET TRANSACTION SNAPSHOT %s", snap);
    if (!exec_ok(conn, sql, PGRES_COMMAND_OK, err, errlen, "importing the slot's snapshot"))
        goto done;

    /* Does the table have the poller's dispatched_at column? */
    char relname[300];
    snprintf(relname, sizeof relname, "%s.%s", qschema, qtable);
    lit = PQescapeLiteral(conn, relname, strlen(relname));
    snprintf(sql, sizeof sql,
             "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass "
             "AND attname = 'dispatched_at' AND NOT attisdropped",
             lit ? lit : "''");
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "backfill: cannot read %s's columns: %s", relname,
                 PQerrorMessage(conn));
        PQclear(res);
        goto done;
    }
    bool has_dispatched = PQntuples(res) == 1;
    PQclear(res);

    snprintf(sql, sizeof sql,
             "DECLARE outbox_backfill NO SCROLL CURSOR FOR "
             "SELECT id::text, aggregate_id::text, type, payload::text, created_at::text "
             "FROM %s.%s %s ORDER BY id",
             qschema, qtable, has_dispatched ? "WHERE dispatched_at IS NULL" : "");
    if (!exec_ok(conn, sql, PGRES_COMMAND_OK, err, errlen, "declaring the backfill cursor"))
        goto done;

    snprintf(sql, sizeof sql, "FETCH %d FROM outbox_backfill", BACKFILL_FETCH);
    for (;;) {
        res = PQexec(conn, sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, errlen, "backfill: FETCH failed after %llu rows: %s",
                     (unsigned long long) *rows, PQerrorMessage(conn));
            PQclear(res);
            goto done;
        }
        int n = PQntuples(res);
        for (int i = 0; i < n; i++) {
            struct outbox_event ev;
            if (row_event(res, i, &ev) < 0) {
                snprintf(err, errlen, "backfill: row id=%s has no type; cannot route it",
                         PQgetvalue(res, i, 0));
                PQclear(res);
                goto done;
            }
            if (emit(ctx, &ev) < 0) {
                snprintf(err, errlen, "backfill: stopped after %llu rows (at id %s)",
                         (unsigned long long) *rows, ev.event_id);
                PQclear(res);
                goto done;
            }
            (*rows)++;
        }
        PQclear(res);
        if (n < BACKFILL_FETCH)
            break;
    }
    exec_ok(conn, "COMMIT", PGRES_COMMAND_OK, err, errlen, "COMMIT");
    rc = 0;
done:
    PQfreemem(snap);
    PQfreemem(qschema);
    PQfreemem(qtable);
    PQfreemem(lit);
    PQfinish(conn);
    return rc;
}
