/*
 * relay_sink.c — the relay's side of the Kafka sink (see relay_internal.h):
 * producing with a full librdkafka queue waited out, doing what
 * report_judge (report_judge.h) makes of each delivery report and of each
 * refused produce (an ack, a rewind, a backfill retry, a dead letter, a
 * halt), and sending dead letters (deadletter.h) from the loop. Calls down
 * to relay_state.c only.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_internal.h"

#include "outbox_relay/kafka/event_headers.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/core/deadletter_judge.h"
#include "outbox_relay/core/report_judge.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"
#include "outbox_relay/core/tracker.h"

/* Why an event refused with its batch is not judged yet (REPORT_ISOLATE). */
#define ISOLATE_WHY                                                                              \
    "with other events in the same request: a broker refuses the whole batch for one "        \
    "record's size, so this event may be innocent"

/* Asks for a rewind (see relay.c); the first cause is kept. */
__attribute__((format(printf, 3, 4)))
static void request_rewind(struct relay *r, enum kafka_err_class cls, const char *fmt, ...)
{
    if (r->rewind)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->rewind_why, sizeof r->rewind_why, fmt, ap);
    va_end(ap);
    r->rewind = true;
    r->rewind_class = cls;
    r->stats.rewinds++;
    /* A batch refused for one record rewinds too (REPORT_ISOLATE). */
    const char *reason = cls == KAFKA_ERR_POISON ? "batch_refused" : kafka_err_class_name(cls);
    if (r->metrics) {
        metrics_delivery_retried(r->metrics, reason);
        metrics_set_delivery_waiting(r->metrics, reason);
    }
    log_warn("%s; nothing past it is confirmed: once the %zu deliveries in flight have "
             "reported, everything after slot position " LSN_FMT " is produced again, in "
             "commit order (%s)", r->rewind_why, sink_inflight(r->sink),
             LSN_ARGS(tracker_confirmed(r->tracker)),
             cls == KAFKA_ERR_TOPIC_WAIT ? "waiting for the topic to exist; create it or "
                                           "enable auto-creation"
             : cls == KAFKA_ERR_AUTH ? "waiting for the authorization; grant the ACL"
             : cls == KAFKA_ERR_POISON
                 ? "one at a time up to this event, so that only an event the broker refuses "
                   "by itself is taken for poison"
                 : "a retriable broker error");
}

/* Sends a poison event to the dead-letter topic under the same token, so
 * that its delivery report acks the original event. Returns 0, 1 when it
 * cannot be produced now but later can (a rewind was asked for), or -1. */
static int dead_letter(struct relay *r, uint64_t token, lsn_t event_lsn, const char *event_id,
                       const char *type, const char *topic, const char *key, size_t key_len,
                       const char *value, size_t value_len, const char *error)
{
    struct deadletter_msg m;
    deadletter_build(&m, event_lsn, event_id, type, topic, key, key_len, value, value_len, error,
                     sink_max_message_bytes(r->sink));
    int rc = SINK_FULL;
    if (relay_eos_on(r) && relay_eos_begin(r) < 0)
        return r->eos.fenced ? 1 : -1; /* in the same transaction as its neighbours, or not
                                          at all */
    while (rc == SINK_FULL && !*r->stop) {
        rc = deadletter_produce(r->sink, r->cfg->dead_letter_topic, &m, token);
        if (rc == SINK_FULL) {
            sink_poll(r->sink, 100);
            relay_keep_status(r);
        }
    }
    if (rc == SINK_RETRY && !is_backfill(token)) {
        request_rewind(r, sink_err_class(r->sink),
                       "event_id=%s type=%s lsn=%s: cannot produce its dead letter to %s now: %s",
                       event_id, type, m.lsn, r->cfg->dead_letter_topic, sink_errstr(r->sink));
        return 1;
    }
    if (rc != SINK_OK && relay_eos_on(r) && sink_fenced(r->sink)) {
        relay_eos_check_fenced(r); /* standby (relay.c), not a failed dead letter */
        return 1;
    }
    if (rc != SINK_OK)
        return -1;
    r->stats.dead_lettered++;
    if (r->metrics)
        metrics_dead_lettered(r->metrics);
    log_warn("event_id=%s type=%s lsn=%s: poison event; producing it to dead-letter topic %s: %s",
             event_id, type, m.lsn, r->cfg->dead_letter_topic, error);
    return 0;
}

/* ev's dead letter (dead_letter), topic the one it was meant for. */
static int dead_letter_event(struct relay *r, uint64_t token, lsn_t lsn,
                             const struct outbox_event *ev, const char *topic, const char *value,
                             size_t value_len, const char *why)
{
    char *type = strndup(ev->type != NULL ? ev->type : "", ev->type_len);
    int rc = type != NULL ? dead_letter(r, token, lsn, ev->event_id, type, topic, ev->aggregate_id,
                                        ev->aggregate_id_len, value, value_len, why)
                          : -1;
    free(type);
    return rc;
}

/* No topic: the change never got as far as one. */
int relay_dead_letter_change(void *ctx, uint64_t token, lsn_t lsn, const struct outbox_event *ev,
                             const char *value, size_t value_len, const char *why)
{
    return dead_letter_event(ctx, token, lsn, ev, "", value, value_len, why);
}

/* Sends the queued dead letters. A job whose token is no longer live (a
 * rewind or reconnect since: the event comes again from the server) or
 * that arrives while a rewind is pending is dropped, not sent: the event is
 * produced again anyway. Backfill's jobs (is_backfill) always go out. */
void relay_serve_dead_letters(struct relay *r)
{
    struct deadletter_job *j;
    while (!r->fatal && (j = deadletter_queue_pop(&r->dlq)) != NULL) {
        bool live = is_backfill(j->token) || (tracker_token_live(r->tracker, j->token) && !r->rewind);
        if (live && dead_letter(r, j->token, j->lsn, j->event_id, j->type, j->topic, j->key,
                                j->key_len, j->value, j->value_len, j->error) < 0)
            relay_set_fatal(r,
                            "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT
                            ": %s; its dead letter cannot be produced to %s either: %s; the "
                            "slot stays at " LSN_FMT " and nothing after this event is "
                            "confirmed. Fix the cause and restart", j->event_id, j->type,
                            j->topic, LSN_ARGS(j->lsn), j->error, r->cfg->dead_letter_topic,
                            sink_errstr(r->sink), LSN_ARGS(tracker_confirmed(r->tracker)));
        deadletter_job_free(j);
    }
}

int relay_serve(struct relay *r, int timeout_ms)
{
    int n = sink_poll(r->sink, timeout_ms);
    relay_serve_dead_letters(r);
    return n;
}

/* The position to name for a reported event: its transaction's commit
 * end once that is known, else (the transaction is still being read) the
 * position reached inside it. */
static lsn_t report_lsn(const struct relay *r, uint64_t token)
{
    lsn_t lsn = tracker_token_lsn(r->tracker, token);
    return lsn ? lsn : r->stats.received_lsn;
}

/* Counts a delivery: when the broker's answer came in, not when the report
 * is served (served lazily, that can be later). */
static void count_delivered(struct relay *r, uint64_t token, const struct sink_report *rep)
{
    r->stats.events_delivered++;
    if (r->metrics == NULL)
        return;
    int64_t stamp = tracker_token_stamp(r->tracker, token);
    int64_t acked = rep->acked_unix_us ? rep->acked_unix_us : wall_now_us();
    metrics_event_delivered(r->metrics, rep->topic, stamp ? (double) (acked - stamp) / 1e6 : -1,
                            rep->ack_latency_us >= 0 ? (double) rep->ack_latency_us / 1e6 : -1);
}

/* --delivery exactly-once: a delivered event's token waits for its Kafka
 * transaction's commit (relay_eos.c); a failed delivery dooms the
 * transaction, which is aborted and produced again from the confirmed
 * position, except a record the broker refuses by itself (poison): sent
 * again it would be refused again, and sending it to the dead-letter topic
 * instead would take a second decision for an event of a transaction
 * already aborted, so the relayer stops with the reason. Reports of tokens
 * from before the abort (purged, or delivered into the aborted
 * transaction) are stale. */
static void on_report_eos(struct relay *r, uint64_t token, const struct sink_report *rep)
{
    bool progress = token == PROGRESS_TOKEN;
    if (rep->err == 0) {
        if (!progress && tracker_token_live(r->tracker, token)) {
            count_delivered(r, token, rep);
            relay_eos_hold(r, token);
        }
        return;
    }
    if (!progress && !tracker_token_live(r->tracker, token))
        return; /* stale: produced again since */
    r->stats.delivery_errors++;
    if (r->metrics)
        metrics_delivery_error(r->metrics);
    if (rep->poison) {
        relay_set_fatal(r, "delivery failed for event_id=%s type=%s topic=%s: %s; with "
                        "--delivery exactly-once a record the broker refuses aborts its "
                        "transaction and cannot be dead-lettered after the fact. The slot stays "
                        "at " LSN_FMT "; fix the record or the topic's limits and restart",
                        rep->event_id, rep->event_type, rep->topic, rep->errstr,
                        LSN_ARGS(tracker_confirmed(r->tracker)));
        return;
    }
    if (!r->rewind) {
        snprintf(r->rewind_why, sizeof r->rewind_why,
                 "delivery failed for %s%s topic=%s: %s (%s)", progress ? "the progress record" :
                 "event_id=", progress ? "" : rep->event_id, rep->topic, rep->errstr,
                 kafka_err_class_name(rep->cls));
        r->eos.abort_pending = true;
    }
}

/* Gathers the facts of one report, asks report_judge, and does what the
 * verdict says; nothing here decides. A backfilled row's token is split
 * off first: it is tracked, without its bit, by the backfill's tracker. */
void relay_on_report(void *ctx, uint64_t token, const struct sink_report *rep)
{
    struct relay *r = ctx;
    if (relay_eos_on(r)) {
        on_report_eos(r, token, rep);
        return;
    }
    bool backfill = is_backfill(token);
    struct tracker *t = backfill ? r->bf_tracker : r->tracker;
    uint64_t tt = backfill ? token & ~BACKFILL_TOKEN : token;
    /* Nothing else in flight: a batch-mate would still be (all of a
     * batch's reports are served one after the other). */
    bool alone = rep->err != 0 && sink_inflight(r->sink) == 0;
    struct report_facts f = {
        .delivered = rep->err == 0,
        .backfill = backfill,
        .live = rep->err == 0 || tracker_token_live(t, tt),
        .waits = kafka_err_waits(rep->cls),
        .poison = rep->poison,
        .dead_letter_policy = r->cfg->on_poison == POISON_DEAD_LETTER,
        /* A backfill run that is stopping sends its unacknowledged rows
         * again when resumed, as a rewind does the streamed events (the
         * last report of a refused batch comes alone, and must not be
         * judged on its own refusal). */
        .rewinding = r->rewind || (backfill && r->bf_retry),
        .to_dead_letter_topic = r->cfg->dead_letter_topic != NULL &&
                                strcmp(rep->topic, r->cfg->dead_letter_topic) == 0,
        .shared = kafka_err_batch_refusal(rep->err) && !alone,
    };
    enum report_verdict v = report_judge(&f);
    if (v == REPORT_ACK) {
        count_delivered(r, token, rep);
        tracker_ack(t, tt);
        return;
    }
    r->stats.delivery_errors++;
    if (r->metrics)
        metrics_delivery_error(r->metrics);
    lsn_t lsn = v == REPORT_STALE                         ? 0
                : alone && !backfill && relay_isolating(r) ? r->last_produced_lsn
                                                           : report_lsn(r, token);
    switch (v) {
    case REPORT_ACK:
    case REPORT_SKIP: /* produced again after the rewind, and judged then */
        return;
    case REPORT_STALE:
        log_debug("event_id=%s topic=%s: delivery failed (%s) for an earlier round; produced "
                  "again since", rep->event_id, rep->topic, rep->errstr);
        return;
    case REPORT_BACKFILL_RETRY:
        /* The backfill run stops (relay_backfill.c) and is resumed after a
         * backoff from its last acknowledged batch; the slot is not
         * streamed meanwhile. */
        if (!r->bf_retry)
            log_warn("slot=%s: backfill: delivery failed for event_id=%s topic=%s: %s (%s); "
                     "the backfill is resumed from its last acknowledged rows", r->cfg->slot,
                     rep->event_id, rep->topic, rep->errstr, kafka_err_class_name(rep->cls));
        r->bf_retry = true;
        return;
    case REPORT_REWIND:
        request_rewind(r, rep->cls,
                       "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT
                       ": %s (%s)", rep->event_id, rep->event_type, rep->topic, LSN_ARGS(lsn),
                       rep->errstr, kafka_err_class_name(rep->cls));
        return;
    case REPORT_BACKFILL_ISOLATE:
        /* Every report of the refused batch comes here; the first one of
         * the run (bf_retry still clear) names the row to isolate up to. */
        if (!r->bf_retry) {
            r->bf_isolating = true;
            r->bf_isolate_row = 0;
            snprintf(r->bf_isolate_id, sizeof r->bf_isolate_id, "%s", r->bf_last_id);
            log_warn("slot=%s: backfill: delivery failed for event_id=%s topic=%s: %s, with "
                     "other rows in the same request: a broker refuses the whole batch for one "
                     "record's size, so this row may be innocent; the backfill is resumed from "
                     "its last acknowledged rows, one row at a time up to id=%s", r->cfg->slot,
                     rep->event_id, rep->topic, rep->errstr, r->bf_isolate_id);
        }
        r->bf_retry = true;
        return;
    case REPORT_ISOLATE:
        /* A rewind already pending (another failure came first) keeps its
         * cause; the isolation is logged on its own then. */
        if (r->rewind && lsn > r->isolate_until)
            log_warn("delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT ": %s, "
                     "%s; the rewind under way produces everything up to it one event at a "
                     "time", rep->event_id, rep->event_type, rep->topic, LSN_ARGS(lsn),
                     rep->errstr, f.shared ? ISOLATE_WHY
                                           : "while a rewind was pending: judged once it "
                                             "is produced alone");
        if (lsn > r->isolate_until)
            r->isolate_until = lsn;
        request_rewind(r, KAFKA_ERR_POISON,
                       "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT
                       ": %s, " ISOLATE_WHY, rep->event_id, rep->event_type, rep->topic,
                       LSN_ARGS(lsn), rep->errstr);
        return;
    case REPORT_DEAD_LETTER:
        if (deadletter_queue_push(&r->dlq, token, lsn, rep) == 0)
            return; /* sent by the loop (relay_serve_dead_letters) */
        break;      /* out of memory: halting is all that is left */
    case REPORT_HALT:
        break;
    }
    relay_set_fatal(r,
                    "delivery failed for event_id=%s type=%s topic=%s lsn=" LSN_FMT ": %s; the "
                    "slot stays at " LSN_FMT " and nothing after this event is confirmed. %s",
                    rep->event_id, rep->event_type, rep->topic, LSN_ARGS(lsn), rep->errstr,
                    LSN_ARGS(tracker_confirmed(r->tracker)), report_halt_advice(&f));
}

/* The default ce_source names the database the stream is connected to:
 * known once it is, before any event (backfilled ones included). */
static void set_ce_source(struct relay *r)
{
    const char *db = stream_database(r->stream);
    char src[512];
    if (db != NULL && event_headers_default_source(db, r->cfg->table_schema, r->cfg->table_name,
                                                   src, sizeof src) > 0)
        sink_set_ce_source(r->sink, src);
}

/* Produces one event, waiting out a full librdkafka queue (serving reports
 * and sending status updates meanwhile). A refusal is judged as its failed
 * delivery report would be (report_judge): poison events are dead-lettered
 * or halt the relay, by policy; events that cannot be produced now (topic
 * unknown or unauthorized as far as the metadata says) start a rewind, or
 * stop a backfill run to be resumed. Returns 0 when the sink took the
 * event, 1 when it did not (dealt with here: stopping, a rewind, a
 * backfill retry, a dead letter, a fatal error). */
int relay_produce(void *ctx, const struct outbox_event *ev, uint64_t token)
{
    struct relay *r = ctx;
    int rc = SINK_FULL;
    if (sink_needs_ce_source(r->sink))
        set_ce_source(r);
    if (relay_eos_on(r) && relay_eos_begin(r) < 0)
        return 1; /* fenced or fatal: the session ends */
    /* A rewind or a halt decided by a report served while waiting ends the
     * wait: the event, not produced, is not confirmed, and the rewind
     * produces it again after the events before it. Produced now, it could
     * reach Kafka ahead of an earlier event of its aggregate that the
     * rewind sends again. */
    while (rc == SINK_FULL && !*r->stop && !r->fatal &&
           !(is_backfill(token) ? r->bf_retry : r->rewind)) {
        rc = sink_produce(r->sink, ev, token);
        if (rc == SINK_FULL) {
            sink_poll(r->sink, 100);
            relay_keep_status(r);
        }
    }
    if (rc == SINK_OK) {
        if (relay_eos_on(r))
            relay_eos_produced(r);
        r->last_produced_lsn = ev->lsn;
        r->stats.events_produced++;
        if (r->metrics)
            metrics_event_produced(r->metrics, sink_last_topic(r->sink));
        return 0;
    }
    if (rc == SINK_FULL)
        return 1; /* stopping, or a rewind: unconfirmed, so it is sent again */
    if (relay_eos_on(r) && sink_fenced(r->sink)) {
        relay_eos_check_fenced(r); /* the session ends: standby, not a fatal error */
        return 1;
    }
    struct report_facts f = {.backfill = is_backfill(token), .live = true,
                             .waits = rc == SINK_RETRY, .poison = rc == SINK_POISON,
                             .dead_letter_policy = r->cfg->on_poison == POISON_DEAD_LETTER,
                             .rewinding = r->rewind};
    switch (report_judge(&f)) {
    case REPORT_BACKFILL_RETRY:
        if (!r->bf_retry)
            log_warn("slot=%s: backfill: cannot produce row id=%s now: %s (%s); the backfill "
                     "is resumed from its last acknowledged rows", r->cfg->slot, ev->event_id,
                     sink_errstr(r->sink), kafka_err_class_name(sink_err_class(r->sink)));
        r->bf_retry = true;
        return 1;
    case REPORT_REWIND:
        request_rewind(r, sink_err_class(r->sink), "slot=%s lsn=" LSN_FMT ": cannot produce "
                       "now: %s (%s)", r->cfg->slot, LSN_ARGS(ev->lsn), sink_errstr(r->sink),
                       kafka_err_class_name(sink_err_class(r->sink)));
        return 1; /* its group waits for an ack that never comes: not confirmed */
    case REPORT_SKIP:
        return 1; /* produced again after the rewind, and judged then */
    case REPORT_DEAD_LETTER:
        if (dead_letter_event(r, token, ev->lsn, ev, sink_last_topic(r->sink), ev->payload,
                              ev->payload_len, sink_errstr(r->sink)) >= 0)
            return 1;
        break;
    case REPORT_ACK:
    case REPORT_STALE:   /* neither comes of a refusal */
    case REPORT_BACKFILL_ISOLATE:
    case REPORT_ISOLATE: /* a refused produce is this message's own (not shared) */
    case REPORT_HALT:
        break;
    }
    relay_set_fatal(r, "slot=%s lsn=" LSN_FMT ": cannot produce: %s; nothing from here on is "
                    "confirmed", r->cfg->slot, LSN_ARGS(ev->lsn), sink_errstr(r->sink));
    return 1;
}
