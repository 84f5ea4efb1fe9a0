/*
 * reaper.c — deletes expired, delivered outbox rows (see reaper.h for the
 * rule and docs/operations.md for why it is exact).
 *
 * Everything runs on the caller's ordinary connection with blocking libpq
 * calls; the only waits are bounded (confirm_wait for the fresh mark and
 * for a partition's W0, lock_timeout on locks, the pause between batches)
 * and each checks should_stop. Every transaction this file opens is
 * committed or rolled back before it returns, so the connection always
 * goes back idle.
 */
#include "outbox_relay/reaper.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/clock.h"
#include "outbox_relay/log.h"
#include "outbox_relay/pgconn.h"

#define POLL_SLICE 0.1       /* s between confirmed_flush_lsn polls */
#define LOCK_TIMEOUT "5s"    /* waiting for a lock on the outbox or a partition */
#define DROP_LOCK_TIMEOUT "1s" /* DROP's lock on the parent: writers queue behind it */
#define BATCH_RETRIES 3      /* serialization failures / lock timeouts per batch */

/* SQL pieces for "the row's inserting transaction id is below a mark's X".
 * xmin is 32 bits; SNAP_TOP puts the statement snapshot's xmax - 1 in
 * n.top, and XMIN64(alias) is alias.xmin widened to the 64-bit id in
 * (n.top - 2^32, n.top] with the same low 32 bits — the right one for
 * every row the statement can see that is not frozen (docs/operations.md,
 * "32-bit xmin"). Marks whose X is 2^31 or more below n.top are never
 * used (MARK_FRESH_ENOUGH). XMIN64 goes through snprintf. */
#define SNAP_TOP "(SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 1 AS top) AS n"
#define XMIN64(a) /* for snprintf formats: %% is % */                           \
    "(n.top - (((n.top - " a ".xmin::text::bigint) %% 4294967296 + 4294967296) "   \
    "%% 4294967296))"
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

struct reap {
    PGconn *conn;
    const struct reaper_options *o; /* NULL in reaper_take_mark */
    struct reaper_result *res;
    char *err;
    size_t errlen;
    const char *slot;
    bool slots_table; /* public.outbox_relay_slots exists */
    char mark_x[24]; /* res->used.xmin as decimal text, for the queries */
    char pqmsg[REAPER_ERRLEN]; /* pq_reason's buffer */
};

static bool stopping(const struct reap *r)
{
    return r->o != NULL && r->o->should_stop != NULL && r->o->should_stop(r->o->stop_arg);
}

/* Sleeps up to seconds in short slices; false when stopped meanwhile. */
static bool nap(const struct reap *r, double seconds)
{
    double end = mono_now() + seconds;
    for (;;) {
        if (stopping(r))
            return false;
        if (r->o->tick != NULL)
            r->o->tick(r->o->stop_arg);
        double left = end - mono_now();
        if (left <= 0)
            return true;
        if (left > POLL_SLICE)
            left = POLL_SLICE;
        struct timespec ts = {.tv_sec = (time_t) left,
                              .tv_nsec = (long) ((left - (double) (time_t) left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static int set_err(struct reap *r, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int set_err(struct reap *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* The server's reason for the last failure on r's connection, as one line
 * (pgconn_error), or "connection lost". Valid until the next call. */
static const char *pq_reason(struct reap *r)
{
    if (PQstatus(r->conn) != CONNECTION_OK)
        return "connection lost";
    pgconn_error(r->conn, r->pqmsg, sizeof r->pqmsg);
    return r->pqmsg;
}

/* SQLSTATEs a later retry can cure: serialization failure, deadlock, lock
 * timeout, statement cancelled (e.g. by shutdown). */
static bool transient(const PGresult *res)
{
    const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return st != NULL && (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0 ||
                          strcmp(st, "55P03") == 0 || strcmp(st, "57014") == 0);
}

/* Runs sql with text parameters. Returns the result (caller clears) when
 * its status is `want`; otherwise NULL, with err set and *rc the class of
 * the failure (REAPER_RETRY for a lost connection or a transient error,
 * REAPER_FATAL otherwise). */
static PGresult *run(struct reap *r, ExecStatusType want, int *rc, const char *what,
                     const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(r->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == want)
        return res;
    bool lost = PQstatus(r->conn) != CONNECTION_OK;
    *rc = lost || transient(res) ? REAPER_RETRY : REAPER_FATAL;
    set_err(r, *rc, "reaper: %s failed: %s", what,
            pq_reason(r));
    PQclear(res);
    return NULL;
}

static int command(struct reap *r, const char *what, const char *sql)
{
    int rc = REAPER_OK;
    PGresult *res = run(r, PGRES_COMMAND_OK, &rc, what, sql, 0, NULL);
    PQclear(res);
    return res ? REAPER_OK : rc;
}

static void rollback(struct reap *r)
{
    if (PQstatus(r->conn) == CONNECTION_OK &&
        PQtransactionStatus(r->conn) != PQTRANS_IDLE)
        PQclear(PQexec(r->conn, "ROLLBACK"));
}

/* "schema"."name", quoted by libpq; malloc'ed, NULL on OOM. */
static char *quote_qualified(PGconn *conn, const char *schema, const char *name)
{
    char *qs = PQescapeIdentifier(conn, schema, strlen(schema));
    char *qn = PQescapeIdentifier(conn, name, strlen(name));
    char *out = NULL;
    if (qs && qn) {
        size_t n = strlen(qs) + strlen(qn) + 2;
        out = malloc(n);
        if (out)
            snprintf(out, n, "%s.%s", qs, qn);
    }
    PQfreemem(qs);
    PQfreemem(qn);
    return out;
}

/* The slot's confirmed_flush_lsn into *out. Returns 0, or a negative
 * reaper_rc: no such slot (RETRY: the relayer creates it on first start),
 * a slot without a confirmed position (FATAL: physical slot). */
static int slot_confirmed(struct reap *r, lsn_t *out)
{
    const char *params[] = {r->slot};
    int rc = REAPER_OK;
    PGresult *res = run(r, PGRES_TUPLES_OK, &rc, "reading the slot",
                        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                        "WHERE slot_name = $1",
                        1, params);
    if (res == NULL)
        return rc;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return set_err(r, REAPER_RETRY, "reaper: slot %s does not exist; without it nothing "
                       "can be proven delivered, so every row is kept", r->slot);
    }
    const char *v = PQgetvalue(res, 0, 0);
    if (PQgetisnull(res, 0, 0) || lsn_parse(v, strlen(v), out) < 0) {
        PQclear(res);
        return set_err(r, REAPER_FATAL, "reaper: slot %s has no confirmed_flush_lsn (not a "
                       "logical slot?)", r->slot);
    }
    PQclear(res);
    return 0;
}


/* Polls the slot until confirmed_flush_lsn >= lsn. Returns 1 when it is,
 * 0 when confirm_wait ran out or a stop was asked, negative on error.
 * res->confirmed gets the last position read. */
static int wait_confirmed(struct reap *r, lsn_t lsn)
{
    double deadline = mono_now() + r->o->confirm_wait;
    for (;;) {
        int rc = slot_confirmed(r, &r->res->confirmed);
        if (rc < 0)
            return rc;
        if (r->res->confirmed >= lsn)
            return 1;
        if (mono_now() >= deadline || !nap(r, POLL_SLICE))
            return 0;
    }
}

/* Parses an LSN from column col of res row 0 into *out. */
static int result_lsn(struct reap *r, PGresult *res, int col, lsn_t *out)
{
    const char *v = PQntuples(res) == 1 ? PQgetvalue(res, 0, col) : "";
    if (lsn_parse(v, strlen(v), out) < 0)
        return set_err(r, REAPER_FATAL, "reaper: unexpected WAL position \"%s\"", v);
    return 0;
}

/* Parses a transaction id (decimal) from column col of res row 0. */
static int result_xid(struct reap *r, PGresult *res, int col, uint64_t *out)
{
    const char *v = PQntuples(res) == 1 ? PQgetvalue(res, 0, col) : "";
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == '\0' || end == NULL || *end != '\0')
        return set_err(r, REAPER_FATAL, "reaper: unexpected transaction id \"%s\"", v);
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
static int take_mark(struct reap *r, struct reaper_mark *m)
{
    char lsn[32], x[24];
    int rc = REAPER_OK;
    PGresult *res = NULL;

    if ((rc = command(r, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ")) < 0)
        return rc;
    /* The first statement takes the transaction's snapshot; X is its
     * xmin. L is read by the next statement, so after the snapshot. */
    res = run(r, PGRES_TUPLES_OK, &rc, "taking a mark (snapshot)",
              "SELECT pg_snapshot_xmin(pg_current_snapshot())::text", 0, NULL);
    if (res == NULL || (rc = result_xid(r, res, 0, &m->xmin)) < 0)
        goto fail;
    PQclear(res);
    res = run(r, PGRES_TUPLES_OK, &rc, "taking a mark (insert position)",
              "SELECT pg_current_wal_insert_lsn()::text", 0, NULL);
    if (res == NULL || (rc = result_lsn(r, res, 0, &m->insert_lsn)) < 0)
        goto fail;
    PQclear(res);

    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(m->insert_lsn));
    snprintf(x, sizeof x, "%llu", (unsigned long long) m->xmin);
    const char *p[] = {r->slot, lsn, x};
    res = PQexecParams(r->conn,
                       "INSERT INTO " REAPER_MARKS_TABLE " (slot_name, insert_lsn, snapshot_xmin) "
                       "SELECT $1::text, $2::pg_lsn, $3::xid8 FROM pg_replication_slots s "
                       "WHERE s.slot_name = $1::text AND s.database = current_database() "
                       "AND (SELECT count(*) FROM " REAPER_MARKS_TABLE " m WHERE m.slot_name = $1::text "
                       "AND m.insert_lsn > coalesce(s.confirmed_flush_lsn, '0/0')) < "
                       STR(REAPER_MARKS_MAX) " ON CONFLICT DO NOTHING",
                       3, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        bool lost = PQstatus(r->conn) != CONNECTION_OK;
        /* 0: the mark is taken (and valid for this run), just not kept. */
        rc = !lost && marks_unusable(res) ? 0
             : lost || transient(res)     ? REAPER_RETRY
                                          : REAPER_FATAL;
        set_err(r, rc, "cannot store a mark in " REAPER_MARKS_TABLE ": %s",
                pq_reason(r));
        goto fail;
    }
    PQclear(res);
    res = NULL;
    if ((rc = command(r, "COMMIT", "COMMIT")) < 0)
        return rc; /* the mark is valid, but the connection is not */
    return 1;
fail:
    PQclear(res);
    rollback(r);
    return rc;
}

/* Removes the slot's confirmed marks but the one with the greatest X (any
 * later choice is that one or a newer mark), and those of an earlier slot
 * of the same name. Errors are ignored: pruning only keeps the table
 * small. */
static void prune_marks(struct reap *r)
{
    const char *p[] = {r->slot};
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
    struct reaper_mark m = {0};
    struct reap r = {.conn = conn, .err = err, .errlen = errlen, .slot = slot};
    err[0] = '\0';
    if (PQstatus(conn) != CONNECTION_OK)
        return set_err(&r, REAPER_RETRY, "reaper: not connected to PostgreSQL");
    int rc = take_mark(&r, &m);
    if (mark != NULL)
        *mark = m;
    if (rc == 0)
        return REAPER_FATAL;
    if (rc < 0)
        return rc;
    prune_marks(&r);
    return REAPER_OK;
}

/* Lagging: the stored mark of the slot the slot has confirmed (insert_lsn
 * <= res->confirmed) with the greatest X, into res->used. Returns 1 found,
 * 0 none (or the table is unusable: res->marks_off), negative on error. */
static int choose_mark(struct reap *r)
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
            set_err(r, 0, "cannot read the marks in " REAPER_MARKS_TABLE ": %s",
                    pq_reason(r));
            snprintf(r->res->marks_err, sizeof r->res->marks_err, "%s", r->err);
            r->err[0] = '\0';
            rc = 0;
        } else {
            rc = set_err(r, lost || transient(res) ? REAPER_RETRY : REAPER_FATAL,
                         "reaper: reading the marks failed: %s",
                         pq_reason(r));
        }
    } else if (PQntuples(res) == 1) {
        if ((rc = result_lsn(r, res, 0, &r->res->used.insert_lsn)) == 0 &&
            (rc = result_xid(r, res, 1, &r->res->used.xmin)) == 0)
            rc = 1;
    }
    PQclear(res);
    return rc;
}

/* A backfill in progress (--backfill pending; backfill.h) means rows
 * committed before the slot's consistent point look confirmed to the slot
 * (it starts past them) although Kafka has not got them yet: nothing may
 * be deleted until the marker says 'done'. Read inside the deleting
 * transaction with FOR SHARE, so a marker written meanwhile either waits
 * for our COMMIT or fails our snapshot (40001, retried). Returns 1 when a
 * backfill holds the reaper back, 0 when not, or a negative reaper_rc. */
static int backfill_holds(struct reap *r)
{
    if (!r->slots_table)
        return 0; /* no table, no marker: --backfill refuses to run without it */
    const char *params[] = {r->slot};
    int rc = REAPER_OK;
    PGresult *res = run(r, PGRES_TUPLES_OK, &rc, "reading the slot's backfill marker",
                        "SELECT to_jsonb(h)->>'backfill_state' FROM public.outbox_relay_slots h "
                        "WHERE slot_name = $1 FOR SHARE", 1, params);
    if (res == NULL)
        return rc;
    bool holds = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
                 strcmp(PQgetvalue(res, 0, 0), "done") != 0;
    PQclear(res);
    if (holds && !r->res->backfill_held)
        log_info("reaper: slot %s has a backfill in progress (public.outbox_relay_slots."
                 "backfill_state); deleting nothing until it is done", r->slot);
    if (holds)
        r->res->backfill_held = true;
    return holds;
}

/* One batch on `table` (quoted): deletes up to `batch` expired rows whose
 * xmin is below the used mark's X. partitioned: the table is partitioned
 * (but not by range on created_at), so ctid alone does not name a row.
 * Returns the rows deleted (>= 0) or a negative reaper_rc. */
static long reap_batch(struct reap *r, const char *table, bool partitioned)
{
    char sql[1400], batch[32];
    const char *params[] = {r->o->retention, batch, r->mark_x};
    int rc = REAPER_OK;

    snprintf(batch, sizeof batch, "%ld", r->o->batch);
    if ((rc = command(r, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ")) < 0)
        return rc;
    if ((rc = command(r, "SET lock_timeout", "SET LOCAL lock_timeout = '" LOCK_TIMEOUT "'")) < 0)
        goto fail;
    if ((rc = backfill_holds(r)) != 0) {
        rollback(r);
        return rc < 0 ? rc : 0;
    }
    if (partitioned)
        snprintf(sql, sizeof sql,
                 "DELETE FROM %s AS o USING (SELECT i.tableoid AS toid, i.ctid AS tid FROM %s AS i, "
                 SNAP_TOP " WHERE i.created_at < now() - $1::interval AND " XMIN64("i")
                 " < $3::bigint ORDER BY i.created_at LIMIT $2::bigint) "
                 "AS x WHERE o.tableoid = x.toid AND o.ctid = x.tid", table, table);
    else
        snprintf(sql, sizeof sql,
                 "DELETE FROM %s WHERE ctid = ANY (ARRAY (SELECT i.ctid FROM %s AS i, " SNAP_TOP
                 " WHERE i.created_at < now() - $1::interval AND " XMIN64("i")
                 " < $3::bigint ORDER BY i.created_at LIMIT $2::bigint))", table, table);
    PGresult *res = run(r, PGRES_COMMAND_OK, &rc, "DELETE", sql, 3, params);
    if (res == NULL)
        goto fail;
    long n = atol(PQcmdTuples(res));
    PQclear(res);
    if ((rc = command(r, "COMMIT", "COMMIT")) < 0)
        goto fail;
    log_debug("reaper: deleted %ld rows from %s (mark " LSN_FMT " xmin %s, confirmed " LSN_FMT
              ")", n, table, LSN_ARGS(r->res->used.insert_lsn), r->mark_x,
              LSN_ARGS(r->res->confirmed));
    return n;
fail:
    rollback(r);
    return rc;
}

/* Deletes expired rows of `table` batch by batch until a short batch. */
static int reap_rows(struct reap *r, const char *table, bool partitioned)
{
    int retries = 0;
    for (;;) {
        if (stopping(r))
            return REAPER_OK;
        long n = reap_batch(r, table, partitioned);
        if (n == REAPER_RETRY && PQstatus(r->conn) == CONNECTION_OK &&
            retries++ < BATCH_RETRIES) {
            log_debug("%s; retrying the batch", r->err);
            if (!nap(r, r->o->pause > 0.5 ? r->o->pause : 0.5))
                return REAPER_OK;
            continue;
        }
        if (n < 0)
            return (int) n;
        retries = 0;
        if (n > 0) {
            r->res->rows += (uint64_t) n;
            r->res->batches++;
        }
        if (n < r->o->batch)
            return REAPER_OK;
        if (!nap(r, r->o->pause))
            return REAPER_OK;
    }
}

/* Whether `table` (quoted) still has expired rows visible now: *any. */
static int any_expired(struct reap *r, const char *table, bool *any)
{
    char sql[600];
    const char *params[] = {r->o->retention};
    int rc = REAPER_OK;
    snprintf(sql, sizeof sql,
             "SELECT EXISTS (SELECT 1 FROM %s WHERE created_at < now() - $1::interval)", table);
    PGresult *res = run(r, PGRES_TUPLES_OK, &rc, "looking for expired rows", sql, 1, params);
    if (res == NULL)
        return rc;
    *any = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return 0;
}

/* Drops one expired partition (qpart, quoted) of the table whose oid is
 * parent_oid. Returns 1 dropped, 0 kept (res->held_back) or skipped, or a
 * negative reaper_rc. */
static int drop_partition(struct reap *r, const char *qpart, const char *parent_oid,
                          long long est_rows)
{
    char sql[900];
    int rc;
    lsn_t w0 = 0;

    if ((rc = command(r, "BEGIN", "BEGIN")) < 0)
        return rc;
    if ((rc = command(r, "SET lock_timeout", "SET LOCAL lock_timeout = '" LOCK_TIMEOUT "'")) < 0)
        goto fail;
    /* SHARE conflicts with the ROW EXCLUSIVE lock every transaction that
     * inserted into the partition holds until it ends: granted, it means
     * none is in progress and none can start until we commit, so every
     * row in it has committed. Unlike ACCESS EXCLUSIVE it lets readers of
     * the parent through during the wait for the slot (and is not
     * WAL-logged, so W0 is not pushed past the flushed WAL by our own lock
     * record). DROP upgrades it at the end. */
    snprintf(sql, sizeof sql, "LOCK TABLE %s IN SHARE MODE", qpart);
    if ((rc = command(r, "LOCK partition", sql)) < 0)
        goto fail;
    const char *p1[] = {qpart, parent_oid};
    PGresult *res = run(r, PGRES_TUPLES_OK, &rc, "reading W0",
                        "SELECT pg_current_wal_insert_lsn()::text, EXISTS (SELECT 1 FROM "
                        "pg_inherits WHERE inhrelid = $1::regclass AND inhparent = $2::oid)",
                        2, p1);
    if (res == NULL)
        goto fail;
    if ((rc = result_lsn(r, res, 0, &w0)) < 0) {
        PQclear(res);
        goto fail;
    }
    bool still_ours = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    if (!still_ours) { /* detached meanwhile by someone else: not ours to drop */
        rc = 0;
        goto fail;
    }
    if (!r->res->lagging) {
        /* Every row committed before W0: wait for the slot to confirm it. */
        rc = wait_confirmed(r, w0);
        if (rc == 0 && !stopping(r)) {
            r->res->held_back = true;
            r->res->wanted = w0;
        }
    } else {
        /* Every row committed; all of them below the mark's X means all
         * committed before the mark's L, which the slot has confirmed. */
        const char *p2[] = {r->mark_x};
        snprintf(sql, sizeof sql,
                 "SELECT NOT EXISTS (SELECT 1 FROM %s AS i, " SNAP_TOP " WHERE " XMIN64("i")
                 " >= $1::bigint)", qpart);
        res = run(r, PGRES_TUPLES_OK, &rc, "checking the partition's rows against the mark", sql,
                  1, p2);
        if (res == NULL)
            goto fail;
        rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (rc == 0)
            r->res->held_back = true;
    }
    if (rc <= 0)
        goto fail;
    if ((rc = backfill_holds(r)) != 0) {
        rc = rc < 0 ? rc : 0;
        goto fail;
    }
    if ((rc = command(r, "SET lock_timeout",
                      "SET LOCAL lock_timeout = '" DROP_LOCK_TIMEOUT "'")) < 0)
        goto fail;
    snprintf(sql, sizeof sql, "DROP TABLE %s", qpart);
    if ((rc = command(r, "DROP partition", sql)) < 0)
        goto fail;
    if ((rc = command(r, "COMMIT", "COMMIT")) < 0)
        goto fail;
    if (r->res->lagging)
        log_info("reaper: dropped expired partition %s (about %lld rows; all below mark "
                 LSN_FMT " xmin %s, confirmed " LSN_FMT ")", qpart, est_rows,
                 LSN_ARGS(r->res->used.insert_lsn), r->mark_x, LSN_ARGS(r->res->confirmed));
    else
        log_info("reaper: dropped expired partition %s (about %lld rows; W0 " LSN_FMT
                 " confirmed)", qpart, est_rows, LSN_ARGS(w0));
    r->res->partitions++;
    r->res->batches++;
    r->res->rows += (uint64_t) (est_rows > 0 ? est_rows : 0);
    return 1;
fail:
    rollback(r);
    return rc;
}

/* Drops every partition of parent_oid whose upper bound is at or before
 * now() - retention, oldest first. default_oid ("0" when none) is never
 * dropped. */
static int drop_expired_partitions(struct reap *r, const char *parent_oid,
                                   const char *default_oid)
{
    const char *params[] = {parent_oid, r->o->retention, default_oid};
    int rc = REAPER_OK;
    /* The upper bound as PostgreSQL prints it: FOR VALUES FROM ('…') TO
     * ('…'); MAXVALUE and DEFAULT do not match and are never dropped. */
    PGresult *res = run(r, PGRES_TUPLES_OK, &rc, "listing partitions",
                        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname), "
                        "greatest(c.reltuples, 0)::bigint, b.upper "
                        "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace, "
                        "LATERAL (SELECT substring(pg_get_expr(c.relpartbound, c.oid) "
                        "FROM 'TO \\(''([^'']*)''\\)')::timestamptz AS upper) b "
                        "WHERE i.inhparent = $1::oid AND c.oid <> $3::oid "
                        "AND b.upper <= now() - $2::interval ORDER BY b.upper",
                        3, params);
    if (res == NULL)
        return rc;
    for (int i = 0; i < PQntuples(res) && !stopping(r); i++) {
        rc = drop_partition(r, PQgetvalue(res, i, 0), parent_oid,
                            atoll(PQgetvalue(res, i, 1)));
        if (rc == 0 && r->res->held_back && !r->res->lagging)
            break; /* the slot is behind: later partitions would wait just the same */
        if (rc == REAPER_RETRY && PQstatus(r->conn) == CONNECTION_OK) {
            log_warn("%s; trying partition %s again next run", r->err, PQgetvalue(res, i, 0));
            rc = REAPER_OK;
            continue;
        }
        if (rc < 0)
            break;
        rc = REAPER_OK;
        if (!nap(r, r->o->pause))
            break;
    }
    PQclear(res);
    return rc < 0 ? rc : REAPER_OK;
}

/* Refuses a table any part of which is not logged: its rows are not in the
 * WAL, so the slot moving past them says nothing about their delivery.
 * Walks pg_inherits rather than calling pg_partition_tree(), which locks
 * every partition. */
static int check_logged(struct reap *r, const char *oid)
{
    const char *p[] = {oid};
    int rc = REAPER_OK;
    PGresult *res = run(r, PGRES_TUPLES_OK, &rc, "checking the table is logged",
                        "WITH RECURSIVE tree(relid) AS (SELECT $1::oid UNION ALL "
                        "SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid) "
                        "SELECT count(*), string_agg(CASE c.relpersistence WHEN 't' THEN "
                        "'table ' || q.name || ' is TEMPORARY (recreate it as a logged table)' "
                        "ELSE 'table ' || q.name || ' is UNLOGGED (run ALTER TABLE ' || q.name || "
                        "' SET LOGGED)' END, '; ' ORDER BY q.name) "
                        "FROM tree JOIN pg_class c ON c.oid = tree.relid "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace, "
                        "LATERAL (SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) "
                        "AS name) q WHERE c.relpersistence <> 'p'",
                        1, p);
    if (res == NULL)
        return rc;
    if (atoll(PQgetvalue(res, 0, 0)) > 0)
        rc = set_err(r, REAPER_FATAL, "reaper: refusing to delete anything: %s. Such a table "
                     "writes no WAL, so its rows never reach slot %s while the slot moves past "
                     "them; rows written while it was not logged were never relayed (re-publish "
                     "them)", PQgetvalue(res, 0, 1), r->slot);
    PQclear(res);
    return rc;
}

bool reaper_enabled(const char *retention)
{
    if (retention == NULL)
        return false;
    while (isspace((unsigned char) *retention))
        retention++;
    return *retention != '\0' && strcmp(retention, "0") != 0;
}

int reaper_run(PGconn *conn, const struct reaper_options *opts, struct reaper_result *res,
               char *err, size_t errlen)
{
    struct reap r = {.conn = conn, .o = opts, .res = res, .err = err, .errlen = errlen,
                     .slot = opts->slot};
    double started = mono_now();
    char *qtable = NULL, *qdefault = NULL;
    int rc = REAPER_OK;
    PGresult *pr = NULL;

    memset(res, 0, sizeof *res);
    err[0] = '\0';
    if (!reaper_enabled(opts->retention)) {
        res->off = true;
        return REAPER_OK;
    }
    if (PQstatus(conn) != CONNECTION_OK)
        return set_err(&r, REAPER_RETRY, "reaper: not connected to PostgreSQL");

    /* The retention must be an interval; <= 0 turns the reaper off. */
    const char *p1[] = {opts->retention};
    pr = run(&r, PGRES_TUPLES_OK, &rc, "checking --retention",
             "SELECT $1::interval > interval '0'", 1, p1);
    if (pr == NULL) {
        if (rc == REAPER_FATAL)
            set_err(&r, rc, "reaper: --retention \"%s\" is not a PostgreSQL interval (e.g. "
                    "\"7 days\"; 0 turns the reaper off)", opts->retention);
        goto out;
    }
    res->off = strcmp(PQgetvalue(pr, 0, 0), "t") != 0;
    PQclear(pr);
    if (res->off)
        goto out;

    /* The slot must belong to this database: its position says nothing
     * about another database's outbox. */
    const char *p2[] = {opts->slot};
    pr = run(&r, PGRES_TUPLES_OK, &rc, "checking the slot",
             "SELECT database IS NOT DISTINCT FROM current_database() FROM "
             "pg_replication_slots WHERE slot_name = $1", 1, p2);
    if (pr == NULL)
        goto out;
    if (PQntuples(pr) == 0) {
        rc = set_err(&r, REAPER_RETRY, "reaper: slot %s does not exist (yet); without it "
                     "nothing can be proven delivered, so every row is kept", opts->slot);
        goto out;
    }
    if (strcmp(PQgetvalue(pr, 0, 0), "t") != 0) {
        rc = set_err(&r, REAPER_FATAL, "reaper: slot %s belongs to another database than "
                     "the one --dsn connects to; it cannot prove this outbox delivered",
                     opts->slot);
        goto out;
    }
    PQclear(pr);
    pr = run(&r, PGRES_TUPLES_OK, &rc, "looking for public.outbox_relay_slots",
             "SELECT to_regclass('public.outbox_relay_slots') IS NOT NULL", 0, NULL);
    if (pr == NULL)
        goto out;
    r.slots_table = strcmp(PQgetvalue(pr, 0, 0), "t") == 0;
    PQclear(pr);

    /* What the table is: plain, range-partitioned on created_at, or
     * partitioned some other way. */
    const char *p3[] = {opts->table_schema, opts->table_name};
    pr = run(&r, PGRES_TUPLES_OK, &rc, "inspecting the outbox table",
             "SELECT c.oid, c.relkind, a.attnum IS NOT NULL, "
             "coalesce(pt.partstrat = 'r' AND pt.partnatts = 1 AND pt.partattrs[0] = a.attnum, "
             "false), coalesce(pt.partdefid, 0), "
             "coalesce((SELECT quote_ident(dn.nspname) || '.' || quote_ident(d.relname) || "
             "'|' || d.relkind::text FROM pg_class d JOIN pg_namespace dn ON dn.oid = d.relnamespace "
             "WHERE d.oid = pt.partdefid), '') "
             "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
             "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'created_at' "
             "AND a.attnum > 0 AND NOT a.attisdropped "
             "LEFT JOIN pg_partitioned_table pt ON pt.partrelid = c.oid "
             "WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
             2, p3);
    if (pr == NULL)
        goto out;
    if (PQntuples(pr) == 0) {
        rc = set_err(&r, REAPER_FATAL, "reaper: table %s.%s does not exist",
                     opts->table_schema, opts->table_name);
        goto out;
    }
    if (strcmp(PQgetvalue(pr, 0, 2), "t") != 0) {
        rc = set_err(&r, REAPER_FATAL, "reaper: table %s.%s has no created_at column",
                     opts->table_schema, opts->table_name);
        goto out;
    }
    bool partitioned = PQgetvalue(pr, 0, 1)[0] == 'p';
    bool by_created_at = strcmp(PQgetvalue(pr, 0, 3), "t") == 0;
    qtable = quote_qualified(conn, opts->table_schema, opts->table_name);
    char oid[16], defoid[16];
    snprintf(oid, sizeof oid, "%s", PQgetvalue(pr, 0, 0));
    snprintf(defoid, sizeof defoid, "%s", PQgetvalue(pr, 0, 4));
    const char *def = PQgetvalue(pr, 0, 5), *bar = strrchr(def, '|');
    bool def_partitioned = bar != NULL && bar[1] == 'p';
    if (bar != NULL)
        qdefault = strndup(def, (size_t) (bar - def));
    PQclear(pr);
    pr = NULL;
    if (qtable == NULL || (bar != NULL && qdefault == NULL)) {
        rc = set_err(&r, REAPER_FATAL, "out of memory");
        goto out;
    }

    if ((rc = check_logged(&r, oid)) < 0)
        goto out;

    /* The fresh mark, stored for later runs even when this one cannot
     * use it. */
    rc = take_mark(&r, &res->fresh);
    if (rc < 0)
        goto out;
    if (rc == 0) {
        res->marks_off = true;
        snprintf(res->marks_err, sizeof res->marks_err, "%s", err);
        err[0] = '\0';
    }
    bool any = false;
    if ((rc = any_expired(&r, qtable, &any)) < 0)
        goto out;
    if (!any) /* an idle run ends without waiting for the slot */
        goto prune;

    rc = wait_confirmed(&r, res->fresh.insert_lsn);
    if (rc < 0)
        goto out;
    if (rc == 1) {
        res->used = res->fresh;
        res->have_mark = true;
    } else if (!stopping(&r)) {
        res->lagging = true;
        res->wanted = res->fresh.insert_lsn;
        if ((rc = choose_mark(&r)) < 0)
            goto out;
        res->have_mark = rc == 1;
    }
    rc = REAPER_OK;
    if (res->have_mark && !stopping(&r)) {
        snprintf(r.mark_x, sizeof r.mark_x, "%llu", (unsigned long long) res->used.xmin);
        if (partitioned && by_created_at) {
            rc = drop_expired_partitions(&r, oid, defoid);
            /* Rows that landed in the DEFAULT partition (no partition
             * covered them) age out row by row. */
            if (rc == REAPER_OK && qdefault != NULL && !(res->held_back && !res->lagging) &&
                !stopping(&r))
                rc = reap_rows(&r, qdefault, def_partitioned);
        } else {
            rc = reap_rows(&r, qtable, partitioned);
        }
    }
    if (rc == REAPER_OK && res->lagging && !res->held_back && !stopping(&r)) {
        bool left = true;
        if (!res->have_mark || (rc = any_expired(&r, qtable, &left)) == 0)
            res->held_back = left;
    }
prune:
    if (!res->marks_off && PQstatus(conn) == CONNECTION_OK)
        prune_marks(&r);
out:
    PQclear(pr);
    free(qtable);
    free(qdefault);
    rollback(&r);
    res->seconds = mono_now() - started;
    return rc;
}
