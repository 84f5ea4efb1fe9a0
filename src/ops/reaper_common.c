/*
 * reaper_common.c — the bottom of the reaper: what every step of a run
 * (reaper_marks.c, reaper_partitions.c, reaper_rows.c, reaper.c) shares and
 * calls down to — running a statement and classifying its failure, the
 * error text, the stop and the nap between steps, the backfill marker that
 * holds every deletion back, and the progress note. Calls nothing of the
 * reaper's other files, so the reaper's calls point one way: reaper.c (the
 * run) → rows, partitions → marks → common.
 */
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

/* Parses an LSN from column col of res row 0 into *out. */
int reap_result_lsn(struct reap *r, PGresult *res, int col, lsn_t *out)
{
    const char *v = PQntuples(res) == 1 ? PQgetvalue(res, 0, col) : "";
    if (lsn_parse(v, strlen(v), out) < 0)
        return reap_err(r, REAPER_FATAL, "reaper: unexpected WAL position \"%s\"", v);
    return 0;
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

void reap_progress_note(struct reap *r)
{
    char line[512];
    if (!r->counting)
        return;
    if (progress_update(&r->prog, r->res->rows, mono_now()))
        log_info("%s", progress_line(&r->prog, line, sizeof line));
    metrics_set_progress(r->o->metrics, METRICS_WORK_REAPER, &r->prog, true);
}
