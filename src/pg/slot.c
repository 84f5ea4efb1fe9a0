/*
 * slot.c — the replication slot's administration (see slot.h): the checks
 * of the server, the outbox table and the slot, its creation, its history
 * in public.outbox_relay_slots, the take-over of a walsender that holds it,
 * and the backfill marker's read. It runs plain SQL on the stream's
 * replication connection (allowed on a database walsender since PostgreSQL
 * 10; simple protocol only, so literals are escaped with PQescapeLiteral).
 */
#include "outbox_relay/pg/slot.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/pg/outbox_catalog.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/plugin.h"

#define SLOT_MSGLEN 1024 /* a server message, trimmed to one line */

int slot_fail(struct slot *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
    return rc;
}


/* query_timeout is the relayer's --wal-receiver-timeout (see slot.h). */
PGresult *slot_exec(struct slot *s, const char *sql)
{
    char err[SLOT_MSGLEN];
    PGresult *res = pgconn_exec(s->conn, sql, 0, NULL, s->query_timeout, err, sizeof err);
    if (res == NULL && strstr(err, "no answer") != NULL)
        log_warn("slot=%s: %s", s->name, err);
    return res;
}

/* Runs a command that returns rows; on error fills errstr and returns NULL. */
static PGresult *query(struct slot *s, const char *sql, const char *what)
{
    PGresult *res = slot_exec(s, sql);
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    char msg[SLOT_MSGLEN];
    pgconn_failure(s->conn, res, msg, sizeof msg);
    slot_fail(s, PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY,
              "slot=%s: %s failed: %s", s->name, what, msg);
    PQclear(res);
    return NULL;
}

static int error_rc(struct slot *s)
{
    return PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY;
}

/* Without --plugin: the relayer must start over with `plugin` (why in err). */
static int switch_plugin(struct slot *s, const char *plugin)
{
    snprintf(s->switch_to, sizeof s->switch_to, "%s", plugin);
    return STREAM_PLUGIN;
}

int slot_plugin_libraries(struct slot *s, struct plugin_libs *libs)
{
    char buf[sizeof libs->value];
    int rc = pgconn_show(s->conn, "output_plugin_libraries", s->query_timeout, buf, sizeof buf);
    if (rc < 0)
        return slot_fail(s, error_rc(s), "slot=%s: SHOW output_plugin_libraries failed: %s",
                         s->name, buf);
    libs->state = rc == 1 ? PLUGIN_LIBS_KNOWN : rc == 2 ? PLUGIN_LIBS_HIDDEN : PLUGIN_LIBS_ABSENT;
    snprintf(libs->value, sizeof libs->value, "%s", buf);
    return STREAM_OK;
}

/* The server refused s->plugin (msg): without --plugin a new slot is made
 * with pgoutput instead; otherwise wait for the operator, who is told the
 * statement that allows it (plugin.h). */
static int refused(struct slot *s, const char *msg, bool exists)
{
    struct plugin_libs libs;
    int rc = slot_plugin_libraries(s, &libs);
    if (rc != STREAM_OK)
        return rc;
    if (s->plugin_auto && !exists) {
        char why[900];
        const char *p = plugin_choose_new(&libs, true, false, why, sizeof why);
        slot_fail(s, STREAM_PLUGIN, "slot=%s: %s", s->name, why);
        return switch_plugin(s, p);
    }
    char advice[1400];
    plugin_refusal_advice(s->plugin, &libs, exists, advice, sizeof advice);
    return slot_fail(s, STREAM_REFUSED, "slot=%s: %s (server said: %s)", s->name, advice, msg);
}

int slot_refused(struct slot *s, const char *msg)
{
    return refused(s, msg, true);
}

int slot_check_server(struct slot *s)
{
    PGresult *res = query(s, "IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM");
    if (res == NULL)
        return error_rc(s);
    bool has_db = PQnfields(res) >= 4 && PQntuples(res) == 1 && !PQgetisnull(res, 0, 3);
    s->timeline = PQnfields(res) >= 2 && PQntuples(res) == 1
                      ? (unsigned) strtoul(PQgetvalue(res, 0, 1), NULL, 10)
                      : 0;
    snprintf(s->system_id, sizeof s->system_id, "%s",
             PQnfields(res) >= 1 && PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    if (!has_db)
        return slot_fail(s, STREAM_FATAL,
                         "IDENTIFY_SYSTEM returned no database: the connection "
                         "must name the database that holds the outbox (dbname=...)");

    res = query(s, "SHOW wal_level", "SHOW wal_level");
    if (res == NULL)
        return error_rc(s);
    char level[64];
    snprintf(level, sizeof level, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "?");
    PQclear(res);
    if (strcmp(level, "logical") != 0)
        return slot_fail(
            s, STREAM_FATAL,
            "wal_level is '%s' on the server, logical decoding needs wal_level = "
            "logical: run ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL",
            level);
    return STREAM_OK;
}

/* The outbox table must exist; a partitioned one changes what the stream
 * asks the server for (stream_build_start_command). Neither it nor any of its
 * partitions may be UNLOGGED or temporary: such a table writes no WAL, so
 * logical decoding never sees its rows, while keepalives move the slot past
 * them (and the reaper would then delete them as delivered). */
int slot_check_table(struct slot *s, bool *partitioned)
{
    char *schema = PQescapeLiteral(s->conn, s->table_schema, strlen(s->table_schema));
    char *table = PQescapeLiteral(s->conn, s->table_name, strlen(s->table_name));
    char expr[600], sql[2200];
    snprintf(expr, sizeof expr, "to_regclass(quote_ident(%s) || '.' || quote_ident(%s))",
             schema ? schema : "''", table ? table : "''");
    PQfreemem(schema);
    PQfreemem(table);
    if (outbox_catalog_logged_sql(expr, sql, sizeof sql) < 0)
        return slot_fail(s, STREAM_FATAL, "slot=%s: the outbox table's name is too long",
                         s->name);
    PGresult *res = query(s, sql, "looking up the outbox table");
    if (res == NULL)
        return error_rc(s);
    int rc = STREAM_OK;
    if (PQgetisnull(res, 0, OUTBOX_LOGGED_KIND)) {
        rc = slot_fail(s, STREAM_FATAL, "the outbox table %s.%s does not exist in this "
                       "database: create it (sql/001_outbox.sql) or name another with --table",
                       s->table_schema, s->table_name);
        goto done;
    }
    *partitioned = strcmp(PQgetvalue(res, 0, OUTBOX_LOGGED_KIND), "p") == 0;
    long nolog = atol(PQgetvalue(res, 0, OUTBOX_LOGGED_COUNT));
    if (nolog > 0)
        rc = slot_fail(s, STREAM_FATAL,
                       "the outbox %s.%s has %ld table(s) that write no WAL (UNLOGGED or "
                       "temporary): logical decoding never sees their rows, so their events "
                       "would be lost. Run: %s (rows written while unlogged were never relayed: "
                       "republish them)",
                       s->table_schema, s->table_name, nolog,
                       PQgetvalue(res, 0, OUTBOX_LOGGED_FIX));
done:
    PQclear(res);
    return rc;
}

/* The slot is held by the walsender of our own previous connection, which
 * we dropped (it stalled, or timed out): the server notices only after its
 * wal_sender_timeout, or never while the stalled path swallows its writes.
 * The connection is ours and closed, so ending its backend loses nothing:
 * terminate it (allowed for the same role, or with pg_signal_backend) and
 * look again soon; when the role may not, wait for the server. */
static int take_back(struct slot *s, const char *pid)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", s->dead_pid);
    PGresult *res = slot_exec(s, sql);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
              strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    char msg[SLOT_MSGLEN] = "pg_terminate_backend() returned false";
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        pgconn_failure(s->conn, res, msg, sizeof msg);
    PQclear(res);
    if (ok) {
        log_warn("slot=%s: still held by walsender PID %s of our previous connection, which "
                 "we dropped; terminated it to take the slot back", s->name, pid);
        return slot_fail(s, STREAM_BUSY,
                         "slot=%s: waiting for our previous walsender (PID %s) "
                         "to exit",
                         s->name, pid);
    }
    return slot_fail(s, STREAM_BUSY,
                     "slot=%s: still held by walsender PID %s of our previous "
                     "connection; cannot terminate it (%s): waiting until the server's "
                     "wal_sender_timeout ends it",
                     s->name, pid, msg);
}

/* The slot is held by walsender `pid`. With --takeover-after, a walsender
 * whose client has sent nothing for that long (a partitioned or hung
 * relayer: a crashed one closes its socket and the server frees the slot by
 * itself) is terminated so this relayer can take over. pg_stat_replication's
 * reply_time is the last status update the holder sent; our relayers send
 * one at least every --status-interval. */
static int take_over(struct slot *s, const char *pid)
{
    if (s->dead_pid != 0 && atoi(pid) == s->dead_pid)
        return take_back(s, pid);
    int rc = slot_fail(s, STREAM_BUSY,
                       "slot=%s is active for PID %s; waiting as a standby "
                       "(another relayer may own it)",
                       s->name, pid);
    if (s->takeover_after <= 0 || strspn(pid, "0123456789") != strlen(pid) || *pid == '\0')
        return rc;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(EXTRACT(EPOCH FROM now() - COALESCE(reply_time, backend_start)), "
             "0) FROM pg_stat_replication WHERE pid = %s", pid);
    PGresult *res = slot_exec(s, sql);
    double silent = -1;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        silent = strtod(PQgetvalue(res, 0, 0), NULL);
    PQclear(res);
    if (silent < s->takeover_after)
        return rc;
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%s)", pid);
    res = slot_exec(s, sql);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
              strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    char msg[SLOT_MSGLEN] = "pg_terminate_backend() returned false";
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        pgconn_failure(s->conn, res, msg, sizeof msg);
    PQclear(res);
    if (ok)
        log_warn("slot=%s: its walsender PID %s has heard nothing from its client for %.1f s "
                 "(--takeover-after %.1f); terminated it to take over", s->name, pid, silent,
                 s->takeover_after);
    else
        log_warn("slot=%s: could not terminate the silent walsender PID %s: %s", s->name, pid,
                 msg);
    return slot_fail(s, STREAM_BUSY, "slot=%s was held by a silent walsender (PID %s); taking over",
                     s->name, pid);
}

/* Looks the slot up and refuses what we must not use. */
int slot_lookup(struct slot *s, bool *exists, lsn_t *confirmed)
{
    char *lit = PQescapeLiteral(s->conn, s->name, strlen(s->name));
    if (lit == NULL)
        return slot_fail(s, STREAM_RETRY, "slot=%s: cannot escape slot name", s->name);
    char sql[640];
    /* invalidation_reason (17+): why a slot was invalidated; on 18 also for
     * idle_replication_slot_timeout, which leaves wal_status as it was. */
    snprintf(sql, sizeof sql,
             "SELECT plugin, slot_type, database, database = current_database(), active, "
             "active_pid, wal_status, confirmed_flush_lsn, %s, pg_is_in_recovery() "
             "FROM pg_replication_slots WHERE slot_name = %s",
             PQserverVersion(s->conn) >= 170000 ? "invalidation_reason, synced"
                                                : "NULL::text, false",
             lit);
    PQfreemem(lit);
    PGresult *res = query(s, sql, "looking up the slot in pg_replication_slots");
    if (res == NULL)
        return error_rc(s);

    int rc = STREAM_OK;
    if (PQntuples(res) == 0) {
        *exists = false;
        PQclear(res);
        res = query(s, "SELECT pg_is_in_recovery()", "asking whether the server is a standby");
        if (res == NULL)
            return error_rc(s);
        s->in_recovery = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        goto done;
    }
    *exists = true;
    const char *plugin = PQgetvalue(res, 0, 0);
    const char *type = PQgetvalue(res, 0, 1);
    const char *db = PQgetvalue(res, 0, 2);
    bool same_db = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
    bool active = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
    const char *pid = PQgetvalue(res, 0, 5);
    const char *wal_status = PQgetvalue(res, 0, 6);
    const char *flush = PQgetvalue(res, 0, 7);

    bool synced_copy = strcmp(PQgetvalue(res, 0, 9), "t") == 0 &&
                       strcmp(PQgetvalue(res, 0, 10), "t") == 0;
    s->in_recovery = strcmp(PQgetvalue(res, 0, 10), "t") == 0;

    if (synced_copy) {
        rc = slot_fail(s, STREAM_FAILOVER,
                       "slot=%s on this server is a copy synced from the primary (the server "
                       "is a standby, pg_replication_slots.synced = true): it cannot be "
                       "streamed before this standby is promoted. Point --dsn at the primary; "
                       "with a list of hosts add target_session_attrs=read-write (or primary) "
                       "so that the connection skips standbys",
                       s->name);
    } else if (strcmp(type, "logical") != 0) {
        rc = slot_fail(s, STREAM_FATAL,
                       "slot=%s is a %s slot, not a logical one: choose another "
                       "--slot",
                       s->name, type);
    } else if (strcmp(plugin, s->plugin) != 0 && s->plugin_auto &&
               (strcmp(plugin, "wal2json") == 0 || strcmp(plugin, "pgoutput") == 0)) {
        slot_fail(s, STREAM_PLUGIN,
                  "slot=%s exists with the %s output plugin, which it keeps "
                  "(no --plugin given)",
                  s->name, plugin);
        rc = switch_plugin(s, plugin);
    } else if (strcmp(plugin, s->plugin) != 0) {
        rc = slot_fail(s, STREAM_FATAL,
                       "slot=%s exists with output plugin \"%s\", but outbox-relay needs %s: "
                       "drop it (SELECT pg_drop_replication_slot('%s')) if nothing else uses it, "
                       "or choose another --slot",
                       s->name, plugin, s->plugin, s->name);
    } else if (!same_db) {
        rc = slot_fail(s, STREAM_FATAL,
                       "slot=%s belongs to database \"%s\", not to the one in "
                       "--dsn: connect to that database or choose another --slot",
                       s->name, db);
    } else if (!PQgetisnull(res, 0, 8)) {
        const char *reason = PQgetvalue(res, 0, 8);
        rc = slot_fail(s, STREAM_FATAL,
                       "slot=%s was invalidated by the server (invalidation_reason = %s%s). Events "
                       "committed since its confirmed position %s may not have been relayed. Drop "
                       "the slot and start again with --recreate-slot --backfill pending%s",
                       s->name, reason,
                       strcmp(reason, "idle_timeout") == 0
                           ? ": it was inactive longer than idle_replication_slot_timeout"
                       : strcmp(reason, "wal_removed") == 0
                           ? ": the WAL it needed was removed, see max_slot_wal_keep_size"
                           : "",
                       flush,
                       strcmp(reason, "idle_timeout") == 0
                           ? "; set idle_replication_slot_timeout to 0 (off) or above the longest "
                             "time the relayer may be stopped"
                       : strcmp(reason, "wal_removed") == 0 ? ", and raise max_slot_wal_keep_size"
                                                            : "");
    } else if (strcmp(wal_status, "lost") == 0) {
        rc = slot_fail(s, STREAM_FATAL,
                       "slot=%s was invalidated (wal_status = lost): the server removed WAL it "
                       "still needed, probably because of max_slot_wal_keep_size. Events committed "
                       "since its confirmed position %s may not have been relayed. Drop the slot "
                       "and start again (consider --backfill), and raise max_slot_wal_keep_size",
                       s->name, flush);
    } else if (active) {
        rc = take_over(s, pid);
    } else if (!PQgetisnull(res, 0, 7) && lsn_parse(flush, strlen(flush), confirmed) < 0) {
        rc = slot_fail(s, STREAM_FATAL, "slot=%s: cannot parse confirmed_flush_lsn \"%s\"", s->name,
                       flush);
    }
done:
    PQclear(res);
    return rc;
}

const char *slot_package_for(const char *package, int server_version, char *buf, size_t cap)
{
    const char *at = strstr(package, "<version>");
    if (at == NULL || server_version < 100000)
        snprintf(buf, cap, "%s", package);
    else
        snprintf(buf, cap, "%.*s%d%s", (int) (at - package), package, server_version / 10000,
                 at + strlen("<version>"));
    return buf;
}

bool slot_plugin_missing(const char *plugin, const char *msg)
{
    return strstr(msg, "could not access file") != NULL ||
           (strstr(msg, plugin) != NULL && strstr(msg, "No such file") != NULL);
}

int slot_build_create_command(const char *name, const char *plugin, int server_version,
                              bool export_snapshot, bool failover, char *buf, size_t cap)
{
    int n;
    if (server_version >= 150000)
        n = snprintf(buf, cap, "CREATE_REPLICATION_SLOT \"%s\" LOGICAL %s (SNAPSHOT %s%s)", name,
                     plugin, export_snapshot ? "'export'" : "'nothing'",
                     failover ? ", FAILOVER" : "");
    else
        n = snprintf(buf, cap, "CREATE_REPLICATION_SLOT \"%s\" LOGICAL %s %s", name, plugin,
                     export_snapshot ? "EXPORT_SNAPSHOT" : "NOEXPORT_SNAPSHOT");
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

#define STANDBY_CREATE_WAIT 300.0 /* s a slot's creation on a standby may take */

/* Runs CREATE_REPLICATION_SLOT (sql) on a standby. There it waits for the
 * primary's next running-transactions record (logged every 15 s while the
 * primary writes, never while it is idle); with --primary-dsn it asks the
 * primary for one with pg_log_standby_snapshot() every second until the
 * command returns. Returns the command's result, like PQexec. */
static PGresult *create_on_standby(struct slot *s, const char *sql)
{
    if (s->primary_dsn == NULL || *s->primary_dsn == '\0') {
        log_info("slot=%s: creating the slot on a standby: it waits for the primary's next "
                 "running-transactions record (within about 15 s while the primary writes, "
                 "never while it is idle; give --primary-dsn to have one logged at once)",
                 s->name);
        return PQexec(s->conn, sql);
    }
    char err[SLOT_MSGLEN];
    PGconn *primary = pgconn_open(s->primary_dsn, "outbox-relay standby snapshot", err,
                                  sizeof err);
    if (primary == NULL)
        log_warn("slot=%s: cannot connect to --primary-dsn for pg_log_standby_snapshot() (%s); "
                 "waiting for the primary's own running-transactions record", s->name, err);
    if (PQsendQuery(s->conn, sql) == 0) {
        PQfinish(primary);
        return NULL;
    }
    double end = mono_now() + STANDBY_CREATE_WAIT;
    bool warned = false;
    while (PQisBusy(s->conn) && mono_now() < end) {
        if (primary != NULL) {
            PGresult *r = pgconn_exec(primary, "SELECT pg_log_standby_snapshot()", 0, NULL,
                                      s->query_timeout, err, sizeof err);
            if (PQresultStatus(r) != PGRES_TUPLES_OK && !warned) {
                log_warn("slot=%s: pg_log_standby_snapshot() on --primary-dsn failed: %s",
                         s->name, err);
                warned = true;
            }
            PQclear(r);
        }
        struct pollfd pfd = {.fd = PQsocket(s->conn), .events = POLLIN};
        if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
            break;
        if (PQconsumeInput(s->conn) == 0)
            break;
    }
    PQfinish(primary);
    if (PQisBusy(s->conn) && PQstatus(s->conn) == CONNECTION_OK) {
        PGcancel *c = PQgetCancel(s->conn);
        if (c != NULL) {
            char e[128];
            PQcancel(c, e, sizeof e);
            PQfreeCancel(c);
        }
    }
    PGresult *last = NULL, *r;
    while ((r = PQgetResult(s->conn)) != NULL) {
        PQclear(last);
        last = r;
    }
    return last;
}

/* Creates the slot. When on_creating asks for it, exports the snapshot of
 * the slot's consistent point and hands it to on_created before anything
 * else runs on this connection (running a command would end the
 * snapshot). */
static int create_new(struct slot *s)
{
    char sql[256];
    bool export_snapshot = false;
    if (s->failover_slot && PQserverVersion(s->conn) < 170000)
        return slot_fail(
            s, STREAM_FATAL,
            "slot=%s: --failover-slot needs PostgreSQL 17 or later (this server is %d); "
            "on PostgreSQL 15 and 16 a logical slot exists only on the primary and is "
            "not carried to a promoted standby (see docs/deploy.md)",
            s->name, PQserverVersion(s->conn));
    if (s->plugin_auto && strcmp(s->plugin, "wal2json") == 0) {
        struct plugin_libs libs;
        char why[900];
        int rc = slot_plugin_libraries(s, &libs);
        if (rc != STREAM_OK)
            return rc;
        const char *p = plugin_choose_new(&libs, false, false, why, sizeof why);
        if (strcmp(p, s->plugin) != 0) {
            slot_fail(s, STREAM_PLUGIN, "slot=%s: %s", s->name, why);
            return switch_plugin(s, p);
        }
        log_info("slot=%s: no --plugin given: %s", s->name, why);
    }
    if (s->on_creating != NULL) {
        char err[SLOT_MSGLEN] = "";
        int rc = s->on_creating(s->on_created_ctx, &export_snapshot, err, sizeof err);
        if (rc != STREAM_OK)
            return slot_fail(s, rc, "%s", err);
    }
    export_snapshot = export_snapshot && s->on_created != NULL;
    if (slot_build_create_command(s->name, s->plugin, PQserverVersion(s->conn), export_snapshot,
                                  s->failover_slot, sql, sizeof sql) < 0)
        return slot_fail(s, STREAM_FATAL, "slot=%s: CREATE_REPLICATION_SLOT command too long",
                         s->name);
    PGresult *res = s->in_recovery ? create_on_standby(s, sql) : PQexec(s->conn, sql);
    int rc = STREAM_OK;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && export_snapshot) {
        char name[128] = "", err[SLOT_MSGLEN] = "";
        lsn_t consistent = 0;
        if (PQnfields(res) >= 3 && PQntuples(res) == 1 && !PQgetisnull(res, 0, 2))
            snprintf(name, sizeof name, "%s", PQgetvalue(res, 0, 2));
        if (PQnfields(res) >= 2 && PQntuples(res) == 1 && !PQgetisnull(res, 0, 1) &&
            lsn_parse(PQgetvalue(res, 0, 1), (size_t) PQgetlength(res, 0, 1), &consistent) < 0)
            consistent = 0;
        PQclear(res);
        bool drop = true;
        if (*name == '\0') {
            rc = slot_fail(s, STREAM_FATAL, "slot=%s: the server exported no snapshot", s->name);
        } else {
            rc = s->on_created(s->on_created_ctx, name, consistent, &drop, err, sizeof err);
            if (rc != STREAM_OK)
                slot_fail(s, rc,
                          "slot=%s: the work on the exported snapshot did not finish (%s); %s",
                          s->name, err,
                          drop ? "dropped the new slot so the next start does it again"
                               : "kept the slot: the next start resumes the work");
        }
        if (rc != STREAM_OK && drop) {
            snprintf(sql, sizeof sql, "DROP_REPLICATION_SLOT \"%s\"", s->name);
            PQclear(PQexec(s->conn, sql));
        }
        return rc;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        char msg[SLOT_MSGLEN];
        pgconn_failure(s->conn, res, msg, sizeof msg);
        char pkg[128], why[900];
        if (slot_plugin_missing(s->plugin, msg) && s->plugin_auto) {
            const char *p = plugin_choose_new(NULL, false, true, why, sizeof why);
            slot_fail(s, STREAM_PLUGIN, "slot=%s: %s (server said: %s)", s->name, why, msg);
            rc = switch_plugin(s, p);
        } else if (plugin_refused_error(msg))
            rc = refused(s, msg, false);
        else if (slot_plugin_missing(s->plugin, msg))
            rc = slot_fail(
                s, STREAM_FATAL,
                "slot=%s: the %s output plugin is not installed "
                "on the server (install %s): %s",
                s->name, s->plugin,
                slot_package_for(s->plugin_package, PQserverVersion(s->conn), pkg, sizeof pkg),
                msg);
        else if (strstr(msg, "already exists"))
            rc = slot_fail(s, STREAM_BUSY,
                           "slot=%s was created concurrently by another process; "
                           "waiting",
                           s->name);
        else
            rc = slot_fail(s, error_rc(s), "slot=%s: CREATE_REPLICATION_SLOT failed: %s", s->name,
                           msg);
    }
    PQclear(res);
    return rc;
}

/* Runs SELECT <columns> FROM public.outbox_relay_slots h for this slot.
 * Returns the result (the caller's, PQclear it; check its status), or NULL
 * with *rc = STREAM_RETRY when the name cannot be escaped. */
static PGresult *history_select(struct slot *s, const char *columns, int *rc)
{
    char *lit = PQescapeLiteral(s->conn, s->name, strlen(s->name));
    if (lit == NULL) {
        *rc = slot_fail(s, STREAM_RETRY, "slot=%s: cannot escape slot name", s->name);
        return NULL;
    }
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %s FROM public.outbox_relay_slots h WHERE slot_name = %s",
             columns, lit);
    PQfreemem(lit);
    return slot_exec(s, sql);
}

/* A missing slot that outbox-relay created before was dropped or lost:
 * events committed since may never have been relayed, so creating a new
 * one at the current position would skip them silently. The history is
 * public.outbox_relay_slots (sql/003_relay_role.sql); without that table
 * the check cannot be made, which is said once. */
static int check_slot_history(struct slot *s)
{
    int rc = STREAM_OK;
    PGresult *res = history_select(
        s, "created_lsn, created_at, to_jsonb(h)->>'backfill_state'", &rc);
    if (res == NULL)
        return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (PQstatus(s->conn) != CONNECTION_OK) {
            rc = slot_fail(s, STREAM_RETRY,
                           "slot=%s: lost the connection while checking the slot "
                           "history",
                           s->name);
        } else {
            char msg[SLOT_MSGLEN];
            pgconn_failure(s->conn, res, msg, sizeof msg);
            log_warn("slot=%s: cannot read public.outbox_relay_slots (%s): if this slot was "
                     "dropped after an earlier run, creating it again skips the events "
                     "committed meanwhile; load sql/003_relay_role.sql so this is checked",
                     s->name, msg);
        }
    } else if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 2) &&
               strcmp(PQgetvalue(res, 0, 2), "creating") == 0) {
        /* A backfill wrote its marker and then stopped before the slot was
         * created, or before anything could have been streamed from it:
         * nothing was skipped, the new slot's backfill covers it all. */
        log_info("slot=%s: an earlier start with --backfill did not get to create the slot; "
                 "creating it now", s->name);
    } else if (PQntuples(res) == 1 && !s->recreate_slot) {
        rc =
            slot_fail(s, STREAM_FATAL,
                      "slot=%s was created by outbox-relay at %s (%s) and no longer exists: it was "
                      "dropped or lost, and events committed since may not have been relayed. Not "
                      "creating a new one silently. To go on, start once with --recreate-slot (add "
                      "--backfill pending to republish the rows still in the outbox table)",
                      s->name, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
    } else if (PQntuples(res) == 1) {
        log_warn("slot=%s was created before at %s and is gone; recreating it as "
                 "--recreate-slot asks", s->name, PQgetvalue(res, 0, 0));
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
int slot_check_backfill_marker(struct slot *s)
{
    int rc = STREAM_OK;
    PGresult *res = history_select(s, "to_jsonb(h)->>'backfill_state'", &rc);
    if (res == NULL)
        return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (PQstatus(s->conn) != CONNECTION_OK)
            rc = slot_fail(s, STREAM_RETRY,
                           "slot=%s: lost the connection while reading its backfill "
                           "marker",
                           s->name);
    } else if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
               (strcmp(PQgetvalue(res, 0, 0), "creating") == 0 ||
                strcmp(PQgetvalue(res, 0, 0), "running") == 0)) {
        rc = slot_fail(s, STREAM_BACKFILL,
                       "slot=%s: its backfill has not finished (backfill_state "
                       "'%s' in public.outbox_relay_slots); not streaming it before",
                       s->name, PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return rc;
}

/* Notes in public.outbox_relay_slots that this slot exists (see above). */
static void record_slot(struct slot *s, lsn_t lsn)
{
    char *lit = PQescapeLiteral(s->conn, s->name, strlen(s->name));
    if (lit == NULL)
        return;
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO public.outbox_relay_slots (slot_name, created_lsn) "
             "VALUES (%s, '" LSN_FMT "') ON CONFLICT (slot_name) DO UPDATE "
             "SET created_lsn = EXCLUDED.created_lsn, created_at = now()",
             lit, LSN_ARGS(lsn));
    PQfreemem(lit);
    /* On a standby the table is read-only: it is written on the primary,
     * and the standby reads it back as it replays. */
    bool on_primary = s->in_recovery && s->primary_dsn != NULL && *s->primary_dsn != '\0';
    char msg[SLOT_MSGLEN] = "";
    PGconn *primary = on_primary ? pgconn_open(s->primary_dsn, "outbox-relay", msg, sizeof msg)
                                 : NULL;
    PGconn *conn = on_primary ? primary : s->conn;
    PGresult *res = conn == NULL ? NULL
                    : on_primary ? pgconn_exec(conn, sql, 0, NULL, s->query_timeout, msg,
                                               sizeof msg)
                                 : slot_exec(s, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        if (conn != NULL)
            pgconn_failure(conn, res, msg, sizeof msg);
        log_warn("slot=%s: cannot record the new slot in public.outbox_relay_slots (%s%s); a "
                 "later drop of the slot would go unnoticed by a restart", s->name, msg,
                 s->in_recovery && !on_primary
                     ? ": on a standby it is written through --primary-dsn" : "");
    }
    PQclear(res);
    PQfinish(primary);
}

int slot_create(struct slot *s, lsn_t *confirmed, bool *created)
{
    int rc;
    bool exists = false;
    if ((rc = check_slot_history(s)) != STREAM_OK)
        return rc;
    if ((rc = create_new(s)) != STREAM_OK)
        return rc;
    *created = true;
    if ((rc = slot_lookup(s, &exists, confirmed)) != STREAM_OK)
        return rc;
    record_slot(s, *confirmed);
    return STREAM_OK;
}
