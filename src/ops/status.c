/*
 * status.c — `outbox-relay status` (see status.h).
 *
 * Two read-only queries on an ordinary connection: the slot joined with its
 * walsender's pg_stat_replication row, then the outbox's oldest row and row
 * estimate. Everything printed is "key value" on its own line so that
 * scripts can grep it.
 */
#include "outbox_relay/ops/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "outbox_relay/base/human.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/ops/maint.h"
#include "outbox_relay/pg/outbox_catalog.h"
#include "outbox_relay/pg/failover.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/plugin.h"
#include "outbox_relay/pg/publication.h"

#define KEYW "-16"
#define STATUS_QUERY_TIMEOUT 10.0 /* s: a stalled path makes `status` report, not hang */

struct verdict {
    FILE *out;
    int unhealthy;
    struct plugin_libs libs;   /* the server's output_plugin_libraries */
    bool pgoutput_slot;        /* the slot exists with pgoutput */
};

static void unhealthy(struct verdict *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void unhealthy(struct verdict *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(v->out, "UNHEALTHY: ");
    vfprintf(v->out, fmt, ap);
    fprintf(v->out, "\n");
    va_end(ap);
    v->unhealthy++;
}

static PGresult *query(PGconn *conn, const char *what, const char *sql, int nparams,
                       const char *const *params)
{
    char msg[512];
    PGresult *res = pgconn_exec(conn, sql, nparams, params, STATUS_QUERY_TIMEOUT, msg,
                                sizeof msg);
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    log_error("status: %s failed: %s", what, msg);
    PQclear(res);
    return NULL;
}

static const char *val(PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? NULL : PQgetvalue(res, 0, col);
}

/* The server: its version, what that means for the relayer, and the
 * output plugins it allows. Returns -1 when the query failed. */
static int report_server(PGconn *conn, struct verdict *v)
{
    PGresult *res = query(conn, "reading the server's version",
                          "SELECT current_setting('server_version_num')::int, "
                          "current_setting('server_version')", 0, NULL);
    if (res == NULL)
        return -1;
    int version = atoi(PQgetvalue(res, 0, 0));
    char name[128];
    snprintf(name, sizeof name, "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    char buf[sizeof v->libs.value];
    int rc = pgconn_show(conn, "output_plugin_libraries", STATUS_QUERY_TIMEOUT, buf, sizeof buf);
    v->libs.state = rc == 1 ? PLUGIN_LIBS_KNOWN : rc == 0 ? PLUGIN_LIBS_ABSENT
                                                          : PLUGIN_LIBS_HIDDEN;
    snprintf(v->libs.value, sizeof v->libs.value, "%s", rc == 1 ? buf : "");
    char notes[600];
    plugin_describe_server(version, &v->libs, notes, sizeof notes);
    fprintf(v->out, "%" KEYW "s PostgreSQL %s (major %d): %s\n", "server", name,
            version / 10000, notes);
    if (v->libs.state != PLUGIN_LIBS_ABSENT)
        fprintf(v->out, "%" KEYW "s %s\n", "plugins_allowed",
                v->libs.state == PLUGIN_LIBS_KNOWN ? v->libs.value
                                                   : "unknown (output_plugin_libraries is "
                                                     "visible only to superusers and "
                                                     "pg_read_all_settings)");
    return 0;
}

/* Prints the slot part; returns -1 when the query failed. */
static int report_slot(PGconn *conn, const struct relay_config *cfg, struct verdict *v)
{
    const char *params[] = {cfg->slot};
    /* 17+: why the server invalidated the slot, and since when it is idle
     * (18's idle_replication_slot_timeout counts from there). */
    bool v17 = PQserverVersion(conn) >= 170000;
    char sql[1200];
    snprintf(sql, sizeof sql,
             "SELECT s.plugin, s.database, s.database = current_database(), "
             "s.active, s.active_pid, s.confirmed_flush_lsn::text, "
             "pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
             "ELSE pg_current_wal_lsn() END, s.confirmed_flush_lsn)::bigint, "
             "s.wal_status, s.safe_wal_size, r.pid IS NOT NULL, "
             "r.sent_lsn IS NOT NULL, extract(epoch FROM r.flush_lag), "
             "r.flush_lsn >= r.sent_lsn, %s, %s "
             "FROM pg_replication_slots s "
             "LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid "
             "WHERE s.slot_name = $1",
             v17 ? "s.invalidation_reason" : "NULL::text",
             v17 ? "s.inactive_since::text" : "NULL::text");
    PGresult *res = query(conn, "reading the slot", sql, 1, params);
    if (res == NULL)
        return -1;
    FILE *out = v->out;
    fprintf(out, "%" KEYW "s %s\n", "slot", cfg->slot);
    if (PQntuples(res) == 0) {
        unhealthy(v, "slot %s does not exist (the relayer creates it on first start; if it "
                  "was dropped, events committed since are not relayed)", cfg->slot);
        PQclear(res);
        return 0;
    }
    const char *plugin = val(res, 0), *db = val(res, 1), *same_db = val(res, 2);
    const char *active = val(res, 3), *pid = val(res, 4), *confirmed = val(res, 5);
    const char *lag = val(res, 6), *wal_status = val(res, 7), *safe = val(res, 8);
    bool has_walsender = strcmp(PQgetvalue(res, 0, 9), "t") == 0;
    bool can_see = strcmp(PQgetvalue(res, 0, 10), "t") == 0;
    const char *flush_lag = val(res, 11), *caught_up = val(res, 12);
    const char *invalidated = val(res, 13), *inactive_since = val(res, 14);

    fprintf(out, "%" KEYW "s %s\n", "plugin", plugin ? plugin : "(none: physical slot)");
    fprintf(out, "%" KEYW "s %s\n", "database", db ? db : "-");
    bool is_active = active && strcmp(active, "t") == 0;
    fprintf(out, "%" KEYW "s %s\n", "active", is_active ? "yes" : "no");
    fprintf(out, "%" KEYW "s %s\n", "active_pid", pid ? pid : "-");
    if (inactive_since != NULL)
        fprintf(out, "%" KEYW "s %s\n", "inactive_since", inactive_since);
    fprintf(out, "%" KEYW "s %s\n", "confirmed_lsn", confirmed ? confirmed : "-");
    char h1[HUMAN_LEN], h2[HUMAN_LEN];
    fprintf(out, "%" KEYW "s %s\n", "lag_bytes", lag ? lag : "unknown");
    if (lag) /* the exact figure stays alone on its line: scripts read it */
        fprintf(out, "%" KEYW "s %s\n", "lag", human_bytes(atoll(lag), h1, sizeof h1));
    fprintf(out, "%" KEYW "s %s\n", "wal_status", wal_status ? wal_status : "unknown");
    fprintf(out, "%" KEYW "s %s\n", "safe_wal_size",
            safe ? safe : "unlimited (max_slot_wal_keep_size = -1)");
    if (safe)
        fprintf(out, "%" KEYW "s %s\n", "safe_wal", human_bytes(atoll(safe), h1, sizeof h1));

    /* The confirmation lag in time. */
    double lag_s = -1;
    const char *why_unknown = NULL;
    if (!is_active || !has_walsender)
        why_unknown = "no walsender: the slot is not active";
    else if (!can_see)
        why_unknown = "pg_stat_replication details need pg_read_all_stats";
    else if (flush_lag != NULL)
        lag_s = atof(flush_lag);
    else if (caught_up && strcmp(caught_up, "t") == 0)
        lag_s = 0; /* PostgreSQL clears the lag once the relayer is fully caught up */
    else
        why_unknown = "the walsender has no timing sample yet";
    if (lag_s >= 0)
        fprintf(out, "%" KEYW "s %.3f s = %s (pg_stat_replication.flush_lag)\n",
                "confirm_lag", lag_s, human_duration(lag_s, h1, sizeof h1));
    else
        fprintf(out, "%" KEYW "s unknown (%s)\n", "confirm_lag", why_unknown);

    v->pgoutput_slot = plugin != NULL && strcmp(plugin, "pgoutput") == 0;
    if (plugin != NULL && strcmp(plugin, "wal2json") == 0 &&
        !plugin_allowed(&v->libs, "wal2json")) {
        char advice[1400];
        plugin_refusal_advice("wal2json", &v->libs, true, advice, sizeof advice);
        unhealthy(v, "not streaming: %s", advice);
    }
    if (plugin == NULL)
        unhealthy(v, "slot %s is a physical slot, not the relayer's logical slot", cfg->slot);
    else if (same_db == NULL || strcmp(same_db, "t") != 0)
        unhealthy(v, "slot %s belongs to database %s, not the one --dsn connects to",
                  cfg->slot, db ? db : "?");
    if (invalidated != NULL)
        unhealthy(v, "slot %s was invalidated by the server (invalidation_reason %s): events "
                  "may be lost; drop it and start with --recreate-slot --backfill pending%s",
                  cfg->slot, invalidated,
                  strcmp(invalidated, "idle_timeout") == 0
                      ? ", and set idle_replication_slot_timeout to 0 or above the longest "
                        "stop of the relayer"
                      : "");
    else if (wal_status && strcmp(wal_status, "lost") == 0)
        unhealthy(v, "wal_status lost: WAL the slot needs was removed; events may be lost "
                  "(see docs/operations.md, \"slot lost\")");
    else if (wal_status && strcmp(wal_status, "unreserved") == 0)
        unhealthy(v, "wal_status unreserved: WAL the slot needs is past "
                  "max_slot_wal_keep_size and goes at the next checkpoint");
    if (!is_active)
        unhealthy(v, "slot %s is not active: no relayer is streaming from it", cfg->slot);
    if (lag && cfg->max_lag_bytes > 0 && atoll(lag) > cfg->max_lag_bytes)
        unhealthy(v, "lag_bytes %s > --max-lag-bytes %ld (%s > %s)", lag, cfg->max_lag_bytes,
                  human_bytes(atoll(lag), h1, sizeof h1),
                  human_bytes(cfg->max_lag_bytes, h2, sizeof h2));
    if (lag_s >= 0 && cfg->max_age > 0 && lag_s > cfg->max_age)
        unhealthy(v, "confirm_lag %.1f s > --max-age %.0f s (%s > %s)", lag_s, cfg->max_age,
                  human_duration(lag_s, h1, sizeof h1),
                  human_duration(cfg->max_age, h2, sizeof h2));
    else if (lag_s < 0 && is_active && cfg->max_age > 0)
        fprintf(out, "warning: --max-age not checked: confirmation lag unknown (%s)\n",
                why_unknown);
    PQclear(res);
    return 0;
}

/* Prints the outbox part; returns -1 when the query failed. */
static int report_table(PGconn *conn, const struct relay_config *cfg, struct verdict *v)
{
    char *qs = PQescapeIdentifier(conn, cfg->table_schema, strlen(cfg->table_schema));
    char *qn = PQescapeIdentifier(conn, cfg->table_name, strlen(cfg->table_name));
    char sql[1024];
    int rc = -1;
    if (qs == NULL || qn == NULL)
        goto out;
    /* The row estimate reads catalogs only; the oldest row is one probe of
     * the created_at index, but on a partitioned outbox it needs every
     * partition, and one the reaper is about to drop is locked for up to
     * its confirm wait: give up after 2 s rather than hang a probe. */
    char qtable[300];
    snprintf(qtable, sizeof qtable, "%s.%s", qs, qn);
    const char *params[] = {qtable};
    PGresult *res = query(conn, "estimating the table's rows", OUTBOX_CATALOG_ROWS_SQL, 1, params);
    if (res == NULL)
        goto out;
    char rows[32];
    snprintf(rows, sizeof rows, "%s", PQgetisnull(res, 0, 0) ? "" : PQgetvalue(res, 0, 0));
    PQclear(res);
    /* A table that writes no WAL: its rows are never relayed, and look
     * delivered (keepalives move the slot past them). */
    char logged_sql[1500];
    outbox_catalog_logged_sql("to_regclass($1)", logged_sql, sizeof logged_sql);
    res = query(conn, "checking that the outbox writes WAL", logged_sql, 1, params);
    if (res == NULL)
        goto out;
    if (atoll(PQgetvalue(res, 0, OUTBOX_LOGGED_COUNT)) > 0)
        unhealthy(v, "the outbox has %s UNLOGGED or temporary table(s): they write no WAL, so "
                  "their rows are never relayed (and the reaper would delete them); run %s and "
                  "republish the rows written meanwhile",
                  PQgetvalue(res, 0, OUTBOX_LOGGED_COUNT), PQgetvalue(res, 0, OUTBOX_LOGGED_FIX));
    PQclear(res);
    char ignored[512];
    PQclear(pgconn_exec(conn, "SET lock_timeout = '2s'", 0, NULL, STATUS_QUERY_TIMEOUT, ignored,
                        sizeof ignored));
    snprintf(sql, sizeof sql,
             "SELECT created_at::text, extract(epoch FROM now() - created_at) FROM %s "
             "ORDER BY created_at LIMIT 1", qtable);
    res = query(conn, "reading the outbox's oldest row", sql, 0, NULL);
    if (res == NULL)
        goto out;
    const char *oldest = PQntuples(res) ? val(res, 0) : NULL;
    const char *age = PQntuples(res) ? val(res, 1) : NULL;
    char h[HUMAN_LEN];
    fprintf(v->out, "%" KEYW "s %s.%s\n", "table", cfg->table_schema, cfg->table_name);
    if (oldest)
        fprintf(v->out, "%" KEYW "s %s (age %.0f s = %s)\n", "oldest_row", oldest, atof(age),
                human_duration(atof(age), h, sizeof h));
    else
        fprintf(v->out, "%" KEYW "s none (the table is empty)\n", "oldest_row");
    fprintf(v->out, "%" KEYW "s %s\n", "rows_estimate",
            rows[0] ? rows : "unknown (not vacuumed or analyzed yet)");
    fprintf(v->out, "%" KEYW "s %s\n", "retention", cfg->retention);
    PQclear(res);
    rc = 0;
out:
    PQfreemem(qs);
    PQfreemem(qn);
    return rc;
}

/* --plugin pgoutput: the publication, judged as the relayer judges it
 * (publication.h). Returns -1 when a query failed. */
static int report_publication(PGconn *conn, const struct relay_config *cfg, struct verdict *v)
{
    if (cfg->plugin == PLUGIN_WAL2JSON || (cfg->plugin == PLUGIN_AUTO && !v->pgoutput_slot))
        return 0;
    char why[1024];
    bool filtered;
    int health = publication_inspect(conn, cfg->publication, cfg->table_schema, cfg->table_name,
                                     cfg->slot, &cfg->columns, STATUS_QUERY_TIMEOUT, &filtered,
                                     why, sizeof why);
    if (health == PUBLICATION_UNKNOWN) {
        log_error("status: %s", why);
        return -1;
    }
    if (health == PUBLICATION_SERVES)
        fprintf(v->out, "%" KEYW "s %s (serves the outbox%s)\n", "publication", cfg->publication,
                filtered ? "; with a row filter" : "");
    else if (health == PUBLICATION_NOT_MADE)
        fprintf(v->out, "%" KEYW "s %s (not made yet: the relayer creates it with its slot)\n",
                "publication", cfg->publication);
    else
        unhealthy(v, "%s: the server skips outbox rows and the slot moves past them", why);
    return 0;
}

/* PostgreSQL 17+: the slot's failover protection (failover.h), as far as
 * the server asked can see it. Never fails the report: an unreadable
 * setting is said. */
static void report_failover(PGconn *conn, const struct relay_config *cfg, struct verdict *v)
{
    if (PQserverVersion(conn) < 170000)
        return;
    struct failover_info fi;
    char why[1024], h[HUMAN_LEN];
    if (failover_probe(conn, cfg->slot, STATUS_QUERY_TIMEOUT, &fi, why, sizeof why) < 0) {
        fprintf(v->out, "%" KEYW "s unknown (%s)\n", "failover", why);
        return;
    }
    if (!fi.slot_exists)
        return;
    if (fi.in_recovery) {
        fprintf(v->out, "%" KEYW "s %s\n", "failover",
                fi.synced ? (fi.temporary ? "this standby holds a synced copy, not yet "
                                            "persisted (it would be dropped at a promotion)"
                                          : "this standby holds a synced copy of the slot")
                          : "the slot is this standby's own (decoding on a standby)");
        return;
    }
    enum failover_verdict fv = failover_judge(&fi, cfg->slot, why, sizeof why);
    if (fv == FAILOVER_NOT_USED) {
        fprintf(v->out, "%" KEYW "s %s\n", "failover",
                "no (the slot is not a failover slot: it is lost if a standby is promoted)");
        return;
    }
    fprintf(v->out, "%" KEYW "s yes; synchronized_standby_slots = '%s'\n", "failover",
            fi.standby_slots);
    if (fi.standby_lag_bytes >= 0)
        fprintf(v->out, "%" KEYW "s %lld (%s; a standby's synced copy of the slot is visible "
                "only on the standby)\n", "standby_lag_bytes", (long long) fi.standby_lag_bytes,
                human_bytes(fi.standby_lag_bytes, h, sizeof h));
    if (fv != FAILOVER_PROTECTED)
        unhealthy(v, "%s", why);
    else if (fi.inactive > 0)
        fprintf(v->out, "%" KEYW "s %d of the physical slots named have no standby connected: "
                "the relayer waits for them\n", "standby_inactive", fi.inactive);
}

int status_run(const struct relay_config *cfg, FILE *out)
{
    struct verdict v = {.out = out};
    char msg[512];
    PGconn *conn = pgconn_open(cfg->dsn, "outbox-relay status", msg, sizeof msg);
    if (conn == NULL) {
        log_error("status: cannot connect to PostgreSQL: %s", msg);
        fprintf(out, "UNHEALTHY: cannot connect to PostgreSQL\n");
        return 1;
    }
    int rc = report_server(conn, &v);
    if (rc == 0)
        rc = report_slot(conn, cfg, &v);
    if (rc == 0)
        report_failover(conn, cfg, &v);
    if (rc == 0)
        rc = report_table(conn, cfg, &v);
    if (rc == 0)
        rc = report_publication(conn, cfg, &v);
    PQfinish(conn);
    if (rc < 0) {
        fprintf(out, "UNHEALTHY: could not read the slot or the table (see the log)\n");
        return 1;
    }
    if (v.unhealthy == 0)
        fprintf(out, "%" KEYW "s OK\n", "status");
    fflush(out);
    return v.unhealthy ? 1 : 0;
}
