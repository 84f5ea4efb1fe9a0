/*
 * reaper_marks.c — the reaper's marks (reaper.h, "THE RULE"): taking one
 * (L, X) and storing it per slot, choosing the stored mark a lagging slot
 * has confirmed, pruning those no later run can need, and reading the
 * slot's confirmed position they are compared with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "reaper_internal.h"

#define MARK_FRESH_ENOUGH                                                          \
    "snapshot_xmin::text::bigint > "                                             \
    "pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 2147483648"
/* Where outbox-relay last created the slot (0/0 when it did not record
 * it): a mark taken before that belongs to an earlier slot of the same
 * name, dropped or lost — the new one never decoded what that mark covers,
 * it started past it. $1 is the slot. */
#define SLOT_CREATED                                                               \
    "coalesce((SELECT created_lsn FROM public.outbox_relay_slots WHERE slot_name = $1), " \
    "'0/0')"

#define STR_(x) #x
#define STR(x) STR_(x)

PGresult *reap_slot_exec(struct reap *r, ExecStatusType want, int *rc, const char *what,
                         const char *sql, int nparams, const char *const *params)
{
    if (r->slot_conn == NULL)
        return reap_exec(r, want, rc, what, sql, nparams, params);
    /* reap_exec says why with r->conn's message: point it at the slot's. */
    PGconn *own = r->conn;
    r->conn = r->slot_conn;
    PGresult *res = reap_exec(r, want, rc, what, sql, nparams, params);
    r->conn = own;
    return res;
}

/* The slot's confirmed_flush_lsn into *out. Returns 0, or a negative
 * reaper_rc: no such slot (RETRY: the relayer creates it on first start),
 * a slot without a confirmed position (FATAL: physical slot). */
static int slot_confirmed(struct reap *r, lsn_t *out)
{
    const char *params[] = {r->slot};
    int rc = REAPER_OK;
    PGresult *res = reap_slot_exec(r, PGRES_TUPLES_OK, &rc, "reading the slot",
                                   "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                   "WHERE slot_name = $1",
                                   1, params);
    if (res == NULL)
        return rc;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return reap_err(r, REAPER_RETRY, "reaper: slot %s does not exist; without it nothing "
                        "can be proven delivered, so every row is kept", r->slot);
    }
    const char *v = PQgetvalue(res, 0, 0);
    if (PQgetisnull(res, 0, 0) || lsn_parse(v, strlen(v), out) < 0) {
        PQclear(res);
        return reap_err(r, REAPER_FATAL, "reaper: slot %s has no confirmed_flush_lsn (not a "
                        "logical slot?)", r->slot);
    }
    PQclear(res);
    return 0;
}


/* Polls the slot until confirmed_flush_lsn >= lsn. Returns 1 when it is,
 * 0 when confirm_wait ran out or a stop was asked, negative on error.
 * res->confirmed gets the last position read. */
int reap_wait_confirmed(struct reap *r, lsn_t lsn)
{
    double deadline = mono_now() + r->o->confirm_wait;
    for (;;) {
        int rc = slot_confirmed(r, &r->res->confirmed);
        if (rc < 0)
            return rc;
        if (r->res->confirmed >= lsn)
            return 1;
        if (mono_now() >= deadline || !reap_nap(r, POLL_SLICE))
            return 0;
    }
}


/* Parses a transaction id (decimal) from column col of res row 0. */
static int result_xid(struct reap *r, PGresult *res, int col, uint64_t *out)
{
    const char *v = PQntuples(res) == 1 ? PQgetvalue(res, 0, col) : "";
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == '\0' || end == NULL || *end != '\0')
        return reap_err(r, REAPER_FATAL, "reaper: unexpected transaction id \"%s\"", v);
    *out = (uint64_t) x;
    return 0;
}

/* SQLSTATEs that say the marks table cannot be used here: it (or a
 * column) does not exist, no privilege, read-only server. */
static bool marks_unusable(const PGresult *res)
{
    const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return st != NULL && (strcmp(st, "42P01") == 0 || strcmp(st, "42501") == 0 ||
                          strcmp(st, "25006") == 0 || strcmp(st, "42703") == 0);
}

/* Takes a mark (reaper.h) into *m and stores it. Returns 1 stored (or not
 * stored because the slot is missing or REAPER_MARKS_MAX is reached), 0
 * taken but the table cannot be written (err says why), or a negative
 * reaper_rc when no mark could be taken. */
int reap_take_mark(struct reap *r, struct reaper_mark *m)
{
    char lsn[32], x[24];
    int rc = REAPER_OK;
    PGresult *res = NULL;

    if ((rc = reap_command(r, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ")) < 0)
        return rc;
    /* The first statement takes the transaction's snapshot; X is its
     * xmin. L is read by the next statement, so after the snapshot. */
    res = reap_exec(r, PGRES_TUPLES_OK, &rc, "taking a mark (snapshot)",
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text", 0, NULL);
    if (res == NULL || (rc = result_xid(r, res, 0, &m->xmin)) < 0)
        goto fail;
    PQclear(res);
    res = reap_exec(r, PGRES_TUPLES_OK, &rc, "taking a mark (insert position)",
                    "SELECT pg_current_wal_insert_lsn()::text", 0, NULL);
    if (res == NULL || (rc = reap_result_lsn(r, res, 0, &m->insert_lsn)) < 0)
        goto fail;
    PQclear(res);
    res = NULL;

    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(m->insert_lsn));
    snprintf(x, sizeof x, "%llu", (unsigned long long) m->xmin);
    if (r->slot_conn != NULL) {
        /* The slot is elsewhere: its position is read there, and the mark
         * is stored (bounded as below) only while the slot exists. */
        lsn_t confirmed = 0;
        char clsn[32];
        rc = slot_confirmed(r, &confirmed);
        if (rc < 0 && PQstatus(r->slot_conn) == CONNECTION_OK &&
            PQstatus(r->conn) == CONNECTION_OK) {
            r->err[0] = '\0';
            rc = reap_command(r, "COMMIT", "COMMIT"); /* taken, not stored: no slot */
            return rc < 0 ? rc : 1;
        }
        if (rc < 0)
            goto fail;
        snprintf(clsn, sizeof clsn, LSN_FMT, LSN_ARGS(confirmed));
        const char *q[] = {r->slot, lsn, x, clsn};
        res = PQexecParams(r->conn,
                           "INSERT INTO " REAPER_MARKS_TABLE " (slot_name, insert_lsn, "
                           "snapshot_xmin) SELECT $1::text, $2::pg_lsn, $3::xid8 "
                           "WHERE (SELECT count(*) FROM " REAPER_MARKS_TABLE " m WHERE "
                           "m.slot_name = $1::text AND m.insert_lsn > $4::pg_lsn) < "
                           STR(REAPER_MARKS_MAX) " ON CONFLICT DO NOTHING",
                           4, NULL, q, NULL, NULL, 0);
    } else {
    const char *p[] = {r->slot, lsn, x};
    res = PQexecParams(r->conn,
                       "INSERT INTO " REAPER_MARKS_TABLE " (slot_name, insert_lsn, snapshot_xmin) "
                       "SELECT $1::text, $2::pg_lsn, $3::xid8 FROM pg_replication_slots s "
                       "WHERE s.slot_name = $1::text AND s.database = current_database() "
                       "AND (SELECT count(*) FROM " REAPER_MARKS_TABLE " m WHERE m.slot_name = $1::text "
                       "AND m.insert_lsn > coalesce(s.confirmed_flush_lsn, '0/0')) < "
                       STR(REAPER_MARKS_MAX) " ON CONFLICT DO NOTHING",
                       3, NULL, p, NULL, NULL, 0);
    }
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        bool lost = PQstatus(r->conn) != CONNECTION_OK;
        /* 0: the mark is taken (and valid for this run), just not kept. */
        rc = !lost && marks_unusable(res) ? 0
             : lost || reap_transient(res)     ? REAPER_RETRY
                                          : REAPER_FATAL;
        reap_err(r, rc, "cannot store a mark in " REAPER_MARKS_TABLE ": %s",
                 reap_pq_reason(r));
        goto fail;
    }
    PQclear(res);
    res = NULL;
    if ((rc = reap_command(r, "COMMIT", "COMMIT")) < 0)
        return rc; /* the mark is valid, but the connection is not */
    return 1;
fail:
    PQclear(res);
    reap_rollback(r);
    return rc;
}

/* Removes the slot's confirmed marks but the one with the greatest X (any
 * later choice is that one or a newer mark), and those of an earlier slot
 * of the same name. Errors are ignored: pruning only keeps the table
 * small. */
#define PRUNE_BEST                                                                        \
    "best AS (SELECT max(m.snapshot_xmin) AS x FROM " REAPER_MARKS_TABLE " m, c WHERE "       \
    "m.slot_name = $1 AND m.insert_lsn <= c.lsn AND m.insert_lsn >= " SLOT_CREATED ") "       \
    "DELETE FROM " REAPER_MARKS_TABLE " m USING c, best WHERE m.slot_name = $1 AND "          \
    "(m.insert_lsn < " SLOT_CREATED " OR (m.insert_lsn <= c.lsn AND m.snapshot_xmin < best.x))"

void reap_prune_marks(struct reap *r)
{
    const char *p[] = {r->slot};
    if (r->slot_conn != NULL) { /* the slot's position read where it lives */
        lsn_t confirmed = 0;
        char clsn[32];
        if (slot_confirmed(r, &confirmed) < 0) {
            r->err[0] = '\0';
            return;
        }
        snprintf(clsn, sizeof clsn, LSN_FMT, LSN_ARGS(confirmed));
        const char *q[] = {r->slot, clsn};
        PQclear(PQexecParams(r->conn, "WITH c AS (SELECT $2::pg_lsn AS lsn), " PRUNE_BEST, 2,
                             NULL, q, NULL, NULL, 0));
        return;
    }
    PQclear(PQexecParams(r->conn,
                         "WITH c AS (SELECT confirmed_flush_lsn AS lsn FROM pg_replication_slots "
                         "WHERE slot_name = $1), best AS (SELECT max(m.snapshot_xmin) AS x FROM "
                         REAPER_MARKS_TABLE " m, c WHERE m.slot_name = $1 AND m.insert_lsn <= c.lsn "
                         "AND m.insert_lsn >= " SLOT_CREATED ") "
                         "DELETE FROM " REAPER_MARKS_TABLE " m USING c, best "
                         "WHERE m.slot_name = $1 AND (m.insert_lsn < " SLOT_CREATED
                         " OR (m.insert_lsn <= c.lsn AND m.snapshot_xmin < best.x))",
                         1, NULL, p, NULL, NULL, 0));
}

int reaper_take_mark(PGconn *conn, const char *slot, struct reaper_mark *mark, char *err,
                     size_t errlen)
{
    return reaper_take_mark_on(conn, NULL, slot, mark, err, errlen);
}

int reaper_take_mark_on(PGconn *conn, PGconn *slot_conn, const char *slot,
                        struct reaper_mark *mark, char *err, size_t errlen)
{
    struct reaper_mark m = {0};
    struct reap r = {.conn = conn, .slot_conn = slot_conn, .err = err, .errlen = errlen,
                     .slot = slot};
    err[0] = '\0';
    if (PQstatus(conn) != CONNECTION_OK)
        return reap_err(&r, REAPER_RETRY, "reaper: not connected to PostgreSQL");
    int rc = reap_take_mark(&r, &m);
    if (mark != NULL)
        *mark = m;
    if (rc == 0)
        return REAPER_FATAL;
    if (rc < 0)
        return rc;
    reap_prune_marks(&r);
    return REAPER_OK;
}

/* Lagging: the stored mark of the slot the slot has confirmed (insert_lsn
 * <= res->confirmed) with the greatest X, into res->used. Returns 1 found,
 * 0 none (or the table is unusable: res->marks_off), negative on error. */
int reap_choose_mark(struct reap *r)
{
    char lsn[32];
    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(r->res->confirmed));
    const char *p[] = {r->slot, lsn};
    PGresult *res = PQexecParams(r->conn,
                                 "SELECT insert_lsn::text, snapshot_xmin::text FROM "
                                 REAPER_MARKS_TABLE " WHERE slot_name = $1 AND "
                                 "insert_lsn <= $2::pg_lsn AND " MARK_FRESH_ENOUGH
                                 " AND insert_lsn >= " SLOT_CREATED
                                 " ORDER BY snapshot_xmin DESC LIMIT 1",
                                 2, NULL, p, NULL, NULL, 0);
    int rc = 0;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        bool lost = PQstatus(r->conn) != CONNECTION_OK;
        if (!lost && marks_unusable(res)) {
            r->res->marks_off = true;
            reap_err(r, 0, "cannot read the marks in " REAPER_MARKS_TABLE ": %s",
                     reap_pq_reason(r));
            snprintf(r->res->marks_err, sizeof r->res->marks_err, "%s", r->err);
            r->err[0] = '\0';
            rc = 0;
        } else {
            rc = reap_err(r, lost || reap_transient(res) ? REAPER_RETRY : REAPER_FATAL,
                          "reaper: reading the marks failed: %s",
                          reap_pq_reason(r));
        }
    } else if (PQntuples(res) == 1) {
        if ((rc = reap_result_lsn(r, res, 0, &r->res->used.insert_lsn)) == 0 &&
            (rc = result_xid(r, res, 1, &r->res->used.xmin)) == 0)
            rc = 1;
    }
    PQclear(res);
    return rc;
}
