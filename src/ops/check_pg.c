/*
 * check_pg.c — the preflight's checks of the PostgreSQL server (see
 * check.h): the connection, wal_level, the role, the output plugin, free
 * slots and WAL senders, the WAL-retention and timeout settings, and an
 * existing slot; and check_query, which every check that reads the server
 * runs its statements through. Everything reads catalogs and settings; the one thing
 * created is a temporary slot (the plugin check), which the server drops
 * at the end of the session even when this process is killed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_internal.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/plugin.h"
#include "outbox_relay/pg/slot.h"

#define MSGLEN 1024

PGresult *check_query(struct check_ctx *c, ExecStatusType want, const char *sql, int nparams,
                      const char *const *params, char *msg, size_t msglen)
{
    PGresult *res = pgconn_exec(c->conn, sql, nparams, params, CHECK_QUERY_TIMEOUT, msg,
                                msglen);
    if (res != NULL && PQresultStatus(res) == want)
        return res;
    if (res != NULL)
        pgconn_result_error(res, msg, msglen);
    PQclear(res);
    return NULL;
}

static bool cfg_is_auto(const struct check_ctx *c)
{
    return c->cfg->plugin == PLUGIN_AUTO;
}

static bool is_true(const PGresult *res, int row, int col)
{
    return !PQgetisnull(res, row, col) && strcmp(PQgetvalue(res, row, col), "t") == 0;
}

static const char *plugin_name(const struct check_ctx *c)
{
    return c->plugin == PLUGIN_PGOUTPUT ? "pgoutput" : "wal2json";
}

/* output_plugin_libraries, when the server has it (a minor of November 2026
 * or later) and this role may read it. */
static void read_plugin_libraries(struct check_ctx *c)
{
    char buf[sizeof c->libs.value];
    int rc = pgconn_show(c->conn, "output_plugin_libraries", CHECK_QUERY_TIMEOUT, buf,
                         sizeof buf);
    c->libs.state = rc == 1 ? PLUGIN_LIBS_KNOWN
                    : rc == 0 ? PLUGIN_LIBS_ABSENT
                              : PLUGIN_LIBS_HIDDEN; /* or unreadable: only trying tells */
    snprintf(c->libs.value, sizeof c->libs.value, "%s", rc == 1 ? buf : "");
}

void check_server(struct check_ctx *c)
{
    char msg[MSGLEN];
    c->conn = pgconn_open(c->cfg->dsn, "outbox-relay check", msg, sizeof msg);
    if (c->conn == NULL) {
        check_report_addf(c->report, "server", CHECK_FAIL,
                          "check --dsn (host, port, dbname, user) and pg_hba.conf; the other "
                          "PostgreSQL checks need a connection",
                          "cannot connect to PostgreSQL: %s", msg);
        return;
    }
    c->server_version = PQserverVersion(c->conn);
    /* A stalled lock (a partition being dropped) or the plugin test's slot
     * waiting for a long transaction must not hang a preflight: the server
     * cancels the statement (a WARN) before pgconn_exec's deadline would
     * drop the connection. */
    PQclear(pgconn_exec(c->conn, "SET lock_timeout = '2s'; SET statement_timeout = '"
                        CHECK_STATEMENT_TIMEOUT "'", 0, NULL, CHECK_QUERY_TIMEOUT, msg,
                        sizeof msg));
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT current_user, current_database(), pg_is_in_recovery(), "
                                "r.rolsuper, r.rolreplication FROM pg_roles r "
                                "WHERE r.rolname = current_user", 0, NULL, msg, sizeof msg);
    if (res == NULL || PQntuples(res) != 1) {
        check_report_addf(c->report, "server", CHECK_FAIL, NULL,
                          "connected, but cannot read the role: %s", res ? "no row" : msg);
        PQclear(res);
        PQfinish(c->conn);
        c->conn = NULL;
        return;
    }
    snprintf(c->role, sizeof c->role, "%s", PQgetvalue(res, 0, 0));
    c->superuser = is_true(res, 0, 3);
    c->replication = is_true(res, 0, 4);
    bool standby = is_true(res, 0, 2);
    int v = c->server_version;
    read_plugin_libraries(c);
    char notes[600];
    plugin_describe_server(v, &c->libs, notes, sizeof notes);
    if (standby && v < 160000)
        check_report_addf(c->report, "server", CHECK_FAIL,
                          "point --dsn at the primary", "PostgreSQL %d.%d, database %s: a "
                          "standby, where PostgreSQL before 16 has no logical decoding",
                          v / 10000, v % 10000, PQgetvalue(res, 0, 1));
    else
        check_report_addf(c->report, "server", CHECK_PASS, NULL,
                          "PostgreSQL %d.%d, database %s, role %s%s: %s", v / 10000, v % 10000,
                          PQgetvalue(res, 0, 1), c->role, standby ? " (a standby)" : "", notes);
    PQclear(res);
}

/* The text of a setting, or NULL with a FAIL item when it cannot be read. */
static PGresult *setting(struct check_ctx *c, const char *check, const char *name)
{
    char msg[MSGLEN];
    const char *p[] = {name};
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT setting FROM pg_settings WHERE name = $1", 1, p, msg,
                                sizeof msg);
    if (res == NULL || PQntuples(res) != 1) {
        check_report_addf(c->report, check, CHECK_FAIL, NULL, "cannot read %s: %s", name,
                          res ? "no such setting" : msg);
        PQclear(res);
        return NULL;
    }
    return res;
}

void check_wal_level(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    PGresult *res = setting(c, "wal_level", "wal_level");
    if (res == NULL)
        return;
    const char *level = PQgetvalue(res, 0, 0);
    c->wal_logical = strcmp(level, "logical") == 0;
    if (c->wal_logical)
        check_report_add(c->report, "wal_level", CHECK_PASS, "wal_level = logical", NULL);
    else
        check_report_addf(c->report, "wal_level", CHECK_FAIL,
                          "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
                          "wal_level = %s: logical decoding needs wal_level = logical", level);
    PQclear(res);
}

/* REPLICATION (or superuser), then a logical replication connection as
 * the relayer opens it: that also proves pg_hba.conf lets it in. */
void check_role(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    char fix[512];
    if (!c->superuser && !c->replication) {
        snprintf(fix, sizeof fix, "ALTER ROLE \"%s\" REPLICATION; (as a superuser; "
                 "sql/003_relay_role.sql creates such a role)", c->role);
        check_report_addf(c->report, "role", CHECK_FAIL, fix,
                          "role %s has neither REPLICATION nor SUPERUSER: it cannot create or "
                          "stream a replication slot", c->role);
        return;
    }
    PGconn *rc = pgconn_connectdb(c->cfg->dsn, "outbox-relay check", "database");
    char msg[MSGLEN] = "";
    bool ok = rc != NULL && PQstatus(rc) == CONNECTION_OK;
    if (ok) {
        PGresult *res = pgconn_exec(rc, "IDENTIFY_SYSTEM", 0, NULL, CHECK_QUERY_TIMEOUT, msg,
                                    sizeof msg);
        ok = res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK && PQnfields(res) >= 4 &&
             PQntuples(res) == 1;
        if (!ok && res != NULL)
            pgconn_result_error(res, msg, sizeof msg);
        PQclear(res);
    } else {
        pgconn_error(rc, msg, sizeof msg);
    }
    PQfinish(rc);
    if (ok) {
        check_report_addf(c->report, "role", CHECK_PASS, NULL,
                          "role %s has %s; a logical replication connection works", c->role,
                          c->superuser ? "SUPERUSER" : "REPLICATION");
        return;
    }
    snprintf(fix, sizeof fix, "%s",
             strstr(msg, "pg_hba.conf")
                 ? "allow the role in pg_hba.conf for this database (a logical replication "
                   "connection is matched by its database name, not \"replication\")"
             : strstr(msg, "max_wal_senders") || strstr(msg, "wal_sender")
                 ? "raise max_wal_senders (see wal_senders)"
                 : "see the server's message");
    check_report_addf(c->report, "role", CHECK_FAIL, fix,
                      "role %s has %s, but a logical replication connection fails: %s",
                      c->role, c->superuser ? "SUPERUSER" : "REPLICATION", msg);
}

/* Whether our slot exists (read once here, the slot check reads the rest). */
static bool slot_exists(struct check_ctx *c)
{
    char msg[MSGLEN];
    const char *p[] = {c->cfg->slot};
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", 1, p,
                                msg, sizeof msg);
    bool exists = res != NULL && PQntuples(res) == 1;
    PQclear(res);
    return exists;
}

/* max_<setting> against what is in use; the relayer needs a new one only
 * while its slot does not exist (slots) or always (WAL senders). */
static void free_of(struct check_ctx *c, const char *check, const char *max_name,
                    const char *used_sql, bool need_new, const char *what, const char *fix)
{
    char msg[MSGLEN];
    const char *p[] = {max_name};
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT current_setting($1)::bigint, (%s)", used_sql);
    PGresult *res = check_query(c, PGRES_TUPLES_OK, sql, 1, p, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, check, CHECK_FAIL, NULL, "cannot count %s: %s", what, msg);
        return;
    }
    long max = atol(PQgetvalue(res, 0, 0)), used = atol(PQgetvalue(res, 0, 1));
    PQclear(res);
    enum check_status st = check_classify_free(max, used, need_new);
    if (strcmp(check, "replication_slots") == 0)
        c->slots_free = !need_new || max - used >= 1;
    check_report_addf(c->report, check, st, st == CHECK_PASS ? NULL : fix,
                      "%s = %ld, %ld in use, %ld free%s", max_name, max, used,
                      max - used > 0 ? max - used : 0,
                      need_new ? "" : " (the relayer's slot exists already)");
}

void check_replication_slots(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    c->slot_exists = slot_exists(c);
    free_of(c, "replication_slots", "max_replication_slots",
            "SELECT count(*) FROM pg_replication_slots", !c->slot_exists,
            "replication slots",
            "the relayer needs one slot: raise max_replication_slots (ALTER SYSTEM SET "
            "max_replication_slots = ...; restart PostgreSQL) or drop a slot nothing uses "
            "(SELECT slot_name, active FROM pg_replication_slots)");
}

void check_wal_senders(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    free_of(c, "wal_senders", "max_wal_senders",
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'", true,
            "WAL senders",
            "the relayer streams through one WAL sender (and a standby relayer waits in "
            "another): raise max_wal_senders (ALTER SYSTEM SET max_wal_senders = ...; "
            "restart PostgreSQL)");
}

/* The plugin of an existing slot (NULL: none, or not a logical one). */
static char *existing_slot_plugin(struct check_ctx *c, char *buf, size_t cap)
{
    char msg[MSGLEN];
    const char *p[] = {c->cfg->slot};
    PGresult *res = check_query(c, PGRES_TUPLES_OK, "SELECT plugin FROM pg_replication_slots "
                                "WHERE slot_name = $1 AND plugin IS NOT NULL", 1, p, msg,
                                sizeof msg);
    bool found = res != NULL && PQntuples(res) == 1;
    if (found)
        snprintf(buf, cap, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return found ? buf : NULL;
}

/* Whether wal2json loads: only creating a slot with it proves that; a
 * temporary slot is dropped with the session whatever happens. Returns 1
 * (loads), 0 (not installed: msg says so), -1 (refused: not named in
 * output_plugin_libraries), -2 (not tested, or another failure: msg). */
static int wal2json_loads(struct check_ctx *c, char *msg, size_t msglen)
{
    char name[64];
    snprintf(name, sizeof name, "outbox_relay_check_%ld", (long) getpid());
    const char *p[] = {name};
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT pg_drop_replication_slot(slot_name) FROM "
                                "pg_create_logical_replication_slot($1, 'wal2json', true)",
                                1, p, msg, msglen);
    if (res != NULL) {
        PQclear(res);
        return 1;
    }
    return plugin_refused_error(msg) ? -1 : slot_plugin_missing("wal2json", msg) ? 0 : -2;
}

/* The plugin the relayer would use (PLUGIN_AUTO resolved as plugin.h
 * says) and whether the server lets it: wal2json must be named in
 * output_plugin_libraries (15.19+) and load; pgoutput is built in since
 * PostgreSQL 10, with what the relayer needs from 14 (logical messages,
 * publish_via_partition_root). */
void check_plugin(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    int v = c->server_version;
    const struct plugin_libs *libs = &c->libs;
    char slot_plugin[64], how[900] = "";
    const char *existing = existing_slot_plugin(c, slot_plugin, sizeof slot_plugin);
    if (c->plugin == PLUGIN_AUTO) {
        const char *chosen;
        if (existing != NULL && (strcmp(existing, "wal2json") == 0 ||
                                 strcmp(existing, "pgoutput") == 0)) {
            chosen = existing;
            snprintf(how, sizeof how, "no --plugin: slot %s exists with %s, which it keeps",
                     c->cfg->slot, existing);
        } else {
            chosen = plugin_choose_new(libs, false, false, how, sizeof how);
        }
        c->plugin = strcmp(chosen, "pgoutput") == 0 ? PLUGIN_PGOUTPUT : PLUGIN_WAL2JSON;
    }
    if (c->plugin == PLUGIN_PGOUTPUT) {
        if (v >= 140000)
            check_report_addf(c->report, "plugin", CHECK_PASS, NULL,
                              "pgoutput is built into PostgreSQL %d%s%s", v / 10000,
                              *how ? "; " : "", how);
        else
            check_report_addf(c->report, "plugin", CHECK_FAIL,
                              "upgrade PostgreSQL, or use --plugin wal2json",
                              "--plugin pgoutput needs PostgreSQL 14 or later (logical "
                              "messages, publish_via_partition_root); this server is %d", v);
        return;
    }
    bool exists = existing != NULL && strcmp(existing, "wal2json") == 0;
    char advice[1400];
    if (!plugin_allowed(libs, "wal2json")) {
        plugin_refusal_advice("wal2json", libs, exists, advice, sizeof advice);
        check_report_addf(c->report, "plugin", CHECK_FAIL, advice,
                          "the server refuses wal2json for a replication role: "
                          "output_plugin_libraries = '%s' does not name it%s", libs->value,
                          exists ? " (the existing slot cannot stream)" : "");
        return;
    }
    const char *why = !c->wal_logical            ? "wal_level is not logical"
                      : !c->superuser && !c->replication ? "the role lacks REPLICATION"
                      : !c->slots_free           ? "no replication slot is free"
                                                 : NULL;
    if (why != NULL) {
        check_report_addf(c->report, "plugin", CHECK_WARN,
                          "fix the checks above, then run check again",
                          "not tested whether wal2json loads: %s", why);
        return;
    }
    char msg[MSGLEN];
    int loads = wal2json_loads(c, msg, sizeof msg);
    if (loads == 1) {
        check_report_addf(c->report, "plugin", CHECK_PASS, NULL,
                          "wal2json loads (a temporary slot was created with it and "
                          "dropped)%s%s", *how ? "; " : "", how);
    } else if ((loads == 0 || loads == -1) && cfg_is_auto(c) && !exists) {
        c->plugin = PLUGIN_PGOUTPUT; /* as the relayer does (slot.c) */
        plugin_choose_new(libs, loads == -1, loads == 0, how, sizeof how);
        check_report_addf(c->report, "plugin", v >= 140000 ? CHECK_PASS : CHECK_FAIL,
                          v >= 140000 ? NULL : "install the server's wal2json package",
                          "no --plugin: %s", how);
    } else if (loads == 0) {
        char pkg[128], fix[256];
        slot_package_for("postgresql-<version>-wal2json", v, pkg, sizeof pkg);
        snprintf(fix, sizeof fix, "install %s on the server (or run with --plugin pgoutput)",
                 pkg);
        check_report_addf(c->report, "plugin", CHECK_FAIL, fix,
                          "the wal2json output plugin does not load: %s", msg);
    } else if (loads == -1) {
        plugin_refusal_advice("wal2json", libs, exists, advice, sizeof advice);
        check_report_addf(c->report, "plugin", CHECK_FAIL, advice,
                          "the server refuses wal2json: %s", msg);
    } else {
        check_report_addf(c->report, "plugin", CHECK_WARN,
                          "see the server's message (a long-running transaction delays slot "
                          "creation)", "could not test whether wal2json loads: %s", msg);
    }
}

void check_keep_size(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    PGresult *res = setting(c, "max_slot_wal_keep_size", "max_slot_wal_keep_size");
    if (res == NULL)
        return;
    long long mb = atoll(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (check_classify_keep_size(mb) == CHECK_PASS)
        check_report_addf(c->report, "max_slot_wal_keep_size", CHECK_PASS, NULL,
                          "max_slot_wal_keep_size = %lld MB: a stopped relayer cannot make WAL "
                          "fill the disk", mb);
    else
        check_report_add(c->report, "max_slot_wal_keep_size", CHECK_WARN,
                         "max_slot_wal_keep_size = -1 (unlimited): while the relayer is stopped "
                         "its slot keeps every WAL segment, until the disk is full",
                         "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB' (below the WAL "
                         "disk's free space); SELECT pg_reload_conf(); and alert on slot lag "
                         "(docs/operations.md)");
}

void check_sender_timeout(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    PGresult *res = setting(c, "wal_sender_timeout", "wal_sender_timeout");
    if (res == NULL)
        return;
    long long ms = atoll(PQgetvalue(res, 0, 0));
    PQclear(res);
    double si = c->cfg->status_interval;
    enum check_status st = check_classify_sender_timeout(ms, si);
    char fix[400];
    if (ms <= 0)
        snprintf(fix, sizeof fix, "ALTER SYSTEM SET wal_sender_timeout = '60s'; SELECT "
                 "pg_reload_conf(); (or use --takeover-after)");
    else
        snprintf(fix, sizeof fix, "lower --status-interval below %.1f s (half of "
                 "wal_sender_timeout), or raise wal_sender_timeout (ALTER SYSTEM SET "
                 "wal_sender_timeout = '60s'; SELECT pg_reload_conf())", (double) ms / 2000.0);
    if (ms <= 0)
        check_report_add(c->report, "wal_sender_timeout", st,
                         "wal_sender_timeout = 0 (off): the walsender of a vanished relayer "
                         "holds the slot until TCP gives up, and a standby relayer waits", fix);
    else
        check_report_addf(c->report, "wal_sender_timeout", st, st == CHECK_PASS ? NULL : fix,
                          "wal_sender_timeout = %.1f s, --status-interval = %.1f s%s",
                          (double) ms / 1000.0, si,
                          st == CHECK_FAIL ? ": the server would end the connection between "
                                             "two status updates while the relayer waits for "
                                             "Kafka"
                          : st == CHECK_WARN ? ": above half the timeout, little margin for a "
                                               "slow path"
                                             : "");
}

void check_slot(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    char msg[MSGLEN], detail[1024], fix[600];
    const char *p[] = {c->cfg->slot};
    char sql[700];
    snprintf(sql, sizeof sql,
             "SELECT slot_type, plugin, database = current_database(), database, active, "
             "active_pid::text, wal_status, pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN "
             "pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, "
             "confirmed_flush_lsn)::bigint, %s FROM pg_replication_slots WHERE slot_name = $1",
             c->server_version >= 170000 ? "invalidation_reason" : "NULL::text");
    PGresult *res = check_query(c, PGRES_TUPLES_OK, sql, 1, p, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "slot", CHECK_FAIL, NULL, "cannot read slot %s: %s",
                          c->cfg->slot, msg);
        return;
    }
    if (PQntuples(res) == 1) {
        struct check_slot_row row = {
            .slot_type = PQgetvalue(res, 0, 0),
            .plugin = PQgetisnull(res, 0, 1) ? NULL : PQgetvalue(res, 0, 1),
            .same_database = is_true(res, 0, 2),
            .database = PQgetisnull(res, 0, 3) ? NULL : PQgetvalue(res, 0, 3),
            .active = is_true(res, 0, 4),
            .active_pid = PQgetisnull(res, 0, 5) ? NULL : PQgetvalue(res, 0, 5),
            .wal_status = PQgetisnull(res, 0, 6) ? NULL : PQgetvalue(res, 0, 6),
            .lag_bytes = PQgetisnull(res, 0, 7) ? -1 : atoll(PQgetvalue(res, 0, 7)),
            .invalidation_reason = PQgetisnull(res, 0, 8) ? NULL : PQgetvalue(res, 0, 8),
        };
        enum check_status st = check_classify_slot(&row, c->cfg->slot, plugin_name(c),
                                                   c->cfg->max_lag_bytes, detail,
                                                   sizeof detail, fix, sizeof fix);
        check_report_add(c->report, "slot", st, detail, st == CHECK_PASS ? NULL : fix);
        PQclear(res);
        return;
    }
    PQclear(res);
    /* No slot: was there one that outbox-relay created (slot.c refuses to
     * create it again silently)? */
    res = check_query(c, PGRES_TUPLES_OK,
                      "SELECT created_lsn::text, created_at::text, "
                      "to_jsonb(h)->>'backfill_state' FROM public.outbox_relay_slots h "
                      "WHERE slot_name = $1", 1, p, msg, sizeof msg);
    bool dropped = res != NULL && PQntuples(res) == 1 &&
                   !(PQgetvalue(res, 0, 2) && strcmp(PQgetvalue(res, 0, 2), "creating") == 0);
    if (dropped && !c->cfg->recreate_slot)
        check_report_addf(c->report, "slot", CHECK_FAIL,
                          "start once with --recreate-slot (with --backfill pending to "
                          "republish the rows still in the outbox)",
                          "slot %s does not exist, but outbox-relay created it at %s (%s): it "
                          "was dropped or lost, events committed since may not be in Kafka, "
                          "and the relayer refuses to create it again silently",
                          c->cfg->slot, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
    else if (dropped)
        check_report_addf(c->report, "slot", c->cfg->backfill_pending ? CHECK_PASS : CHECK_WARN,
                          c->cfg->backfill_pending ? NULL
                                                   : "add --backfill pending to republish the "
                                                     "rows still in the outbox",
                          "slot %s was created by outbox-relay at %s and is gone: the relayer "
                          "creates it again as --recreate-slot asks, and events committed "
                          "meanwhile may not be in Kafka", c->cfg->slot, PQgetvalue(res, 0, 1));
    else
        check_report_addf(c->report, "slot", CHECK_PASS, NULL,
                          "slot %s does not exist yet: the relayer creates it (%s) on first "
                          "start; events committed before that are not relayed",
                          c->cfg->slot, plugin_name(c));
    PQclear(res);
}
