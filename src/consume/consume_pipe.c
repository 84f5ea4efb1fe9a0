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
#include "consume_plan.h"

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

/* One batch in the pipeline, on one connection (the consumer's own, or an
 * apply worker's). */
struct pipe {
    struct consumer *c;
    PGconn *pg;      /* borrowed: c->pg or a worker's */
    bool *prepared;  /* borrowed: whether our statements are prepared on pg */
    rd_kafka_message_t **msgs; /* borrowed: the messages, in batch order */
    struct msg_view *views;
    size_t nviews;
    bool *fresh;     /* per message: new, to be applied */
    char *ids;       /* the array literal of $2 */
    long inserted;   /* rows the optimistic INSERT inserted */
    int r1;          /* optimistic_decide: read_results' verdict on BEGIN and the INSERT */
    size_t failed1;  /* ... which of them failed */
    struct consumer_failure why1; /* ... and why */
    bool commit;     /* ... COMMIT sent (else ROLLBACK) */
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
    consumer_failure_from_result(why, NULL, p->pg);
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
    PGconn *pg = p->pg;
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
    return PQsendQueryPrepared(p->pg, p->c->o.apply_stmt, 5, v, NULL, NULL, 0);
}

/* What a failing apply statement means for the batch. */
static enum apply_rc apply_failed(struct pipe *p, size_t i, const struct consumer_failure *why)
{
    const struct consumer_message *m = &p->views[i].m;
    switch (consume_classify_on(p->pg, why)) {
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
    PGconn *pg = p->pg;
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
    if (!send_simple(p->pg, "ROLLBACK") || !PQpipelineSync(p->pg)) {
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
    PGconn *pg = p->pg;
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

/* The optimistic form's first half, for at most PIPE_CHUNK messages: sends
 * BEGIN, the INSERT of every event id, a Flush request, the apply
 * statements and a Sync without reading anything, so that several
 * connections can each have a batch in the server at once. APPLY_OK when
 * sent; APPLY_CONN when the connection failed. */
static enum apply_rc optimistic_send(struct pipe *p, size_t n)
{
    PGconn *pg = p->pg;
    struct consumer_failure why;
    const char *dparams[2] = {p->c->o.consumer_name, p->ids};
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
    return APPLY_OK;
lost:
    conn_failure(p, &why);
    return APPLY_CONN;
}

/* The optimistic form's middle: reads BEGIN's and the INSERT's results
 * (sent ahead of the apply statements' by the Flush request) and sends
 * COMMIT when the INSERT inserted a row for every message, else ROLLBACK.
 * After it the transaction ends in the server without waiting for us.
 * APPLY_OK when that is sent (what was read is kept in p for
 * optimistic_finish); APPLY_CONN when the connection failed. */
static enum apply_rc optimistic_decide(struct pipe *p, size_t n)
{
    p->r1 = read_results(p, 2, false, 1, NULL, &p->failed1, &p->why1);
    if (p->r1 == -2)
        return APPLY_CONN;
    p->commit = p->r1 == 0 && p->inserted == (long) n;
    if (!send_simple(p->pg, p->commit ? "COMMIT" : "ROLLBACK") || !PQpipelineSync(p->pg)) {
        struct consumer_failure why;
        conn_failure(p, &why);
        return APPLY_CONN;
    }
    return APPLY_OK;
}

/* The optimistic form's end: reads the apply statements' results and the
 * COMMIT's (or ROLLBACK's). APPLY_OK when committed; *dups set (and the
 * transaction rolled back) when some event was not new. */
static enum apply_rc optimistic_finish(struct pipe *p, size_t n, bool *dups)
{
    struct consumer_failure why2, why3;
    size_t failed_apply = 0, failed2 = 0;
    int r2 = read_results(p, n, true, (size_t) -1, NULL, &failed_apply, &why2);
    if (r2 == -2)
        return APPLY_CONN;
    int r3 = read_results(p, 1, true, (size_t) -1, NULL, &failed2, &why3);
    if (r3 == -2)
        return APPLY_CONN;
    if (p->r1 < 0)
        return consume_own_failed(p->c, p->failed1 == 0 ? "BEGIN" : "INSERT INTO processed_events",
                                  &p->why1);
    if (!p->commit) {
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
}

/* The optimistic form (every message new). APPLY_OK when committed; *dups
 * set (and the transaction rolled back) when some event was not new. */
static enum apply_rc optimistic(struct pipe *p, size_t n, bool *dups)
{
    if (n > PIPE_CHUNK)
        return optimistic_large(p, n, dups);
    enum apply_rc rc = optimistic_send(p, n);
    if (rc == APPLY_OK)
        rc = optimistic_decide(p, n);
    return rc != APPLY_OK ? rc : optimistic_finish(p, n, dups);
}

/* The two-step form: which events are new first, then apply those. */
static enum apply_rc two_step(struct pipe *p, size_t n)
{
    PGconn *pg = p->pg;
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

/* Prepares our two statements on p's connection, once. */
static enum apply_rc prepare(struct pipe *p)
{
    if (*p->prepared)
        return APPLY_OK;
    struct consumer *c = p->c;
    struct consumer_failure why;
    const char *names[2] = {DEDUP_ALL_STMT, DEDUP_ONE_STMT};
    const char *sqls[2] = {c->idcol.kind == IDCOL_INTEGER ? DEDUP_ALL_INT_SQL : DEDUP_ALL_SQL,
                           DEDUP_ONE_SQL};
    for (int i = 0; i < 2; i++) {
        PGresult *res = PQprepare(p->pg, names[i], sqls[i], 2, NULL);
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            consumer_failure_from_result(&why, res, p->pg);
        PQclear(res);
        if (!ok)
            return consume_own_failed(c, "INSERT INTO processed_events", &why);
    }
    *p->prepared = true;
    return APPLY_OK;
}

static void pipe_free(struct pipe *p)
{
    for (size_t i = 0; i < p->nviews; i++)
        consume_view_free(&p->views[i]);
    free(p->views);
    free(p->fresh);
    free(p->ids);
    p->views = NULL;
    p->fresh = NULL;
    p->ids = NULL;
    p->nviews = 0;
}

/* Ends pipeline mode and rolls back what is left of a transaction. false
 * when the connection cannot say where it stands: the caller closes it. */
static bool pipe_end(struct pipe *p)
{
    PGconn *pg = p->pg;
    if (pg == NULL || PQstatus(pg) != CONNECTION_OK)
        return true; /* the caller sees the status */
    for (int guard = 0; PQpipelineStatus(pg) != PQ_PIPELINE_OFF && !PQexitPipelineMode(pg);
         guard++) {
        PGresult *r = PQgetResult(pg);
        if ((r == NULL && PQstatus(pg) != CONNECTION_OK) || guard > 4 * PIPE_CHUNK) {
            PQclear(r);
            log_warn("PostgreSQL pipeline did not end cleanly: %s; reconnecting",
                     PQerrorMessage(pg));
            return false;
        }
        PQclear(r);
    }
    if (PQtransactionStatus(pg) != PQTRANS_IDLE)
        PQclear(PQexec(pg, "ROLLBACK"));
    return true;
}

/* Makes the views of p's n messages and the array of their ids. APPLY_OK;
 * APPLY_SLOW when a message cannot go through the pipeline (a NUL byte in
 * its payload: the handler says what that is; an id the column cannot
 * hold: consume_batch.c refuses it as --on-error says); APPLY_FATAL when
 * out of memory (c->errstr set). */
static enum apply_rc pipe_views(struct pipe *p, size_t n)
{
    p->views = calloc(n, sizeof *p->views);
    p->fresh = calloc(n, sizeof *p->fresh);
    if (p->views == NULL || p->fresh == NULL)
        goto oom;
    for (; p->nviews < n; p->nviews++) {
        if (consume_view_make(&p->views[p->nviews], p->msgs[p->nviews]) < 0)
            goto oom;
        const struct consumer_message *m = &p->views[p->nviews].m;
        if ((m->payload != NULL && strlen(m->payload) != m->payload_len) ||
            !consume_id_fits(&p->c->idcol, m->event_id)) {
            p->nviews++;
            return APPLY_SLOW;
        }
    }
    if ((p->ids = consume_ids_literal(p->views, n)) == NULL)
        goto oom;
    return APPLY_OK;
oom:
    consume_set_error(p->c, "out of memory");
    return APPLY_FATAL;
}

/* Prepares (once) and enters pipeline mode on p's connection. */
static enum apply_rc pipe_start(struct pipe *p)
{
    enum apply_rc rc = prepare(p);
    if (rc != APPLY_OK)
        return rc;
    if (!PQenterPipelineMode(p->pg)) {
        struct consumer_failure why;
        consumer_failure_from_result(&why, NULL, p->pg);
        return consume_own_failed(p->c, "entering pipeline mode", &why);
    }
    return APPLY_OK;
}

/* After the optimistic form: the two-step form when it found an event
 * already processed, then the end of pipeline mode. */
static enum apply_rc pipe_conclude(struct pipe *p, size_t n, enum apply_rc rc, bool dups,
                                   bool *lost)
{
    if (rc == APPLY_OK && dups) {
        memset(p->fresh, 0, n * sizeof *p->fresh);
        rc = two_step(p, n);
    }
    *lost = rc == APPLY_CONN || !pipe_end(p) || PQstatus(p->pg) != CONNECTION_OK;
    return *lost ? APPLY_CONN : rc;
}

/* How many of p's n messages were new; the others are logged. */
static size_t count_fresh(const struct pipe *p, size_t n)
{
    size_t applied = 0;
    for (size_t k = 0; k < n; k++) {
        if (p->fresh[k])
            applied++;
        else if (log_enabled(LOG_LEVEL_DEBUG))
            log_debug("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                      ": already processed, skipped", p->views[k].m.event_id, p->views[k].m.topic,
                      p->views[k].m.partition, p->views[k].m.offset);
    }
    return applied;
}

enum apply_rc consume_pipe_apply(struct consumer *c, size_t n)
{
    struct pipe p = {.c = c, .pg = c->pg, .prepared = &c->pipe_prepared, .msgs = c->batch};
    bool dups = false, lost = false;
    enum apply_rc rc = pipe_views(&p, n);
    if (rc == APPLY_OK)
        rc = pipe_start(&p);
    if (rc == APPLY_OK)
        rc = optimistic(&p, n, &dups);
    if (p.ids != NULL && rc != APPLY_SLOW && rc != APPLY_FATAL)
        rc = pipe_conclude(&p, n, rc, dups, &lost);
    else if (!pipe_end(&p))
        lost = true;
    /* A pipeline that did not end cleanly counts as a lost connection:
     * consume_batch.c closes it (consume_pg_lost). */
    if (lost || (rc != APPLY_FATAL && (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK))) {
        pipe_free(&p);
        return APPLY_CONN;
    }
    if (rc == APPLY_OK) {
        size_t applied = count_fresh(&p, n);
        c->stats.applied += applied;
        c->stats.duplicates += n - applied;
        c->stats.batches++;
        c->stats.pipelined++;
        log_debug("batch of %zu committed (pipelined%s): %zu applied, %zu duplicates", n,
                  dups ? ", two steps" : "", applied, n - applied);
    }
    pipe_free(&p);
    return rc;
}

/* ---- several connections ------------------------------------------------ */

/*
 * The parallel form (c->nworkers > 1): the batch is split by key
 * (consume_worker_of), each part is sent on its own connection as the
 * optimistic form above, all of them before any answer is read, so that as
 * many backends apply at once; then each part is concluded (COMMIT, or the
 * two-step form) in turn. A key's events are all in one part, in batch
 * order, and the next batch starts only after every part is concluded, so
 * one aggregate's events are applied in their Kafka order whichever
 * connection applied the one before.
 *
 * Each part is its own transaction, with its own processed_events rows:
 * the exactly-once argument is unchanged per part. applied[i] says which
 * of the batch's messages are committed; the caller commits offsets only
 * below the lowest unapplied one of each partition (consume_plan.h) and
 * applies the batch again on the consumer's own connection when a part did
 * not commit (its committed parts are then skipped as already processed).
 */
enum apply_rc consume_pipe_apply_parallel(struct consumer *c, size_t n, bool *applied)
{
    unsigned nw = (unsigned) c->nworkers;
    struct pipe *parts = calloc(nw, sizeof *parts);
    size_t *count = calloc(nw, sizeof *count);
    unsigned *wof = calloc(n, sizeof *wof);
    rd_kafka_message_t **msgs = calloc(n, sizeof *msgs);
    bool *sent = calloc(nw, sizeof *sent), *done = calloc(nw, sizeof *done);
    bool *decided_lost = calloc(nw, sizeof *decided_lost);
    enum apply_rc rc = APPLY_OK;
    size_t napplied = 0, ndups = 0;
    unsigned ncommitted = 0, nused = 0;

    memset(applied, 0, n * sizeof *applied);
    if (parts == NULL || count == NULL || wof == NULL || msgs == NULL || sent == NULL ||
        done == NULL || decided_lost == NULL) {
        consume_set_error(c, "out of memory");
        rc = APPLY_FATAL;
        goto out;
    }
    /* The parts, each a run of msgs[] in batch order. */
    for (size_t i = 0; i < n; i++) {
        const rd_kafka_message_t *m = c->batch[i];
        const char *key = (const char *) m->key;
        size_t key_len = m->key_len;
        if (c->o.apply_key != NULL && m->payload != NULL &&
            !consume_json_member((const char *) m->payload, m->len, c->o.apply_key, &key, &key_len)) {
            key = (const char *) m->key;
            key_len = m->key_len;
        }
        wof[i] = consume_worker_of(key, key_len, m->partition, nw);
        count[wof[i]]++;
    }
    size_t start = 0;
    for (unsigned w = 0; w < nw; w++) {
        parts[w] = (struct pipe){.c = c, .msgs = msgs + start};
        if (w == 0) {
            parts[w].pg = c->pg;
            parts[w].prepared = &c->pipe_prepared;
        } else {
            parts[w].pg = c->workers[w - 1].pg;
            parts[w].prepared = &c->workers[w - 1].prepared;
        }
        start += count[w];
        if (count[w] > 0)
            nused++;
        count[w] = 0;
    }
    for (size_t i = 0; i < n; i++)
        parts[wof[i]].msgs[count[wof[i]]++] = c->batch[i];

    /* Views first: a message the pipeline cannot carry sends the whole
     * batch to the consumer's own connection before anything is sent. */
    for (unsigned w = 0; w < nw && rc == APPLY_OK; w++)
        if (count[w] > 0 && (count[w] > PIPE_CHUNK || (rc = pipe_views(&parts[w], count[w])) != APPLY_OK))
            rc = rc == APPLY_OK ? APPLY_SLOW : rc;
    if (rc != APPLY_OK)
        goto out;
    for (unsigned w = 0; w < nw; w++) {
        if (count[w] == 0)
            continue;
        enum apply_rc r = pipe_start(&parts[w]);
        if (r == APPLY_OK)
            r = optimistic_send(&parts[w], count[w]);
        sent[w] = r == APPLY_OK;
        if (!sent[w])
            log_debug("apply worker %u: the part of %zu messages could not be sent", w, count[w]);
    }
    /* Every part's COMMIT (or ROLLBACK) is sent before any part's end is
     * read: a part whose apply waits for a row lock of another part's
     * transaction (two keys, one row: the loyalty example's customer row
     * is shared by the orders of one customer) then waits for PostgreSQL
     * only, never for us reading the first part; a cycle of such waits is
     * PostgreSQL's deadlock (40P01), a part that does not commit. */
    for (unsigned w = 0; w < nw; w++)
        if (count[w] > 0 && sent[w] && optimistic_decide(&parts[w], count[w]) != APPLY_OK)
            decided_lost[w] = true;
    for (unsigned w = 0; w < nw; w++) {
        if (count[w] == 0)
            continue;
        bool dups = false, lost = false;
        enum apply_rc r = !sent[w] ? APPLY_SLOW : decided_lost[w] ? APPLY_CONN
                          : optimistic_finish(&parts[w], count[w], &dups);
        if (r == APPLY_FATAL)
            r = APPLY_SLOW; /* the consumer's own connection says it again, or not */
        r = sent[w] ? pipe_conclude(&parts[w], count[w], r, dups, &lost) : r;
        if (!sent[w] && !pipe_end(&parts[w]))
            lost = true;
        if (lost || PQstatus(parts[w].pg) != CONNECTION_OK) {
            if (w == 0) {
                rc = APPLY_CONN; /* consume_batch.c: consume_pg_lost */
            } else {
                log_warn("apply worker %u: PostgreSQL connection lost; its part of the batch "
                         "(%zu messages) is applied on the main connection", w, count[w]);
                consume_worker_lost(c, w);
            }
            continue;
        }
        if (r != APPLY_OK)
            continue;
        done[w] = true;
        ncommitted++;
        size_t a = count_fresh(&parts[w], count[w]);
        napplied += a;
        ndups += count[w] - a;
    }
    for (size_t i = 0; i < n; i++)
        applied[i] = done[wof[i]];
    if (ncommitted == nused && rc == APPLY_OK) {
        c->stats.applied += napplied;
        c->stats.duplicates += ndups;
        c->stats.batches++;
        c->stats.pipelined++;
        log_debug("batch of %zu committed (pipelined, %u connections): %zu applied, %zu "
                  "duplicates", n, nused, napplied, ndups);
        goto out;
    }
    /* Some part did not commit: applied[] says which did; their events are
     * counted when the batch is done (consume_batch.c, applied_ahead). */
    c->applied_ahead += napplied;
    c->stats.duplicates += ndups;
    if (rc == APPLY_OK)
        rc = APPLY_SLOW;
out:
    for (unsigned w = 0; parts != NULL && w < nw; w++)
        pipe_free(&parts[w]);
    free(parts);
    free(count);
    free(wof);
    free(msgs);
    free(sent);
    free(done);
    free(decided_lost);
    return rc;
}
