/*
 * backfill.c — publish the rows a polling relayer left undispatched, under
 * a durable marker and a lock (see backfill.h for the rule and why it
 * leaves no gap). The rows are read through a cursor in batches so a large
 * backlog never sits in memory at once; after each batch the last id is
 * queued as a checkpoint, and a checkpoint whose rows are all acknowledged
 * becomes backfill_done_id (written at most once a second, skipped while
 * someone holds the marker row).
 */
#include "outbox_relay/relay/backfill.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/core/progress.h"
#include "outbox_relay/pg/rowcount.h"

#define BACKFILL_FETCH 1000
#define BACKFILL_ERRLEN 1024
#define PROGRESS_EVERY 1.0 /* s between writes of backfill_done_id */
#define ID_MAX BACKFILL_ID_MAX
#define APP_NAME "outbox-relay-backfill"

struct backfill {
    char *dsn;
    char *slot;
    char *table_schema;
    char *table_name;
    PGconn *conn; /* the lock and the marker; autocommit */
    bool locked;
    bool schema_ok; /* the backfill columns exist */
    const struct outbox_columns_map *columns; /* the outbox's layout (borrowed) */
    char errstr[BACKFILL_ERRLEN];
    /* During backfill_run: its progress and sink (backfill_progress_tick). */
    const struct backfill_sink *sink;
    struct progress pr;
};

/* What the marker row says. */
struct marker {
    enum backfill_state state;
    bool has_max, has_done;
    char max_id[ID_MAX], done_id[ID_MAX];
    unsigned long long rows;
};

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

static int fail(struct backfill *b, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct backfill *b, int rc, const char *fmt, ...)
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
static PGresult *run(struct backfill *b, ExecStatusType want, int *rc, const char *what,
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
    fail(b, *rc, "slot=%s: backfill: %s failed: %s", b->slot, what, msg);
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
            return fail(b, BACKFILL_RETRY, "slot=%s: backfill: cannot connect to PostgreSQL: %s",
                        b->slot, err);
    }
    const char *p[] = {b->slot};
    int rc = BACKFILL_OK;
    PGresult *res = run(b, PGRES_TUPLES_OK, &rc, "taking the backfill lock",
                        "SELECT pg_try_advisory_lock(1868722790, hashtext($1))", 1, p);
    if (res == NULL)
        return rc;
    b->locked = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!b->locked)
        return fail(b, BACKFILL_BUSY, "slot=%s: another relayer is backfilling it; waiting as "
                    "a standby", b->slot);
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
    PGresult *res = run(b, PGRES_TUPLES_OK, &rc, "looking up public.outbox_relay_slots",
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
        return fail(b, BACKFILL_FATAL,
                    "slot=%s: --backfill needs public.outbox_relay_slots with its backfill_* "
                    "columns, where the progress is recorded so that a crash cannot lose the "
                    "rest of the backlog: load sql/003_relay_role.sql (again)", b->slot);
    return BACKFILL_OK;
}

static void copy_id(char *dst, const char *src, bool *has)
{
    *has = src != NULL && strlen(src) < ID_MAX;
    snprintf(dst, ID_MAX, "%s", *has ? src : "");
}

static int read_marker(struct backfill *b, struct marker *m)
{
    memset(m, 0, sizeof *m);
    int rc = check_schema(b);
    if (rc != BACKFILL_OK)
        return rc;
    const char *p[] = {b->slot};
    PGresult *res = run(b, PGRES_TUPLES_OK, &rc, "reading the backfill marker",
                        "SELECT backfill_state, backfill_max_id, backfill_done_id, "
                        "coalesce(backfill_rows, 0) FROM public.outbox_relay_slots "
                        "WHERE slot_name = $1",
                        1, p);
    if (res == NULL)
        return rc;
    if (PQntuples(res) == 1) {
        const char *st = PQgetisnull(res, 0, 0) ? NULL : PQgetvalue(res, 0, 0);
        if (backfill_parse_state(st, &m->state) < 0) {
            fail(b, BACKFILL_FATAL, "slot=%s: unknown backfill_state '%s' in "
                 "public.outbox_relay_slots", b->slot, st);
            PQclear(res);
            return BACKFILL_FATAL;
        }
        if (!PQgetisnull(res, 0, 1))
            copy_id(m->max_id, PQgetvalue(res, 0, 1), &m->has_max);
        if (!PQgetisnull(res, 0, 2))
            copy_id(m->done_id, PQgetvalue(res, 0, 2), &m->has_done);
        m->rows = strtoull(PQgetvalue(res, 0, 3), NULL, 10);
    }
    PQclear(res);
    return BACKFILL_OK;
}

int backfill_read_state(struct backfill *b, enum backfill_state *st)
{
    struct marker m;
    int rc = read_marker(b, &m);
    *st = m.state;
    return rc;
}

int backfill_begin(struct backfill *b)
{
    if (!backfill_locked(b))
        return fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost", b->slot);
    int rc = check_schema(b);
    if (rc != BACKFILL_OK)
        return rc;
    const char *p[] = {b->slot};
    PGresult *res = run(b, PGRES_TUPLES_OK, &rc, "looking up the slot",
                        "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", 1, p);
    if (res == NULL)
        return rc;
    bool exists = PQntuples(res) > 0;
    PQclear(res);
    if (exists)
        return fail(b, BACKFILL_BUSY, "slot=%s was created meanwhile by another process; "
                    "waiting", b->slot);
    res = run(b, PGRES_COMMAND_OK, &rc, "writing the backfill marker",
              "INSERT INTO public.outbox_relay_slots (slot_name, created_lsn, backfill_state, "
              "backfill_rows, backfill_updated_at) VALUES ($1, '0/0', 'creating', 0, now()) "
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
        return fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost", b->slot);
    const char *p[] = {b->slot};
    int rc = BACKFILL_OK;
    PGresult *res = run(b, PGRES_COMMAND_OK, &rc, "resetting the backfill marker",
                        "UPDATE public.outbox_relay_slots SET backfill_state = 'creating', "
                        "backfill_max_id = NULL, backfill_done_id = NULL, backfill_rows = 0, "
                        "backfill_updated_at = now() WHERE slot_name = $1",
                        1, p);
    if (res == NULL)
        return rc;
    PQclear(res);
    return BACKFILL_OK;
}

/* Writes backfill_done_id. Never waits long for the row: when someone holds
 * it (the reaper checking it, an operator), this write is skipped and a
 * later one carries the progress. Returns 0, or RETRY when the lock
 * connection is gone (and with it the lock). */
static int write_progress(struct backfill *b, const char *done_id, unsigned long long rows)
{
    char *lid = PQescapeLiteral(b->conn, done_id, strlen(done_id));
    char *lslot = PQescapeLiteral(b->conn, b->slot, strlen(b->slot));
    char sql[1024];
    int rc = BACKFILL_OK;
    if (lid == NULL || lslot == NULL) {
        rc = fail(b, BACKFILL_RETRY, "slot=%s: backfill: cannot quote the progress", b->slot);
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
        rc = fail(b, BACKFILL_RETRY, "slot=%s: backfill: lost the connection that holds the "
                  "backfill lock (at id %s); stopping, the next attempt resumes", b->slot,
                  done_id);
    }
done:
    PQfreemem(lid);
    PQfreemem(lslot);
    return rc;
}

/* --- the run ----------------------------------------------------------- */

/* The SELECT list of the rows (id, key, type, payload, created_at, then
 * the extra columns), as text, in the map's column names; NULL for a role
 * without a column. Names are plain identifiers (config.c), quoted. The
 * text is each type's output function's, as the plugins send it
 * (docs/producing.md, "Column types"): concat() calls it, where a ::text
 * cast would make a boolean "true" instead of "t". */
static int select_list(const struct outbox_columns_map *m, char *buf, size_t cap)
{
    const char *names[5 + OUTBOX_MAX_EXTRA] = {m->id, m->aggregate_id, m->type, m->payload,
                                               m->created_at};
    size_t n = 5, used = 0;
    for (size_t i = 0; i < m->nextra && i < OUTBOX_MAX_EXTRA; i++)
        names[n++] = m->extra[i].column;
    for (size_t i = 0; i < n; i++) {
        int w = names[i] != NULL
                    ? snprintf(buf + used, cap - used,
                               "%sCASE WHEN o.\"%s\" IS NOT NULL THEN concat(o.\"%s\") END",
                               i ? ", " : "", names[i], names[i])
                    : snprintf(buf + used, cap - used, "%sNULL::text", i ? ", " : "");
        if (w < 0 || (size_t) w >= cap - used)
            return -1;
        used += (size_t) w;
    }
    return 0;
}

/* Fills ev from one row (select_list()'s columns); a bytea payload is
 * decoded into scratch. Returns 0, or -1 with why in err. */
static int row_event(const struct outbox_columns_map *m, PGresult *res, int row,
                     struct outbox_scratch *scratch, struct outbox_event *ev, char *err,
                     size_t errlen)
{
    memset(ev, 0, sizeof *ev);
    const char *id = PQgetvalue(res, row, 0);
    size_t id_len = (size_t) PQgetlength(res, row, 0);
    if (m->id_kind == OUTBOX_ID_TEXT ? outbox_event_set_text_id(ev, id, id_len) < 0
                                     : outbox_event_set_id(ev, id, id_len, true) < 0) {
        snprintf(err, errlen, "its id is not %s", m->id_kind == OUTBOX_ID_TEXT
                 ? "1 to 63 bytes without control characters" : "an integer");
        return -1;
    }
#define FIELD(col, ptr, len)                                                  \
    do {                                                                      \
        if (!PQgetisnull(res, row, col)) {                                    \
            ev->ptr = PQgetvalue(res, row, col);                              \
            ev->len = (size_t) PQgetlength(res, row, col);                    \
        }                                                                     \
    } while (0)
    FIELD(1, aggregate_id, aggregate_id_len);
    FIELD(2, type, type_len);
    FIELD(3, payload, payload_len);
    FIELD(4, created_at, created_at_len);
    for (size_t i = 0; i < m->nextra && i < OUTBOX_MAX_EXTRA; i++)
        FIELD(5 + (int) i, extra[i].ptr, extra[i].len);
#undef FIELD
    if (ev->type == NULL || ev->type_len == 0) {
        snprintf(err, errlen, "it has no type; cannot route it");
        return -1;
    }
    if (m->payload_bytea && ev->payload != NULL) {
        long n = outbox_scratch_reserve(scratch, ev->payload_len / 2 + 1) < 0
                     ? -1 : outbox_bytea_decode(ev->payload, ev->payload_len, scratch->buf);
        if (n < 0) {
            snprintf(err, errlen, "its bytea payload is not in hex format (bytea_output = hex)");
            return -1;
        }
        ev->payload = scratch->buf;
        ev->payload_len = (size_t) n;
    }
    return 0;
}

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
    fail(b, *rc, "slot=%s: backfill: %s failed: %s", b->slot, what, msg);
    PQclear(res);
    return NULL;
}

/* Records the bound of the backlog: state 'running'. */
static int write_running(struct backfill *b, const struct marker *m, lsn_t consistent)
{
    char lsn[32];
    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(consistent));
    const char *p[] = {b->slot, m->has_max ? m->max_id : NULL, consistent ? lsn : NULL};
    int rc = BACKFILL_OK;
    PGresult *res = run(b, PGRES_COMMAND_OK, &rc, "recording the backlog's bound",
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
        return fail(b, BACKFILL_FATAL, "slot=%s: backfill: its marker row in "
                    "public.outbox_relay_slots disappeared", b->slot);
    return BACKFILL_OK;
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

int backfill_run(struct backfill *b, const char *snapshot, lsn_t consistent,
                 const struct backfill_sink *sink, uint64_t *rows)
{
    PGconn *conn = NULL;
    PGresult *res = NULL;
    char *qschema = NULL, *qtable = NULL, *lit = NULL;
    struct backfill_progress q = {0};
    struct progress *pr = &b->pr;
    struct outbox_scratch scratch = {0};
    struct marker m;
    char sql[6144], cols[4096], qid[80], err[512], done_id[ID_MAX] = "";
    uint64_t n = 0;
    double last_write = 0;
    int rc = BACKFILL_OK;
    *rows = 0;

    if (!backfill_locked(b)) {
        rc = fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost", b->slot);
        goto done;
    }
    if ((rc = read_marker(b, &m)) != BACKFILL_OK)
        goto done;
    if (snapshot == NULL && m.state != BACKFILL_CREATING && m.state != BACKFILL_RUNNING)
        goto done; /* finished meanwhile */

    conn = pgconn_open(b->dsn, APP_NAME, err, sizeof err);
    if (conn == NULL) {
        rc = fail(b, BACKFILL_RETRY, "slot=%s: backfill: cannot connect to PostgreSQL: %s",
                  b->slot, err);
        goto done;
    }
    qschema = PQescapeIdentifier(conn, b->table_schema, strlen(b->table_schema));
    qtable = PQescapeIdentifier(conn, b->table_name, strlen(b->table_name));
    if (qschema == NULL || qtable == NULL) {
        pgconn_error(conn, err, sizeof err);
        rc = fail(b, BACKFILL_RETRY, "slot=%s: backfill: cannot quote names: %s", b->slot, err);
        goto done;
    }
    if ((res = data_exec(b, conn, PGRES_COMMAND_OK, &rc, "BEGIN",
                         "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL)) == NULL)
        goto done;
    PQclear(res);
    if (snapshot != NULL) {
        lit = PQescapeLiteral(conn, snapshot, strlen(snapshot));
        snprintf(sql, sizeof sql, "SET TRANSACTION SNAPSHOT %s", lit ? lit : "''");
        if ((res = data_exec(b, conn, PGRES_COMMAND_OK, &rc, "importing the slot's snapshot",
                             sql, 0, NULL)) == NULL)
            goto done;
        PQclear(res);
    }

    /* Does the table have the poller's dispatched_at column? */
    char relname[300];
    snprintf(relname, sizeof relname, "%s.%s", qschema, qtable);
    const char *prel[] = {relname};
    if ((res = data_exec(b, conn, PGRES_TUPLES_OK, &rc, "reading the table's columns",
                         "SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass "
                         "AND attname = 'dispatched_at' AND NOT attisdropped",
                         1, prel)) == NULL)
        goto done;
    const char *pending = PQntuples(res) == 1 ? "o.dispatched_at IS NULL" : "true";
    PQclear(res);
    snprintf(qid, sizeof qid, "\"%s\"", b->columns->id);
    if (select_list(b->columns, cols, sizeof cols) < 0) {
        res = NULL;
        rc = fail(b, BACKFILL_FATAL, "slot=%s: backfill: too many columns", b->slot);
        goto done;
    }

    /* The first run, or a resume that does not know the bound yet: the
     * largest pending id now visible bounds the backlog (see backfill.h). */
    if (snapshot != NULL || m.state == BACKFILL_CREATING) {
        snprintf(sql, sizeof sql,
                 "SELECT o.%s::text FROM %s.%s o WHERE %s ORDER BY o.%s DESC LIMIT 1", qid,
                 qschema, qtable, pending, qid);
        if ((res = data_exec(b, conn, PGRES_TUPLES_OK, &rc, "finding the backlog's bound", sql,
                             0, NULL)) == NULL)
            goto done;
        m.has_max = false;
        m.has_done = false;
        m.rows = 0;
        if (PQntuples(res) == 1)
            copy_id(m.max_id, PQgetvalue(res, 0, 0), &m.has_max);
        bool too_long = PQntuples(res) == 1 && !m.has_max;
        PQclear(res);
        res = NULL;
        if (too_long) {
            rc = fail(b, BACKFILL_FATAL, "slot=%s: backfill: ids longer than %d characters "
                      "cannot be recorded", b->slot, ID_MAX - 1);
            goto done;
        }
        if ((rc = write_running(b, &m, consistent)) != BACKFILL_OK)
            goto done;
    }
    if (snapshot == NULL)
        log_info("slot=%s: backfill: resuming the unfinished backfill: rows with %s and "
                 "%s%s < id <= %s (%llu rows acknowledged before)", b->slot, pending,
                 m.has_done ? m.done_id : "", m.has_done ? "" : "-inf",
                 m.has_max ? m.max_id : "(none)", m.rows);
    /* What this run has to publish, for the progress lines. */
    const char *pc[] = {m.max_id, m.done_id};
    int64_t expected = 0;
    bool exact = true;
    if (m.has_max) {
        snprintf(sql, sizeof sql, "SELECT 1 FROM %s.%s o WHERE %s AND o.%s <= $1 %s%s%s",
                 qschema, qtable, pending, qid, m.has_done ? "AND o." : "",
                 m.has_done ? qid : "", m.has_done ? " > $2" : "");
        expected = rowcount_bounded(conn, sql, m.has_done ? 2 : 1, pc, &exact);
    }
    snprintf(err, sizeof err, "slot=%s: backfill", b->slot);
    progress_start(pr, err, expected, exact, PROGRESS_INTERVAL, false, mono_now());
    b->sink = sink;
    note_progress(sink, pr);
    if (!m.has_max)
        goto finish; /* nothing pending */

    snprintf(sql, sizeof sql,
             "DECLARE outbox_backfill NO SCROLL CURSOR FOR "
             "SELECT %s FROM %s.%s o WHERE %s AND o.%s <= $1 %s%s%s ORDER BY o.%s", cols,
             qschema, qtable, pending, qid, m.has_done ? "AND o." : "", m.has_done ? qid : "",
             m.has_done ? " > $2" : "", qid);
    if ((res = data_exec(b, conn, PGRES_COMMAND_OK, &rc, "declaring the backfill cursor", sql,
                         m.has_done ? 2 : 1, pc)) == NULL)
        goto done;
    PQclear(res);
    res = NULL;

    snprintf(sql, sizeof sql, "FETCH %d FROM outbox_backfill", BACKFILL_FETCH);
    for (;;) {
        if ((res = data_exec(b, conn, PGRES_TUPLES_OK, &rc, "FETCH", sql, 0, NULL)) == NULL)
            goto done;
        int got = PQntuples(res);
        for (int i = 0; i < got; i++) {
            struct outbox_event ev;
            char why[128];
            if (row_event(b->columns, res, i, &scratch, &ev, why, sizeof why) < 0) {
                rc = fail(b, BACKFILL_FATAL, "slot=%s: backfill: row id=%s: %s", b->slot,
                          PQgetvalue(res, i, 0), why);
                goto done;
            }
            if (sink->emit(sink->ctx, &ev, n + 1) < 0) {
                rc = fail(b, BACKFILL_STOPPED, "slot=%s: backfill: stopped after %llu rows (at "
                          "id %s)", b->slot, (unsigned long long) n, ev.event_id);
                goto done;
            }
            n++;
        }
        if (got > 0)
            backfill_progress_note(&q, n, PQgetvalue(res, got - 1, 0));
        PQclear(res);
        res = NULL;
        note_progress(sink, pr);
        if (backfill_progress_done(&q, sink->acked(sink->ctx), done_id) &&
            mono_now() - last_write >= PROGRESS_EVERY) {
            uint64_t acked = sink->acked(sink->ctx);
            if ((rc = write_progress(b, done_id, m.rows + acked)) != BACKFILL_OK)
                goto done;
            last_write = mono_now();
        }
        if (got < BACKFILL_FETCH)
            break;
    }

finish:
    /* Every row must be acknowledged before the marker is cleared. */
    while (sink->acked(sink->ctx) < n) {
        if (sink->serve(sink->ctx, 100) < 0) {
            rc = fail(b, BACKFILL_STOPPED, "slot=%s: backfill: stopped with %llu of %llu rows "
                      "acknowledged", b->slot, (unsigned long long) sink->acked(sink->ctx),
                      (unsigned long long) n);
            goto done;
        }
        note_progress(sink, pr);
        if (backfill_progress_done(&q, sink->acked(sink->ctx), done_id) &&
            mono_now() - last_write >= PROGRESS_EVERY) {
            if ((rc = write_progress(b, done_id, m.rows + sink->acked(sink->ctx))) !=
                BACKFILL_OK)
                goto done;
            last_write = mono_now();
        }
    }
    if (!backfill_locked(b)) {
        rc = fail(b, BACKFILL_RETRY, "slot=%s: backfill: the lock was lost before the end",
                  b->slot);
        goto done;
    }
    char total[32];
    snprintf(total, sizeof total, "%llu", m.rows + (unsigned long long) n);
    const char *pd[] = {b->slot, total};
    if ((res = run(b, PGRES_COMMAND_OK, &rc, "clearing the backfill marker",
                   "UPDATE public.outbox_relay_slots SET backfill_state = 'done', "
                   "backfill_done_id = NULL, backfill_rows = $2, backfill_updated_at = now() "
                   "WHERE slot_name = $1",
                   2, pd)) == NULL)
        goto done;
    PQclear(res);
    res = NULL;
    *rows = n;
    progress_update(pr, n, mono_now());
    log_info("%s", progress_final_line(pr, err, sizeof err));
    if (sink->progress != NULL)
        sink->progress(sink->ctx, pr, false);
    rc = BACKFILL_OK;
done:
    b->sink = NULL;
    PQclear(res);
    backfill_progress_free(&q);
    outbox_scratch_free(&scratch);
    PQfreemem(qschema);
    PQfreemem(qtable);
    PQfreemem(lit);
    PQfinish(conn);
    if (rc != BACKFILL_OK)
        *rows = n;
    return rc;
}
