/*
 * consumer.c — the idempotent consumer (see consumer.h): the loop, the
 * Kafka callbacks (errors, rebalances) and the lifecycle. The batch
 * transaction is consume_batch.c, the PostgreSQL connection consume_pg.c
 * (consume_internal.h says who uses whom).
 *
 * One thread. The loop collects a batch (at most o.batch messages, or what
 * arrived within o.batch_ms of the first one), applies it in one PostgreSQL
 * transaction, commits the transaction, then commits the Kafka offsets of
 * the batch synchronously. Nothing else commits offsets: auto commit and
 * the offset store are off.
 *
 * When PostgreSQL goes away mid-batch, the batch stays in memory (the
 * rd_kafka_message_t references are kept), every assigned partition is
 * paused so no more messages are fetched, and the loop keeps polling so that
 * rebalances are served. After reconnecting the same batch is applied again
 * (duplicates of a transaction that did commit are skipped by
 * processed_events) and the partitions resume where the batch ended. If the
 * partitions are revoked meanwhile, the batch is dropped without committing
 * anything for it: the next owner reads it again from the last committed
 * offsets.
 *
 * A batch applied from the rebalance callback or at a stop runs under the
 * watchdog (pg_watchdog.h) with o.revoke_timeout: a lock wait, a hung server
 * or a silent network cannot hold the group's rebalance (or the exit) for
 * longer than that. A cut batch is handled like a lost connection.
 */
#include "consume_internal.h"

#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "outbox_relay/kafka/kafka_conf.h"
#include "outbox_relay/base/log.h"

#define POLL_MS 100           /* longest wait in one poll: how fast a stop is seen */
#define KAFKA_ERR_LOG_GAP 10.0 /* s between two log lines of the same Kafka error */

/* ---- Kafka callbacks --------------------------------------------------- */

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct consumer *c = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[256];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof buf);
        consume_set_error(c, "fatal Kafka consumer error %s: %s", rd_kafka_err2name(orig), buf);
        c->fatal = true;
        return;
    }
    double now = mono_now();
    if (err == c->last_kafka_err && now - c->last_kafka_err_at < KAFKA_ERR_LOG_GAP)
        return;
    c->last_kafka_err = err;
    c->last_kafka_err_at = now;
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        char advice[768];
        log_error("%s: %s", reason, kafka_conf_auth_advice_of(rk, advice, sizeof advice));
        return;
    }
    log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t) err), reason);
}

static bool in_list(const rd_kafka_topic_partition_list_t *parts, const rd_kafka_message_t *m)
{
    return rd_kafka_topic_partition_list_find(parts, rd_kafka_topic_name(m->rkt),
                                              m->partition) != NULL;
}

static void log_parts(const char *what, const rd_kafka_topic_partition_list_t *parts)
{
    char buf[1024];
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < parts->cnt && n < sizeof buf - 64; i++)
        n += (size_t) snprintf(buf + n, sizeof buf - n, "%s%s[%" PRId32 "]", i ? " " : "",
                               parts->elems[i].topic, parts->elems[i].partition);
    log_info("%s %d partition(s): %s", what, parts->cnt, buf);
}

/* Runs from rd_kafka_consumer_poll() (and rd_kafka_commit()) in our thread. */
static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    (void) rk;
    consume_on_commit(opaque, err, offsets);
}

/* Runs from rd_kafka_consumer_poll() in our thread. On revoke the batch in
 * progress is finished while the partitions are still ours, or dropped with
 * nothing committed for it. */
static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    struct consumer *c = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *e = NULL;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        log_parts("assigned", parts);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        if (!c->pg_ready && parts->cnt > 0) {
            rd_kafka_pause_partitions(rk, parts);
            c->paused = true;
        }
    } else {
        if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS)
            log_parts("revoked", parts);
        else
            log_warn("rebalance error: %s", rd_kafka_err2str(err));
        bool affected = !coop;
        for (size_t i = 0; i < c->nbatch && !affected; i++)
            affected = in_list(parts, c->batch[i]);
        if (affected && c->nbatch > 0 && !c->halted && !c->fatal) {
            log_info("finishing the batch in progress (%zu messages) before giving the "
                     "partitions up (at most %.1f s)", c->nbatch, c->o.revoke_timeout);
            consume_batch_process(c, true);
        }
        if (affected && c->nbatch > 0) {
            /* Could not apply: keep what belongs to partitions we still own
             * (cooperative), drop the rest; no offset is committed for it. */
            size_t kept = 0, dropped = 0;
            for (size_t i = 0; i < c->nbatch; i++) {
                if (coop && !in_list(parts, c->batch[i])) {
                    c->batch[kept++] = c->batch[i];
                } else {
                    rd_kafka_message_destroy(c->batch[i]);
                    dropped++;
                }
            }
            c->nbatch = kept;
            log_warn("%zu unapplied messages of revoked partitions dropped; their offsets "
                     "were not committed, so the next owner reads them again", dropped);
        }
        /* What earlier batches committed asynchronously and the coordinator
         * has not confirmed yet: committed now, while the partitions are ours. */
        consume_commit_pending(c);
        consume_forget_pending(c, coop ? parts : NULL);
        if (coop)
            e = rd_kafka_incremental_unassign(rk, parts);
        else
            rd_kafka_assign(rk, NULL);
    }
    if (e != NULL) {
        log_warn("rebalance: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

/* ---- lifecycle --------------------------------------------------------- */

struct consumer *consumer_new(const struct consumer_options *o, char *err, size_t errlen)
{
    struct consumer *c = calloc(1, sizeof *c);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (c == NULL || conf == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    c->o = *o;
    if (c->o.batch <= 0)
        c->o.batch = 100;
    if (c->o.batch_ms < 0)
        c->o.batch_ms = 100;
    if (c->o.reconnect_max <= 0)
        c->o.reconnect_max = 30;
    if (c->o.revoke_timeout <= 0)
        c->o.revoke_timeout = 5;
    if (c->o.apply_workers <= 0)
        c->o.apply_workers = CONSUMER_APPLY_WORKERS_DEFAULT;
    if (c->o.apply_workers > CONSUMER_APPLY_WORKERS_MAX)
        c->o.apply_workers = CONSUMER_APPLY_WORKERS_MAX;
    c->nworkers = c->o.apply_stmt != NULL ? c->o.apply_workers : 1;
    c->backoff = 0.5;
    if (o->handler == NULL || o->group == NULL || *o->group == '\0' || o->ntopics == 0 ||
        o->dsn == NULL || o->consumer_name == NULL || *o->consumer_name == '\0') {
        snprintf(err, errlen, "consumer_new: handler, group, topics, dsn and consumer_name "
                 "are required");
        goto fail;
    }
    c->batch_cap = (size_t) c->o.batch;
    c->batch = calloc(c->batch_cap, sizeof *c->batch);
    c->watchdog = pg_watchdog_new(NULL);
    if (c->nworkers > 1) {
        c->workers = calloc((size_t) c->nworkers - 1, sizeof *c->workers);
        for (int w = 0; c->workers != NULL && w < c->nworkers - 1; w++)
            c->workers[w].backoff = 0.5;
    }
    if (c->batch == NULL || c->watchdog == NULL || (c->nworkers > 1 && c->workers == NULL)) {
        snprintf(err, errlen, "out of memory (or no thread) for the consumer");
        goto fail;
    }

    /* Our defaults first; the user's properties win, except the three that
     * make the guarantee (consume_config refuses them; re-set after). Why
     * each differs from librdkafka's: consumer.h. */
    if ((o->brokers && *o->brokers &&
         kafka_conf_set(conf, "bootstrap.servers", o->brokers, err, errlen) < 0) ||
        kafka_conf_set(conf, "client.id", "outbox-consume", err, errlen) < 0 ||
        kafka_conf_set(conf, "auto.offset.reset", "earliest", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.partition.eof", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "session.timeout.ms", "10000", err, errlen) < 0 ||
        kafka_conf_set(conf, "heartbeat.interval.ms", "1000", err, errlen) < 0 ||
        kafka_conf_set(conf, "topic.metadata.refresh.interval.ms", "10000", err, errlen) < 0 ||
        kafka_conf_route_log(conf, err, errlen) < 0)
        goto fail;
    for (size_t i = 0; i < o->nkafka; i++)
        if (kafka_conf_set(conf, o->kafka[i].key, o->kafka[i].value, err, errlen) < 0)
            goto fail;
    if (kafka_conf_set(conf, "group.id", o->group, err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.commit", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.offset.store", "false", err, errlen) < 0)
        goto fail;

    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_conf_set_offset_commit_cb(conf, on_commit);

    char e[512];
    kafka_conf_warn_scram(conf, "the Kafka consumer");
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof e);
    if (c->rk == NULL) {
        snprintf(err, errlen, "cannot create the Kafka consumer: %s", e);
        goto fail;
    }
    conf = NULL; /* owned by rk now */
    rd_kafka_poll_set_consumer(c->rk);
    return c;

fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (c != NULL) {
        pg_watchdog_free(c->watchdog);
        free(c->workers);
        free(c->batch);
        free(c);
    }
    return NULL;
}

static int subscribe(struct consumer *c)
{
    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new((int) c->o.ntopics);
    for (size_t i = 0; i < c->o.ntopics; i++)
        rd_kafka_topic_partition_list_add(topics, c->o.topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        consume_set_error(c, "cannot subscribe: %s", rd_kafka_err2str(err));
        return -1;
    }
    c->subscribed = true;
    return 0;
}

/* A message or an error event from the consumer queue. */
static void take(struct consumer *c, rd_kafka_message_t *m)
{
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            double now = mono_now();
            if ((int) m->err != c->last_kafka_err || now - c->last_kafka_err_at >= KAFKA_ERR_LOG_GAP) {
                c->last_kafka_err = (int) m->err;
                c->last_kafka_err_at = now;
                log_warn("kafka: %s%s%s", rd_kafka_message_errstr(m), m->rkt ? " topic=" : "",
                         m->rkt ? rd_kafka_topic_name(m->rkt) : "");
            }
        }
        rd_kafka_message_destroy(m);
        return;
    }
    if (c->nbatch == c->batch_cap) {
        /* Never drop a message: the consumer's position is already past it. */
        rd_kafka_message_t **grown = realloc(c->batch, 2 * c->batch_cap * sizeof *grown);
        if (grown == NULL) {
            consume_set_error(c, "out of memory");
            c->fatal = true;
            rd_kafka_message_destroy(m);
            return;
        }
        c->batch = grown;
        c->batch_cap *= 2;
    }
    if (c->nbatch == 0)
        c->batch_started = mono_now();
    c->batch[c->nbatch++] = m;
}

int consumer_run(struct consumer *c, volatile sig_atomic_t *stop)
{
    c->stop = stop;
    srand((unsigned) time(NULL) ^ (unsigned) getpid());
    while (!*stop && !c->pg_ready && !c->fatal) {
        consume_pg_connect(c);
        if (!c->pg_ready && !c->fatal)
            consume_sleep(0.05);
    }
    if (!c->fatal && !*stop && subscribe(c) < 0)
        c->fatal = true;
    if (!c->fatal && !*stop)
        log_info("consuming %zu topic(s) as group %s, consumer %s (batch %d, %d ms, "
                 "%d apply worker(s), on-error %s)",
                 c->o.ntopics, c->o.group, c->o.consumer_name, c->o.batch, c->o.batch_ms,
                 c->nworkers,
                 c->o.on_error == CONSUMER_ON_ERROR_HALT ? "halt" : "failed");

    while (!*stop && !c->halted && !c->fatal) {
        consume_commit_retry(c); /* refused, or not asked for yet */
        if (!c->pg_ready) {
            consume_pg_connect(c);
            if (c->fatal)
                break;
            if (!c->pg_ready) {
                /* Paused: serves rebalances; anything fetched before the
                 * pause took effect is kept in the batch. */
                rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, POLL_MS);
                if (m != NULL)
                    take(c, m);
                continue;
            }
        }
        double now = mono_now();
        bool full = c->nbatch >= (size_t) c->o.batch;
        double left = c->batch_started + c->o.batch_ms / 1000.0 - now;
        if (c->nbatch > 0 && (full || left <= 0)) {
            consume_batch_process(c, false);
            continue;
        }
        int timeout = POLL_MS;
        if (c->nbatch > 0 && left * 1000 < timeout)
            timeout = (int) (left * 1000) + 1;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, timeout);
        if (m != NULL)
            take(c, m);
    }

    /* Stopping: finish the batch in progress (stop set, halted or fatal:
     * only the first applies anything). */
    if (*stop && !c->halted && !c->fatal && c->nbatch > 0) {
        if (!c->pg_ready)
            consume_pg_connect(c);
        if (!consume_batch_process(c, true))
            log_warn("stopping: %zu unapplied messages dropped, their offsets are not "
                     "committed", c->nbatch);
    }
    consume_batch_drop(c, 0);
    consume_commit_pending(c);
    log_info("stopping: %" PRIu64 " events applied, %" PRIu64 " duplicates skipped, %" PRIu64
             " failed, %" PRIu64 " batches (%" PRIu64 " pipelined, %" PRIu64 " applied again "
             "one by one after a failing event), %" PRIu64 " PostgreSQL reconnects, %" PRIu64
             " batches given up at a revoke or stop",
             c->stats.applied, c->stats.duplicates, c->stats.failed, c->stats.batches,
             c->stats.pipelined, c->stats.one_by_one, c->stats.reconnects, c->stats.abandoned);
    if (c->halted)
        return CONSUMER_HALTED;
    if (c->fatal)
        return c->setup_error ? CONSUMER_SETUP : CONSUMER_FATAL;
    return CONSUMER_OK;
}

const char *consumer_errstr(const struct consumer *c)
{
    return c->errstr;
}

const struct consumer_stats *consumer_stats(const struct consumer *c)
{
    return &c->stats;
}

void consumer_free(struct consumer *c)
{
    if (c == NULL)
        return;
    consume_batch_drop(c, 0);
    if (c->rk != NULL) {
        /* Leaves the group: the revoke callback runs with an empty batch. */
        rd_kafka_resp_err_t err = rd_kafka_consumer_close(c->rk);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
            log_warn("closing the Kafka consumer: %s", rd_kafka_err2str(err));
        rd_kafka_destroy(c->rk);
    }
    consume_pg_close(c);
    consume_workers_close(c);
    free(c->workers);
    pg_watchdog_free(c->watchdog);
    if (c->pending != NULL)
        rd_kafka_topic_partition_list_destroy(c->pending);
    free(c->batch);
    free(c);
}
