/*
 * stream.c — the replication connection (see stream.h).
 *
 * The flow follows pg_recvlogical: connect with replication=database,
 * IDENTIFY_SYSTEM, check the server and the slot with plain SQL (allowed on
 * a database walsender since PostgreSQL 10; simple protocol only, so
 * literals are escaped with PQescapeLiteral), START_REPLICATION, then read
 * CopyData without blocking and answer with standby status updates.
 */
#include "outbox_relay/stream.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "outbox_relay/log.h"
#include "outbox_relay/pgconn.h"

#define STREAM_ERRLEN 1024

struct stream {
    char *dsn;
    char *slot;
    char *table_schema;
    char *table_name;
    char *message_prefix;
    bool create_slot;
    bool recreate_slot;
    bool failover_slot;
    double takeover_after;
    double query_timeout;
    int (*on_creating)(void *ctx, bool *export_snapshot, char *err, size_t errlen);
    int (*on_created)(void *ctx, const char *snapshot, lsn_t consistent, bool *drop_slot,
                      char *err, size_t errlen);
    void *on_created_ctx;
    PGconn *conn;
    bool streaming; /* START_REPLICATION succeeded on conn */
    bool partitioned; /* the outbox table is partitioned */
    int dead_pid; /* walsender of our last streaming connection, closed since
                     (it may still hold the slot: see take_over) */
    char *copybuf; /* last frame from PQgetCopyData, freed on the next read */
    char errstr[STREAM_ERRLEN];
};

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

struct stream *stream_new(const struct stream_options *opts)
{
    struct stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->dsn = dup_or_empty(opts->dsn);
    s->slot = dup_or_empty(opts->slot);
    s->table_schema = dup_or_empty(opts->table_schema);
    s->table_name = dup_or_empty(opts->table_name);
    s->message_prefix = dup_or_empty(opts->message_prefix);
    s->create_slot = opts->create_slot;
    s->failover_slot = opts->failover_slot;
    s->recreate_slot = opts->recreate_slot;
    s->takeover_after = opts->takeover_after;
    s->query_timeout = opts->query_timeout;
    s->on_creating = opts->on_creating;
    s->on_created = opts->on_created;
    s->on_created_ctx = opts->on_created_ctx;
    if (!s->dsn || !s->slot || !s->table_schema || !s->table_name || !s->message_prefix) {
        stream_free(s);
        return NULL;
    }
    return s;
}

void stream_free(struct stream *s)
{
    if (s == NULL)
        return;
    stream_close(s);
    free(s->dsn);
    free(s->slot);
    free(s->table_schema);
    free(s->table_name);
    free(s->message_prefix);
    free(s);
}

const char *stream_errstr(const struct stream *s)
{
    return s->errstr;
}

bool stream_connected(const struct stream *s)
{
    return s->conn != NULL;
}

void stream_set_create_slot(struct stream *s, bool create)
{
    s->create_slot = create;
}

int stream_socket(const struct stream *s)
{
    return s->conn ? PQsocket(s->conn) : -1;
}

int stream_backend_pid(const struct stream *s)
{
    return s->conn ? PQbackendPID(s->conn) : 0;
}

/* Copies a libpq message without its trailing newline(s). */
static void copy_pq_message(char *dst, size_t cap, const char *msg)
{
    snprintf(dst, cap, "%s", msg ? msg : "");
    size_t n = strlen(dst);
    while (n > 0 && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
        dst[--n] = '\0';
    for (char *p = dst; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

static int fail(struct stream *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct stream *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errstr, sizeof s->errstr, fmt, ap);
    va_end(ap);
    return rc;
}

void stream_close(struct stream *s)
{
    if (s->conn != NULL && s->streaming)
        s->dead_pid = PQbackendPID(s->conn);
    if (s->copybuf != NULL) {
        PQfreemem(s->copybuf);
        s->copybuf = NULL;
    }
    if (s->conn != NULL) {
        PQfinish(s->conn);
        s->conn = NULL;
    }
    s->streaming = false;
}

int stream_timed_out(struct stream *s, double silence)
{
    return fail(s, STREAM_RETRY, "slot=%s: nothing received from the server for %.1f s "
                "(--wal-receiver-timeout): the connection is considered dead (a stalled "
                "network path?)", s->slot, silence);
}

bool stream_streaming(const struct stream *s)
{
    return s->conn != NULL && s->streaming;
}

/* Connection failures that no retry cures: say what to change. */
static int classify_connect_error(struct stream *s, const char *msg)
{
    if (strstr(msg, "must be superuser or replication role") ||
        strstr(msg, "permission denied to start WAL sender"))
        return fail(s, STREAM_FATAL,
                    "the role lacks the REPLICATION attribute needed for a replication "
                    "slot: ALTER ROLE <role> REPLICATION, or use the outbox_relay role from "
                    "sql/003_relay_role.sql (server said: %s)", msg);
    if (strstr(msg, "no pg_hba.conf entry") && strstr(msg, "replication"))
        return fail(s, STREAM_FATAL,
                    "pg_hba.conf does not allow this replication connection: add a "
                    "\"host replication <role> <address> scram-sha-256\" line (server said: %s)",
                    msg);
    if (strstr(msg, "password authentication failed") || strstr(msg, "no pg_hba.conf entry") ||
        (strstr(msg, "role \"") && strstr(msg, "does not exist")) ||
        (strstr(msg, "database \"") && strstr(msg, "does not exist")))
        return fail(s, STREAM_FATAL, "cannot connect to PostgreSQL: %s", msg);
    return fail(s, STREAM_RETRY, "cannot connect to PostgreSQL (will retry): %s", msg);
}

static int connect_replication(struct stream *s)
{
    stream_close(s);
    s->conn = pgconn_connectdb(s->dsn, "outbox-relay", "database");
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "cannot connect to PostgreSQL: out of memory");
    if (PQstatus(s->conn) != CONNECTION_OK) {
        char msg[STREAM_ERRLEN];
        copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
        stream_close(s);
        return classify_connect_error(s, msg);
    }
    return STREAM_OK;
}

/* PQexec with the stream's deadline (--wal-receiver-timeout), so that a
 * path that stalls while the stream is set up cannot hang it: without an
 * answer in time the connection is shut down (PQstatus turns
 * CONNECTION_BAD, every caller's retry path) and NULL returned. */
static PGresult *exec_bounded(struct stream *s, const char *sql)
{
    char err[STREAM_ERRLEN];
    PGresult *res = pgconn_exec(s->conn, sql, 0, NULL, s->query_timeout, err, sizeof err);
    if (res == NULL && strstr(err, "no answer") != NULL)
        log_warn("slot=%s: %s", s->slot, err);
    return res;
}

/* Runs a command that returns rows; on error fills errstr and returns NULL. */
static PGresult *query(struct stream *s, const char *sql, const char *what)
{
    PGresult *res = exec_bounded(s, sql);
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    char msg[STREAM_ERRLEN];
    copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
    fail(s, PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY,
         "slot=%s: %s failed: %s", s->slot, what, msg);
    PQclear(res);
    return NULL;
}

static int error_rc(struct stream *s)
{
    return PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY;
}

static int check_server(struct stream *s)
{
    PGresult *res = query(s, "IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM");
    if (res == NULL)
        return error_rc(s);
    bool has_db = PQnfields(res) >= 4 && PQntuples(res) == 1 && !PQgetisnull(res, 0, 3);
    PQclear(res);
    if (!has_db)
        return fail(s, STREAM_FATAL, "IDENTIFY_SYSTEM returned no database: the connection "
                    "must name the database that holds the outbox (dbname=...)");

    res = query(s, "SHOW wal_level", "SHOW wal_level");
    if (res == NULL)
        return error_rc(s);
    char level[64];
    snprintf(level, sizeof level, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "?");
    PQclear(res);
    if (strcmp(level, "logical") != 0)
        return fail(s, STREAM_FATAL,
                    "wal_level is '%s' on the server, logical decoding needs wal_level = "
                    "logical: run ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL",
                    level);
    return STREAM_OK;
}

/* The outbox table must exist; a partitioned one changes what we ask the
 * server for (see stream_build_start_command). Neither it nor any of its
 * partitions may be UNLOGGED or temporary: such a table writes no WAL, so
 * logical decoding never sees its rows, while keepalives move the slot past
 * them (and the reaper would then delete them as delivered). */
static int check_table(struct stream *s)
{
    char *schema = PQescapeLiteral(s->conn, s->table_schema, strlen(s->table_schema));
    char *table = PQescapeLiteral(s->conn, s->table_name, strlen(s->table_name));
    char sql[1024];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE tree(relid, depth) AS (SELECT c.oid, 0 FROM pg_class c "
             "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
             "c.relname = %s UNION ALL SELECT i.inhrelid, t.depth + 1 FROM pg_inherits i "
             "JOIN tree t ON i.inhparent = t.relid WHERE t.depth < 16) "
             "SELECT c.relkind, c.relpersistence, quote_ident(n.nspname) || '.' || "
             "quote_ident(c.relname) FROM tree JOIN pg_class c ON c.oid = tree.relid "
             "JOIN pg_namespace n ON n.oid = c.relnamespace ORDER BY tree.depth, 3",
             schema ? schema : "''", table ? table : "''");
    PQfreemem(schema);
    PQfreemem(table);
    PGresult *res = query(s, sql, "looking up the outbox table");
    if (res == NULL)
        return error_rc(s);
    int rc = STREAM_OK;
    if (PQntuples(res) == 0) {
        rc = fail(s, STREAM_FATAL, "the outbox table %s.%s does not exist in this database: "
                  "create it (sql/001_outbox.sql) or name another with --table",
                  s->table_schema, s->table_name);
        goto done;
    }
    s->partitioned = strcmp(PQgetvalue(res, 0, 0), "p") == 0;
    char fix[600] = "";
    size_t used = 0;
    int nolog = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        const char *p = PQgetvalue(res, i, 1);
        if (strcmp(p, "u") != 0 && strcmp(p, "t") != 0)
            continue;
        if (nolog++ == 0 || used + 64 < sizeof fix) {
            int w = snprintf(fix + used, sizeof fix - used, "%sALTER TABLE %s SET LOGGED;",
                             used ? " " : "", PQgetvalue(res, i, 2));
            if (w > 0 && (size_t) w < sizeof fix - used)
                used += (size_t) w;
        }
    }
    if (nolog > 0)
        rc = fail(s, STREAM_FATAL,
                  "the outbox %s.%s has %d table(s) that write no WAL (UNLOGGED or temporary): "
                  "logical decoding never sees their rows, so their events would be lost. Run: "
                  "%s (rows written while unlogged were never relayed: republish them)",
                  s->table_schema, s->table_name, nolog, fix);
done:
    PQclear(res);
    return rc;
}

bool stream_outbox_partitioned(const struct stream *s)
{
    return s->partitioned;
}

enum slot_state { SLOT_MISSING, SLOT_READY };

/* The slot is held by the walsender of our own previous connection, which
 * we dropped (it stalled, or timed out): the server notices only after its
 * wal_sender_timeout, or never while the stalled path swallows its writes.
 * The connection is ours and closed, so ending its backend loses nothing:
 * terminate it (allowed for the same role, or with pg_signal_backend) and
 * look again soon; when the role may not, wait for the server. */
static int take_back(struct stream *s, const char *pid)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", s->dead_pid);
    PGresult *res = exec_bounded(s, sql);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
              strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    char msg[STREAM_ERRLEN];
    copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
    PQclear(res);
    if (ok) {
        log_warn("slot=%s: still held by walsender PID %s of our previous connection, which "
                 "we dropped; terminated it to take the slot back", s->slot, pid);
        return fail(s, STREAM_BUSY, "slot=%s: waiting for our previous walsender (PID %s) "
                    "to exit", s->slot, pid);
    }
    return fail(s, STREAM_BUSY, "slot=%s: still held by walsender PID %s of our previous "
                "connection; cannot terminate it (%s): waiting until the server's "
                "wal_sender_timeout ends it", s->slot, pid, *msg ? msg : "not permitted");
}

/* The slot is held by walsender `pid`. With --takeover-after, a walsender
 * whose client has sent nothing for that long (a partitioned or hung
 * relayer: a crashed one closes its socket and the server frees the slot by
 * itself) is terminated so this relayer can take over. pg_stat_replication's
 * reply_time is the last status update the holder sent; our relayers send
 * one at least every --status-interval. */
static int take_over(struct stream *s, const char *pid)
{
    if (s->dead_pid != 0 && atoi(pid) == s->dead_pid)
        return take_back(s, pid);
    int rc = fail(s, STREAM_BUSY, "slot=%s is active for PID %s; waiting as a standby "
                  "(another relayer may own it)", s->slot, pid);
    if (s->takeover_after <= 0 || strspn(pid, "0123456789") != strlen(pid) || *pid == '\0')
        return rc;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(EXTRACT(EPOCH FROM now() - COALESCE(reply_time, backend_start)), "
             "0) FROM pg_stat_replication WHERE pid = %s", pid);
    PGresult *res = exec_bounded(s, sql);
    double silent = -1;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        silent = strtod(PQgetvalue(res, 0, 0), NULL);
    PQclear(res);
    if (silent < s->takeover_after)
        return rc;
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%s)", pid);
    res = exec_bounded(s, sql);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
              strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    char msg[STREAM_ERRLEN];
    copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
    PQclear(res);
    if (ok)
        log_warn("slot=%s: its walsender PID %s has heard nothing from its client for %.1f s "
                 "(--takeover-after %.1f); terminated it to take over", s->slot, pid, silent,
                 s->takeover_after);
    else
        log_warn("slot=%s: could not terminate the silent walsender PID %s: %s", s->slot, pid,
                 msg);
    return fail(s, STREAM_BUSY, "slot=%s was held by a silent walsender (PID %s); taking over",
                s->slot, pid);
}

/* Looks the slot up and refuses what we must not use. */
static int check_slot(struct stream *s, enum slot_state *state, lsn_t *confirmed)
{
    char *lit = PQescapeLiteral(s->conn, s->slot, strlen(s->slot));
    if (lit == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: cannot escape slot name", s->slot);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT plugin, slot_type, database, database = current_database(), active, "
             "active_pid, wal_status, confirmed_flush_lsn FROM pg_replication_slots "
             "WHERE slot_name = %s",
             lit);
    PQfreemem(lit);
    PGresult *res = query(s, sql, "looking up the slot in pg_replication_slots");
    if (res == NULL)
        return error_rc(s);

    int rc = STREAM_OK;
    if (PQntuples(res) == 0) {
        *state = SLOT_MISSING;
        goto done;
    }
    *state = SLOT_READY;
    const char *plugin = PQgetvalue(res, 0, 0);
    const char *type = PQgetvalue(res, 0, 1);
    const char *db = PQgetvalue(res, 0, 2);
    bool same_db = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
    bool active = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
    const char *pid = PQgetvalue(res, 0, 5);
    const char *wal_status = PQgetvalue(res, 0, 6);
    const char *flush = PQgetvalue(res, 0, 7);

    if (strcmp(type, "logical") != 0) {
        rc = fail(s, STREAM_FATAL, "slot=%s is a %s slot, not a logical one: choose another "
                  "--slot", s->slot, type);
    } else if (strcmp(plugin, "wal2json") != 0) {
        rc = fail(s, STREAM_FATAL,
                  "slot=%s exists with output plugin \"%s\", but outbox-relay needs wal2json: "
                  "drop it (SELECT pg_drop_replication_slot('%s')) if nothing else uses it, "
                  "or choose another --slot", s->slot, plugin, s->slot);
    } else if (!same_db) {
        rc = fail(s, STREAM_FATAL, "slot=%s belongs to database \"%s\", not to the one in "
                  "--dsn: connect to that database or choose another --slot", s->slot, db);
    } else if (strcmp(wal_status, "lost") == 0) {
        rc = fail(s, STREAM_FATAL,
                  "slot=%s was invalidated (wal_status = lost): the server removed WAL it "
                  "still needed, probably because of max_slot_wal_keep_size. Events committed "
                  "since its confirmed position %s may not have been relayed. Drop the slot "
                  "and start again (consider --backfill), and raise max_slot_wal_keep_size",
                  s->slot, flush);
    } else if (active) {
        rc = take_over(s, pid);
    } else if (!PQgetisnull(res, 0, 7) && lsn_parse(flush, strlen(flush), confirmed) < 0) {
        rc = fail(s, STREAM_FATAL, "slot=%s: cannot parse confirmed_flush_lsn \"%s\"", s->slot,
                  flush);
    }
done:
    PQclear(res);
    return rc;
}

static int plugin_missing(const char *msg)
{
    return strstr(msg, "could not access file") != NULL ||
           (strstr(msg, "wal2json") != NULL && strstr(msg, "No such file") != NULL);
}

/* Creates the slot. When on_creating asks for it, exports the snapshot of
 * the slot's consistent point and hands it to on_created before anything
 * else runs on this connection (running a command would end the
 * snapshot). */
static int create_slot(struct stream *s)
{
    char sql[256];
    bool export_snapshot = false;
    if (s->failover_slot && PQserverVersion(s->conn) < 170000)
        return fail(s, STREAM_FATAL,
                    "slot=%s: --failover-slot needs PostgreSQL 17 or later (this server is %d); "
                    "on PostgreSQL 15 and 16 a logical slot exists only on the primary and is "
                    "not carried to a promoted standby (see docs/deploy.md)",
                    s->slot, PQserverVersion(s->conn));
    if (s->on_creating != NULL) {
        char err[STREAM_ERRLEN] = "";
        int rc = s->on_creating(s->on_created_ctx, &export_snapshot, err, sizeof err);
        if (rc != STREAM_OK)
            return fail(s, rc, "%s", err);
    }
    export_snapshot = export_snapshot && s->on_created != NULL;
    const char *snapshot = export_snapshot ? "'export'" : "'nothing'";
    if (PQserverVersion(s->conn) >= 150000)
        snprintf(sql, sizeof sql,
                 "CREATE_REPLICATION_SLOT \"%s\" LOGICAL wal2json (SNAPSHOT %s%s)", s->slot,
                 snapshot, s->failover_slot ? ", FAILOVER" : "");
    else
        snprintf(sql, sizeof sql, "CREATE_REPLICATION_SLOT \"%s\" LOGICAL wal2json %s",
                 s->slot, export_snapshot ? "EXPORT_SNAPSHOT" : "NOEXPORT_SNAPSHOT");
    PGresult *res = PQexec(s->conn, sql);
    int rc = STREAM_OK;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && export_snapshot) {
        char name[128] = "", err[STREAM_ERRLEN] = "";
        lsn_t consistent = 0;
        if (PQnfields(res) >= 3 && PQntuples(res) == 1 && !PQgetisnull(res, 0, 2))
            snprintf(name, sizeof name, "%s", PQgetvalue(res, 0, 2));
        if (PQnfields(res) >= 2 && PQntuples(res) == 1 && !PQgetisnull(res, 0, 1) &&
            lsn_parse(PQgetvalue(res, 0, 1), (size_t) PQgetlength(res, 0, 1), &consistent) < 0)
            consistent = 0;
        PQclear(res);
        bool drop = true;
        if (*name == '\0') {
            rc = fail(s, STREAM_FATAL, "slot=%s: the server exported no snapshot", s->slot);
        } else {
            rc = s->on_created(s->on_created_ctx, name, consistent, &drop, err, sizeof err);
            if (rc != STREAM_OK)
                fail(s, rc, "slot=%s: the work on the exported snapshot did not finish (%s); %s",
                     s->slot, err, drop ? "dropped the new slot so the next start does it again"
                                        : "kept the slot: the next start resumes the work");
        }
        if (rc != STREAM_OK && drop) {
            snprintf(sql, sizeof sql, "DROP_REPLICATION_SLOT \"%s\"", s->slot);
            PQclear(PQexec(s->conn, sql));
        }
        return rc;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        char msg[STREAM_ERRLEN];
        copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
        if (plugin_missing(msg))
            rc = fail(s, STREAM_FATAL, "slot=%s: the wal2json output plugin is not installed "
                      "on the server (install postgresql-<version>-wal2json): %s", s->slot, msg);
        else if (strstr(msg, "already exists"))
            rc = fail(s, STREAM_BUSY, "slot=%s was created concurrently by another process; "
                      "waiting", s->slot);
        else
            rc = fail(s, error_rc(s), "slot=%s: CREATE_REPLICATION_SLOT failed: %s", s->slot,
                      msg);
    }
    PQclear(res);
    return rc;
}

/* A missing slot that outbox-relay created before was dropped or lost:
 * events committed since may never have been relayed, so creating a new
 * one at the current position would skip them silently. The history is
 * public.outbox_relay_slots (sql/003_relay_role.sql); without that table
 * the check cannot be made, which is said once. */
static int check_slot_history(struct stream *s)
{
    char *lit = PQescapeLiteral(s->conn, s->slot, strlen(s->slot));
    if (lit == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: cannot escape slot name", s->slot);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT created_lsn, created_at, to_jsonb(h)->>'backfill_state' "
             "FROM public.outbox_relay_slots h WHERE slot_name = %s", lit);
    PQfreemem(lit);
    PGresult *res = exec_bounded(s, sql);
    int rc = STREAM_OK;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (PQstatus(s->conn) != CONNECTION_OK) {
            rc = fail(s, STREAM_RETRY, "slot=%s: lost the connection while checking the slot "
                      "history", s->slot);
        } else {
            char msg[STREAM_ERRLEN];
            copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
            log_warn("slot=%s: cannot read public.outbox_relay_slots (%s): if this slot was "
                     "dropped after an earlier run, creating it again skips the events "
                     "committed meanwhile; load sql/003_relay_role.sql so this is checked",
                     s->slot, msg);
        }
    } else if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 2) &&
               strcmp(PQgetvalue(res, 0, 2), "creating") == 0) {
        /* A backfill wrote its marker and then stopped before the slot was
         * created, or before anything could have been streamed from it:
         * nothing was skipped, the new slot's backfill covers it all. */
        log_info("slot=%s: an earlier start with --backfill did not get to create the slot; "
                 "creating it now", s->slot);
    } else if (PQntuples(res) == 1 && !s->recreate_slot) {
        rc = fail(s, STREAM_FATAL,
                  "slot=%s was created by outbox-relay at %s (%s) and no longer exists: it was "
                  "dropped or lost, and events committed since may not have been relayed. Not "
                  "creating a new one silently. To go on, start once with --recreate-slot (add "
                  "--backfill pending to republish the rows still in the outbox table)",
                  s->slot, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
    } else if (PQntuples(res) == 1) {
        log_warn("slot=%s was created before at %s and is gone; recreating it as "
                 "--recreate-slot asks", s->slot, PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return rc;
}

/* A slot whose backfill marker (public.outbox_relay_slots.backfill_state,
 * see backfill.h) is 'creating' or 'running' must not be streamed before the
 * backfill has finished: rows committed before its consistent point would be
 * skipped, or follow the events streamed after them. Read here, after the
 * slot was seen to exist: the marker is committed before a slot is created,
 * so it cannot be missed. No table or no column: no backfill can have
 * written a marker. */
static int check_backfill_marker(struct stream *s)
{
    char *lit = PQescapeLiteral(s->conn, s->slot, strlen(s->slot));
    if (lit == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: cannot escape slot name", s->slot);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT to_jsonb(h)->>'backfill_state' FROM public.outbox_relay_slots h "
             "WHERE slot_name = %s", lit);
    PQfreemem(lit);
    PGresult *res = exec_bounded(s, sql);
    int rc = STREAM_OK;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (PQstatus(s->conn) != CONNECTION_OK)
            rc = fail(s, STREAM_RETRY, "slot=%s: lost the connection while reading its backfill "
                      "marker", s->slot);
    } else if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
               (strcmp(PQgetvalue(res, 0, 0), "creating") == 0 ||
                strcmp(PQgetvalue(res, 0, 0), "running") == 0)) {
        rc = fail(s, STREAM_BACKFILL, "slot=%s: its backfill has not finished (backfill_state "
                  "'%s' in public.outbox_relay_slots); not streaming it before", s->slot,
                  PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return rc;
}

/* Notes in public.outbox_relay_slots that this slot exists (see above). */
static void record_slot(struct stream *s, lsn_t lsn)
{
    char *lit = PQescapeLiteral(s->conn, s->slot, strlen(s->slot));
    if (lit == NULL)
        return;
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO public.outbox_relay_slots (slot_name, created_lsn) "
             "VALUES (%s, '" LSN_FMT "') ON CONFLICT (slot_name) DO UPDATE "
             "SET created_lsn = EXCLUDED.created_lsn, created_at = now()",
             lit, LSN_ARGS(lsn));
    PQfreemem(lit);
    PGresult *res = exec_bounded(s, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        char msg[STREAM_ERRLEN];
        copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
        log_warn("slot=%s: cannot record the new slot in public.outbox_relay_slots (%s); a "
                 "later drop of the slot would go unnoticed by a restart", s->slot, msg);
    }
    PQclear(res);
}

/* Appends `"name" 'value'` to buf. Values are ours or validated (no quote). */
static int append_opt(char *buf, size_t cap, size_t *n, const char *name, const char *value)
{
    int w = snprintf(buf + *n, cap - *n, "%s\"%s\" '%s'", buf[*n - 1] == '(' ? "" : ", ", name,
                     value);
    if (w < 0 || (size_t) w >= cap - *n)
        return -1;
    *n += (size_t) w;
    return 0;
}

int stream_build_start_command(const struct stream_options *opts, lsn_t start, char *buf,
                               size_t cap)
{
    char tables[300];
    int w = snprintf(buf, cap, "START_REPLICATION SLOT \"%s\" LOGICAL " LSN_FMT " (", opts->slot,
                     LSN_ARGS(start));
    if (w < 0 || (size_t) w >= cap)
        return -1;
    size_t n = (size_t) w;
    if (opts->partitioned)
        snprintf(tables, sizeof tables, "%s.*", opts->table_schema);
    else
        snprintf(tables, sizeof tables, "%s.%s", opts->table_schema, opts->table_name);
    if (append_opt(buf, cap, &n, "format-version", "2") < 0 ||
        append_opt(buf, cap, &n, "include-timestamp", "1") < 0 ||
        append_opt(buf, cap, &n, "include-types", "0") < 0 ||
        append_opt(buf, cap, &n, "add-tables", tables) < 0 ||
        append_opt(buf, cap, &n, "actions", "insert") < 0)
        return -1;
    /* A partitioned outbox: the xid of every transaction, so that the
     * relayer can tell which catalog changes it has seen commit (see
     * partition.h). */
    if (opts->partitioned && append_opt(buf, cap, &n, "include-xids", "1") < 0)
        return -1;
    if (opts->message_prefix && *opts->message_prefix &&
        append_opt(buf, cap, &n, "add-msg-prefixes", opts->message_prefix) < 0)
        return -1;
    if (n + 2 > cap)
        return -1;
    buf[n++] = ')';
    buf[n] = '\0';
    return (int) n;
}

static int start_replication(struct stream *s, lsn_t start)
{
    struct stream_options o = {.slot = s->slot, .table_schema = s->table_schema,
                               .table_name = s->table_name, .message_prefix = s->message_prefix,
                               .partitioned = s->partitioned};
    char cmd[1024];
    if (stream_build_start_command(&o, start, cmd, sizeof cmd) < 0)
        return fail(s, STREAM_FATAL, "slot=%s: START_REPLICATION command too long", s->slot);

    PGresult *res = exec_bounded(s, cmd);
    if (PQresultStatus(res) == PGRES_COPY_BOTH) {
        PQclear(res);
        s->streaming = true;
        s->dead_pid = 0;
        return STREAM_OK;
    }
    char msg[STREAM_ERRLEN];
    copy_pq_message(msg, sizeof msg, PQerrorMessage(s->conn));
    PQclear(res);
    if (strstr(msg, "is active for PID"))
        return fail(s, STREAM_BUSY, "slot=%s is active for another process; waiting (another "
                    "relayer may own it): %s", s->slot, msg);
    if (plugin_missing(msg))
        return fail(s, STREAM_FATAL, "slot=%s: the wal2json output plugin cannot be loaded on "
                    "the server (install postgresql-<version>-wal2json): %s", s->slot, msg);
    if (strstr(msg, "can no longer get changes") || strstr(msg, "invalidated"))
        return fail(s, STREAM_FATAL, "slot=%s was invalidated (max_slot_wal_keep_size?): "
                    "events may have been lost; drop the slot and start again: %s", s->slot,
                    msg);
    if (strstr(msg, "does not exist"))
        return fail(s, STREAM_FATAL, "slot=%s does not exist any more (dropped while in use?); "
                    "not recreating it silently, as events would be lost: %s", s->slot, msg);
    return fail(s, error_rc(s), "slot=%s: START_REPLICATION from " LSN_FMT " failed: %s",
                s->slot, LSN_ARGS(start), msg);
}

int stream_start(struct stream *s, lsn_t start, lsn_t *slot_confirmed, bool *created)
{
    *created = false;
    *slot_confirmed = 0;
    int rc;
    /* A standby keeps its connection between looks at the slot, so waiting
     * costs one query per look, not a new backend. */
    if (s->conn == NULL || PQstatus(s->conn) != CONNECTION_OK) {
        if ((rc = connect_replication(s)) != STREAM_OK)
            return rc;
        if ((rc = check_server(s)) != STREAM_OK)
            goto fail;
    }
    if ((rc = check_table(s)) != STREAM_OK)
        goto fail;

    enum slot_state state;
    if ((rc = check_slot(s, &state, slot_confirmed)) != STREAM_OK)
        goto fail;
    if (state == SLOT_MISSING) {
        if (!s->create_slot) {
            rc = fail(s, STREAM_FATAL, "slot=%s does not exist any more (dropped while in "
                      "use?); not recreating it silently, as events committed meanwhile would "
                      "be lost. To go on, start once with --recreate-slot (with --backfill "
                      "pending to republish the rows still in the outbox table)", s->slot);
            goto fail;
        }
        if ((rc = check_slot_history(s)) != STREAM_OK)
            goto fail;
        if ((rc = create_slot(s)) != STREAM_OK)
            goto fail;
        *created = true;
        if ((rc = check_slot(s, &state, slot_confirmed)) != STREAM_OK)
            goto fail;
        record_slot(s, *slot_confirmed);
    }
    if ((rc = check_backfill_marker(s)) != STREAM_OK)
        goto fail;
    if (start < *slot_confirmed)
        start = *slot_confirmed;
    if ((rc = start_replication(s, start)) != STREAM_OK)
        goto fail;
    if (PQsetnonblocking(s->conn, 1) != 0) {
        rc = fail(s, STREAM_RETRY, "slot=%s: cannot make the connection non-blocking", s->slot);
        goto fail;
    }
    return STREAM_OK;
fail:
    if (rc != STREAM_BUSY && rc != STREAM_BACKFILL)
        stream_close(s);
    return rc;
}

/* After the server ended the copy: collect its final result and say why. */
static int copy_ended(struct stream *s)
{
    PGresult *res;
    char msg[STREAM_ERRLEN] = "";
    while ((res = PQgetResult(s->conn)) != NULL) {
        if (PQresultStatus(res) == PGRES_FATAL_ERROR)
            copy_pq_message(msg, sizeof msg, PQresultErrorMessage(res));
        PQclear(res);
    }
    if (*msg == '\0')
        return fail(s, STREAM_END, "slot=%s: the server ended the replication stream", s->slot);
    if (strstr(msg, "can no longer get changes") || strstr(msg, "invalidated"))
        return fail(s, STREAM_FATAL, "slot=%s was invalidated while streaming: %s", s->slot,
                    msg);
    return fail(s, STREAM_RETRY, "slot=%s: replication stream ended: %s", s->slot, msg);
}

int stream_read(struct stream *s, struct wire_msg *msg)
{
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: not connected", s->slot);
    if (s->copybuf != NULL) {
        PQfreemem(s->copybuf);
        s->copybuf = NULL;
    }
    int len = PQgetCopyData(s->conn, &s->copybuf, 1);
    if (len == 0)
        return 0;
    if (len == -1)
        return copy_ended(s);
    if (len < 0) {
        char m[STREAM_ERRLEN];
        copy_pq_message(m, sizeof m, PQerrorMessage(s->conn));
        return fail(s, STREAM_RETRY, "slot=%s: lost the replication connection: %s", s->slot, m);
    }
    char err[256];
    if (wire_parse(s->copybuf, (size_t) len, msg, err, sizeof err) < 0)
        return fail(s, STREAM_FATAL, "slot=%s: protocol violation from the server: %s", s->slot,
                    err);
    return 1;
}

int stream_consume(struct stream *s)
{
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: not connected", s->slot);
    if (PQconsumeInput(s->conn) == 0) {
        char m[STREAM_ERRLEN];
        copy_pq_message(m, sizeof m, PQerrorMessage(s->conn));
        return fail(s, STREAM_RETRY, "slot=%s: lost the replication connection: %s", s->slot, m);
    }
    return 0;
}

static int64_t now_unix_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}

int stream_send_status(struct stream *s, lsn_t write, lsn_t flush, bool reply_requested)
{
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: not connected", s->slot);
    char buf[WIRE_STATUS_LEN];
    size_t n = wire_build_status(buf, write, flush, flush, wire_unix_to_pg_us(now_unix_us()),
                                 reply_requested);
    if (PQputCopyData(s->conn, buf, (int) n) < 0 || PQflush(s->conn) < 0) {
        char m[STREAM_ERRLEN];
        copy_pq_message(m, sizeof m, PQerrorMessage(s->conn));
        return fail(s, STREAM_RETRY, "slot=%s lsn=" LSN_FMT ": cannot send status update: %s",
                    s->slot, LSN_ARGS(flush), m);
    }
    return 0;
}

void stream_stop(struct stream *s, int timeout_ms)
{
    if (!stream_streaming(s)) {
        stream_close(s);
        return;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (PQputCopyEnd(s->conn, NULL) > 0) {
        for (;;) {
            PQflush(s->conn);
            if (s->copybuf != NULL) {
                PQfreemem(s->copybuf);
                s->copybuf = NULL;
            }
            int len = PQgetCopyData(s->conn, &s->copybuf, 1);
            if (len == -1) {
                PGresult *res;
                while (!PQisBusy(s->conn) && (res = PQgetResult(s->conn)) != NULL)
                    PQclear(res);
                if (!PQisBusy(s->conn))
                    break;
            } else if (len < -1) {
                break;
            } else if (len > 0) {
                continue;
            }
            clock_gettime(CLOCK_MONOTONIC, &t);
            long elapsed = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
            if (elapsed >= timeout_ms)
                break;
            struct pollfd pfd = {.fd = PQsocket(s->conn), .events = POLLIN};
            if (poll(&pfd, 1, (int) (timeout_ms - elapsed)) < 0 && errno != EINTR)
                break;
            if (PQconsumeInput(s->conn) == 0)
                break;
        }
    }
    stream_close(s);
}
