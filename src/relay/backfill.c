/*
 * backfill.c — the backfill's durable record and its lock (see backfill.h
 * for the rule and why it leaves no gap): the session advisory lock on the
 * lock connection, and every read and write of the slot's row in
 * public.outbox_relay_slots: 'creating' before the slot exists, 'running'
 * with the backlog's bound, backfill_done_id as rows are acknowledged
 * (skipped while someone holds the row), 'done' at the end. The run that
 * reads and publishes the rows is backfill_run.c, which calls into this
 * file (backfill_internal.h); nothing here calls back.
 */
#include "outbox_relay/relay/backfill.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/pg/pgconn.h"

#include "backfill_internal.h"

int backfill_parse_state(const char *s, enum backfill_state *out)
{
    if (s == NULL || *s == '\0')
        *out = BACKFILL_NONE;
    else if (strcmp(s, "creating") == 0)
        *out = BACKFILL_CREATING;
    else if (strcmp(s, "running") == 0)
        *out = BACKFILL_RUNNING;
    else if (strcmp(s, "done") == 0)
        *out = BACKFILL_DONE;
    else
        return -1;
    return 0;
}

int backfill_fail(struct backfill *b, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errstr, sizeof b->errstr, fmt, ap);
    va_end(ap);
    return rc;
}

const char *backfill_errstr(const struct backfill *b)
{
    return b->errstr;
}

struct backfill *backfill_new(const struct backfill_options *o)
{
    struct backfill *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->dsn = strdup(o->dsn ? o->dsn : "");
    b->slot = strdup(o->slot ? o->slot : "");
    b->table_schema = strdup(o->table_schema ? o->table_schema : "");
    b->table_name = strdup(o->table_name ? o->table_name : "");
    b->columns = o->columns != NULL ? o->columns : &OUTBOX_DEFAULT_COLUMNS;
    if (!b->dsn || !b->slot || !b->table_schema || !b->table_name) {
        backfill_free(b);
        return NULL;
    }
    return b;
}

static void close_conn(struct backfill *b)
{
    PQfinish(b->conn);
    b->conn = NULL;
    b->locked = false;
}

void backfill_close(struct backfill *b)
{
    close_conn(b);
}

void backfill_free(struct backfill *b)
{
    if (b == NULL)
        return;
    close_conn(b);
    free(b->dsn);
    free(b->slot);
    free(b->table_schema);
    free(b->table_name);
    free(b);
}

bool backfill_locked(const struct backfill *b)
{
    return b->locked && b->conn != NULL && PQstatus(b->conn) == CONNECTION_OK;
}

/* Runs sql with the slot name as $1 (and more text parameters) on the lock
 * connection. Returns the result when its status is `want`, else NULL with
 * errstr set and *rc RETRY (connection lost) or FATAL. */
static PGresult *lock_exec(struct backfill *b, ExecStatusType want, int *rc, const char *what,
                           const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(b->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == want)
        return res;
    bool lost = PQstatus(b->conn) != CONNECTION_OK;
    char msg[512] = "connection lost";
    if (!lost)
        pgconn_failure(b->conn, res, msg, sizeof msg);
    *rc = lost ? BACKFILL_RETRY : BACKFILL_FATAL;
    backfill_fail(b, *rc, "slot=%s: backfill: %s failed: %s", b->slot, what, msg);
    PQclear(res);
    if (lost)
        close_conn(b);
    return NULL;
}

int backfill_lock(struct backfill *b)
{
    if (backfill_locked(b))
        return BACKFILL_OK;
    if (b->conn == NULL || PQstatus(b->conn) != CONNECTION_OK) {
        close_conn(b);
        char err[512];
        b->conn = pgconn_open(b->dsn, APP_NAME, err, sizeof err);
        if (b->conn == NULL)
            return backfill_fail(b, BACKFILL_RETRY,
                                 "slot=%s: backfill: cannot connect to PostgreSQL: %s", b->slot,
                                 err);
    }
    const char *p[] = {b->slot};
    int rc = BACKFILL_OK;
    PGresult *res = lock_exec(b, PGRES_TUPLES_OK, &rc, "taking the backfill lock",
                              "SELECT pg_try_advisory_lock(1868722790, hashtext($1))", 1, p);
    if (res == NULL)
        return rc;
    b->locked = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!b->locked)
        return backfill_fail(b, BACKFILL_BUSY, "slot=%s: another relayer is backfilling it; "
                             "waiting as a standby", b->slot);
    return BACKFILL_OK;
}

void backfill_unlock(struct backfill *b)
{
    if (!b->locked)
        return;
    b->locked = false;
    if (b->conn == NULL || PQstatus(b->conn) != CONNECTION_OK) {
        close_conn(b);
        return;
    }
    const char *p[] = {b->slot};
    PGresult *res = PQexecParams(b->conn, "SELECT pg_advisory_unlock(1868722790, hashtext($1))",
                                 1, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        close_conn(b); /* closing releases it for sure */
    PQclear(res);
}

/* The marker columns must exist: without them nothing durable can be
 * written, and a crash would lose the rest of the backlog. */
static int check_schema(struct backfill *b)
{
    if (b->schema_ok)
        return BACKFILL_OK;
    int rc = BACKFILL_OK;
    PGresult *res = lock_exec(b, PGRES_TUPLES_OK, &rc, "looking up public.outbox_relay_slots",
                              "SELECT count(*) FROM pg_attribute "
                              "WHERE attrelid = to_regclass('public.outbox_relay_slots') AND NOT "
                              "attisdropped AND attname IN ('backfill_state', 'backfill_max_id', "
                              "'backfill_done_id', 'backfill_rows', 'backfill_updated_at')",
                              0, NULL);
    if (res == NULL)
        return rc;
    b->schema_ok = strcmp(PQgetvalue(res, 0, 0), "5") == 0;
    PQclear(res);
    if (!b->schema_ok)
        return backfill_fail(b, BACKFILL_FATAL,
                             "slot=%s: --backfill needs public.outbox_relay_slots with its "
                             "backfill_* columns, where the progress is recorded so that a crash "
                             "cannot lose the rest of the backlog: load sql/003_relay_role.sql "
                             "(again)", b->slot);
    return BACKFILL_OK;
}

void backfill_copy_id(char *dst, const char *src, bool *has)
{
    *has = src != NULL && strlen(src) < ID_MAX;
    snprintf(dst, ID_MAX, "%s", *has ? src : "");
}

int backfill_read_marker(struct backfill *b, struct backfill_marker *m)
{
    memset(m, 0, sizeof *m);
    int rc = check_schema(b);
    if (rc != BACKFILL_OK)
        return rc;
    const char *p[] = {b->slot};
    PGresult *res = lock_exec(b, PGRES_TUPLES_OK, &rc, "reading the backfill marker",
                              "SELECT backfill_state, backfill_max_id, backfill_done_id, "
                              "coalesce(backfill_rows, 0) FROM public.outbox_relay_slots "
                              "WHERE slot_name = $1",
                              1, p);
    if (res == NULL)
        return rc;
    if (PQntuples(res) == 1) {
        const char *st = PQgetisnull(res, 0, 0) ? NULL : PQgetvalue(res, 0, 0);
        if (backfill_parse_state(st, &m->state) < 0) {
            backfill_fail(b, BACKFILL_FATAL, "slot=%s: unknown backfill_state '%s' in "
                          "public.outbox_relay_slots", b->slot, st);
            PQclear(res);
            return BACKFILL_FATAL;
        }
        if (!PQgetisnull(res, 0, 1))
            backfill_copy_id(m->max_id, PQgetvalue(res, 0, 1), &m->has_max);
        if (!PQgetisnull(res, 0, 2))
            backfill_copy_id(m->done_id, PQgetvalue(res, 0, 2), &m->has_done);
        m->rows = strtoull(PQgetvalue(res, 0, 3), NULL, 10);
    }
    PQclear(res);
    return BACKFILL_OK;
}

int backfill_read_state(struct backfill *b, enum backfill_state *st)
{
    struct backfill_marker m;
    int rc = backfill_read_marker(b, &m);
    *st = m.state;
    return rc;
}

int backfill_begin(struct backfill *b)
{
    if (!backfill_locked(b))
        return backfill_fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost", b->slot);
    int rc = check_schema(b);
    if (rc != BACKFILL_OK)
        return rc;
    const char *p[] = {b->slot};
    PGresult *res = lock_exec(b, PGRES_TUPLES_OK, &rc, "looking up the slot",
                              "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", 1, p);
    if (res == NULL)
        return rc;
    bool exists = PQntuples(res) > 0;
    PQclear(res);
    if (exists)
        return backfill_fail(b, BACKFILL_BUSY, "slot=%s was created meanwhile by another process; "
                             "waiting", b->slot);
    res = lock_exec(b, PGRES_COMMAND_OK, &rc, "writing the backfill marker",
                    "INSERT INTO public.outbox_relay_slots (slot_name, created_lsn, "
                    "backfill_state, backfill_rows, backfill_updated_at) "
                    "VALUES ($1, '0/0', 'creating', 0, now()) "
                    "ON CONFLICT (slot_name) DO UPDATE SET backfill_state = 'creating', "
                    "backfill_max_id = NULL, backfill_done_id = NULL, backfill_rows = 0, "
                    "backfill_updated_at = now()",
                    1, p);
    if (res == NULL)
        return rc;
    PQclear(res);
    return BACKFILL_OK;
}

int backfill_abandon(struct backfill *b)
{
    if (!backfill_locked(b))
        return backfill_fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost", b->slot);
    const char *p[] = {b->slot};
    int rc = BACKFILL_OK;
    PGresult *res = lock_exec(b, PGRES_COMMAND_OK, &rc, "resetting the backfill marker",
                              "UPDATE public.outbox_relay_slots SET backfill_state = 'creating', "
                              "backfill_max_id = NULL, backfill_done_id = NULL, backfill_rows = 0, "
                              "backfill_updated_at = now() WHERE slot_name = $1",
                              1, p);
    if (res == NULL)
        return rc;
    PQclear(res);
    return BACKFILL_OK;
}

/* Records the bound of the backlog: state 'running'. */
int backfill_write_running(struct backfill *b, const struct backfill_marker *m,
                           lsn_t consistent)
{
    char lsn[32];
    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(consistent));
    const char *p[] = {b->slot, m->has_max ? m->max_id : NULL, consistent ? lsn : NULL};
    int rc = BACKFILL_OK;
    PGresult *res = lock_exec(b, PGRES_COMMAND_OK, &rc, "recording the backlog's bound",
                              "UPDATE public.outbox_relay_slots SET backfill_state = 'running', "
                              "backfill_max_id = $2, backfill_done_id = NULL, backfill_rows = 0, "
                              "created_lsn = coalesce($3::pg_lsn, created_lsn), "
                              "backfill_updated_at = now() WHERE slot_name = $1",
                              3, p);
    if (res == NULL)
        return rc;
    bool one = strcmp(PQcmdTuples(res), "1") == 0;
    PQclear(res);
    if (!one)
        return backfill_fail(b, BACKFILL_FATAL, "slot=%s: backfill: its marker row in "
                             "public.outbox_relay_slots disappeared", b->slot);
    return BACKFILL_OK;
}

/* Writes backfill_done_id. Never waits long for the row: when someone holds
 * it (the reaper checking it, an operator), this write is skipped and a
 * later one carries the progress. Returns 0, or RETRY when the lock
 * connection is gone (and with it the lock). */
int backfill_write_progress(struct backfill *b, const char *done_id, unsigned long long rows)
{
    char *lid = PQescapeLiteral(b->conn, done_id, strlen(done_id));
    char *lslot = PQescapeLiteral(b->conn, b->slot, strlen(b->slot));
    char sql[1024];
    int rc = BACKFILL_OK;
    if (lid == NULL || lslot == NULL) {
        rc = backfill_fail(b, BACKFILL_RETRY, "slot=%s: backfill: cannot quote the progress",
                           b->slot);
        goto done;
    }
    snprintf(sql, sizeof sql,
             "BEGIN; SET LOCAL lock_timeout = '200ms'; UPDATE public.outbox_relay_slots SET "
             "backfill_done_id = %s, backfill_rows = %llu, backfill_updated_at = now() "
             "WHERE slot_name = %s AND backfill_state = 'running'; COMMIT",
             lid, rows, lslot);
    PGresult *res = PQexec(b->conn, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    bool lock_timeout = state != NULL && strcmp(state, "55P03") == 0;
    if (!ok && PQstatus(b->conn) == CONNECTION_OK && !lock_timeout) {
        char msg[512];
        pgconn_result_error(res, msg, sizeof msg);
        log_warn("slot=%s: backfill: cannot record the progress (%s)", b->slot, msg);
    }
    PQclear(res);
    if (PQstatus(b->conn) == CONNECTION_OK && PQtransactionStatus(b->conn) != PQTRANS_IDLE)
        PQclear(PQexec(b->conn, "ROLLBACK"));
    if (PQstatus(b->conn) != CONNECTION_OK) {
        close_conn(b);
        rc = backfill_fail(b, BACKFILL_RETRY, "slot=%s: backfill: lost the connection that "
                           "holds the backfill lock (at id %s); stopping, the next attempt "
                           "resumes", b->slot, done_id);
    }
done:
    PQfreemem(lid);
    PQfreemem(lslot);
    return rc;
}

/* Every row is acknowledged: the marker says 'done', with the total of
 * rows the backfill published over all its runs. */
int backfill_write_done(struct backfill *b, unsigned long long rows)
{
    char total[32];
    snprintf(total, sizeof total, "%llu", rows);
    const char *p[] = {b->slot, total};
    int rc = BACKFILL_OK;
    PGresult *res = lock_exec(b, PGRES_COMMAND_OK, &rc, "clearing the backfill marker",
                              "UPDATE public.outbox_relay_slots SET backfill_state = 'done', "
                              "backfill_done_id = NULL, backfill_rows = $2, backfill_updated_at = "
                              "now() WHERE slot_name = $1",
                              2, p);
    if (res == NULL)
        return rc;
    PQclear(res);
    return BACKFILL_OK;
}
