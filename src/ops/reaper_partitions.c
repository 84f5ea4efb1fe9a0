/*
 * reaper_partitions.c — a range-partitioned outbox (on created_at) loses its
 * expired partitions whole (reaper.h): each is locked in SHARE mode, then
 * dropped once the slot has confirmed W0 or, lagging, once none of its rows
 * is at or above the used mark's X.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/log.h"
#include "reaper_internal.h"

/* Drops one expired partition (qpart, quoted) of the table whose oid is
 * parent_oid. Returns 1 dropped, 0 kept (res->held_back) or skipped, or a
 * negative reaper_rc. */
static int drop_partition(struct reap *r, const char *qpart, const char *parent_oid,
                          long long est_rows)
{
    char sql[900];
    int rc;
    lsn_t w0 = 0;

    if ((rc = reap_command(r, "BEGIN", "BEGIN")) < 0)
        return rc;
    if ((rc = reap_command(r, "SET lock_timeout",
                           "SET LOCAL lock_timeout = '" LOCK_TIMEOUT "'")) < 0)
        goto fail;
    /* SHARE conflicts with the ROW EXCLUSIVE lock every transaction that
     * inserted into the partition holds until it ends: granted, it means
     * none is in progress and none can start until we commit, so every
     * row in it has committed. Unlike ACCESS EXCLUSIVE it lets readers of
     * the parent through during the wait for the slot (and is not
     * WAL-logged, so W0 is not pushed past the flushed WAL by our own lock
     * record). DROP upgrades it at the end. */
    snprintf(sql, sizeof sql, "LOCK TABLE %s IN SHARE MODE", qpart);
    if ((rc = reap_command(r, "LOCK partition", sql)) < 0)
        goto fail;
    const char *p1[] = {qpart, parent_oid};
    PGresult *res = reap_exec(r, PGRES_TUPLES_OK, &rc, "reading W0",
                              "SELECT pg_current_wal_insert_lsn()::text, EXISTS (SELECT 1 FROM "
                              "pg_inherits WHERE inhrelid = $1::regclass AND inhparent = $2::oid)",
                              2, p1);
    if (res == NULL)
        goto fail;
    if ((rc = reap_result_lsn(r, res, 0, &w0)) < 0) {
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
        rc = reap_wait_confirmed(r, w0);
        if (rc == 0 && !reap_stopping(r)) {
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
        res = reap_exec(r, PGRES_TUPLES_OK, &rc, "checking the partition's rows against the mark",
                        sql, 1, p2);
        if (res == NULL)
            goto fail;
        rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (rc == 0)
            r->res->held_back = true;
    }
    if (rc <= 0)
        goto fail;
    if ((rc = reap_backfill_holds(r)) != 0) {
        rc = rc < 0 ? rc : 0;
        goto fail;
    }
    if ((rc = reap_command(r, "SET lock_timeout",
                           "SET LOCAL lock_timeout = '" DROP_LOCK_TIMEOUT "'")) < 0)
        goto fail;
    snprintf(sql, sizeof sql, "DROP TABLE %s", qpart);
    if ((rc = reap_command(r, "DROP partition", sql)) < 0)
        goto fail;
    if ((rc = reap_command(r, "COMMIT", "COMMIT")) < 0)
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
    reap_progress_note(r);
    return 1;
fail:
    reap_rollback(r);
    return rc;
}

/* Drops every partition of parent_oid whose upper bound is at or before
 * now() - retention, oldest first. default_oid ("0" when none) is never
 * dropped. */
int reap_drop_expired_partitions(struct reap *r, const char *parent_oid,
                                   const char *default_oid)
{
    const char *params[] = {parent_oid, r->o->retention, default_oid};
    int rc = REAPER_OK;
    /* The upper bound as PostgreSQL prints it: FOR VALUES FROM ('…') TO
     * ('…'); MAXVALUE and DEFAULT do not match and are never dropped. */
    PGresult *res = reap_exec(r, PGRES_TUPLES_OK, &rc, "listing partitions",
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
    for (int i = 0; i < PQntuples(res) && !reap_stopping(r); i++) {
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
        if (!reap_nap(r, r->o->pause))
            break;
    }
    PQclear(res);
    return rc < 0 ? rc : REAPER_OK;
}
