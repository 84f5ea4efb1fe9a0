/*
 * backfill_run.c — one run of the backfill (backfill_run, backfill.h). On
 * its own connection, in the slot's exported snapshot or a fresh one, the
 * rows are read through a cursor in batches so that a large backlog never
 * sits in memory at once, and handed to the sink in id order. After each
 * batch the last id is queued as a checkpoint (backfill_ckpt.h); a
 * checkpoint whose rows are all acknowledged becomes backfill_done_id, at
 * most once every PROGRESS_EVERY s (backfill.c writes it).
 *
 * The steps, in run_steps(): read the marker, open the data connection,
 * read the table (dispatched_at? the select list), bound the backlog,
 * count it for the progress lines, publish, wait for the last
 * acknowledgements, mark it 'done'. Calls down into backfill.c (the marker,
 * backfill_internal.h) and backfill_rows.c; neither calls back.
 */
#include "outbox_relay/relay/backfill.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/progress.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/rowcount.h"

#include "backfill_internal.h"
#include "backfill_rows.h"

#define BACKFILL_FETCH 1000 /* rows per FETCH */
#define PROGRESS_EVERY 1.0  /* s between writes of backfill_done_id */

/* A statement on the data connection that must succeed. */
static PGresult *data_exec(struct backfill *b, PGconn *conn, ExecStatusType want, int *rc,
                           const char *what, const char *sql, int nparams,
                           const char *const *params)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == want)
        return res;
    char msg[512];
    pgconn_failure(conn, res, msg, sizeof msg);
    *rc = PQstatus(conn) == CONNECTION_OK ? BACKFILL_FATAL : BACKFILL_RETRY;
    backfill_fail(b, *rc, "slot=%s: backfill: %s failed: %s", b->slot, what, msg);
    PQclear(res);
    return NULL;
}

/* Logs a progress line when one is due, and hands the numbers to the
 * sink's gauges. */
static void note_progress(const struct backfill_sink *sink, struct progress *pr)
{
    char line[512];
    if (progress_update(pr, sink->acked(sink->ctx), mono_now()))
        log_info("%s", progress_line(pr, line, sizeof line));
    if (sink->progress != NULL)
        sink->progress(sink->ctx, pr, true);
}

void backfill_progress_tick(struct backfill *b)
{
    if (b->sink != NULL)
        note_progress(b->sink, &b->pr);
}

/* One run: the data connection in its snapshot, what it selects, and how
 * far the rows have gone. Every pointer is freed by run_free. */
struct run {
    struct backfill *b;
    const struct backfill_sink *sink;
    PGconn *conn;                /* reads the rows; its own transaction */
    char *qschema, *qtable;      /* quoted by libpq */
    char qid[80];                /* the mapped id column, quoted */
    const char *pending;         /* the WHERE term of rows still to publish */
    char cols[4096];             /* backfill_select_list() */
    struct backfill_marker m;    /* the marker as this run sees it */
    struct backfill_progress q;  /* checkpoints waiting for their acks */
    struct outbox_scratch scratch;
    char done_id[ID_MAX];        /* the newest id all of whose rows are acked */
    uint64_t n;                  /* rows emitted */
    double last_write;           /* monotonic s of the last progress write */
};

static void run_free(struct run *r)
{
    backfill_progress_free(&r->q);
    outbox_scratch_free(&r->scratch);
    PQfreemem(r->qschema);
    PQfreemem(r->qtable);
    PQfinish(r->conn);
}

/* Opens the data connection in a read-only repeatable-read transaction, in
 * the slot's exported snapshot when given. */
static int run_open(struct run *r, const char *snapshot)
{
    struct backfill *b = r->b;
    char err[512];
    r->conn = pgconn_open(b->dsn, APP_NAME, err, sizeof err);
    if (r->conn == NULL)
        return backfill_fail(b, BACKFILL_RETRY,
                             "slot=%s: backfill: cannot connect to PostgreSQL: %s", b->slot, err);
    r->qschema = PQescapeIdentifier(r->conn, b->table_schema, strlen(b->table_schema));
    r->qtable = PQescapeIdentifier(r->conn, b->table_name, strlen(b->table_name));
    if (r->qschema == NULL || r->qtable == NULL) {
        pgconn_error(r->conn, err, sizeof err);
        return backfill_fail(b, BACKFILL_RETRY, "slot=%s: backfill: cannot quote names: %s",
                             b->slot, err);
    }
    int rc = BACKFILL_OK;
    PGresult *res = data_exec(b, r->conn, PGRES_COMMAND_OK, &rc, "BEGIN",
                              "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL);
    if (res == NULL)
        return rc;
    PQclear(res);
    if (snapshot == NULL)
        return BACKFILL_OK;
    char *lit = PQescapeLiteral(r->conn, snapshot, strlen(snapshot));
    char sql[256];
    snprintf(sql, sizeof sql, "SET TRANSACTION SNAPSHOT %s", lit ? lit : "''");
    PQfreemem(lit);
    if ((res = data_exec(b, r->conn, PGRES_COMMAND_OK, &rc, "importing the slot's snapshot",
                         sql, 0, NULL)) == NULL)
        return rc;
    PQclear(res);
    return BACKFILL_OK;
}

/* What the run selects: rows the poller has not dispatched (when the table
 * has its dispatched_at column), by the mapped id column, in the layout's
 * column names. */
static int run_read_table(struct run *r)
{
    char relname[300];
    snprintf(relname, sizeof relname, "%s.%s", r->qschema, r->qtable);
    const char *prel[] = {relname};
    int rc = BACKFILL_OK;
    PGresult *res = data_exec(r->b, r->conn, PGRES_TUPLES_OK, &rc, "reading the table's columns",
                              "SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass "
                              "AND attname = 'dispatched_at' AND NOT attisdropped",
                              1, prel);
    if (res == NULL)
        return rc;
    r->pending = PQntuples(res) == 1 ? "o.dispatched_at IS NULL" : "true";
    PQclear(res);
    snprintf(r->qid, sizeof r->qid, "\"%s\"", r->b->columns->id);
    if (backfill_select_list(r->b->columns, r->cols, sizeof r->cols) < 0)
        return backfill_fail(r->b, BACKFILL_FATAL, "slot=%s: backfill: too many columns",
                             r->b->slot);
    return BACKFILL_OK;
}

/* The first run, or a resume that does not know the bound yet: the largest
 * pending id now visible bounds the backlog (see backfill.h), recorded with
 * the marker 'running'. A resume that knows it says what is left. */
static int run_bound(struct run *r, const char *snapshot, lsn_t consistent)
{
    struct backfill *b = r->b;
    struct backfill_marker *m = &r->m;
    if (snapshot != NULL || m->state == BACKFILL_CREATING) {
        char sql[1024];
        snprintf(sql, sizeof sql,
                 "SELECT o.%s::text FROM %s.%s o WHERE %s ORDER BY o.%s DESC LIMIT 1", r->qid,
                 r->qschema, r->qtable, r->pending, r->qid);
        int rc = BACKFILL_OK;
        PGresult *res = data_exec(b, r->conn, PGRES_TUPLES_OK, &rc,
                                  "finding the backlog's bound", sql, 0, NULL);
        if (res == NULL)
            return rc;
        m->has_max = false;
        m->has_done = false;
        m->rows = 0;
        if (PQntuples(res) == 1)
            backfill_copy_id(m->max_id, PQgetvalue(res, 0, 0), &m->has_max);
        bool too_long = PQntuples(res) == 1 && !m->has_max;
        PQclear(res);
        if (too_long)
            return backfill_fail(b, BACKFILL_FATAL, "slot=%s: backfill: ids longer than %d "
                                 "characters cannot be recorded", b->slot, ID_MAX - 1);
        if ((rc = backfill_write_running(b, m, consistent)) != BACKFILL_OK)
            return rc;
    }
    if (snapshot == NULL)
        log_info("slot=%s: backfill: resuming the unfinished backfill: rows with %s and "
                 "%s%s < id <= %s (%llu rows acknowledged before)", b->slot, r->pending,
                 m->has_done ? m->done_id : "", m->has_done ? "" : "-inf",
                 m->has_max ? m->max_id : "(none)", m->rows);
    return BACKFILL_OK;
}

/* The rows of this run, after SELECT: FROM the table WHERE pending, by the
 * mapped id column, up to the bound ($1) and past the done id ($2) when
 * there is one. The count and the cursor share it, so they agree. */
static void run_range(const struct run *r, char *buf, size_t cap)
{
    bool done = r->m.has_done;
    snprintf(buf, cap, "FROM %s.%s o WHERE %s AND o.%s <= $1%s%s%s", r->qschema, r->qtable,
             r->pending, r->qid, done ? " AND o." : "", done ? r->qid : "", done ? " > $2" : "");
}

/* Counts what this run has to publish (rowcount.h: exact up to its limit,
 * else the planner's estimate) and logs the first progress line. */
static void run_start_progress(struct run *r)
{
    struct backfill *b = r->b;
    int64_t expected = 0;
    bool exact = true;
    if (r->m.has_max) {
        char range[2048], sql[2100];
        run_range(r, range, sizeof range);
        snprintf(sql, sizeof sql, "SELECT 1 %s", range);
        const char *pc[] = {r->m.max_id, r->m.done_id};
        expected = rowcount_bounded(r->conn, sql, r->m.has_done ? 2 : 1, pc, &exact);
    }
    char what[128];
    snprintf(what, sizeof what, "slot=%s: backfill", b->slot);
    progress_start(&b->pr, what, expected, exact, PROGRESS_INTERVAL, false, mono_now());
    b->sink = r->sink;
    note_progress(r->sink, &b->pr);
}

/* After a batch or a wait: the progress line and gauges and, at most every
 * PROGRESS_EVERY s, the newest checkpoint all of whose rows are acknowledged
 * written as backfill_done_id, so that a resume starts after it. */
static int run_record_progress(struct run *r)
{
    note_progress(r->sink, &r->b->pr);
    uint64_t acked = r->sink->acked(r->sink->ctx);
    if (!backfill_progress_done(&r->q, acked, r->done_id) ||
        mono_now() - r->last_write < PROGRESS_EVERY)
        return BACKFILL_OK;
    int rc = backfill_write_progress(r->b, r->done_id, r->m.rows + acked);
    if (rc == BACKFILL_OK)
        r->last_write = mono_now();
    return rc;
}

/* Hands the rows of one fetched batch to the sink, in order. */
static int run_emit(struct run *r, const PGresult *res)
{
    struct backfill *b = r->b;
    for (int i = 0; i < PQntuples(res); i++) {
        struct outbox_event ev;
        char why[128];
        if (backfill_row_event(b->columns, res, i, &r->scratch, &ev, why, sizeof why) < 0)
            return backfill_fail(b, BACKFILL_FATAL, "slot=%s: backfill: row id=%s: %s", b->slot,
                                 PQgetvalue(res, i, 0), why);
        if (r->sink->emit(r->sink->ctx, &ev, r->n + 1) < 0)
            return backfill_fail(b, BACKFILL_STOPPED, "slot=%s: backfill: stopped after %llu "
                                 "rows (at id %s)", b->slot, (unsigned long long) r->n,
                                 ev.event_id);
        r->n++;
    }
    return BACKFILL_OK;
}

/* Publishes the run's rows in id order through a cursor, BACKFILL_FETCH at
 * a time, noting each batch's last id as a checkpoint. */
static int run_publish(struct run *r)
{
    char range[2048], sql[8192];
    run_range(r, range, sizeof range);
    snprintf(sql, sizeof sql, "DECLARE outbox_backfill NO SCROLL CURSOR FOR SELECT %s %s "
             "ORDER BY o.%s", r->cols, range, r->qid);
    const char *pc[] = {r->m.max_id, r->m.done_id};
    int rc = BACKFILL_OK;
    PGresult *res = data_exec(r->b, r->conn, PGRES_COMMAND_OK, &rc,
                              "declaring the backfill cursor", sql, r->m.has_done ? 2 : 1, pc);
    if (res == NULL)
        return rc;
    PQclear(res);
    snprintf(sql, sizeof sql, "FETCH %d FROM outbox_backfill", BACKFILL_FETCH);
    int got;
    do {
        if ((res = data_exec(r->b, r->conn, PGRES_TUPLES_OK, &rc, "FETCH", sql, 0, NULL)) ==
            NULL)
            return rc;
        got = PQntuples(res);
        rc = run_emit(r, res);
        if (rc == BACKFILL_OK && got > 0)
            backfill_progress_note(&r->q, r->n, PQgetvalue(res, got - 1, 0));
        PQclear(res);
        if (rc == BACKFILL_OK)
            rc = run_record_progress(r);
    } while (rc == BACKFILL_OK && got == BACKFILL_FETCH);
    return rc;
}

/* Every row must be acknowledged before the marker is cleared. */
static int run_drain(struct run *r)
{
    const struct backfill_sink *sink = r->sink;
    while (sink->acked(sink->ctx) < r->n) {
        if (sink->serve(sink->ctx, 100) < 0)
            return backfill_fail(r->b, BACKFILL_STOPPED, "slot=%s: backfill: stopped with %llu "
                                 "of %llu rows acknowledged", r->b->slot,
                                 (unsigned long long) sink->acked(sink->ctx),
                                 (unsigned long long) r->n);
        int rc = run_record_progress(r);
        if (rc != BACKFILL_OK)
            return rc;
    }
    return BACKFILL_OK;
}

/* Every row acknowledged: the marker says 'done'; the final line. */
static int run_finish(struct run *r)
{
    struct backfill *b = r->b;
    if (!backfill_locked(b))
        return backfill_fail(b, BACKFILL_RETRY,
                             "slot=%s: backfill: the lock was lost before the end", b->slot);
    int rc = backfill_write_done(b, r->m.rows + r->n);
    if (rc != BACKFILL_OK)
        return rc;
    char line[512];
    progress_update(&b->pr, r->n, mono_now());
    log_info("%s", progress_final_line(&b->pr, line, sizeof line));
    if (r->sink->progress != NULL)
        r->sink->progress(r->sink->ctx, &b->pr, false);
    return BACKFILL_OK;
}

/* The run, step by step; what it opened is freed by the caller. */
static int run_steps(struct run *r, const char *snapshot, lsn_t consistent)
{
    struct backfill *b = r->b;
    if (!backfill_locked(b))
        return backfill_fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost", b->slot);
    int rc = backfill_read_marker(b, &r->m);
    if (rc != BACKFILL_OK)
        return rc;
    if (snapshot == NULL && r->m.state != BACKFILL_CREATING && r->m.state != BACKFILL_RUNNING)
        return BACKFILL_OK; /* finished meanwhile */
    if ((rc = run_open(r, snapshot)) != BACKFILL_OK ||
        (rc = run_read_table(r)) != BACKFILL_OK ||
        (rc = run_bound(r, snapshot, consistent)) != BACKFILL_OK)
        return rc;
    run_start_progress(r);
    if (r->m.has_max && (rc = run_publish(r)) != BACKFILL_OK) /* else nothing pending */
        return rc;
    if ((rc = run_drain(r)) != BACKFILL_OK)
        return rc;
    return run_finish(r);
}

int backfill_run(struct backfill *b, const char *snapshot, lsn_t consistent,
                 const struct backfill_sink *sink, uint64_t *rows)
{
    struct run r = {.b = b, .sink = sink};
    int rc = run_steps(&r, snapshot, consistent);
    b->sink = NULL;
    run_free(&r);
    *rows = r.n;
    return rc;
}
