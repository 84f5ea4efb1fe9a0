/*
 * rowcount.c — a count bounded in time, else the planner's estimate (see
 * rowcount.h).
 */
#include "outbox_relay/rowcount.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static bool command(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    return ok;
}

/* EXPLAIN's estimate of the top plan node's rows: "Plan Rows": N. */
static int64_t planner_estimate(PGconn *conn, const char *select_sql, int nparams,
                                const char *const *params)
{
    size_t len = strlen(select_sql) + 32;
    char *sql = malloc(len);
    int64_t n = -1;
    if (sql == NULL)
        return -1;
    snprintf(sql, len, "EXPLAIN (FORMAT JSON) %s", select_sql);
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        const char *at = strstr(PQgetvalue(res, 0, 0), "\"Plan Rows\":");
        if (at != NULL)
            n = strtoll(at + strlen("\"Plan Rows\":"), NULL, 10);
    }
    PQclear(res);
    free(sql);
    return n < 0 ? -1 : n;
}

int64_t rowcount_bounded(PGconn *conn, const char *select_sql, int nparams,
                         const char *const *params, bool *exact)
{
    *exact = false;
    if (PQstatus(conn) != CONNECTION_OK)
        return -1;
    PGTransactionStatusType ts = PQtransactionStatus(conn);
    if (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS)
        return -1;
    bool in_tx = ts == PQTRANS_INTRANS;
    int64_t n = -1;
    size_t len = strlen(select_sql) + 64;
    char *sql = malloc(len);
    if (sql == NULL)
        return -1;
    snprintf(sql, len, "SELECT count(*) FROM (%s) AS rowcount_q", select_sql);
    if (!command(conn, in_tx ? "SAVEPOINT outbox_relay_rowcount" : "BEGIN"))
        goto out;
    if (command(conn, "SET LOCAL statement_timeout = " STR(ROWCOUNT_TIMEOUT_MS))) {
        PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
            n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
            *exact = true;
        }
        PQclear(res);
    }
    /* Rolled back in every case: the SET LOCAL goes with it. */
    if (in_tx) {
        if (!command(conn, "ROLLBACK TO SAVEPOINT outbox_relay_rowcount") ||
            !command(conn, "RELEASE SAVEPOINT outbox_relay_rowcount")) {
            n = -1;
            goto out;
        }
    } else if (!command(conn, "ROLLBACK")) {
        n = -1;
        goto out;
    }
    if (n < 0)
        n = planner_estimate(conn, select_sql, nparams, params);
out:
    if (n < 0)
        *exact = false;
    free(sql);
    return n;
}
