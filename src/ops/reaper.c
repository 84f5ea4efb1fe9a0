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
 *
 * This file holds the run (its checks of the retention, the slot and the
 * table) and the deletion of rows in batches; the marks of the rule are in
 * reaper_marks.c, the dropping of whole partitions in reaper_partitions.c,
 * and what the three share in reaper_internal.h.
 */
#include "outbox_relay/ops/reaper.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/pg/pgconn.h"
#include "reaper_internal.h"
#include "outbox_relay/pg/outbox_catalog.h"
#include "outbox_relay/pg/rowcount.h"

bool reap_stopping(const struct reap *r)
{
    return r->o != NULL && r->o->should_stop != NULL && r->o->should_stop(r->o->stop_arg);
}

/* Sleeps up to seconds in short slices; false when stopped meanwhile. */
bool reap_nap(const struct reap *r, double seconds)
{
    double end = mono_now() + seconds;
    for (;;) {
        if (reap_stopping(r))
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

int reap_err(struct reap *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* The server's reason for the last failure on r's connection, as one line
 * (pgconn_error), or "connection lost". Valid until the next call. */
const char *reap_pq_reason(struct reap *r)
{
    if (PQstatus(r->conn) != CONNECTION_OK)
        return "connection lost";
    pgconn_error(r->conn, r->pqmsg, sizeof r->pqmsg);
    return r->pqmsg;
}

/* SQLSTATEs a later retry can cure: serialization failure, deadlock, lock
 * timeout, statement cancelled (e.g. by shutdown). */
bool reap_transient(const PGresult *res)
{
    const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return st != NULL && (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0 ||
                          strcmp(st, "55P03") == 0 || strcmp(st, "57014") == 0);
}

/* Runs sql with text parameters. Returns the result (caller clears) when
 * its status is `want`; otherwise NULL, with err set and *rc the class of
 * the failure (REAPER_RETRY for a lost connection or a transient error,
 * REAPER_FATAL otherwise). */
PGresult *reap_exec(struct reap *r, ExecStatusType want, int *rc, const char *what,
                     const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(r->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == want)
        return res;
    bool lost = PQstatus(r->conn) != CONNECTION_OK;
    *rc = lost || reap_transient(res) ? REAPER_RETRY : REAPER_FATAL;
    reap_err(r, *rc, "reaper: %s failed: %s", what,
             reap_pq_reason(r));
    PQclear(res);
    return NULL;
}

int reap_command(struct reap *r, const char *what, const char *sql)
{
    int rc = REAPER_OK;
    PGresult *res = reap_exec(r, PGRES_COMMAND_OK, &rc, what, sql, 0, NULL);
    PQclear(res);
    return res ? REAPER_OK : rc;
}

void reap_rollback(struct reap *r)
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
/* A backfill in progress (--backfill pending; backfill.h) means rows
 * committed before the slot's consistent point look confirmed to the slot
 * (it starts past them) although Kafka has not got them yet: nothing may
 * be deleted until the marker says 'done'. Read inside the deleting
 * transaction with FOR SHARE, so a marker written meanwhile either waits
 * for our COMMIT or fails our snapshot (40001, retried). Returns 1 when a
 * backfill holds the reaper back, 0 when not, or a negative reaper_rc. */
int reap_backfill_holds(struct reap *r)
{
    if (!r->slots_table)
        return 0; /* no table, no marker: --backfill refuses to run without it */
    const char *params[] = {r->slot};
    int rc = REAPER_OK;
    PGresult *res = reap_exec(r, PGRES_TUPLES_OK, &rc, "reading the slot's backfill marker",
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

int reaper_build_delete(const char *table, bool partitioned, char *buf, size_t cap)
{
    return reaper_build_delete_on(table, "created_at", partitioned, buf, cap);
}

int reaper_build_delete_on(const char *table, const char *column, bool partitioned, char *buf,
                           size_t cap)
{
    int n;
    if (partitioned)
        n = snprintf(buf, cap,
                     "DELETE FROM %s AS o USING (SELECT i.tableoid AS toid, i.ctid AS tid FROM "
                     "%s AS i, " SNAP_TOP " WHERE i.%s < now() - $1::interval AND "
                     XMIN64("i") " < $3::bigint ORDER BY i.%s LIMIT $2::bigint) "
                     "AS x WHERE o.tableoid = x.toid AND o.ctid = x.tid", table, table, column,
                     column);
    else
        n = snprintf(buf, cap,
                     "DELETE FROM %s WHERE ctid = ANY (ARRAY (SELECT i.ctid FROM %s AS i, "
                     SNAP_TOP " WHERE i.%s < now() - $1::interval AND " XMIN64("i")
                     " < $3::bigint ORDER BY i.%s LIMIT $2::bigint))", table, table, column,
                     column);
    return n < 0 || (size_t) n >= cap ? -1 : n;
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
    if ((rc = reap_command(r, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ")) < 0)
        return rc;
    if ((rc = reap_command(r, "SET lock_timeout",
                           "SET LOCAL lock_timeout = '" LOCK_TIMEOUT "'")) < 0)
        goto fail;
    if ((rc = reap_backfill_holds(r)) != 0) {
        reap_rollback(r);
        return rc < 0 ? rc : 0;
    }
    if (reaper_build_delete_on(table, r->created_at, partitioned, sql, sizeof sql) < 0) {
        rc = reap_err(r, REAPER_FATAL, "reaper: the DELETE for %s is too long", table);
        goto fail;
    }
    PGresult *res = reap_exec(r, PGRES_COMMAND_OK, &rc, "DELETE", sql, 3, params);
    if (res == NULL)
        goto fail;
    long n = atol(PQcmdTuples(res));
    PQclear(res);
    if ((rc = reap_command(r, "COMMIT", "COMMIT")) < 0)
        goto fail;
    log_debug("reaper: deleted %ld rows from %s (mark " LSN_FMT " xmin %s, confirmed " LSN_FMT
              ")", n, table, LSN_ARGS(r->res->used.insert_lsn), r->mark_x,
              LSN_ARGS(r->res->confirmed));
    return n;
fail:
    reap_rollback(r);
    return rc;
}

void reap_progress_note(struct reap *r)
{
    char line[512];
    if (!r->counting)
        return;
    if (progress_update(&r->prog, r->res->rows, mono_now()))
        log_info("%s", progress_line(&r->prog, line, sizeof line));
    metrics_set_progress(r->o->metrics, METRICS_WORK_REAPER, &r->prog, true);
}

/* The deleting starts: how many rows are expired in `table` (quoted),
 * then the progress from 0. Lines only once it lasts (quiet start). */
static void progress_begin(struct reap *r, const char *table)
{
    char sql[600];
    const char *params[] = {r->o->retention};
    bool exact = false;
    snprintf(sql, sizeof sql, "SELECT 1 FROM %s WHERE created_at < now() - $1::interval",
             table);
    int64_t expected = rowcount_bounded(r->conn, sql, 1, params, &exact);
    progress_start(&r->prog, "reaper", expected, exact, PROGRESS_INTERVAL, true, mono_now());
    r->counting = true;
    reap_progress_note(r);
}

/* The deleting ended (or stopped): the final line if any was said, the
 * gauges marked ended. */
static void progress_end(struct reap *r)
{
    char line[512];
    if (!r->counting)
        return;
    progress_update(&r->prog, r->res->rows, mono_now());
    if (progress_reported(&r->prog))
        log_info("%s", progress_final_line(&r->prog, line, sizeof line));
    metrics_set_progress(r->o->metrics, METRICS_WORK_REAPER, &r->prog, false);
    r->counting = false;
}

/* Deletes expired rows of `table` batch by batch until a short batch. */
static int reap_rows(struct reap *r, const char *table, bool partitioned)
{
    int retries = 0;
    for (;;) {
        if (reap_stopping(r))
            return REAPER_OK;
        long n = reap_batch(r, table, partitioned);
        if (n == REAPER_RETRY && PQstatus(r->conn) == CONNECTION_OK &&
            retries++ < BATCH_RETRIES) {
            log_debug("%s; retrying the batch", r->err);
            if (!reap_nap(r, r->o->pause > 0.5 ? r->o->pause : 0.5))
                return REAPER_OK;
            continue;
        }
        if (n < 0)
            return (int) n;
        retries = 0;
        if (n > 0) {
            r->res->rows += (uint64_t) n;
            r->res->batches++;
            reap_progress_note(r);
        }
        if (n < r->o->batch)
            return REAPER_OK;
        if (!reap_nap(r, r->o->pause))
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
             "SELECT EXISTS (SELECT 1 FROM %s WHERE %s < now() - $1::interval)", table,
             r->created_at);
    PGresult *res = reap_exec(r, PGRES_TUPLES_OK, &rc, "looking for expired rows", sql, 1, params);
    if (res == NULL)
        return rc;
    *any = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return 0;
}
/* Refuses a table any part of which is not logged: its rows are not in the
 * WAL, so the slot moving past them says nothing about their delivery.
 * Walks pg_inherits rather than calling pg_partition_tree(), which locks
 * every partition. */
static int check_logged(struct reap *r, const char *oid)
{
    const char *p[] = {oid};
    int rc = REAPER_OK;
    char sql[1500];
    outbox_catalog_logged_sql("$1::oid", sql, sizeof sql);
    PGresult *res = reap_exec(r, PGRES_TUPLES_OK, &rc, "checking the table is logged", sql, 1, p);
    if (res == NULL)
        return rc;
    if (atoll(PQgetvalue(res, 0, OUTBOX_LOGGED_COUNT)) > 0)
        rc = reap_err(r, REAPER_FATAL, "reaper: refusing to delete anything: %s (fix: %s). Such "
                      "a table writes no WAL, so its rows never reach slot %s while the slot "
                      "moves past them; rows written while it was not logged were never relayed "
                      "(re-publish them)", PQgetvalue(res, 0, OUTBOX_LOGGED_WHAT),
                      PQgetvalue(res, 0, OUTBOX_LOGGED_FIX), r->slot);
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
    const char *created_at_name =
        opts->created_at_column != NULL ? opts->created_at_column : "created_at";
    snprintf(r.created_at, sizeof r.created_at, "\"%s\"", created_at_name);

    memset(res, 0, sizeof *res);
    err[0] = '\0';
    if (!reaper_enabled(opts->retention)) {
        res->off = true;
        return REAPER_OK;
    }
    if (PQstatus(conn) != CONNECTION_OK)
        return reap_err(&r, REAPER_RETRY, "reaper: not connected to PostgreSQL");

    /* The retention must be an interval; <= 0 turns the reaper off. */
    const char *p1[] = {opts->retention};
    pr = reap_exec(&r, PGRES_TUPLES_OK, &rc, "checking --retention",
                   "SELECT $1::interval > interval '0'", 1, p1);
    if (pr == NULL) {
        if (rc == REAPER_FATAL)
            reap_err(&r, rc, "reaper: --retention \"%s\" is not a PostgreSQL interval (e.g. "
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
    pr = reap_exec(&r, PGRES_TUPLES_OK, &rc, "checking the slot",
                   "SELECT database IS NOT DISTINCT FROM current_database() FROM "
                   "pg_replication_slots WHERE slot_name = $1", 1, p2);
    if (pr == NULL)
        goto out;
    if (PQntuples(pr) == 0) {
        rc = reap_err(&r, REAPER_RETRY, "reaper: slot %s does not exist (yet); without it "
                      "nothing can be proven delivered, so every row is kept", opts->slot);
        goto out;
    }
    if (strcmp(PQgetvalue(pr, 0, 0), "t") != 0) {
        rc = reap_err(&r, REAPER_FATAL, "reaper: slot %s belongs to another database than "
                      "the one --dsn connects to; it cannot prove this outbox delivered",
                      opts->slot);
        goto out;
    }
    PQclear(pr);
    pr = reap_exec(&r, PGRES_TUPLES_OK, &rc, "looking for public.outbox_relay_slots",
                   "SELECT to_regclass('public.outbox_relay_slots') IS NOT NULL", 0, NULL);
    if (pr == NULL)
        goto out;
    r.slots_table = strcmp(PQgetvalue(pr, 0, 0), "t") == 0;
    PQclear(pr);

    /* What the table is: plain, range-partitioned on created_at, or
     * partitioned some other way. */
    const char *p3[] = {opts->table_schema, opts->table_name, created_at_name};
    pr = reap_exec(&r, PGRES_TUPLES_OK, &rc, "inspecting the outbox table",
            "SELECT c.oid, c.relkind, a.attnum IS NOT NULL, "
            "coalesce(pt.partstrat = 'r' AND pt.partnatts = 1 AND pt.partattrs[0] = a.attnum, "
            "false), coalesce(pt.partdefid, 0), "
            "coalesce((SELECT quote_ident(dn.nspname) || '.' || quote_ident(d.relname) || "
            "'|' || d.relkind::text FROM pg_class d JOIN pg_namespace dn ON dn.oid = d.relnamespace "
            "WHERE d.oid = pt.partdefid), '') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $3 "
            "AND a.attnum > 0 AND NOT a.attisdropped "
            "LEFT JOIN pg_partitioned_table pt ON pt.partrelid = c.oid "
            "WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            3, p3);
    if (pr == NULL)
        goto out;
    if (PQntuples(pr) == 0) {
        rc = reap_err(&r, REAPER_FATAL, "reaper: table %s.%s does not exist",
                      opts->table_schema, opts->table_name);
        goto out;
    }
    if (strcmp(PQgetvalue(pr, 0, 2), "t") != 0) {
        rc = reap_err(&r, REAPER_FATAL, "reaper: table %s.%s has no %s column",
                      opts->table_schema, opts->table_name, created_at_name);
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
        rc = reap_err(&r, REAPER_FATAL, "out of memory");
        goto out;
    }

    if ((rc = check_logged(&r, oid)) < 0)
        goto out;

    /* The fresh mark, stored for later runs even when this one cannot
     * use it. */
    rc = reap_take_mark(&r, &res->fresh);
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

    rc = reap_wait_confirmed(&r, res->fresh.insert_lsn);
    if (rc < 0)
        goto out;
    if (rc == 1) {
        res->used = res->fresh;
        res->have_mark = true;
    } else if (!reap_stopping(&r)) {
        res->lagging = true;
        res->wanted = res->fresh.insert_lsn;
        if ((rc = reap_choose_mark(&r)) < 0)
            goto out;
        res->have_mark = rc == 1;
    }
    rc = REAPER_OK;
    if (res->have_mark && !reap_stopping(&r)) {
        snprintf(r.mark_x, sizeof r.mark_x, "%llu", (unsigned long long) res->used.xmin);
        progress_begin(&r, qtable);
        if (partitioned && by_created_at) {
            rc = reap_drop_expired_partitions(&r, oid, defoid);
            /* Rows that landed in the DEFAULT partition (no partition
             * covered them) age out row by row. */
            if (rc == REAPER_OK && qdefault != NULL && !(res->held_back && !res->lagging) &&
                !reap_stopping(&r))
                rc = reap_rows(&r, qdefault, def_partitioned);
        } else {
            rc = reap_rows(&r, qtable, partitioned);
        }
        progress_end(&r);
    }
    if (rc == REAPER_OK && res->lagging && !res->held_back && !reap_stopping(&r)) {
        bool left = true;
        if (!res->have_mark || (rc = any_expired(&r, qtable, &left)) == 0)
            res->held_back = left;
    }
prune:
    if (!res->marks_off && PQstatus(conn) == CONNECTION_OK)
        reap_prune_marks(&r);
out:
    PQclear(pr);
    free(qtable);
    free(qdefault);
    reap_rollback(&r);
    res->seconds = mono_now() - started;
    return rc;
}
