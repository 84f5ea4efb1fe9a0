/*
 * consume_pg.c — the consumer's PostgreSQL connection (see
 * consume_internal.h): connecting with our defaults under the user's DSN,
 * the type of processed_events.event_id (judged by consume_ids.c), on_connect
 * (the caller's prepared statements), pausing the assigned
 * partitions while PostgreSQL is away and resuming them after, one
 * statement at a time, and how a failure is classified (lost connection,
 * transient conflict, data error). Nothing here knows about batches.
 */
#include "consume_internal.h"

#include <string.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/pg/pgconn.h"

int consumer_failure_from_result(struct consumer_failure *why, const PGresult *res,
                                 const PGconn *conn)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : NULL;
    if (msg == NULL || *msg == '\0')
        msg = conn ? PQerrorMessage(conn) : "unknown error";
    snprintf(why->sqlstate, sizeof why->sqlstate, "%s", state ? state : "");
    pgconn_trim(why->message, sizeof why->message, msg);
    return CONSUMER_FAIL;
}

enum failure_class consume_classify(const struct consumer *c, const struct consumer_failure *why)
{
    return consume_classify_on(c->pg, why);
}

enum failure_class consume_classify_on(const PGconn *pg, const struct consumer_failure *why)
{
    const char *s = why->sqlstate;
    if (pg == NULL || PQstatus(pg) != CONNECTION_OK)
        return FAIL_CONN;
    if (strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 ||
        strcmp(s, "57P03") == 0)
        return FAIL_CONN;
    if (strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0 || strcmp(s, "55P03") == 0 ||
        strncmp(s, "53", 2) == 0)
        return FAIL_TRANSIENT;
    return FAIL_DATA;
}

/* Runs one statement; 0 when it succeeded (the affected row count in
 * *ntuples if asked), -1 with why filled. */
int consume_exec(struct consumer *c, const char *sql, int nparams, const char *const *params,
                    long *ntuples, struct consumer_failure *why)
{
    PGresult *res = nparams > 0 || params != NULL
                        ? PQexecParams(c->pg, sql, nparams, NULL, params, NULL, NULL, 0)
                        : PQexec(c->pg, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        consumer_failure_from_result(why, res, c->pg);
        PQclear(res);
        return -1;
    }
    if (ntuples != NULL)
        *ntuples = strtol(PQcmdTuples(res), NULL, 10);
    PQclear(res);
    return 0;
}

/* ---- PostgreSQL -------------------------------------------------------- */

void consume_pg_close(struct consumer *c)
{
    if (c->pg != NULL)
        PQfinish(c->pg);
    c->pg = NULL;
    c->pg_ready = false;
    c->pipe_prepared = false;
}

/* Pauses (or resumes) every assigned partition. */
static void pause_all(struct consumer *c, bool pause)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (rd_kafka_assignment(c->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR || parts == NULL)
        return;
    if (parts->cnt > 0) {
        if (pause)
            rd_kafka_pause_partitions(c->rk, parts);
        else
            rd_kafka_resume_partitions(c->rk, parts);
    }
    rd_kafka_topic_partition_list_destroy(parts);
    c->paused = pause;
}

/* The connection is gone: close it, pause consumption, schedule a retry. */
void consume_pg_lost(struct consumer *c)
{
    consume_pg_close(c);
    c->stats.reconnects++;
    if (c->subscribed)
        pause_all(c, true);
    c->next_connect = mono_now() + jitter(c->backoff);
}

/* Server notices (WARNING: terminating connection ...) go through our log,
 * not straight to stderr. */
static void on_notice(void *arg, const char *message)
{
    char buf[CONSUMER_ERRLEN];
    pgconn_trim(buf, sizeof buf, message);
    log_info("postgres: %s", buf);
}

/* The processed_events the INSERTs resolve to (the search_path's), its
 * event_id column: the base type's name (a domain's base), the type as
 * printed, the table qualified. No row: no such table or column yet. */
#define IDCOL_SQL                                                                           \
    "SELECT b.typname::text, format_type(a.atttypid, a.atttypmod), "                        \
    "quote_ident(n.nspname) || '.' || quote_ident(c.relname) "                              \
    "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "                            \
    "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid "   \
    "JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END " \
    "WHERE a.attrelid = to_regclass('processed_events') AND a.attname = 'event_id' "        \
    "AND NOT a.attisdropped"

/* Reads processed_events.event_id's type into c->idcol. Returns 0; -1 when
 * the connection failed (why filled); -2 when the column can never hold
 * the relayer's ids (c->errstr says so, with the ALTER TABLE). */
static int read_idcol(struct consumer *c, struct consumer_failure *why)
{
    PGresult *res = PQexec(c->pg, IDCOL_SQL);
    int rc = 0;
    c->idcol = (struct consume_idcol){.kind = IDCOL_TEXT};
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        consumer_failure_from_result(why, res, c->pg);
        if (consume_classify(c, why) == FAIL_CONN)
            rc = -1;
        else /* the INSERTs will say what is wrong, with PostgreSQL's words */
            log_warn("cannot read the type of processed_events.event_id: %s (SQLSTATE %s)",
                     why->message, why->sqlstate);
        goto done;
    }
    if (PQntuples(res) == 0)
        goto done; /* missing: the first batch fails, naming sql/002 */
    consume_idcol_judge(&c->idcol, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
                        PQgetvalue(res, 0, 2));
    if (c->idcol.kind == IDCOL_BAD) {
        consume_set_error(c, "processed_events.event_id is %s, which cannot hold the event "
                          "ids (row ids in decimal, m-<lsn>, uuids, kafka-<topic>-<partition>-"
                          "<offset>): run %s", c->idcol.type, c->idcol.fix);
        rc = -2;
    } else if (c->idcol.kind == IDCOL_INTEGER) {
        log_info("processed_events.event_id is %s: events whose id is not an integer are "
                 "refused (--on-error); %s accepts every id", c->idcol.type, c->idcol.fix);
    }
done:
    PQclear(res);
    return rc;
}

/* A new connection with our defaults under the user's DSN (NULL when out
 * of memory; check PQstatus). */
static PGconn *open_conn(const struct consumer *c)
{
    const char *keys[] = {"connect_timeout", "keepalives_idle", "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout", "dbname",
                          "fallback_application_name", NULL};
    const char *vals[] = {"5", "10", "5", "3", PGCONN_TCP_USER_TIMEOUT_MS, c->o.dsn,
                          "outbox-consume", NULL};
    PGconn *pg = PQconnectdbParams(keys, vals, 1);
    if (pg != NULL)
        PQsetNoticeProcessor(pg, on_notice, NULL);
    return pg;
}

/* Connects when due. Returns 0 (connected or not yet due / failed: check
 * c->pg_ready), or -1 when on_connect failed for good (c->fatal set). */
int consume_pg_connect(struct consumer *c)
{
    if (c->pg_ready || mono_now() < c->next_connect)
        return 0;
    /* Our defaults, then the DSN (expanded from "dbname"), which overrides
     * them. Nobody polls Kafka while this blocks, so a server that accepts
     * and never answers must not hold it (and a rebalance) for long; the
     * keepalives find a connection whose peer vanished silently. */
    c->pg = open_conn(c);
    struct consumer_failure why = {{0}, {0}};
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK) {
        pgconn_error(c->pg, why.message, sizeof why.message);
        log_warn("cannot connect to PostgreSQL: %s; retrying in about %.1f s", why.message,
                 c->backoff);
        goto retry;
    }
    int idrc = read_idcol(c, &why);
    if (idrc == -1) {
        log_warn("PostgreSQL connection lost while reading processed_events: %s", why.message);
        goto retry;
    }
    if (idrc == -2) {
        c->fatal = c->setup_error = true;
        consume_pg_close(c);
        return -1;
    }
    if (c->o.on_connect != NULL && c->o.on_connect(c->o.arg, c->pg, &why) != CONSUMER_OK) {
        if (consume_classify(c, &why) == FAIL_CONN) {
            log_warn("PostgreSQL connection lost while preparing: %s", why.message);
            goto retry;
        }
        consume_set_error(c, "%s", why.message);
        c->fatal = true;
        consume_pg_close(c);
        return -1;
    }
    c->pg_ready = true;
    c->backoff = 0.5;
    log_info("connected to PostgreSQL (backend pid %d)", PQbackendPID(c->pg));
    if (c->paused)
        pause_all(c, false);
    return 0;

retry:
    consume_pg_close(c);
    c->next_connect = mono_now() + jitter(c->backoff);
    c->backoff = c->backoff * 2 > c->o.reconnect_max ? c->o.reconnect_max : c->backoff * 2;
    return 0;
}

/* ---- the apply workers' connections (consume_pipe.c's parallel form) ---- */

void consume_worker_lost(struct consumer *c, unsigned w)
{
    struct consume_worker *k = &c->workers[w - 1];
    if (k->pg != NULL)
        PQfinish(k->pg);
    k->pg = NULL;
    k->prepared = false;
    c->stats.reconnects++;
    k->next_connect = mono_now() + jitter(k->backoff);
    k->backoff = k->backoff * 2 > c->o.reconnect_max ? c->o.reconnect_max : k->backoff * 2;
}

void consume_workers_close(struct consumer *c)
{
    for (int w = 1; c->workers != NULL && w < c->nworkers; w++) {
        if (c->workers[w - 1].pg != NULL)
            PQfinish(c->workers[w - 1].pg);
        c->workers[w - 1].pg = NULL;
        c->workers[w - 1].prepared = false;
    }
}

bool consume_workers_ready(struct consumer *c)
{
    bool all = true;
    double now = mono_now();
    for (int w = 1; w < c->nworkers; w++) {
        struct consume_worker *k = &c->workers[w - 1];
        if (k->pg != NULL)
            continue;
        if (now < k->next_connect) {
            all = false;
            continue;
        }
        struct consumer_failure why = {{0}, {0}};
        k->pg = open_conn(c);
        if (k->pg == NULL || PQstatus(k->pg) != CONNECTION_OK) {
            pgconn_error(k->pg, why.message, sizeof why.message);
            log_warn("apply worker %d: cannot connect to PostgreSQL: %s; batches use the main "
                     "connection meanwhile", w, why.message);
        } else if (c->o.on_connect != NULL && c->o.on_connect(c->o.arg, k->pg, &why) != CONSUMER_OK) {
            log_warn("apply worker %d: preparing failed: %s (SQLSTATE %s); batches use the main "
                     "connection meanwhile", w, why.message, why.sqlstate);
        } else {
            k->backoff = 0.5;
            log_info("apply worker %d connected to PostgreSQL (backend pid %d)", w,
                     PQbackendPID(k->pg));
            continue;
        }
        /* not counted as a reconnect: consume_worker_lost counts losses */
        if (k->pg != NULL)
            PQfinish(k->pg);
        k->pg = NULL;
        k->next_connect = now + jitter(k->backoff);
        k->backoff = k->backoff * 2 > c->o.reconnect_max ? c->o.reconnect_max : k->backoff * 2;
        all = false;
    }
    return all;
}
