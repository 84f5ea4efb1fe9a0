/*
 * relay.c — the relay's lifecycle and its outer loop (see relay.h): the
 * relay made and freed, and relay_run, which starts replication (creating
 * the slot, with the backfill hooks of relay_backfill.c, or finishing an
 * unfinished backfill), runs a session (relay_session.c) and deals with
 * its end: a stop, a rewind, a lost connection (reconnect with a capped,
 * jittered exponential backoff), a fatal error; then the clean stop.
 *
 * Rewind: a delivery error that is waited out (kafka_errors.h) stops the
 * reading; once nothing is in flight the session ends, the replication
 * connection is ended and started again from the confirmed position, so
 * everything after it is produced again, in commit order
 * (rewind_replication).
 *
 * The top of the relay's files (relay_internal.h): it calls down to the
 * others, none calls it.
 */
#include "relay_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox_relay/relay/backfill.h"
#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/core/dispatch.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/pg/partition.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/core/progress_record.h"

#define TRACKER_GROUPS 4096
#define STANDBY_POLL 1.0    /* s between a standby's looks at the slot */
#define REFUSED_POLL 5.0    /* s between tries while the server refuses the plugin */
#define REFUSED_LOG_EVERY 60.0 /* s between repeats of that error in the log */
#define BACKOFF_MIN 0.5     /* s, the first pause after a failed start */
#define REWIND_MIN 0.2      /* s before the first re-production after a rewind */
#define AUTH_GRACE 30.0     /* s an authorization refusal may last, without any
                               progress, before it counts as permanent */

/* dispatch's world (dispatch.h): partitions (the sink's side: relay_sink.c).
 * The membership rule (partition_rule.h): step 0 is the decoder's, pure;
 * the catalog lookup is the partition map's, I/O owned by this loop. */
static int op_member(void *ctx, const struct decoder_record *rec, char *why, size_t whylen)
{
    struct relay *r = ctx;
    char name[256];
    partition_tx_row(r->partitions);
    if (!decoder_shaped(r->decoder, rec))
        return PARTITION_NO;
    bool named = decoder_table_name(r->decoder, rec, name, sizeof name) >= 0;
    return partition_member(r->partitions, named ? name : NULL, rec->wal_start, why, whylen);
}

static void op_tx_begin(void *ctx, int64_t xid)
{
    struct relay *r = ctx;
    partition_tx_begin(r->partitions, xid);
}

static void op_tx_commit(void *ctx, int64_t xid, lsn_t commit_end)
{
    struct relay *r = ctx;
    partition_tx_commit(r->partitions, xid, commit_end);
}

static int make_sink(struct relay *r, char *err, size_t errlen);
static int renew_fenced_sink(struct relay *r);
static int adopt_txn_id(struct relay *r);

struct relay *relay_new(const struct relay_config *cfg, volatile sig_atomic_t *stop,
                        struct metrics *metrics, char *err, size_t errlen)
{
    struct relay *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->cfg = cfg;
    r->stop = stop;
    delivery_watch_init(&r->dwatch, mono_now());
    r->metrics = metrics;
    r->columns = cfg->columns;
    /* PLUGIN_AUTO starts with wal2json; the stream says when the slot or
     * the server wants the other (STREAM_PLUGIN), and main.c starts over. */
    r->decoder = cfg->plugin == PLUGIN_PGOUTPUT ? decoder_pgoutput_new() : decoder_w2j_new();
    if (r->decoder != NULL)
        r->decoder->columns = &r->columns;
    struct stream_options so = {.decoder = r->decoder, .dsn = cfg->dsn, .slot = cfg->slot,
                                .columns = &r->columns,
                                .publication = cfg->publication,
                                .table_schema = cfg->table_schema,
                                .table_name = cfg->table_name,
                                .message_prefix = cfg->message_prefix, .create_slot = true,
                                .failover_slot = cfg->failover_slot,
                                .primary_dsn = cfg->primary_dsn,
                                .plugin_auto = cfg->plugin == PLUGIN_AUTO,
                                .recreate_slot = cfg->recreate_slot,
                                .takeover_after = cfg->takeover_after,
                                .query_timeout = cfg->wal_receiver_timeout,
                                .on_creating = relay_on_slot_creating,
                                .on_created = relay_on_slot_created, .on_created_ctx = r};
    struct backfill_options bo = {.dsn = cfg->dsn, .slot = cfg->slot,
                                  .columns = &r->columns,
                                  .table_schema = cfg->table_schema,
                                  .table_name = cfg->table_name};
    r->stream = stream_new(&so);
    r->tracker = tracker_new(TRACKER_GROUPS, 0);
    r->backfill = backfill_new(&bo);
    r->bf_tracker = tracker_new(TRACKER_GROUPS, 0);
    r->partitions = partition_map_new(cfg->dsn, cfg->slot, cfg->table_schema, cfg->table_name);
    struct dispatch_options dopts = {.slot = cfg->slot, .table_schema = cfg->table_schema,
                                     .table_name = cfg->table_name,
                                     .message_prefix = cfg->message_prefix,
                                     .dead_letter = cfg->on_poison == POISON_DEAD_LETTER};
    struct dispatch_ops ops = {.produce = relay_produce, .dead_letter = relay_dead_letter_change,
                               .member = op_member, .tx_begin = op_tx_begin,
                               .tx_commit = op_tx_commit, .ctx = r};
    if (r->tracker != NULL && r->decoder != NULL)
        r->dispatch = dispatch_new(&dopts, r->tracker, r->decoder, &ops);
    if (r->stream == NULL || r->tracker == NULL || r->backfill == NULL ||
        r->bf_tracker == NULL || r->decoder == NULL || r->dispatch == NULL ||
        r->partitions == NULL) {
        snprintf(err, errlen, "out of memory");
        relay_free(r);
        return NULL;
    }
    if (cfg->delivery == DELIVERY_EXACTLY_ONCE) {
        const char *own = config_kafka_get(cfg, "transactional.id");
        if (own != NULL)
            snprintf(r->eos.txn_id, sizeof r->eos.txn_id, "%s", own);
        else if (progress_transactional_id(NULL, cfg->slot, r->eos.txn_id,
                                           sizeof r->eos.txn_id) < 0) {
            snprintf(err, errlen, "--slot %s: too long for a transactional.id", cfg->slot);
            relay_free(r);
            return NULL;
        }
    }
    if (make_sink(r, err, errlen) < 0) {
        relay_free(r);
        return NULL;
    }
    return r;
}

/* The sink for cfg (again after fencing: a fenced producer is done for). */
static int make_sink(struct relay *r, char *err, size_t errlen)
{
    const struct relay_config *cfg = r->cfg;
    const char *kafka[2 * CONFIG_MAX_KAFKA_PROPS];
    for (size_t i = 0; i < cfg->nkafka; i++) {
        kafka[2 * i] = cfg->kafka[i].key;
        kafka[2 * i + 1] = cfg->kafka[i].value;
    }
    struct sink_options sko = {.brokers = cfg->brokers, .topic_template = cfg->topic,
                               .columns = &r->columns, .id_header = cfg->id_header,
                               .envelope = cfg->envelope, .ce_source = cfg->ce_source,
                               .kafka = kafka, .nkafka = cfg->nkafka};
    if (cfg->delivery == DELIVERY_EXACTLY_ONCE)
        sko.transactional_id = r->eos.txn_id;
    r->sink = sink_new(&sko, relay_on_report, r, err, errlen);
    return r->sink != NULL ? 0 : -1;
}

const char *relay_switch_plugin(const struct relay *r)
{
    return r->switch_plugin;
}

void relay_free(struct relay *r)
{
    if (r == NULL)
        return;
    sink_free(r->sink, 0);
    relay_eos_free(r);
    deadletter_queue_clear(&r->dlq);
    stream_free(r->stream);
    backfill_free(r->backfill);
    dispatch_free(r->dispatch);
    decoder_free(r->decoder);
    tracker_free(r->tracker);
    tracker_free(r->bf_tracker);
    partition_map_free(r->partitions);
    free(r);
}

const struct relay_stats *relay_stats(const struct relay *r)
{
    return &r->stats;
}

/* Sleeps up to seconds while serving delivery reports; returns early on
 * stop. */
static void pause_serving(struct relay *r, double seconds)
{
    double end = mono_now() + seconds;
    while (!*r->stop) {
        double left = end - mono_now();
        if (left <= 0)
            break;
        relay_serve(r, left > 0.2 ? 200 : (int) (left * 1000) + 1);
    }
}

/* Carries out a rewind once nothing is in flight: the final status update,
 * a clean end of the replication connection, a pause (REWIND_MIN, doubled
 * while no rewind in between made progress, capped at --reconnect-max),
 * and relay_run starts replication again from the confirmed position.
 * An authorization refusal that lasts AUTH_GRACE without any progress is
 * permanent: fatal, not poison (the event is not at fault). */
static void rewind_replication(struct relay *r)
{
    lsn_t confirmed = tracker_confirmed(r->tracker);
    double now = mono_now();
    bool progress = confirmed > r->rewind_progress;
    r->rewind_progress = confirmed;
    if (progress || r->rewind_backoff == 0)
        r->rewind_backoff = REWIND_MIN;
    else if ((r->rewind_backoff *= 2) > r->cfg->reconnect_max)
        r->rewind_backoff = r->cfg->reconnect_max;
    if (progress || r->rewind_class != KAFKA_ERR_AUTH)
        r->auth_since = 0;
    if (r->rewind_class == KAFKA_ERR_AUTH && r->auth_since == 0)
        r->auth_since = now;
    if (stream_streaming(r->stream) && relay_send_status(r, now, false) < 0)
        log_warn("%s", stream_errstr(r->stream));
    stream_stop(r->stream, 5000);
    deadletter_queue_clear(&r->dlq);
    r->rewind = false;
    if (r->rewind_class == KAFKA_ERR_AUTH && now - r->auth_since >= AUTH_GRACE) {
        relay_set_fatal(r, "%s; still refused after %.0f s without any delivery getting through: "
                  "a permanent authorization failure, not the event's fault, so it is not "
                  "dead-lettered. The slot stays at " LSN_FMT "; grant the ACL and restart",
                  r->rewind_why, now - r->auth_since, LSN_ARGS(confirmed));
        return;
    }
    log_info("slot=%s lsn=" LSN_FMT ": producing everything after the confirmed position "
             "again in about %.1f s", r->cfg->slot, LSN_ARGS(confirmed), r->rewind_backoff);
    relay_publish_gauges(r, false);
    pause_serving(r, jitter(r->rewind_backoff));
}

/* Stops cleanly: no more reading; wait (bounded) for outstanding deliveries
 * while acking them; tell the server the final confirmed position. */
static void finish(struct relay *r)
{
    relay_eos_end(r); /* exactly-once: what is whole is committed, the rest aborted */
    if (sink_inflight(r->sink) > 0)
        log_info("waiting up to %.0f s for %zu outstanding deliveries",
                 r->cfg->shutdown_timeout, sink_inflight(r->sink));
    /* In steps, so that status updates go on (a flush longer than
     * wal_sender_timeout would otherwise lose the connection and, with it,
     * the final confirmation) and dead letters go out. */
    if (r->fatal)
        deadletter_queue_clear(&r->dlq); /* nothing more is confirmed anyway */
    double end = mono_now() + r->cfg->shutdown_timeout;
    int flushed = -1;
    for (;;) {
        double left = end - mono_now();
        flushed = sink_flush(r->sink, left <= 0 ? 0 : left > 0.2 ? 200 : (int) (left * 1000) + 1);
        relay_serve_dead_letters(r);
        relay_keep_status(r);
        if ((flushed == 0 && deadletter_queue_empty(&r->dlq)) || left <= 0)
            break;
    }
    if (flushed < 0 || !deadletter_queue_empty(&r->dlq))
        log_warn("%zu deliveries still outstanding after %.0f s; their events are not "
                 "confirmed and will be sent again by the next run",
                 sink_inflight(r->sink), r->cfg->shutdown_timeout);
    if (stream_streaming(r->stream)) {
        if (relay_send_status(r, mono_now(), false) < 0)
            log_warn("%s", stream_errstr(r->stream));
        stream_stop(r->stream, 5000);
    }
}

/* What relay_run keeps from one start of replication to the next. */
struct run {
    double backoff;        /* s, the next pause after a failed start */
    bool streamed;         /* a session has started */
    bool backfilled;       /* a resumed backfill has finished */
    bool waiting_logged;   /* the wait for another process is logged */
    double refused_logged; /* monotonic s the plugin's refusal was last logged */
    int exit_code;
};

/* What one step of relay_run leads to. */
enum step { STEP_ON, STEP_AGAIN, STEP_END };

/* Another process holds the slot or the backfill lock: a standby's wait,
 * logged once. */
static void wait_standby(struct relay *r, struct run *run, const char *why)
{
    if (!run->waiting_logged)
        log_info("%s", why);
    run->waiting_logged = true;
    pause_serving(r, jitter(STANDBY_POLL));
}

/* A start failed retriably: pause, twice as long each time up to
 * --reconnect-max. */
static void back_off(struct relay *r, struct run *run, const char *why)
{
    log_warn("%s; retrying in about %.1f s", why, run->backoff);
    pause_serving(r, jitter(run->backoff));
    run->backoff = run->backoff * 2 > r->cfg->reconnect_max ? r->cfg->reconnect_max
                                                             : run->backoff * 2;
}

/* The server refuses the output plugin (STREAM_REFUSED), or the slot
 * cannot be streamed safely after a promotion (STREAM_FAILOVER). Not
 * fatal: a reload of the server's configuration, the old primary's return
 * or an operator cures it, and a relayer that stays up can say why it
 * does not stream. */
static void wait_refused(struct relay *r, struct run *run, int rc)
{
    if (r->metrics && rc == STREAM_FAILOVER)
        metrics_set_failover_refused(r->metrics, stream_errstr(r->stream));
    else if (r->metrics)
        metrics_set_plugin_refused(r->metrics, stream_errstr(r->stream));
    relay_publish_gauges(r, false);
    if (mono_now() - run->refused_logged >= REFUSED_LOG_EVERY) {
        log_error("%s", stream_errstr(r->stream));
        run->refused_logged = mono_now();
    }
    pause_serving(r, jitter(REFUSED_POLL));
}

/* The slot exists and its backfill has not finished: relay_resume_backfill,
 * and what its answer means for the loop (an enum step). */
static int resume_backfill(struct relay *r, struct run *run)
{
    if (relay_eos_on(r)) {
        /* the same reason config.c refuses --backfill pending with it */
        relay_set_fatal(r, "slot=%s has an unfinished backfill: --delivery exactly-once cannot "
                        "keep its guarantee for rows published from a snapshot (no commit "
                        "position a progress record could hold). Finish the backfill with "
                        "--delivery at-least-once, then restart with exactly-once",
                        r->cfg->slot);
        return STEP_END;
    }
    int brc = relay_resume_backfill(r);
    if (brc == BACKFILL_OK) {
        run->backfilled = true;
        run->waiting_logged = false;
        run->backoff = BACKOFF_MIN;
        return STEP_AGAIN;
    }
    relay_publish_gauges(r, false);
    if (brc == BACKFILL_BUSY) {
        wait_standby(r, run, backfill_errstr(r->backfill));
        return STEP_AGAIN;
    }
    if (*r->stop)
        return STEP_END;
    if (brc == BACKFILL_FATAL || r->fatal) {
        relay_set_fatal(r, "%s", backfill_errstr(r->backfill));
        return STEP_END;
    }
    back_off(r, run, backfill_errstr(r->backfill));
    return STEP_AGAIN;
}

/* Starts replication (creating the slot, and backfilling, when it must).
 * Returns STEP_ON once it streams, else STEP_AGAIN after the wait its
 * answer calls for, or STEP_END (fatal, or the other plugin wanted). */
static int start_replication(struct relay *r, struct run *run, lsn_t *slot_confirmed,
                             bool *created)
{
    int rc = stream_start(r->stream, tracker_confirmed(r->tracker), slot_confirmed, created);
    backfill_unlock(r->backfill); /* held from before creating the slot */
    if (rc == STREAM_FATAL) {
        if (!*r->stop) /* a stop during backfill is not an error */
            relay_set_fatal(r, "%s", stream_errstr(r->stream));
        return STEP_END;
    }
    if (rc == STREAM_PLUGIN) {
        log_info("%s: starting over with %s", stream_errstr(r->stream),
                 stream_switch_plugin(r->stream));
        snprintf(r->switch_plugin, sizeof r->switch_plugin, "%s",
                 stream_switch_plugin(r->stream));
        run->exit_code = RELAY_SWITCH_PLUGIN;
        return STEP_END;
    }
    /* A failover refusal (failover.h) waits the same way: the old primary
     * may come back, or an operator acts, and /readyz says why meanwhile. */
    if (rc == STREAM_REFUSED || rc == STREAM_FAILOVER) {
        wait_refused(r, run, rc);
        return STEP_AGAIN;
    }
    if (r->metrics) {
        metrics_set_plugin_refused(r->metrics, NULL);
        metrics_set_failover_refused(r->metrics, NULL);
    }
    if (rc == STREAM_BACKFILL)
        return resume_backfill(r, run);
    if (r->cfg->backfill_pending && !*created && !run->streamed && !run->backfilled &&
        rc == STREAM_OK)
        log_info("slot=%s exists already: --backfill applies only when the slot is created",
                 r->cfg->slot);
    relay_publish_gauges(r, false);
    if (rc == STREAM_BUSY) {
        wait_standby(r, run, stream_errstr(r->stream));
        return STEP_AGAIN;
    }
    if (rc != STREAM_OK) {
        back_off(r, run, stream_errstr(r->stream));
        return STEP_AGAIN;
    }
    return STEP_ON;
}

/* Replication runs: the trackers and the dispatch set up for a session
 * from the slot's confirmed position. */
static void begin_streaming(struct relay *r, struct run *run, bool created, lsn_t slot_confirmed)
{
    const struct relay_config *cfg = r->cfg;
    if (created && r->bf_at_creation)
        log_info("created replication slot %s with %s at " LSN_FMT " after "
                 "backfilling the rows committed before it", cfg->slot,
                 decoder_plugin(r->decoder), LSN_ARGS(slot_confirmed));
    else if (created)
        log_warn("created replication slot %s with %s at " LSN_FMT "; outbox events "
                 "committed before now are not relayed by it",
                 cfg->slot, decoder_plugin(r->decoder), LSN_ARGS(slot_confirmed));
    tracker_reset(r->tracker, slot_confirmed);
    if (r->stats.received_lsn < tracker_confirmed(r->tracker))
        r->stats.received_lsn = tracker_confirmed(r->tracker);
    r->sent_flush = 0;
    log_info("slot=%s lsn=" LSN_FMT ": streaming %s.%s to Kafka (%s, walsender pid %d)",
             cfg->slot, LSN_ARGS(tracker_confirmed(r->tracker)), cfg->table_schema,
             cfg->table_name, decoder_plugin(r->decoder), stream_backend_pid(r->stream));
    backfill_close(r->backfill); /* streaming: no lock left to wait for */
    run->streamed = true;
    run->waiting_logged = false;
    run->backoff = BACKOFF_MIN;
    stream_set_create_slot(r->stream, false);
    r->rewind = false; /* this session starts at the confirmed position anyway */
    dispatch_set_partitioned(r->dispatch, stream_outbox_partitioned(r->stream) &&
                                              !decoder_names_root(r->decoder));
}

/* Connection lost: keep the producer, let in-flight deliveries finish so
 * their positions can be confirmed after reconnecting. An enum step. */
static int reconnect(struct relay *r, struct run *run)
{
    log_warn("%s; reconnecting (%zu deliveries in flight)", stream_errstr(r->stream),
             sink_inflight(r->sink));
    relay_eos_end(r); /* a transaction read in part comes again whole: abort it */
    stream_close(r->stream);
    r->stats.reconnects++;
    if (r->metrics)
        metrics_reconnected(r->metrics);
    relay_publish_gauges(r, false);
    sink_flush(r->sink, 5000);
    if (r->fatal)
        return STEP_END;
    pause_serving(r, jitter(run->backoff));
    return STEP_AGAIN;
}

/* Exactly-once, fenced: another replica initialised a producer with our
 * transactional.id, so it holds (or just took) the slot. This one gives the
 * slot up, drops its fenced producer for a new one (initialised only once
 * it holds the slot again) and waits as a standby, never a crash loop. */
static int stand_by_fenced(struct relay *r, struct run *run)
{
    stream_stop(r->stream, 2000);
    stream_close(r->stream);
    if (renew_fenced_sink(r) < 0)
        return STEP_END;
    wait_standby(r, run, "exactly-once: fenced by another replica of this slot; standing by");
    return STEP_AGAIN;
}

/* A fenced producer is done for: a new one replaces it (initialised only
 * once this process holds the slot again, relay_eos_prepare). Wherever the
 * fencing was found (a session, a reconnect's commit), before the next
 * start. 0, or -1 (fatal set). */
static int renew_fenced_sink(struct relay *r)
{
    char err[RELAY_ERRLEN];
    if (!relay_eos_on(r) || !r->eos.fenced || !sink_fatal(r->sink))
        return 0;
    sink_free(r->sink, 0);
    r->sink = NULL;
    r->eos.nheld = 0;
    r->stats.fenced++;
    if (make_sink(r, err, sizeof err) < 0) {
        relay_set_fatal(r, "%s", err);
        return -1;
    }
    relay_publish_gauges(r, false);
    if (r->metrics)
        metrics_set_delivery_waiting(r->metrics, "fenced");
    return 0;
}

/* Exactly-once, once connected: the transactional.id of this slot on this
 * server (progress_transactional_id: with the system identifier, so that a
 * slot of the same name on another cluster relaying to the same Kafka never
 * fences this one, nor this one it), unless -X transactional.id gave one.
 * Until the first connection the sink was made with the slot's name alone;
 * its producer never talked to a coordinator (that is relay_eos_prepare's,
 * later in the session), so it is replaced by one with the new id at no
 * cost. Again only if the server is another cluster. 0, or -1 (fatal set). */
static int adopt_txn_id(struct relay *r)
{
    if (!relay_eos_on(r) || config_kafka_get(r->cfg, "transactional.id") != NULL)
        return 0;
    char id[sizeof r->eos.txn_id], err[RELAY_ERRLEN];
    if (progress_transactional_id(stream_system_id(r->stream), r->cfg->slot, id, sizeof id) < 0 ||
        strcmp(id, r->eos.txn_id) == 0)
        return 0;
    if (r->eos.inited)
        log_warn("slot=%s: the server is another PostgreSQL cluster (system identifier %s); "
                 "the Kafka producer is replaced by one with transactional.id %s",
                 r->cfg->slot, stream_system_id(r->stream), id);
    snprintf(r->eos.txn_id, sizeof r->eos.txn_id, "%s", id);
    sink_free(r->sink, 0);
    r->sink = NULL;
    r->eos.nheld = 0;
    r->eos.inited = false;
    r->eos.ready = false;
    if (make_sink(r, err, sizeof err) < 0) {
        relay_set_fatal(r, "%s", err);
        return -1;
    }
    relay_publish_gauges(r, false);
    return 0;
}

/* Exactly-once, once replication runs: the producer initialised and the
 * slot's progress read (relay_eos_prepare). An enum step; STEP_ON to
 * stream. */
static int prepare_eos(struct relay *r, struct run *run, lsn_t started_at)
{
    char err[RELAY_ERRLEN];
    int rc = relay_eos_prepare(r, started_at, err, sizeof err);
    if (rc == 0)
        return STEP_ON;
    stream_stop(r->stream, 5000);
    if (rc == 1)
        return STEP_AGAIN; /* from the progress, at once */
    if (rc == -1) {
        relay_set_fatal(r, "%s", err);
        return STEP_END;
    }
    back_off(r, run, err);
    return STEP_AGAIN;
}

/* What relay_session()'s answer rc means for the loop: an enum step. */
static int end_session(struct relay *r, struct run *run, int rc)
{
    sink_set_lazy(r->sink, false);
    if (rc == SESSION_STOP)
        return STEP_END;
    if (rc == SESSION_REWIND) {
        rewind_replication(r);
        return r->fatal ? STEP_END : STEP_AGAIN;
    }
    if (rc == SESSION_FENCED)
        return stand_by_fenced(r, run);
    if (rc == STREAM_FATAL) {
        if (!r->fatal)
            relay_set_fatal(r, "%s", stream_errstr(r->stream));
        return STEP_END;
    }
    return reconnect(r, run);
}

int relay_run(struct relay *r)
{
    struct run run = {.backoff = BACKOFF_MIN, .refused_logged = -1e9};
    srand((unsigned) time(NULL) ^ (unsigned) getpid());
    while (!*r->stop) {
        lsn_t slot_confirmed = 0;
        bool created = false;
        if (renew_fenced_sink(r) < 0)
            break;
        int step = start_replication(r, &run, &slot_confirmed, &created);
        if (step == STEP_ON && adopt_txn_id(r) < 0)
            break;
        if (step == STEP_ON) {
            begin_streaming(r, &run, created, slot_confirmed);
            if (relay_eos_on(r))
                step = prepare_eos(r, &run, tracker_confirmed(r->tracker));
        }
        if (step == STEP_ON)
            step = end_session(r, &run, relay_session(r));
        if (step == STEP_END)
            break;
    }

    if (r->fatal) {
        log_error("%s", r->errstr);
        run.exit_code = 1;
    }
    finish(r);
    if (run.exit_code == RELAY_SWITCH_PLUGIN)
        return run.exit_code;
    log_info("slot=%s lsn=" LSN_FMT ": stopped (%llu events delivered)", r->cfg->slot,
             LSN_ARGS(tracker_confirmed(r->tracker)),
             (unsigned long long) r->stats.events_delivered);
    return run.exit_code;
}
