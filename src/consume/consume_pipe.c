/*
 * consume_pipe.c — the batch transaction pipelined (see consume_internal.h):
 * when the caller names a prepared statement that applies one message
 * (consumer_options.apply_stmt), a batch costs about one round trip and one
 * COMMIT instead of four round trips per message.
 *
 * A batch is sent optimistically, as if every event were new (the common
 * case); of at most PIPE_CHUNK messages, as:
 *
 *   BEGIN
 *   INSERT INTO processed_events every event id of the batch, ON CONFLICT
 *   DO NOTHING        (one statement, $2 text[]; bigint[] for an integer column)
 *   Flush (the server sends what it has so far)
 *   the apply statement once per message, in batch order          → Sync
 *   when the INSERT's result says it inserted a row for every message:
 *       COMMIT                                                    → Sync
 *   else (an event already processed, or twice in the batch):
 *       ROLLBACK, and the two-step form below
 *
 * (the COMMIT is sent as soon as the INSERT's result arrives, while the
 * server still runs the apply statements). A larger batch waits for the
 * INSERT's result before it sends the apply statements, and sends them in
 * chunks of PIPE_CHUNK per Sync, each chunk's results read before the next
 * is sent, so that neither side can fill its socket buffer while the other
 * waits. The two-step form, chunked the same way:
 *
 *   1.  BEGIN; one INSERT ... ON CONFLICT DO NOTHING per message: the
 *       ones that inserted a row are new                           → Sync
 *   2.  the apply statement per new message; COMMIT                → Sync
 *
 * There are no savepoints: the first apply that fails aborts the whole
 * transaction. A data error then rolls it back and the caller applies the
 * same batch message by message, in savepoints (consume_batch.c), where the
 * failing event is treated as --on-error says; a lost connection or a
 * transient conflict is what it is in either path. What a transaction
 * commits is the set of rows the message-by-message path commits for a
 * batch without a failing event, so the guarantee (consumer.h) is the same:
 * the processed_events rows and the effects commit together, and the caller
 * commits the offsets only after COMMIT returned.
 */
#include "consume_internal.h"

#include <inttypes.h>
#include <string.h>

#include "outbox_relay/base/log.h"

#define PIPE_CHUNK 500 /* apply statements per Sync; the optimistic form's limit */

#define DEDUP_ALL_STMT "outbox_consume_processed"
#define DEDUP_ALL_SQL                                                               \
    "INSERT INTO processed_events (consumer, event_id) SELECT $1, unnest($2::text[]) " \
    "ON CONFLICT DO NOTHING"
/* The same for an integer event_id column (the seed article's bigint): an
 * array of text would not be cast to it. Every id was checked to fit
 * (consume_id_fits) before it is sent. */
#define DEDUP_ALL_INT_SQL                                                             \
    "INSERT INTO processed_events (consumer, event_id) SELECT $1, unnest($2::bigint[]) " \
    "ON CONFLICT DO NOTHING"
/* One message's row: the two-step form (no RETURNING, which would need
 * SELECT on processed_events). */
#define DEDUP_ONE_STMT "outbox_consume_processed_one"
#define DEDUP_ONE_SQL                                                            \
    "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) "         \
    "ON CONFLICT DO NOTHING"

/* One batch in the pipeline. */
struct pipe {
    struct consumer *c;
    struct msg_view *views;
    size_t nviews;
    bool *fresh;     /* per message: new, to be applied */
    char *ids;       /* the array literal of $2 */
    long inserted;   /* rows the optimistic INSERT inserted */
};

char *consume_ids_literal(const struct msg_view *v, size_t n)
{
    size_t cap = 3;
    for (size_t i = 0; i < n; i++)
        cap += 2 * strlen(v[i].event_id) + 3;
    char *s = malloc(cap), *p = s;
    if (s == NULL)
        return NULL;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        *p++ = '"';
        for (const char *q = v[i].event_id; *q; q++) {
            if (*q == '"' || *q == '\\')
                *p++ = '\\';
            *p++ = *q;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return s;
}

/* The connection failed while sending or reading: why from it, logged. */
static void conn_failure(const struct pipe *p, struct consumer_failure *why)
{
    consumer_failure_from_result(why, NULL, p->c->pg);
    if (why->sqlstate[0] == '\0')
        snprintf(why->sqlstate, sizeof why->sqlstate, "08006");
    log_warn("PostgreSQL connection lost during a batch of %zu messages: %s", p->nviews,
             why->message);
}

/* Reads one query's results (up to libpq's NULL after them) and returns the
 * first, the caller's to clear; NULL when there was none. */
static PGresult *next_query(PGconn *pg)
{
    PGresult *first = NULL, *r;
    while ((r = PQgetResult(pg)) != NULL) {
        if (first == NULL)
            first = r;
        else
            PQclear(r);
        if (PQresultStatus(first) == PGRES_PIPELINE_SYNC || PQstatus(pg) != CONNECTION_OK)
            break; /* no NULL follows a Sync */
    }
    return first;
}

/* Reads nq query results, then the Sync after them when sync. Returns 0;
 * -1 when a query failed: the first failure in why, its index in *failed
 * (those after it are "aborted"); -2 when the connection is gone (why
 * filled). The optimistic INSERT's result (at index dedup_at) sets
 * p->inserted; with rows_of (the two-step form), the result of query q
 * says whether message rows_of[q] is new. */
static int read_results(struct pipe *p, size_t nq, bool sync, size_t dedup_at,
                        const size_t *rows_of, size_t *failed, struct consumer_failure *why)
{
    PGconn *pg = p->c->pg;
    int rc = 0;
    for (size_t q = 0; q < nq + (sync ? 1 : 0); q++) {
        PGresult *r = next_query(pg);
        ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
        bool want_sync = q == nq;
        if (r == NULL || PQstatus(pg) != CONNECTION_OK ||
            (want_sync != (st == PGRES_PIPELINE_SYNC))) {
            PQclear(r);
            conn_failure(p, why);
            return -2;
        }
        if (st == PGRES_FATAL_ERROR) {
            if (rc == 0) {
                consumer_failure_from_result(why, r, pg);
                *failed = q;
                rc = -1;
            }
        } else if (q == dedup_at && rc == 0) {
            p->inserted = strtol(PQcmdTuples(r), NULL, 10);
        } else if (rows_of != NULL && q < nq && st == PGRES_COMMAND_OK && rc == 0) {
            p->fresh[rows_of[q]] = strtol(PQcmdTuples(r), NULL, 10) > 0;
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK &&
                   st != PGRES_PIPELINE_ABORTED && st != PGRES_PIPELINE_SYNC) {
            PQclear(r);
            conn_failure(p, why);
            return -2;
        }
        PQclear(r);
    }
    return rc;
}

static int send_simple(PGconn *pg, const char *sql)
{
    return PQsendQueryParams(pg, sql, 0, NULL, NULL, NULL, NULL, 0);
}

static int send_apply(struct pipe *p, size_t i)
{
    const struct consumer_message *m = &p->views[i].m;
    const char *v[5] = {m->event_id, m->aggregate_id, m->type, m->payload, m->topic};
    return PQsendQueryPrepared(p->c->pg, p->c->o.apply_stmt, 5, v, NULL, NULL, 0);
}

/* What a failing apply statement means for the batch. */
static enum apply_rc apply_failed(struct pipe *p, size_t i, const struct consumer_failure *why)
{
    const struct consumer_message *m = &p->views[i].m;
    switch (consume_classify(p->c, why)) {
    case FAIL_CONN:
        log_warn("PostgreSQL connection lost while applying event_id=%s: %s", m->event_id,
                 why->message);
        return APPLY_CONN;
    case FAIL_TRANSIENT:
        log_warn("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                 ": %s (SQLSTATE %s); the batch is retried", m->event_id, m->topic, m->partition,
                 m->offset, why->message, why->sqlstate);
        return APPLY_RETRY;
    default:
        log_debug("event_id=%s: apply failed (SQLSTATE %s); the batch is applied again message "
                  "by message", m->event_id, why->sqlstate);
        return APPLY_SLOW;
    }
}

/* Applies the messages marked fresh, PIPE_CHUNK per Sync, then COMMIT. */
static enum apply_rc apply_fresh(struct pipe *p, size_t n)
{
    PGconn *pg = p->c->pg;
    struct consumer_failure why;
    size_t failed = 0, i = 0;
    for (;;) {
        size_t sent[PIPE_CHUNK], ns = 0;
        for (; i < n && ns < PIPE_CHUNK; i++) {
            if (!p->fresh[i])
                continue;
            if (!send_apply(p, i))
                goto lost;
            sent[ns++] = i;
        }
        bool last = i == n;
        if ((last && !send_simple(pg, "COMMIT")) || !PQpipelineSync(pg))
            goto lost;
        int r = read_results(p, ns + (last ? 1 : 0), true, (size_t) -1, NULL, &failed, &why);
        if (r == -2)
            return APPLY_CONN;
        if (r == -1 && failed == ns) /* COMMIT itself */
            return consume_own_failed(p->c, "COMMIT", &why);
        if (r == -1)
            return apply_failed(p, sent[failed], &why);
        if (last)
            return APPLY_OK;
    }
lost:
    conn_failure(p, &why);
    return APPLY_CONN;
}

/* Ends the transaction in progress with ROLLBACK (still pipelined). */
static enum apply_rc rollback(struct pipe *p)
{
    struct consumer_failure why;
    size_t failed = 0;
    if (!send_simple(p->c->pg, "ROLLBACK") || !PQpipelineSync(p->c->pg)) {
        conn_failure(p, &why);
        return APPLY_CONN;
    }
    int r = read_results(p, 1, true, (size_t) -1, NULL, &failed, &why);
    return r == -2 ? APPLY_CONN : r == -1 ? consume_own_failed(p->c, "ROLLBACK", &why) : APPLY_OK;
}

/* The optimistic form for batches above PIPE_CHUNK: the INSERT of every
 * event id first (one round trip), then the apply statements in chunks. */
static enum apply_rc optimistic_large(struct pipe *p, size_t n, bool *dups)
{
    PGconn *pg = p->c->pg;
    struct consumer_failure why;
    size_t failed = 0;
    const char *dparams[2] = {p->c->o.consumer_name, p->ids};
    if (!send_simple(pg, "BEGIN") ||
        !PQsendQueryPrepared(pg, DEDUP_ALL_STMT, 2, dparams, NULL, NULL, 0) ||
        !PQpipelineSync(pg)) {
        conn_failure(p, &why);
        return APPLY_CONN;
    }
    int r = read_results(p, 2, true, 1, NULL, &failed, &why);
    if (r == -2)
        return APPLY_CONN;
    if (r == -1) {
        enum apply_rc rc = rollback(p);
        return rc == APPLY_CONN ? rc : consume_own_failed(p->c, failed == 0 ? "BEGIN"
                                                          : "INSERT INTO processed_events", &why);
    }
    if (p->inserted != (long) n) {
        *dups = true;
        return rollback(p);
    }
    for (size_t i = 0; i < n; i++)
        p->fresh[i] = true;
    return apply_fresh(p, n);
}

/* The optimistic form (every message new). APPLY_OK when committed; *dups
 * set (and the transaction rolled back) when some event was not new. */
static enum apply_rc optimistic(struct pipe *p, size_t n, bool *dups)
{
    PGconn *pg = p->c->pg;
    struct consumer_failure why, why2;
    size_t failed = 0, failed2 = 0;
    const char *dparams[2] = {p->c->o.consumer_name, p->ids};

    if (n > PIPE_CHUNK)
        return optimistic_large(p, n, dups);
    /* The Flush request makes the server send the INSERT's result at once
     * (else it would hold it until the Sync, after every apply). */
    if (!send_simple(pg, "BEGIN") ||
        !PQsendQueryPrepared(pg, DEDUP_ALL_STMT, 2, dparams, NULL, NULL, 0) ||
        !PQsendFlushRequest(pg))
        goto lost;
    for (size_t i = 0; i < n; i++)
        if (!send_apply(p, i))
            goto lost;
    if (!PQpipelineSync(pg))
        goto lost;
    int r1 = read_results(p, 2, false, 1, NULL, &failed, &why);
    if (r1 == -2)
        return APPLY_CONN;
    bool commit = r1 == 0 && p->inserted == (long) n;
    if (!send_simple(pg, commit ? "COMMIT" : "ROLLBACK") || !PQpipelineSync(pg))
        goto lost;
    size_t failed_apply = 0;
    int r2 = read_results(p, n, true, (size_t) -1, NULL, &failed_apply, &why2);
    if (r2 == -2)
        return APPLY_CONN;
    struct consumer_failure why3;
    int r3 = read_results(p, 1, true, (size_t) -1, NULL, &failed2, &why3);
    if (r3 == -2)
        return APPLY_CONN;
    if (r1 < 0)
        return consume_own_failed(p->c, failed == 0 ? "BEGIN" : "INSERT INTO processed_events",
                                  &why);
    if (!commit) {
        *dups = true;
        return r3 < 0 ? consume_own_failed(p->c, "ROLLBACK", &why3) : APPLY_OK;
    }
    if (r2 < 0) /* then COMMIT ended the failed transaction with a rollback */
        return apply_failed(p, failed_apply, &why2);
    if (r3 < 0)
        return consume_own_failed(p->c, "COMMIT", &why3);
    for (size_t i = 0; i < n; i++)
        p->fresh[i] = true;
    return APPLY_OK;
lost:
    conn_failure(p, &why);
    return APPLY_CONN;
}

/* The two-step form: which events are new first, then apply those. */
static enum apply_rc two_step(struct pipe *p, size_t n)
{
    PGconn *pg = p->c->pg;
    struct consumer_failure why;
    size_t failed = 0;
    int r;

    if (!send_simple(pg, "BEGIN") || !PQpipelineSync(pg))
        goto lost;
    if ((r = read_results(p, 1, true, (size_t) -1, NULL, &failed, &why)) < 0)
        return r == -2 ? APPLY_CONN : consume_own_failed(p->c, "BEGIN", &why);
    for (size_t from = 0; from < n; from += PIPE_CHUNK) {
        size_t rows_of[PIPE_CHUNK], ns = 0;
        for (size_t i = from; i < n && ns < PIPE_CHUNK; i++) {
            const char *dparams[2] = {p->c->o.consumer_name, p->views[i].event_id};
            if (!PQsendQueryPrepared(pg, DEDUP_ONE_STMT, 2, dparams, NULL, NULL, 0))
                goto lost;
            rows_of[ns++] = i;
        }
        if (!PQpipelineSync(pg))
            goto lost;
        if ((r = read_results(p, ns, true, (size_t) -1, rows_of, &failed, &why)) < 0)
            return r == -2 ? APPLY_CONN
                           : consume_own_failed(p->c, "INSERT INTO processed_events", &why);
    }
    return apply_fresh(p, n);
lost:
    conn_failure(p, &why);
    return APPLY_CONN;
}

/* Prepares our two statements on this connection, once. */
static enum apply_rc prepare(struct consumer *c)
{
    if (c->pipe_prepared)
        return APPLY_OK;
    struct consumer_failure why;
    const char *names[2] = {DEDUP_ALL_STMT, DEDUP_ONE_STMT};
    const char *sqls[2] = {c->idcol.kind == IDCOL_INTEGER ? DEDUP_ALL_INT_SQL : DEDUP_ALL_SQL,
                           DEDUP_ONE_SQL};
    for (int i = 0; i < 2; i++) {
        PGresult *res = PQprepare(c->pg, names[i], sqls[i], 2, NULL);
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            consumer_failure_from_result(&why, res, c->pg);
        PQclear(res);
        if (!ok)
            return consume_own_failed(c, "INSERT INTO processed_events", &why);
    }
    c->pipe_prepared = true;
    return APPLY_OK;
}

static void pipe_free(struct pipe *p)
{
    for (size_t i = 0; i < p->nviews; i++)
        consume_view_free(&p->views[i]);
    free(p->views);
    free(p->fresh);
    free(p->ids);
}

/* Ends pipeline mode and rolls back what is left of a transaction; when
 * the connection cannot say where it stands, closes it. */
static void pipe_end(struct consumer *c)
{
    struct consumer_failure why;
    PGconn *pg = c->pg;
    if (pg == NULL || PQstatus(pg) != CONNECTION_OK)
        return;
    for (int guard = 0; PQpipelineStatus(pg) != PQ_PIPELINE_OFF && !PQexitPipelineMode(pg);
         guard++) {
        PGresult *r = PQgetResult(pg);
        if ((r == NULL && PQstatus(pg) != CONNECTION_OK) || guard > 4 * PIPE_CHUNK) {
            PQclear(r);
            log_warn("PostgreSQL pipeline did not end cleanly: %s; reconnecting",
                     PQerrorMessage(pg));
            consume_pg_lost(c);
            return;
        }
        PQclear(r);
    }
    if (PQtransactionStatus(pg) != PQTRANS_IDLE)
        consume_exec(c, "ROLLBACK", 0, NULL, NULL, &why);
}

enum apply_rc consume_pipe_apply(struct consumer *c, size_t n)
{
    struct pipe p = {.c = c};
    enum apply_rc rc = APPLY_OK;

    p.views = calloc(n, sizeof *p.views);
    p.fresh = calloc(n, sizeof *p.fresh);
    if (p.views == NULL || p.fresh == NULL)
        goto oom;
    for (; p.nviews < n; p.nviews++) {
        if (consume_view_make(&p.views[p.nviews], c->batch[p.nviews]) < 0)
            goto oom;
        const struct consumer_message *m = &p.views[p.nviews].m;
        if ((m->payload != NULL && strlen(m->payload) != m->payload_len) ||
            !consume_id_fits(&c->idcol, m->event_id)) {
            p.nviews++;
            /* a NUL byte: the handler says what that is; an id the column
             * cannot hold: consume_batch.c refuses it as --on-error says */
            rc = APPLY_SLOW;
            goto out;
        }
    }
    if ((p.ids = consume_ids_literal(p.views, n)) == NULL)
        goto oom;
    if ((rc = prepare(c)) != APPLY_OK)
        goto out;
    if (!PQenterPipelineMode(c->pg)) {
        struct consumer_failure why;
        consumer_failure_from_result(&why, NULL, c->pg);
        rc = consume_own_failed(c, "entering pipeline mode", &why);
        goto out;
    }
    bool dups = false;
    rc = optimistic(&p, n, &dups);
    if (rc == APPLY_OK && dups) {
        memset(p.fresh, 0, n * sizeof *p.fresh);
        rc = two_step(&p, n);
    }
    if (rc == APPLY_CONN)
        goto out;
    pipe_end(c);
    if (rc != APPLY_OK || !c->pg_ready)
        goto out;

    size_t applied = 0;
    for (size_t k = 0; k < n; k++) {
        if (p.fresh[k])
            applied++;
        else if (log_enabled(LOG_LEVEL_DEBUG))
            log_debug("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                      ": already processed, skipped", p.views[k].m.event_id, p.views[k].m.topic,
                      p.views[k].m.partition, p.views[k].m.offset);
    }
    c->stats.applied += applied;
    c->stats.duplicates += n - applied;
    c->stats.batches++;
    c->stats.pipelined++;
    log_debug("batch of %zu committed (pipelined%s): %zu applied, %zu duplicates", n,
              dups ? ", two steps" : "", applied, n - applied);
    pipe_free(&p);
    return APPLY_OK;

oom:
    consume_set_error(c, "out of memory");
    rc = APPLY_FATAL;
out:
    if (rc != APPLY_CONN)
        pipe_end(c);
    if (rc != APPLY_CONN && rc != APPLY_FATAL && (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK))
        rc = APPLY_CONN;
    pipe_free(&p);
    return rc;
}
