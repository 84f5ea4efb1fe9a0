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
 * This file holds the run, step by step (its checks of the retention, the
 * slot and the table, the mark it reaps by, the reaping); the calls point
 * down only: the deletion of rows in batches is in reaper_rows.c, the
 * dropping of whole partitions in reaper_partitions.c, the marks of the
 * rule in reaper_marks.c, and what they all share in reaper_common.c
 * (declared in reaper_internal.h).
 */
#include "outbox_relay/ops/reaper.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/pg/outbox_catalog.h"
#include "reaper_internal.h"

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

/* What inspect_table learned about the outbox table. */
struct reap_table {
    char *qtable;        /* "schema"."table", quoted (owned) */
    char *qdefault;      /* its DEFAULT partition, quoted (owned); NULL: none */
    char oid[16];
    char defoid[16];     /* the DEFAULT partition's oid, "0" when none */
    bool partitioned;    /* relkind 'p' */
    bool by_created_at;  /* range-partitioned on the timestamp column alone */
    bool def_partitioned; /* the DEFAULT partition is itself partitioned */
};

/* The retention must be an interval; <= 0 turns the reaper off
 * (res->off). */
static int check_retention(struct reap *r)
{
    const char *p[] = {r->o->retention};
    int rc = REAPER_OK;
    PGresult *pr = reap_exec(r, PGRES_TUPLES_OK, &rc, "checking --retention",
                             "SELECT $1::interval > interval '0'", 1, p);
    if (pr == NULL) {
        if (rc == REAPER_FATAL)
            reap_err(r, rc, "reaper: --retention \"%s\" is not a PostgreSQL interval (e.g. "
                     "\"7 days\"; 0 turns the reaper off)", r->o->retention);
        return rc;
    }
    r->res->off = strcmp(PQgetvalue(pr, 0, 0), "t") != 0;
    PQclear(pr);
    return REAPER_OK;
}

/* The slot must exist and belong to this database: its position says
 * nothing about another database's outbox. Also notes whether
 * public.outbox_relay_slots (the backfill marker) exists. */
static int check_slot(struct reap *r)
{
    const char *p[] = {r->slot};
    int rc = REAPER_OK;
    PGresult *pr = reap_slot_exec(r, PGRES_TUPLES_OK, &rc, "checking the slot",
                                  "SELECT database IS NOT DISTINCT FROM current_database() "
                                  "FROM pg_replication_slots WHERE slot_name = $1", 1, p);
    if (pr == NULL)
        return rc;
    if (PQntuples(pr) == 0)
        rc = reap_err(r, REAPER_RETRY, "reaper: slot %s does not exist (yet); without it "
                      "nothing can be proven delivered, so every row is kept", r->slot);
    else if (strcmp(PQgetvalue(pr, 0, 0), "t") != 0)
        rc = reap_err(r, REAPER_FATAL, "reaper: slot %s belongs to another database than "
                      "the one --dsn connects to; it cannot prove this outbox delivered",
                      r->slot);
    PQclear(pr);
    if (rc < 0)
        return rc;
    pr = reap_exec(r, PGRES_TUPLES_OK, &rc, "looking for public.outbox_relay_slots",
                   "SELECT to_regclass('public.outbox_relay_slots') IS NOT NULL", 0, NULL);
    if (pr == NULL)
        return rc;
    r->slots_table = strcmp(PQgetvalue(pr, 0, 0), "t") == 0;
    PQclear(pr);
    return REAPER_OK;
}

/* What the table is: plain, range-partitioned on the timestamp column, or
 * partitioned some other way; into *t (its strings freed by the caller,
 * also on failure). */
static int inspect_table(struct reap *r, const char *created_at_name, struct reap_table *t)
{
    const struct reaper_options *o = r->o;
    const char *p[] = {o->table_schema, o->table_name, created_at_name};
    int rc = REAPER_OK;
    PGresult *pr = reap_exec(r, PGRES_TUPLES_OK, &rc, "inspecting the outbox table",
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
            3, p);
    if (pr == NULL)
        return rc;
    if (PQntuples(pr) == 0) {
        rc = reap_err(r, REAPER_FATAL, "reaper: table %s.%s does not exist", o->table_schema,
                      o->table_name);
        goto out;
    }
    if (strcmp(PQgetvalue(pr, 0, 2), "t") != 0) {
        rc = reap_err(r, REAPER_FATAL, "reaper: table %s.%s has no %s column",
                      o->table_schema, o->table_name, created_at_name);
        goto out;
    }
    t->partitioned = PQgetvalue(pr, 0, 1)[0] == 'p';
    t->by_created_at = strcmp(PQgetvalue(pr, 0, 3), "t") == 0;
    t->qtable = quote_qualified(r->conn, o->table_schema, o->table_name);
    snprintf(t->oid, sizeof t->oid, "%s", PQgetvalue(pr, 0, 0));
    snprintf(t->defoid, sizeof t->defoid, "%s", PQgetvalue(pr, 0, 4));
    const char *def = PQgetvalue(pr, 0, 5), *bar = strrchr(def, '|');
    t->def_partitioned = bar != NULL && bar[1] == 'p';
    if (bar != NULL)
        t->qdefault = strndup(def, (size_t) (bar - def));
    if (t->qtable == NULL || (bar != NULL && t->qdefault == NULL))
        rc = reap_err(r, REAPER_FATAL, "out of memory");
out:
    PQclear(pr);
    return rc;
}

/* The fresh mark, stored for later runs even when this one cannot use it
 * (res->marks_off, with the reason in res->marks_err). */
static int take_fresh_mark(struct reap *r)
{
    int rc = reap_take_mark(r, &r->res->fresh);
    if (rc == 0) {
        r->res->marks_off = true;
        snprintf(r->res->marks_err, sizeof r->res->marks_err, "%s", r->err);
        r->err[0] = '\0';
    }
    return rc < 0 ? rc : REAPER_OK;
}

/* The mark this run reaps by: the fresh one once the slot confirms it
 * within confirm_wait, else ("lagging") the stored confirmed mark with the
 * greatest X, if any (res->have_mark, res->used). */
static int choose_mark(struct reap *r)
{
    struct reaper_result *res = r->res;
    int rc = reap_wait_confirmed(r, res->fresh.insert_lsn);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        res->used = res->fresh;
        res->have_mark = true;
    } else if (!reap_stopping(r)) {
        res->lagging = true;
        res->wanted = res->fresh.insert_lsn;
        if ((rc = reap_choose_mark(r)) < 0)
            return rc;
        res->have_mark = rc == 1;
    }
    return REAPER_OK;
}

/* Deletes (or drops) what the used mark covers: whole expired partitions
 * of a table range-partitioned on the timestamp column, then the rows of
 * its DEFAULT partition; rows in batches otherwise. */
static int reap_by_mark(struct reap *r, const struct reap_table *t)
{
    struct reaper_result *res = r->res;
    int rc = REAPER_OK;
    snprintf(r->mark_x, sizeof r->mark_x, "%llu", (unsigned long long) res->used.xmin);
    reap_progress_begin(r, t->qtable);
    if (t->partitioned && t->by_created_at) {
        rc = reap_drop_expired_partitions(r, t->oid, t->defoid);
        /* Rows that landed in the DEFAULT partition (no partition covered
         * them) age out row by row. */
        if (rc == REAPER_OK && t->qdefault != NULL && !(res->held_back && !res->lagging) &&
            !reap_stopping(r))
            rc = reap_rows(r, t->qdefault, t->def_partitioned);
    } else {
        rc = reap_rows(r, t->qtable, t->partitioned);
    }
    reap_progress_end(r);
    return rc;
}

/* Lagging: whether expired rows had to be kept (res->held_back) — all of
 * them when no mark covers any, else those still there. */
static int note_held_back(struct reap *r, const struct reap_table *t)
{
    struct reaper_result *res = r->res;
    if (!res->lagging || res->held_back || reap_stopping(r))
        return REAPER_OK;
    bool left = true;
    int rc = REAPER_OK;
    if (!res->have_mark || (rc = reap_any_expired(r, t->qtable, &left)) == 0)
        res->held_back = left;
    return rc;
}

int reaper_run(PGconn *conn, const struct reaper_options *opts, struct reaper_result *res,
               char *err, size_t errlen)
{
    struct reap r = {.conn = conn, .slot_conn = opts->slot_conn, .o = opts, .res = res,
                     .err = err, .errlen = errlen, .slot = opts->slot};
    struct reap_table t = {.qtable = NULL};
    double started = mono_now();
    const char *created_at_name =
        opts->created_at_column != NULL ? opts->created_at_column : "created_at";
    int rc = REAPER_OK;
    bool any = false;

    snprintf(r.created_at, sizeof r.created_at, "\"%s\"", created_at_name);
    memset(res, 0, sizeof *res);
    err[0] = '\0';
    if (!reaper_enabled(opts->retention)) {
        res->off = true;
        return REAPER_OK;
    }
    if (PQstatus(conn) != CONNECTION_OK)
        return reap_err(&r, REAPER_RETRY, "reaper: not connected to PostgreSQL");

    if ((rc = check_retention(&r)) < 0 || res->off)
        goto out;
    if ((rc = check_slot(&r)) < 0 || (rc = inspect_table(&r, created_at_name, &t)) < 0 ||
        (rc = check_logged(&r, t.oid)) < 0 || (rc = take_fresh_mark(&r)) < 0 ||
        (rc = reap_any_expired(&r, t.qtable, &any)) < 0)
        goto out;
    if (any) { /* an idle run ends without waiting for the slot */
        if ((rc = choose_mark(&r)) < 0)
            goto out;
        if (res->have_mark && !reap_stopping(&r))
            rc = reap_by_mark(&r, &t);
        if (rc == REAPER_OK)
            rc = note_held_back(&r, &t);
    }
    if (!res->marks_off && PQstatus(conn) == CONNECTION_OK)
        reap_prune_marks(&r);
out:
    free(t.qtable);
    free(t.qdefault);
    reap_rollback(&r);
    res->seconds = mono_now() - started;
    return rc;
}
