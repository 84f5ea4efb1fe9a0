/*
 * maint.c — the maintenance thread (see maint.h).
 *
 * One thread, one connection, one schedule of three deadlines (slot poll,
 * heartbeat, reaper). Between deadlines it sleeps on a condition variable
 * that maint_stop() signals. The connection is opened with libpq's
 * non-blocking connect so that a stop request never waits for a server
 * that does not answer, and every query can be interrupted by PQcancel from
 * the stopping thread.
 *
 * The reaper runs on the same connection and can wait up to its
 * confirm_wait for the slot; through its tick hook the thread keeps polling
 * and heartbeating meanwhile (inside the reaper's transaction, each under a
 * savepoint so that a failing poll cannot abort the reaper's work). The
 * reaper's statements are blocking libpq calls: a pg_watchdog (pg_watchdog.h),
 * re-armed at each step, shuts the connection down under one that gets no
 * answer for REAP_STALL_TIMEOUT, so that a stalled path ends in
 * "connection lost" and a reconnect instead of a thread blocked forever.
 */
#include "outbox_relay/ops/maint.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/pg/failover.h"
#include "outbox_relay/pg/outbox_catalog.h"
#include "outbox_relay/pg/pg_watchdog.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/publication.h"
#include "outbox_relay/ops/reaper.h"

#define CONNECT_TIMEOUT 15.0 /* s for one connection attempt */
#define QUERY_TIMEOUT 10.0   /* s for the answer to a poll, heartbeat or savepoint */
#define REAP_STALL_TIMEOUT 60.0  /* s of a reaper statement without an answer */
#define WARN_EVERY 60.0      /* s between repeated connection warnings */

struct maint {
    const struct relay_config *cfg;
    struct metrics *m;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_bool stop;
    volatile sig_atomic_t *signal_stop; /* the signal handlers' flag, may be NULL */
    bool once;                          /* maint_reap_once: always report */
    bool done;        /* under mu: the thread has finished */
    PGcancel *cancel; /* under mu: for the connection in use */
    /* Armed while the reaper's statements run (reap_progress); NULL when
     * it could not be started, and in maint_reap_once. */
    struct pg_watchdog *watchdog;

    /* The thread's own. */
    PGconn *conn;
    char *qtable; /* "schema"."table", for the row estimate */
    double next_poll, next_heartbeat, next_reap, next_mark;
    bool heartbeat_off;
    bool marks_warned; /* said once that marks cannot be stored */
    bool in_tick;
    int64_t unlogged; /* outbox tables writing no WAL at the last check; < 0 unknown */
    int publication_ok; /* pgoutput: at the last check, 1 / 0 / -1 unknown */
    bool row_filter_known; /* a check has seen the publication serve the outbox */
    char row_filter[512];  /* the row filter it saw then; "" none */
    double last_conn_warn;
    double last_query_warn;
    int on_standby;    /* --dsn is a hot standby (decoding on a standby): 1, 0, -1 unknown */
    PGconn *primary;   /* --primary-dsn, for the writes on a standby; NULL */
    PGconn *reap_conn; /* the reaper's (mark's) connection while it runs; NULL */
};

static bool stopping(struct maint *mt)
{
    return atomic_load(&mt->stop) || (mt->signal_stop != NULL && *mt->signal_stop);
}

/* Sleeps until the monotonic time `until` or a stop request. maint_stop()
 * wakes it at once; a signal only sets a flag, seen within 0.2 s. */
static void sleep_until(struct maint *mt, double until)
{
    pthread_mutex_lock(&mt->mu);
    while (!stopping(mt)) {
        double now = mono_now();
        if (now >= until)
            break;
        double left = until - now;
        if (left > 0.2)
            left = 0.2;
        struct timespec ts = mono_deadline(left);
        pthread_cond_timedwait(&mt->cv, &mt->mu, &ts);
    }
    pthread_mutex_unlock(&mt->mu);
}

static void disconnect(struct maint *mt)
{
    pthread_mutex_lock(&mt->mu);
    PQfreeCancel(mt->cancel);
    mt->cancel = NULL;
    pthread_mutex_unlock(&mt->mu);
    if (mt->watchdog != NULL) /* before PQfinish closes it: the fd number may be reused */
        pg_watchdog_disarm(mt->watchdog);
    PQfinish(mt->conn);
    mt->conn = NULL;
}

/* stopping() as pgconn_open_interruptible() asks it. */
static bool stopping_cb(void *arg)
{
    return stopping(arg);
}

/* Opens the connection without blocking past CONNECT_TIMEOUT or a stop.
 * Returns 0, or -1 with the reason in err. */
static int connect_db(struct maint *mt, char *err, size_t errlen)
{
    PGconn *c = pgconn_open_interruptible(mt->cfg->dsn, "outbox-relay maintenance",
                                          CONNECT_TIMEOUT, stopping_cb, mt, err, errlen);
    if (c == NULL)
        return -1;
    mt->conn = c;
    pthread_mutex_lock(&mt->mu);
    mt->cancel = PQgetCancel(c);
    pthread_mutex_unlock(&mt->mu);
    return 0;
}

/* Runs a query expected to return rows; logs and returns NULL on failure.
 * Bounded by QUERY_TIMEOUT: on a stalled path the connection is shut down
 * (PQstatus turns bad) and the thread reconnects, rather than waiting on
 * it forever with the slot metrics frozen. */
static PGresult *query(struct maint *mt, const char *what, const char *sql, int nparams,
                       const char *const *params)
{
    char msg[512];
    PGresult *res = pgconn_exec(mt->conn, sql, nparams, params, QUERY_TIMEOUT, msg, sizeof msg);
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    /* A poll that fails every 2 s (say, --dsn points at a standby) warns
     * once a minute, not every time. */
    double now = mono_now();
    if (!stopping(mt) && now - mt->last_query_warn >= WARN_EVERY) {
        log_warn("maintenance: %s failed: %s", what, msg);
        mt->last_query_warn = now;
    } else {
        log_debug("maintenance: %s failed: %s", what, msg);
    }
    PQclear(res);
    return NULL;
}

static int64_t check_logged(struct maint *mt);
static int check_publication(struct maint *mt);
static void note_standby(struct maint *mt);

/* PostgreSQL 17+: the slot's failover protection (failover.h) into
 * metrics. Whether a standby holds a synced copy cannot be seen from the
 * primary; what can is said. */
static void poll_failover(struct maint *mt)
{
    if (PQserverVersion(mt->conn) < 170000)
        return;
    struct failover_info fi;
    char why[1024];
    if (failover_probe(mt->conn, mt->cfg->slot, QUERY_TIMEOUT, &fi, why, sizeof why) < 0) {
        log_debug("maintenance: reading the failover settings failed: %s", why);
        return;
    }
    enum failover_verdict v = failover_judge(&fi, mt->cfg->slot, why, sizeof why);
    metrics_set_failover(mt->m, fi.slot_exists ? fi.failover : -1,
                         v == FAILOVER_NOT_USED ? -1 : v == FAILOVER_PROTECTED,
                         fi.named, fi.inactive, fi.standby_lag_bytes);
}

/* The slot's lag, WAL status and safe size, the table's row estimate, and
 * whether every table of the outbox writes WAL, into metrics. */
static void poll_slot(struct maint *mt)
{
    const char *p1[] = {mt->cfg->slot};
    PGresult *res = query(mt, "polling the slot",
                          "SELECT wal_status, safe_wal_size, "
                          "pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN "
                          "pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, "
                          "confirmed_flush_lsn)::bigint "
                          "FROM pg_replication_slots WHERE slot_name = $1",
                          1, p1);
    if (res == NULL)
        return;
    if (PQntuples(res) == 0) {
        metrics_set_slot(mt->m, -1, NULL, -1);
    } else {
        const char *status = PQgetisnull(res, 0, 0) ? "" : PQgetvalue(res, 0, 0);
        int64_t safe = PQgetisnull(res, 0, 1) ? -1 : atoll(PQgetvalue(res, 0, 1));
        int64_t lag = PQgetisnull(res, 0, 2) ? -1 : atoll(PQgetvalue(res, 0, 2));
        metrics_set_slot(mt->m, lag, status, safe);
    }
    PQclear(res);

    /* reltuples is -1 until the first VACUUM/ANALYZE: unknown, not 0.
     * The partition tree is walked in the catalogs rather than with
     * pg_partition_tree(), which locks every partition: a poll must never
     * queue behind the reaper's lock on a partition it is about to drop. */
    const char *p2[] = {mt->qtable};
    res = query(mt, "estimating the table's rows", OUTBOX_CATALOG_ROWS_SQL, 1, p2);
    if (res == NULL)
        return;
    metrics_set_table_rows(mt->m, PQgetisnull(res, 0, 0) ? -1 : atoll(PQgetvalue(res, 0, 0)));
    PQclear(res);
    check_logged(mt);
    check_publication(mt);
    poll_failover(mt);
    note_standby(mt);
}

/* Checks that the outbox's tables write WAL; returns how many do not (-1
 * when the check failed). Says so once when that changes. */
static int64_t check_logged(struct maint *mt)
{
    const char *p[] = {mt->qtable};
    char sql[1500];
    outbox_catalog_logged_sql("to_regclass($1)", sql, sizeof sql);
    PGresult *res = query(mt, "checking that the outbox writes WAL", sql, 1, p);
    if (res == NULL)
        return -1;
    int64_t n = atoll(PQgetvalue(res, 0, OUTBOX_LOGGED_COUNT));
    if (n > 0 && mt->unlogged <= 0)
        log_error("slot=%s: the outbox %s.%s has %lld table(s) that write no WAL (UNLOGGED or "
                  "temporary): their rows are never relayed, and the reaper is held off so it "
                  "does not delete them. Run: %s, then republish the rows written meanwhile",
                  mt->cfg->slot, mt->cfg->table_schema, mt->cfg->table_name, (long long) n,
                  PQgetvalue(res, 0, OUTBOX_LOGGED_FIX));
    else if (n == 0 && mt->unlogged > 0)
        log_info("slot=%s: every table of the outbox writes WAL again", mt->cfg->slot);
    mt->unlogged = n;
    metrics_set_unlogged(mt->m, n, PQgetvalue(res, 0, OUTBOX_LOGGED_FIX));
    PQclear(res);
    return n;
}

/* pgoutput: a row filter on a publication that serves the outbox is the
 * owner's choice (the rows it filters out are skipped by the server, the
 * slot moves past them, the reaper may delete them: nothing is pending).
 * The stream says so at each connect; this says so when it changes while
 * the relayer runs, once per change (publication_filter_change), and keeps
 * the gauge. */
static void note_row_filter(struct maint *mt, const char *filter)
{
    const struct relay_config *cfg = mt->cfg;
    switch (publication_filter_change(mt->row_filter_known, mt->row_filter, filter)) {
    case PUBLICATION_FILTER_ADDED:
    case PUBLICATION_FILTER_CHANGED:
        log_warn("slot=%s: publication %s has a row filter on %s.%s: WHERE %s. From that change "
                 "on, rows it filters out are never sent to the relayer and never reach Kafka, "
                 "and the slot moves past them. If that is not intended, ALTER PUBLICATION "
                 "\"%s\" SET TABLE \"%s\".\"%s\" (without a row filter), then republish "
                 "the rows it filtered out (they stay in the table for --retention)", cfg->slot, cfg->publication, cfg->table_schema,
                 cfg->table_name, filter, cfg->publication, cfg->table_schema, cfg->table_name);
        break;
    case PUBLICATION_FILTER_REMOVED:
        log_info("slot=%s: publication %s has no row filter on %s.%s any more: every row is "
                 "relayed", cfg->slot, cfg->publication, cfg->table_schema, cfg->table_name);
        break;
    case PUBLICATION_FILTER_SAME:
        break;
    }
    mt->row_filter_known = true;
    snprintf(mt->row_filter, sizeof mt->row_filter, "%s", filter ? filter : "");
    metrics_set_publication_filter(mt->m, filter != NULL && *filter != '\0');
}

/* pgoutput: whether the publication still serves the outbox (publication.h).
 * The stream checks it at each (re)connect; DDL in between makes the server
 * skip outbox rows while keepalives move the slot past them, so this poll
 * says so, fails readiness and holds the reaper off (those rows look
 * delivered). Returns 1 (or with wal2json always), 0, or -1 unknown. */
static int check_publication(struct maint *mt)
{
    const struct relay_config *cfg = mt->cfg;
    if (cfg->plugin != PLUGIN_PGOUTPUT)
        return 1;
    char problem[512];
    bool filtered;
    int health = publication_inspect(mt->conn, cfg->publication, cfg->table_schema,
                                     cfg->table_name, cfg->slot, &cfg->columns, QUERY_TIMEOUT,
                                     &filtered, problem, sizeof problem);
    if (health == PUBLICATION_UNKNOWN) {
        double now = mono_now(); /* as query() says a failed poll: once a minute */
        if (!stopping(mt) && now - mt->last_query_warn >= WARN_EVERY) {
            log_warn("maintenance: %s", problem);
            mt->last_query_warn = now;
        }
        return -1;
    }
    if (health == PUBLICATION_NOT_MADE)
        return -1; /* the stream creates it before the slot */
    int ok = health == PUBLICATION_SERVES;
    if (!ok && mt->publication_ok != 0)
        log_error("slot=%s: %s. From that change on the server skips outbox rows, and the "
                  "slot moves past them: the reaper is held off so it does not delete them, "
                  "and the relayer stops at its next reconnect. Fix the publication, then drop "
                  "the slot and start with --recreate-slot --backfill pending to publish the "
                  "rows written meanwhile", cfg->slot, problem);
    else if (ok && mt->publication_ok == 0)
        log_info("slot=%s: publication %s serves the outbox again", cfg->slot,
                 cfg->publication);
    mt->publication_ok = ok;
    metrics_set_publication(mt->m, ok, ok ? NULL : problem);
    if (ok)
        note_row_filter(mt, filtered ? problem : NULL);
    return ok;
}

/* Decoding on a standby: what needs the primary. Asked at every poll (a
 * promotion turns it off); said when it changes. The reaper and its marks
 * write, so they pause on a standby; the heartbeat goes through
 * --primary-dsn, and without it is off. */
static void note_standby(struct maint *mt)
{
    PGresult *res = query(mt, "asking whether the server is a standby",
                          "SELECT pg_is_in_recovery()", 0, NULL);
    if (res == NULL)
        return;
    int standby = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    bool primary_dsn = mt->cfg->primary_dsn != NULL && *mt->cfg->primary_dsn != '\0';
    if (standby && mt->on_standby != 1 && primary_dsn)
        log_info("maintenance: --dsn is a standby (decoding on a standby): the reaper deletes "
                 "and the heartbeat writes on the primary (--primary-dsn), by the position of "
                 "the slot on the standby");
    else if (standby && mt->on_standby != 1)
        log_warn("maintenance: --dsn is a standby (decoding on a standby) and there is no "
                 "--primary-dsn: the reaper, its marks and the heartbeat are off (they write on "
                 "the primary); delivered rows stay in the table, and an idle primary holds the "
                 "standby's slot back");
    else if (!standby && mt->on_standby == 1)
        log_info("maintenance: the server is no longer a standby (promoted): the reaper and "
                 "the heartbeat run on it");
    if (!standby && mt->primary != NULL) {
        PQfinish(mt->primary);
        mt->primary = NULL;
    }
    mt->on_standby = standby;
}

/* Where the writes go: --dsn, or on a standby the primary (--primary-dsn,
 * connected on demand); NULL when there is none (a standby without
 * --primary-dsn, or the primary unreachable: said at debug level, the
 * next due step tries again). */
static PGconn *writer(struct maint *mt)
{
    if (mt->on_standby != 1)
        return mt->conn;
    if (mt->cfg->primary_dsn == NULL || *mt->cfg->primary_dsn == '\0')
        return NULL;
    char msg[512];
    if (mt->primary != NULL && PQstatus(mt->primary) != CONNECTION_OK) {
        PQfinish(mt->primary);
        mt->primary = NULL;
    }
    if (mt->primary == NULL)
        mt->primary = pgconn_open_interruptible(mt->cfg->primary_dsn, "outbox-relay maintenance",
                                                CONNECT_TIMEOUT, stopping_cb, mt, msg,
                                                sizeof msg);
    if (mt->primary == NULL)
        log_debug("maintenance: cannot connect to --primary-dsn: %s", msg);
    return mt->primary;
}

static void heartbeat(struct maint *mt)
{
    const char *p[] = {MAINT_HEARTBEAT_PREFIX};
    if (mt->on_standby == 1) {
        char msg[512];
        PGconn *primary = writer(mt);
        /* Inside the reaper's transaction there (a tick): skip this beat. */
        if (primary == NULL || PQtransactionStatus(primary) != PQTRANS_IDLE)
            return;
        PGresult *res = pgconn_exec(primary, "SELECT pg_logical_emit_message(false, $1, '')",
                                    1, p, QUERY_TIMEOUT, msg, sizeof msg);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            log_debug("maintenance: heartbeat on --primary-dsn failed: %s", msg);
        PQclear(res);
        return;
    }
    PGresult *res = query(mt, "heartbeat", "SELECT pg_logical_emit_message(false, $1, '')", 1, p);
    if (res == NULL && PQstatus(mt->conn) == CONNECTION_OK && !stopping(mt)) {
        /* Not a lost connection: permissions, a read-only server. It will
         * not get better by itself; say so once. */
        log_warn("maintenance: heartbeat turned off (grant EXECUTE on "
                 "pg_logical_emit_message, or run on the primary)");
        mt->heartbeat_off = true;
    }
    PQclear(res);
}

/* A command whose result does not matter, bounded like query(). */
static void command(struct maint *mt, const char *sql)
{
    char msg[512];
    PQclear(pgconn_exec(mt->conn, sql, 0, NULL, QUERY_TIMEOUT, msg, sizeof msg));
}

/* Runs fn; inside a transaction (the reaper's) under a savepoint, so that
 * its failure cannot abort the reaper's work. */
static void guarded(struct maint *mt, bool in_tx, void (*fn)(struct maint *))
{
    if (in_tx)
        command(mt, "SAVEPOINT outbox_relay_maint");
    if (PQstatus(mt->conn) == CONNECTION_OK)
        fn(mt);
    if (in_tx && PQstatus(mt->conn) == CONNECTION_OK) {
        if (PQtransactionStatus(mt->conn) == PQTRANS_INERROR)
            command(mt, "ROLLBACK TO SAVEPOINT outbox_relay_maint");
        command(mt, "RELEASE SAVEPOINT outbox_relay_maint");
    }
}

/* Does whichever of poll and heartbeat is due. */
static void run_due(struct maint *mt)
{
    double now = mono_now();
    bool poll_due = now >= mt->next_poll;
    bool hb_due = mt->cfg->heartbeat_interval > 0 && !mt->heartbeat_off &&
                  now >= mt->next_heartbeat;
    if ((!poll_due && !hb_due) || mt->conn == NULL || PQstatus(mt->conn) != CONNECTION_OK)
        return;
    PGTransactionStatusType ts = PQtransactionStatus(mt->conn);
    if (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS)
        return;
    bool in_tx = ts == PQTRANS_INTRANS;
    if (hb_due) {
        guarded(mt, in_tx, heartbeat);
        mt->next_heartbeat += mt->cfg->heartbeat_interval;
        if (mt->next_heartbeat < now)
            mt->next_heartbeat = now + mt->cfg->heartbeat_interval;
    }
    if (poll_due && PQstatus(mt->conn) == CONNECTION_OK) {
        guarded(mt, in_tx, poll_slot);
        mt->next_poll = now + MAINT_POLL_INTERVAL;
    }
}

static bool reaper_should_stop(void *arg)
{
    return stopping(arg);
}

/* The reaper starts or made progress: the watchdog's deadline moves to
 * REAP_STALL_TIMEOUT from now. */
static void reap_progress(struct maint *mt)
{
    if (mt->watchdog != NULL)
        pg_watchdog_arm(mt->watchdog, mt->reap_conn != NULL ? mt->reap_conn : mt->conn,
                        REAP_STALL_TIMEOUT);
}

/* The reaper's statements are done: nothing to bound until the next. */
static void reap_done(struct maint *mt)
{
    if (mt->watchdog != NULL)
        pg_watchdog_disarm(mt->watchdog);
}

/* The watchdog cut the connection under a reaper statement (its thread). */
static void reap_stalled(void *arg)
{
    (void) arg;
    log_warn("maintenance: a reaper statement got no answer for %.0f s (a stalled "
             "network path?); closing the connection", REAP_STALL_TIMEOUT);
}

static void reaper_tick(void *arg)
{
    struct maint *mt = arg;
    reap_progress(mt);
    if (!mt->in_tick) {
        mt->in_tick = true;
        run_due(mt);
        mt->in_tick = false;
    }
}

/* Runs the reaper once and reports; returns its enum reaper_rc. */
static int reap(struct maint *mt)
{
    const struct relay_config *cfg = mt->cfg;
    struct reaper_options ro = {.slot = cfg->slot, .table_schema = cfg->table_schema,
                                .table_name = cfg->table_name, .retention = cfg->retention,
                                .created_at_column = cfg->columns.created_at,
                                .batch = cfg->reap_batch, .pause = cfg->reap_pause,
                                .confirm_wait = REAPER_CONFIRM_WAIT,
                                .should_stop = reaper_should_stop, .tick = reaper_tick,
                                .stop_arg = mt, .metrics = mt->m};
    struct reaper_result res;
    char err[REAPER_ERRLEN];
    PGconn *conn = writer(mt);
    if (conn == NULL)
        return REAPER_RETRY;
    ro.slot_conn = conn != mt->conn ? mt->conn : NULL;
    mt->reap_conn = conn;
    reap_progress(mt);
    int rc = reaper_run(conn, &ro, &res, err, sizeof err);
    reap_done(mt);
    mt->reap_conn = NULL;
    if (res.off) {
        log_debug("reaper: off (--retention %s)", cfg->retention);
        return rc;
    }
    /* A run that failed before doing anything does not count as a run: the
     * last-run timestamp going stale is what alerts on a reaper that keeps
     * failing. */
    if (rc == REAPER_OK || res.batches > 0)
        metrics_reaped(mt->m, res.rows, res.batches, res.seconds);
    if (res.progress_ended) /* after the rows are counted (reaper.h) */
        metrics_set_progress(mt->m, METRICS_WORK_REAPER, &res.progress, false);
    if (res.rows > 0 || res.partitions > 0 || mt->once)
        log_info("reaper: deleted %llu rows in %llu batches, dropped %llu partitions of %s.%s "
                 "in %.2f s", (unsigned long long) res.rows, (unsigned long long) res.batches,
                 (unsigned long long) res.partitions, cfg->table_schema, cfg->table_name,
                 res.seconds);
    else
        log_debug("reaper: nothing to delete (%.2f s)", res.seconds);
    if (res.marks_off && !mt->marks_warned) {
        log_warn("reaper: %s; while the slot lags nothing can be reaped (run "
                 "sql/003_relay_role.sql to create the table and its grants)", res.marks_err);
        mt->marks_warned = true;
    }
    if (res.held_back && res.have_mark)
        log_warn("reaper: kept expired rows: slot=%s confirmed " LSN_FMT " < " LSN_FMT
                 " after %.0f s, so they may not be delivered yet (Kafka down, or the relay "
                 "stopped or behind); deleted only the rows of transactions below xid %llu, "
                 "which the slot's confirmed mark " LSN_FMT " covers; later runs go on as the "
                 "slot does", cfg->slot, LSN_ARGS(res.confirmed), LSN_ARGS(res.wanted),
                 REAPER_CONFIRM_WAIT, (unsigned long long) res.used.xmin,
                 LSN_ARGS(res.used.insert_lsn));
    else if (res.held_back)
        log_warn("reaper: kept expired rows: slot=%s confirmed " LSN_FMT " < " LSN_FMT
                 " after %.0f s, so they may not be delivered yet (Kafka down, or the relay "
                 "stopped or behind), and no confirmed mark covers any of them; a later run "
                 "deletes them once the slot confirms one", cfg->slot, LSN_ARGS(res.confirmed),
                 LSN_ARGS(res.wanted), REAPER_CONFIRM_WAIT);
    if (rc < 0 && !stopping(mt))
        log_warn("%s", err);
    return rc;
}

/* Takes a reaper mark (reaper.h), whatever --retention: a `reap` from cron
 * beside this process uses them too. A table that cannot be written is
 * said once; trying goes on (it may be created later). */
static void take_mark(struct maint *mt)
{
    char err[REAPER_ERRLEN];
    PGconn *conn = writer(mt);
    if (conn == NULL)
        return;
    mt->reap_conn = conn;
    reap_progress(mt); /* its statements block: the watchdog bounds them */
    int rc = reaper_take_mark_on(conn, conn != mt->conn ? mt->conn : NULL, mt->cfg->slot, NULL,
                                 err, sizeof err);
    reap_done(mt);
    mt->reap_conn = NULL;
    if (rc == REAPER_FATAL && !mt->marks_warned && !stopping(mt)) {
        log_warn("reaper: %s; while the slot lags nothing can be reaped (run "
                 "sql/003_relay_role.sql to create the table and its grants)", err);
        mt->marks_warned = true;
    } else if (rc < 0) {
        log_debug("maintenance: %s", err);
    } else if (mt->marks_warned) {
        log_info("reaper: marks are stored again in " REAPER_MARKS_TABLE);
        mt->marks_warned = false;
    }
}

static void *maint_main(void *arg)
{
    struct maint *mt = arg;
    const struct relay_config *cfg = mt->cfg;
    double backoff = 0.5;
    bool reaping = reaper_enabled(cfg->retention);
    bool was_connected = false;
    char err[512];

    double now = mono_now();
    mt->next_poll = now;
    mt->next_heartbeat = now + cfg->heartbeat_interval;
    mt->next_reap = now + cfg->reap_interval;
    mt->next_mark = now;
    while (!stopping(mt)) {
        if (mt->conn == NULL) {
            if (connect_db(mt, err, sizeof err) < 0) {
                if (stopping(mt))
                    break;
                now = mono_now();
                if (was_connected || now - mt->last_conn_warn >= WARN_EVERY) {
                    log_warn("maintenance: cannot connect to PostgreSQL: %s; retrying (slot "
                             "lag and the reaper pause meanwhile)", err);
                    mt->last_conn_warn = now;
                }
                was_connected = false;
                sleep_until(mt, now + jitter(backoff));
                backoff = backoff * 2 > cfg->reconnect_max ? cfg->reconnect_max : backoff * 2;
                continue;
            }
            if (!was_connected)
                log_info("maintenance: connected (slot polls every %.0f s%s%s)",
                         MAINT_POLL_INTERVAL, reaping ? ", reaper on" : ", reaper off",
                         cfg->heartbeat_interval > 0 ? ", heartbeat on" : "");
            was_connected = true;
            backoff = 0.5;
        }

        run_due(mt);
        if (mt->on_standby == 1 && (cfg->primary_dsn == NULL || *cfg->primary_dsn == '\0')) {
            /* nowhere to write: see note_standby */
            mt->next_mark = mono_now() + MAINT_MARK_INTERVAL;
            mt->next_reap = mono_now() + cfg->reap_interval;
        }
        if (mono_now() >= mt->next_mark && PQstatus(mt->conn) == CONNECTION_OK) {
            take_mark(mt);
            mt->next_mark = mono_now() + MAINT_MARK_INTERVAL;
        }
        if (reaping && mono_now() >= mt->next_reap && PQstatus(mt->conn) == CONNECTION_OK) {
            /* Checked again here, not taken from the last poll: rows of an
             * unlogged table look delivered (the slot moves past them). */
            int64_t unlogged = check_logged(mt);
            int published = check_publication(mt);
            if (unlogged == 0 && published == 1)
                reap(mt);
            else if (unlogged > 0)
                log_warn("reaper: skipped: the outbox has tables that write no WAL (see above)");
            else if (published == 0)
                log_warn("reaper: skipped: the publication does not serve the outbox (see "
                         "above)");
            mt->next_reap = mono_now() + cfg->reap_interval;
        }
        if (PQstatus(mt->conn) != CONNECTION_OK) {
            if (!stopping(mt))
                log_warn("maintenance: lost the connection to PostgreSQL; reconnecting");
            disconnect(mt);
            continue;
        }

        double next = mt->next_poll;
        if (cfg->heartbeat_interval > 0 && !mt->heartbeat_off && mt->next_heartbeat < next)
            next = mt->next_heartbeat;
        if (reaping && mt->next_reap < next)
            next = mt->next_reap;
        if (mt->next_mark < next)
            next = mt->next_mark;
        sleep_until(mt, next);
    }
    if (mt->conn != NULL)
        disconnect(mt);
    PQfinish(mt->primary);
    mt->primary = NULL;
    pthread_mutex_lock(&mt->mu);
    mt->done = true;
    pthread_cond_broadcast(&mt->cv);
    pthread_mutex_unlock(&mt->mu);
    return NULL;
}

static void maint_free(struct maint *mt)
{
    pg_watchdog_free(mt->watchdog);
    pthread_cond_destroy(&mt->cv);
    pthread_mutex_destroy(&mt->mu);
    free(mt->qtable);
    free(mt);
}

struct maint *maint_start(const struct relay_config *cfg, volatile sig_atomic_t *stop,
                          struct metrics *metrics, char *err, size_t errlen)
{
    struct maint *mt = calloc(1, sizeof *mt);
    if (mt == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    mt->cfg = cfg;
    mt->m = metrics;
    mt->signal_stop = stop;
    mt->last_conn_warn = mt->last_query_warn = -WARN_EVERY; /* the first one is said */
    mt->unlogged = -1;
    mt->publication_ok = -1;
    mt->on_standby = -1;
    atomic_init(&mt->stop, false);
    /* Quoted for to_regclass; the parts were validated as plain
     * identifiers by the configuration. */
    size_t n = strlen(cfg->table_schema) + strlen(cfg->table_name) + 6;
    mt->qtable = malloc(n);
    if (mt->qtable != NULL)
        snprintf(mt->qtable, n, "\"%s\".\"%s\"", cfg->table_schema, cfg->table_name);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = mt->qtable == NULL ? ENOMEM : pthread_mutex_init(&mt->mu, NULL);
    if (rc == 0 && (rc = pthread_cond_init(&mt->cv, &ca)) != 0)
        pthread_mutex_destroy(&mt->mu);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        snprintf(err, errlen, "cannot set up the maintenance thread: %s", strerror(rc));
        free(mt->qtable);
        free(mt);
        return NULL;
    }
    /* Without the watchdog only a reaper statement on a stalled path could
     * block for good; run without it rather than not at all. Started before
     * the thread that arms it. */
    const struct pg_watchdog_options wo = {.no_cancel = true, .on_fire = reap_stalled};
    mt->watchdog = pg_watchdog_new(&wo);
    if (mt->watchdog == NULL)
        log_warn("maintenance: cannot start its watchdog thread; a stalled path under a "
                 "reaper statement would go unnoticed");
    if ((rc = pthread_create(&mt->thread, NULL, maint_main, mt)) != 0) {
        snprintf(err, errlen, "cannot start the maintenance thread: %s", strerror(rc));
        maint_free(mt);
        return NULL;
    }
    return mt;
}

bool maint_stop(struct maint *mt, double timeout)
{
    if (mt == NULL)
        return true;
    pthread_mutex_lock(&mt->mu);
    atomic_store(&mt->stop, true);
    if (mt->cancel != NULL) {
        char buf[256];
        PQcancel(mt->cancel, buf, sizeof buf); /* a query in progress ends now */
    }
    pthread_cond_broadcast(&mt->cv);
    struct timespec ts = mono_deadline(timeout);
    while (!mt->done)
        if (pthread_cond_timedwait(&mt->cv, &mt->mu, &ts) == ETIMEDOUT)
            break;
    bool done = mt->done;
    pthread_mutex_unlock(&mt->mu);
    if (!done) {
        log_warn("maintenance thread did not stop within %.0f s; leaving it", timeout);
        pthread_detach(mt->thread); /* it may still arm the watchdog: both are left */
        return false;
    }
    pthread_join(mt->thread, NULL);
    maint_free(mt);
    return true;
}

int maint_reap_once(const struct relay_config *cfg, volatile sig_atomic_t *stop)
{
    struct maint mt = {.cfg = cfg, .signal_stop = stop, .once = true,
                       .last_conn_warn = -WARN_EVERY, .last_query_warn = -WARN_EVERY};
    char err[512];
    int rc;

    atomic_init(&mt.stop, false);
    if (!reaper_enabled(cfg->retention)) {
        log_info("reaper: off (--retention %s); nothing to do", cfg->retention);
        return 0;
    }
    if (pthread_mutex_init(&mt.mu, NULL) != 0)
        return 1;
    if (connect_db(&mt, err, sizeof err) < 0) {
        log_error("reap: cannot connect to PostgreSQL: %s", err);
        pthread_mutex_destroy(&mt.mu);
        return 1;
    }
    rc = reap(&mt);
    disconnect(&mt);
    pthread_mutex_destroy(&mt.mu);
    return rc == REAPER_OK ? 0 : 1;
}
