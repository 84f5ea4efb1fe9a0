/*
 * rowcount.c — a count bounded in rows and time, else the planner's
 * estimate (see rowcount.h).
 */
#include "outbox_relay/pg/rowcount.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define SAVEPOINT "outbox_relay_rowcount"

static bool command(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    return ok;
}

/* A scope to roll back: a savepoint inside the caller's transaction, or
 * a transaction of our own; either with the statement timeout. */
static bool scope_open(PGconn *conn, bool in_tx)
{
    return command(conn, in_tx ? "SAVEPOINT " SAVEPOINT : "BEGIN READ ONLY") &&
           command(conn, "SET LOCAL statement_timeout = " STR(ROWCOUNT_TIMEOUT_MS));
}

/* Rolls the scope back (its SET LOCAL goes with it); false when the
 * connection is not back in the state it was in. */
static bool scope_close(PGconn *conn, bool in_tx)
{
    if (!in_tx)
        return command(conn, "ROLLBACK");
    return command(conn, "ROLLBACK TO SAVEPOINT " SAVEPOINT) &&
           command(conn, "RELEASE SAVEPOINT " SAVEPOINT);
}

int64_t rowcount_plan_rows(const char *json)
{
    static const char key[] = "\"Plan Rows\":";
    const char *at = json ? strstr(json, key) : NULL;
    if (at == NULL)
        return -1;
    char *end = NULL;
    double v = strtod(at + sizeof key - 1, &end); /* PostgreSQL prints an integer */
    if (end == at + sizeof key - 1 || v < 0 || v > 9e18)
        return -1;
    return (int64_t) v;
}

/* Runs sql (printf format with one %s: select_sql) with the parameters;
 * the single value of its single row, or NULL. Caller frees. */
static char *scalar(PGconn *conn, const char *fmt, const char *select_sql, int nparams,
                    const char *const *params)
{
    size_t len = strlen(fmt) + strlen(select_sql) + 32;
    char *sql = malloc(len), *out = NULL;
    if (sql == NULL)
        return NULL;
    snprintf(sql, len, fmt, select_sql);
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 1)
        out = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    free(sql);
    return out;
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
    int64_t counted = -1, n = -1;

    if (!scope_open(conn, in_tx))
        goto out;
    char *v = scalar(conn, "SELECT count(*) FROM (%s LIMIT " STR(ROWCOUNT_MAX) " + 1) AS q",
                     select_sql, nparams, params);
    if (v != NULL)
        counted = strtoll(v, NULL, 10);
    free(v);
    if (counted >= 0 && counted <= ROWCOUNT_MAX) {
        n = counted;
        *exact = true;
    } else {
        /* Too many to count, or too slow: the planner's estimate, in a
         * fresh scope when the count's timed out. */
        if (counted < 0 && !(scope_close(conn, in_tx) && scope_open(conn, in_tx)))
            goto out;
        v = scalar(conn, "EXPLAIN (FORMAT JSON) %s", select_sql, nparams, params);
        n = rowcount_plan_rows(v);
        free(v);
        if (n >= 0 && n < counted)
            n = counted; /* at least what was seen */
    }
    if (!scope_close(conn, in_tx)) {
        n = -1;
        *exact = false;
    }
out:
    return n;
}
