/*
 * reaper_rows.c — deleting expired rows batch by batch (reaper.h, "THE
 * RULE"): the DELETE of one batch (pure, reaper_build_delete), its short
 * REPEATABLE READ transaction, the loop over batches with retries and
 * pauses, and the run's progress over them.
 */
#include "outbox_relay/ops/reaper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/pg/rowcount.h"
#include "reaper_internal.h"

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


/* The deleting starts: how many rows are expired in `table` (quoted),
 * then the progress from 0. Lines only once it lasts (quiet start). */
void reap_progress_begin(struct reap *r, const char *table)
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

/* The deleting ended (or stopped): the final line if any was said; the
 * final progress is handed to the caller (reaper_result.progress), which
 * marks the gauges ended once it has counted the rows. */
void reap_progress_end(struct reap *r)
{
    char line[512];
    if (!r->counting)
        return;
    progress_update(&r->prog, r->res->rows, mono_now());
    if (progress_reported(&r->prog))
        log_info("%s", progress_final_line(&r->prog, line, sizeof line));
    r->res->progress = r->prog;
    r->res->progress_ended = true;
    r->counting = false;
}

/* Deletes expired rows of `table` batch by batch until a short batch. */
int reap_rows(struct reap *r, const char *table, bool partitioned)
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
int reap_any_expired(struct reap *r, const char *table, bool *any)
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
