/*
 * consume_batch.c — the consumer's batch transaction (see consumer.h for the
 * guarantee, consume_internal.h for the split).
 *
 * One batch, one transaction: per message, (consumer, event_id) into
 * processed_events (a duplicate is skipped), the handler inside a
 * SAVEPOINT, on a data error the savepoint rolled back and then either the
 * message recorded in failed_events (--on-error failed) or the batch rolled
 * back and the messages before it applied (halt). After COMMIT, and only
 * then, the batch's Kafka offsets are committed. Transient failures retry
 * the batch; a lost connection keeps it for after the reconnect. A batch
 * applied from a revoke or at a stop runs under the watchdog
 * (pg_watchdog.h) with o.revoke_timeout; a cut batch is handled like a lost
 * connection.
 */
#include "consume_internal.h"

#include <inttypes.h>
#include <string.h>

#include "outbox_relay/base/log.h"
#include "consume_plan.h"

#define SAVEPOINT_SQL "SAVEPOINT outbox_consume_msg"
#define RELEASE_SQL "RELEASE SAVEPOINT outbox_consume_msg"
#define ROLLBACK_TO_SQL "ROLLBACK TO SAVEPOINT outbox_consume_msg"
#define PROCESSED_SQL                                                            \
    "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) "         \
    "ON CONFLICT DO NOTHING"
#define FAILED_SQL                                                                \
    "INSERT INTO failed_events (consumer, event_id, topic, \"partition\", \"offset\", key, " \
    "event_type, payload, error, sqlstate) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) " \
    "ON CONFLICT (consumer, event_id) DO UPDATE SET topic = EXCLUDED.topic, "     \
    "\"partition\" = EXCLUDED.\"partition\", \"offset\" = EXCLUDED.\"offset\", "  \
    "key = EXCLUDED.key, event_type = EXCLUDED.event_type, payload = EXCLUDED.payload, " \
    "error = EXCLUDED.error, sqlstate = EXCLUDED.sqlstate, failed_at = now()"

#define TRANSIENT_RETRIES_ON_STOP 3
#define COMMIT_RETRY 1.0       /* s between retries of a failed offset commit */
#define COMMIT_UNANSWERED 30.0 /* s after which an unanswered commit is asked for again */

/* ---- applying a batch -------------------------------------------------- */

/* Records a failing message in failed_events, after the savepoint was
 * rolled back. When key or payload are not storable as text (bad encoding,
 * NUL bytes), they are stored as NULL. */
static enum apply_rc record_failed(struct consumer *c, const struct consumer_message *m,
                                   const struct consumer_failure *err)
{
    char partition[16], offset[32];
    snprintf(partition, sizeof partition, "%" PRId32, m->partition);
    snprintf(offset, sizeof offset, "%" PRId64, m->offset);
    bool payload_text = m->payload && strlen(m->payload) == m->payload_len;
    const char *params[10] = {c->o.consumer_name, m->event_id, m->topic, partition, offset,
                              m->aggregate_id, m->type, payload_text ? m->payload : NULL,
                              err->message, err->sqlstate[0] ? err->sqlstate : NULL};
    struct consumer_failure why;
    if (consume_exec(c, FAILED_SQL, 10, params, NULL, &why) == 0)
        return APPLY_OK;
    if (consume_classify(c, &why) != FAIL_DATA)
        return consume_own_failed(c, "INSERT INTO failed_events", &why);
    /* Probably the key or payload: keep the record without them. */
    if (consume_exec(c, ROLLBACK_TO_SQL, 0, NULL, NULL, &why) < 0)
        return consume_own_failed(c, "ROLLBACK TO SAVEPOINT", &why);
    params[5] = NULL; /* key */
    params[6] = NULL; /* type */
    params[7] = NULL; /* payload */
    struct consumer_failure why2;
    if (consume_exec(c, FAILED_SQL, 10, params, NULL, &why2) == 0) {
        log_warn("event_id=%s: key, type and payload not stored in failed_events: %s", m->event_id,
                 why.message);
        return APPLY_OK;
    }
    return consume_own_failed(c, "INSERT INTO failed_events", &why2);
}

/* Applies the first n messages of the batch in one transaction and commits
 * it. On APPLY_HALT, *fail_at is the index of the failing message and the
 * transaction is rolled back. On every other failure the transaction is
 * rolled back or the connection is gone. */
static enum apply_rc apply_single(struct consumer *c, size_t n, size_t *fail_at)
{
    struct consumer_failure why;
    uint64_t applied = 0, dups = 0, failed = 0;
    enum apply_rc rc = APPLY_OK;
    struct msg_view v;
    bool have_view = false;

    if (c->o.apply_stmt != NULL) {
        rc = consume_pipe_apply(c, n);
        if (rc != APPLY_SLOW)
            return rc;
        c->stats.one_by_one++; /* a data error: each message in its savepoint */
        rc = APPLY_OK;
    }
    if (consume_exec(c, "BEGIN", 0, NULL, NULL, &why) < 0)
        return consume_own_failed(c, "BEGIN", &why);

    for (size_t i = 0; i < n; i++) {
        if (consume_view_make(&v, c->batch[i]) < 0) {
            consume_set_error(c, "out of memory");
            rc = APPLY_FATAL;
            goto rollback;
        }
        have_view = true;
        const struct consumer_message *m = &v.m;
        const char *pparams[2] = {c->o.consumer_name, m->event_id};
        long inserted = 0;
        /* An id processed_events cannot hold is not recorded there: the
         * event is refused below as a failing apply would be. */
        bool id_fits = consume_id_fits(&c->idcol, m->event_id);
        if (id_fits && consume_exec(c, PROCESSED_SQL, 2, pparams, &inserted, &why) < 0) {
            rc = consume_own_failed(c, "INSERT INTO processed_events", &why);
            goto rollback;
        }
        if (id_fits && inserted == 0) {
            log_debug("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                      ": already processed, skipped", m->event_id, m->topic, m->partition,
                      m->offset);
            dups++;
            consume_view_free(&v);
            have_view = false;
            continue;
        }
        if (consume_exec(c, SAVEPOINT_SQL, 0, NULL, NULL, &why) < 0) {
            rc = consume_own_failed(c, "SAVEPOINT", &why);
            goto rollback;
        }
        memset(&why, 0, sizeof why);
        const char *verb = id_fits ? "apply failed" : "refused";
        if (!id_fits)
            consume_id_refusal(&c->idcol, m->event_id, &why);
        else if (c->o.handler(c->o.arg, c->pg, m, &why) == CONSUMER_OK) {
            if (consume_exec(c, RELEASE_SQL, 0, NULL, NULL, &why) < 0) {
                rc = consume_own_failed(c, "RELEASE SAVEPOINT", &why);
                goto rollback;
            }
            applied++;
            consume_view_free(&v);
            have_view = false;
            continue;
        }
        if (why.message[0] == '\0')
            snprintf(why.message, sizeof why.message, "the handler failed without a message");
        enum failure_class fc = consume_classify(c, &why);
        if (fc == FAIL_CONN) {
            log_warn("PostgreSQL connection lost while applying event_id=%s: %s", m->event_id,
                     why.message);
            rc = APPLY_CONN;
            goto rollback;
        }
        if (fc == FAIL_TRANSIENT) {
            log_warn("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                     ": %s (SQLSTATE %s); the batch is retried", m->event_id, m->topic,
                     m->partition, m->offset, why.message, why.sqlstate);
            rc = APPLY_RETRY;
            goto rollback;
        }
        if (c->o.on_error == CONSUMER_ON_ERROR_HALT) {
            consume_set_error(c, "event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                      " type=%s: %s: %s%s%s%s; stopped (--on-error halt): nothing "
                      "at or after this offset is committed. Fix the cause and restart, or run "
                      "with --on-error failed", m->event_id, m->topic, m->partition, m->offset,
                      m->type ? m->type : "(none)", verb, why.message,
                      why.sqlstate[0] ? " (SQLSTATE " : "", why.sqlstate,
                      why.sqlstate[0] ? ")" : "");
            *fail_at = i;
            rc = APPLY_HALT;
            goto rollback;
        }
        /* --on-error failed: undo what the handler did, keep the
         * processed_events row (written before the savepoint; none for a
         * refused id), record why. */
        struct consumer_failure why2;
        if (consume_exec(c, ROLLBACK_TO_SQL, 0, NULL, NULL, &why2) < 0) {
            rc = consume_own_failed(c, "ROLLBACK TO SAVEPOINT", &why2);
            goto rollback;
        }
        rc = record_failed(c, m, &why);
        if (rc != APPLY_OK)
            goto rollback;
        if (consume_exec(c, RELEASE_SQL, 0, NULL, NULL, &why2) < 0) {
            rc = consume_own_failed(c, "RELEASE SAVEPOINT", &why2);
            goto rollback;
        }
        log_warn("event_id=%s topic=%s partition=%" PRId32 " offset=%" PRId64
                 " type=%s: %s: %s%s%s%s; recorded in failed_events",
                 m->event_id, m->topic, m->partition, m->offset, m->type ? m->type : "(none)",
                 verb, why.message, why.sqlstate[0] ? " (SQLSTATE " : "", why.sqlstate,
                 why.sqlstate[0] ? ")" : "");
        failed++;
        consume_view_free(&v);
        have_view = false;
    }

    if (consume_exec(c, "COMMIT", 0, NULL, NULL, &why) < 0)
        return consume_own_failed(c, "COMMIT", &why);
    c->stats.applied += applied;
    c->stats.duplicates += dups;
    c->stats.failed += failed;
    c->stats.batches++;
    log_debug("batch of %zu committed: %" PRIu64 " applied, %" PRIu64 " duplicates, %" PRIu64
              " failed", n, applied, dups, failed);
    return APPLY_OK;

rollback:
    if (have_view)
        consume_view_free(&v);
    if (rc != APPLY_CONN && c->pg != NULL && PQstatus(c->pg) == CONNECTION_OK &&
        consume_exec(c, "ROLLBACK", 0, NULL, NULL, &why) < 0 && consume_classify(c, &why) == FAIL_CONN &&
        rc != APPLY_FATAL && rc != APPLY_HALT)
        rc = APPLY_CONN;
    return rc;
}

static void commit_offsets(struct consumer *c, size_t n, const bool *applied, bool sync);

/* Applies the first n messages of the batch: split over the apply workers
 * when parallel (outside a revoke or a stop: the watchdog guards c->pg
 * only) and they are all connected, else, or for what a part of that did
 * not commit, on c->pg (apply_single). Returns as apply_single. */
static enum apply_rc apply_batch(struct consumer *c, size_t n, size_t *fail_at, bool parallel)
{
    if (!parallel || c->nworkers <= 1 || c->o.apply_stmt == NULL || n < 2 ||
        !consume_workers_ready(c))
        return apply_single(c, n, fail_at);
    bool *applied = calloc(n, sizeof *applied);
    if (applied == NULL) {
        consume_set_error(c, "out of memory");
        return APPLY_FATAL;
    }
    enum apply_rc rc = consume_pipe_apply_parallel(c, n, applied);
    if (rc == APPLY_SLOW || rc == APPLY_CONN) {
        /* What did commit is kept: its offsets, below the lowest unapplied
         * event of each partition, are committed now. */
        commit_offsets(c, n, applied, false);
        if (rc == APPLY_SLOW) {
            log_debug("a part of the batch of %zu did not commit; applying the batch on the "
                      "main connection", n);
            rc = apply_single(c, n, fail_at);
        }
    }
    free(applied);
    if (rc == APPLY_OK && c->applied_ahead > 0) {
        /* counted as duplicates by the attempt that completed the batch */
        c->stats.applied += c->applied_ahead;
        c->stats.duplicates -= c->applied_ahead < c->stats.duplicates ? c->applied_ahead
                                                                      : c->stats.duplicates;
        c->applied_ahead = 0;
    }
    return rc;
}

/* Commits the offsets applied and not yet committed (c->pending),
 * synchronously. A failure (typically "rebalance in progress") is logged,
 * not fatal: the events are applied, and the offsets stay pending, to be
 * committed with the next batch or by the retry in the main loop, unless the
 * partition is revoked first (its next owner then skips the redelivered
 * events as duplicates). */
void consume_commit_pending(struct consumer *c)
{
    if (c->pending == NULL || c->pending->cnt == 0)
        return;
    c->commit_sync = true;
    rd_kafka_resp_err_t err = rd_kafka_commit(c->rk, c->pending, 0);
    c->commit_sync = false;
    if (c->pending == NULL) /* on_commit confirmed everything meanwhile */
        return;
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("committing Kafka offsets failed: %s; retrying (the events are applied: "
                 "a redelivery is skipped as duplicate)", rd_kafka_err2str(err));
        c->commit_retry_at = mono_now() + COMMIT_RETRY;
        return;
    }
    if (log_enabled(LOG_LEVEL_DEBUG))
        for (int i = 0; i < c->pending->cnt; i++)
            log_debug("committed %s[%" PRId32 "] offset %" PRId64, c->pending->elems[i].topic,
                      c->pending->elems[i].partition, c->pending->elems[i].offset);
    rd_kafka_topic_partition_list_destroy(c->pending);
    c->pending = NULL;
}

/* Commits the pending offsets asynchronously: consume_on_commit() removes
 * what the group coordinator confirmed; what it refused the main loop asks
 * again for after COMMIT_RETRY (consume_commit_retry), and every next batch
 * asks again. */
static void commit_pending_async(struct consumer *c)
{
    c->commit_async_at = mono_now();
    c->commit_retry_at = c->commit_async_at + COMMIT_RETRY;
    rd_kafka_resp_err_t err = rd_kafka_commit(c->rk, c->pending, 1);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("committing Kafka offsets failed: %s; retrying (the events are applied: "
                 "a redelivery is skipped as duplicate)", rd_kafka_err2str(err));
        return;
    }
    c->commits_in_flight++;
}

/* Never synchronous: the group coordinator holds a member's connection
 * while its JoinGroup waits for the rest of the group (a real broker and
 * the mock cluster alike), so a synchronous commit there would stop the
 * poll loop, and with it fetching and the batch timer, for the rest of the
 * join (measured: 7.5 s with the default session.timeout.ms against the
 * mock broker). One retry in flight at a time. */
void consume_commit_retry(struct consumer *c)
{
    if (c->pending == NULL || c->pending->cnt == 0)
        return;
    double now = mono_now();
    if (now < c->commit_retry_at)
        return;
    if (c->commits_in_flight > 0) {
        if (now - c->commit_async_at < COMMIT_UNANSWERED)
            return;
        c->commits_in_flight = 0; /* librdkafka answers every commit; never wait forever */
    }
    commit_pending_async(c);
}

void consume_on_commit(struct consumer *c, rd_kafka_resp_err_t err,
                       const rd_kafka_topic_partition_list_t *offsets)
{
    if (!c->commit_sync && c->commits_in_flight > 0)
        c->commits_in_flight--;
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return;
    for (int i = 0; offsets != NULL && i < offsets->cnt; i++) {
        const rd_kafka_topic_partition_t *o = &offsets->elems[i];
        rd_kafka_resp_err_t e = err ? err : o->err;
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (!c->commit_sync) { /* a synchronous commit says so itself */
                log_warn("committing Kafka offsets failed: %s; retrying (the events are "
                         "applied: a redelivery is skipped as duplicate)", rd_kafka_err2str(e));
                c->commit_retry_at = mono_now() + COMMIT_RETRY;
            }
            return;
        }
        if (c->pending == NULL)
            continue;
        for (int k = 0; k < c->pending->cnt; k++) {
            const rd_kafka_topic_partition_t *p = &c->pending->elems[k];
            if (p->partition == o->partition && strcmp(p->topic, o->topic) == 0) {
                if (p->offset <= o->offset) {
                    log_debug("committed %s[%" PRId32 "] offset %" PRId64, o->topic,
                              o->partition, o->offset);
                    rd_kafka_topic_partition_list_del_by_idx(c->pending, k);
                }
                break;
            }
        }
    }
    if (c->pending != NULL && c->pending->cnt == 0 && !c->commit_sync) {
        rd_kafka_topic_partition_list_destroy(c->pending);
        c->pending = NULL;
    }
}

/* Adds to the pending offsets, for each partition of the first n batch
 * messages, the offset below which all of them are applied (applied NULL:
 * all are; else applied[i] per message): the lowest unapplied one, or the
 * last + 1 (consume_plan.h). Then commits them (synchronously when sync: at
 * a revoke, a stop or a halt; else asynchronously). */
static void commit_offsets(struct consumer *c, size_t n, const bool *applied, bool sync)
{
    struct consume_lowmark lm = {0};
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const rd_kafka_message_t *m = c->batch[i];
        if (consume_lowmark_note(&lm, rd_kafka_topic_name(m->rkt), m->partition, m->offset,
                                 applied == NULL || applied[i]) < 0) {
            consume_lowmark_free(&lm);
            log_warn("out of memory: the offsets of a batch of %zu are committed later", n);
            return;
        }
    }
    bool any = false;
    for (size_t k = 0; k < lm.nparts; k++) {
        int64_t off;
        if (!consume_lowmark_commit(&lm, k, &off))
            continue;
        if (c->pending == NULL)
            c->pending = rd_kafka_topic_partition_list_new((int) lm.nparts);
        rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(
            c->pending, lm.parts[k].topic, lm.parts[k].partition);
        if (p == NULL)
            p = rd_kafka_topic_partition_list_add(c->pending, lm.parts[k].topic,
                                                  lm.parts[k].partition);
        if (off > p->offset)
            p->offset = off;
        any = true;
    }
    consume_lowmark_free(&lm);
    if (!any)
        return;
    if (sync)
        consume_commit_pending(c);
    else
        commit_pending_async(c);
}

/* Forgets pending offsets of partitions we no longer own (all when parts is
 * NULL): committing them now could move another owner's position. */
void consume_forget_pending(struct consumer *c, const rd_kafka_topic_partition_list_t *parts)
{
    if (c->pending == NULL)
        return;
    for (int i = c->pending->cnt - 1; i >= 0; i--) {
        const rd_kafka_topic_partition_t *p = &c->pending->elems[i];
        if (parts == NULL || rd_kafka_topic_partition_list_find(parts, p->topic, p->partition))
            rd_kafka_topic_partition_list_del_by_idx(c->pending, i);
    }
}

void consume_batch_drop(struct consumer *c, size_t from)
{
    if (from == 0) { /* applied by a part of the parallel form, never counted */
        c->stats.applied += c->applied_ahead;
        c->applied_ahead = 0;
    }
    for (size_t i = from; i < c->nbatch; i++)
        rd_kafka_message_destroy(c->batch[i]);
    if (from < c->nbatch)
        c->nbatch = from;
}

/* on_error halt: roll back (done), apply and commit what came before the
 * failing message so the group's offset points exactly at it, then stop. */
static void halt_at(struct consumer *c, size_t fail_at)
{
    char saved[CONSUMER_ERRLEN];
    snprintf(saved, sizeof saved, "%s", c->errstr);
    size_t dummy;
    if (fail_at > 0) {
        enum apply_rc rc = apply_batch(c, fail_at, &dummy, false);
        if (rc == APPLY_OK)
            commit_offsets(c, fail_at, NULL, true);
        else
            log_warn("could not re-apply the %zu events before the failing one; they are "
                     "applied by the next run", fail_at);
    }
    snprintf(c->errstr, sizeof c->errstr, "%s", saved);
    c->halted = true;
    consume_batch_drop(c, 0);
}

/* Applies the batch in progress, retrying transient failures. Returns true
 * when the batch is done (applied and offsets committed, or halted/fatal);
 * false when PostgreSQL is away (the batch is kept) or, when bounded (a
 * revoke or a stop), when it could not be applied within o.revoke_timeout:
 * the caller then drops it, committing nothing for it. */
bool consume_batch_process(struct consumer *c, bool bounded)
{
    double backoff = 0.1;
    int attempts = 0;
    double started = mono_now();
    double deadline = started + c->o.revoke_timeout;
    while (c->nbatch > 0) {
        if (!c->pg_ready)
            return false;
        if (bounded) {
            double left = deadline - mono_now();
            if (left <= 0) {
                log_warn("gave up on the batch in progress (%zu messages) after %.1f s of "
                         "transient failures (--revoke-timeout)", c->nbatch, mono_now() - started);
                c->stats.abandoned++;
                return false;
            }
            pg_watchdog_arm(c->watchdog, c->pg, left);
        }
        size_t fail_at = 0;
        enum apply_rc rc = apply_batch(c, c->nbatch, &fail_at, !bounded);
        if (rc == APPLY_HALT)
            halt_at(c, fail_at); /* still under the deadline when bounded */
        if (bounded && pg_watchdog_disarm(c->watchdog)) {
            /* The connection was cut: its transaction is rolled back, unless
             * the cut came after COMMIT returned (rc says so). */
            if (rc == APPLY_OK) {
                commit_offsets(c, c->nbatch, NULL, true);
                consume_batch_drop(c, 0);
            } else if (rc != APPLY_HALT) {
                log_warn("gave up on the batch in progress (%zu messages) after %.1f s "
                         "(--revoke-timeout): PostgreSQL did not finish it, the connection "
                         "was cut and its transaction rolled back; no offset is committed "
                         "for it, the next owner of its partitions applies it",
                         c->nbatch, mono_now() - started);
                c->stats.abandoned++;
            }
            consume_pg_lost(c);
            return c->nbatch == 0;
        }
        switch (rc) {
        case APPLY_OK:
            commit_offsets(c, c->nbatch, NULL, bounded);
            consume_batch_drop(c, 0);
            return true;
        case APPLY_CONN:
            consume_pg_lost(c);
            return false;
        case APPLY_HALT:
            return true;
        case APPLY_SLOW: /* consume_pipe_apply's, handled in apply_batch */
        case APPLY_FATAL:
            c->fatal = true;
            consume_batch_drop(c, 0);
            return true;
        case APPLY_RETRY:
            c->stats.retries++;
            if (*c->stop && ++attempts >= TRANSIENT_RETRIES_ON_STOP) {
                log_warn("stopping: %zu unapplied messages dropped, their offsets are not "
                         "committed", c->nbatch);
                consume_batch_drop(c, 0);
                return true;
            }
            double pause = jitter(backoff);
            if (bounded && mono_now() + pause > deadline)
                pause = deadline - mono_now() > 0 ? deadline - mono_now() : 0;
            consume_sleep(pause);
            backoff = backoff * 2 > 5 ? 5 : backoff * 2;
            break;
        }
    }
    return true;
}
