/*
 * relay_eos.c — the relay's side of --delivery exactly-once (see
 * relay_internal.h and docs/how-it-works.md, "Exactly-once").
 *
 * A Kafka transaction is begun lazily by the first event produced after the
 * last one ended, holds whole PostgreSQL transactions in commit order, and
 * is committed at a PostgreSQL commit (never inside a transaction) once it
 * holds --transaction-max-events events or has been open
 * --transaction-max-ms, with the progress record (progress_record.h: the
 * commit end of the last PostgreSQL transaction read) produced into it
 * last. Delivery reports inside it do not ack the tracker: their tokens are
 * held here and acked only once the commit succeeded, so the tracker, and
 * with it the slot, moves only past what Kafka committed.
 *
 * Failures: an abortable one aborts (the held tokens are dropped, never
 * acked) and asks for a rewind, so replication starts again from the
 * confirmed position, which is at or after the last committed progress;
 * fencing marks the relay fenced, and relay.c stands it by; anything else
 * fatal stops the relayer.
 *
 * On start (relay_eos_prepare), once replication runs, so this process
 * holds the slot: the progress topic is made or checked, the producer
 * initialised (fencing older ones, aborting what they left open), and the
 * slot's last committed progress read; when it is past where replication
 * started, relay.c starts again from it, and the server skips every
 * transaction whose commit ends at or before it (progress_start_lsn).
 *
 * Calls down to relay_state.c only.
 */
#include "relay_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/core/progress_record.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/kafka/progress_store.h"
#include "outbox_relay/kafka/sink.h"
#include "outbox_relay/pg/stream.h"

/* Each blocking call of the transactional producer is bounded well under
 * a walsender's timeout (wal_sender_timeout, 60 s by default, 10 s in the
 * tests): a call that times out retriably is made again after a status
 * update, so a slow coordinator (one being elected after its broker died)
 * never costs the replication connection. */
#define TXN_INIT_MS 2000    /* init_transactions' bound per try */
#define TXN_INIT_TRIES 30
#define TXN_END_MS 1000     /* commit's and abort's bound per try */
#define PROGRESS_READ_MS 8000

bool relay_eos_on(const struct relay *r)
{
    return r->cfg->delivery == DELIVERY_EXACTLY_ONCE;
}

void relay_eos_hold(struct relay *r, uint64_t token)
{
    struct relay_eos *e = &r->eos;
    if (e->nheld > 0 && e->held[e->nheld - 1].token == token) {
        e->held[e->nheld - 1].n++;
        return;
    }
    if (e->nheld == e->capheld) {
        size_t cap = e->capheld ? 2 * e->capheld : 256;
        struct eos_held *h = realloc(e->held, cap * sizeof *h);
        if (h == NULL) {
            relay_set_fatal(r, "out of memory holding delivery reports for the Kafka commit");
            return;
        }
        e->held = h;
        e->capheld = cap;
    }
    e->held[e->nheld++] = (struct eos_held){.token = token, .n = 1};
}

void relay_eos_free(struct relay *r)
{
    free(r->eos.held);
    r->eos.held = NULL;
    r->eos.nheld = r->eos.capheld = 0;
}

/* Fenced: this replica stops producing; relay.c stands it by. */
static void fenced(struct relay *r, const char *why)
{
    if (!r->eos.fenced)
        log_error("slot=%s: %s; this relayer stops producing and stands by until it can "
                  "take the slot again (another replica holds it now)", r->cfg->slot, why);
    r->eos.fenced = true;
    r->eos.ready = false;
    r->eos.inited = false; /* a new producer comes (relay.c) */
    r->eos.nheld = 0;
    if (r->metrics)
        metrics_set_delivery_waiting(r->metrics, "fenced");
}

/* Asks for a rewind after an abort: replication starts again from the
 * confirmed position (relay.c). */
static void rewind_after_abort(struct relay *r, const char *why)
{
    if (r->rewind)
        return;
    snprintf(r->rewind_why, sizeof r->rewind_why, "%s", why);
    r->rewind = true;
    r->rewind_class = KAFKA_ERR_RETRIABLE;
    r->stats.rewinds++;
    if (r->metrics)
        metrics_delivery_retried(r->metrics, "transaction_aborted");
    log_warn("slot=%s: %s; the Kafka transaction is aborted and everything after slot position "
             LSN_FMT " (committed progress " LSN_FMT ") is produced again", r->cfg->slot, why,
             LSN_ARGS(tracker_confirmed(r->tracker)), LSN_ARGS(r->eos.progress));
}

/* A commit or abort retried for long says so every TXN_SAY_EVERY s: the
 * loop reads no WAL meanwhile and the slot does not move, which must not
 * look like an idle relayer (CI: a relayer confirmed nothing for two
 * minutes with nothing in its log). */
#define TXN_SAY_EVERY 10.0
static void say_waiting(struct relay *r, const char *what, double t0, double *said)
{
    double now = mono_now();
    if (now - *said < TXN_SAY_EVERY)
        return;
    *said = now;
    log_warn("slot=%s: the Kafka transaction's %s has been retried for %.0f s (%s); nothing "
             "past " LSN_FMT " is confirmed meanwhile", r->cfg->slot, what, now - t0,
             sink_errstr(r->sink), LSN_ARGS(tracker_confirmed(r->tracker)));
}

/* Test hooks, from the environment, for the integration tests only
 * (docs/testing.md): OUTBOX_RELAY_TEST_EOS="delay-commit=MS" sleeps MS
 * before each Kafka commit, the loop blocked as by a slow coordinator;
 * "pause-after-commit=MS" sleeps MS after each commit succeeded and
 * before its events are acknowledged to the tracker (so before the slot
 * is confirmed), after a warning the test waits for: a SIGKILL then lands
 * exactly between the two. Both may be given, comma-separated. */
static void test_hooks_read(struct relay *r)
{
    const char *env = getenv("OUTBOX_RELAY_TEST_EOS");
    r->eos.test_read = true;
    for (const char *p = env; p != NULL && *p;) {
        long v;
        if (sscanf(p, "delay-commit=%ld", &v) == 1)
            r->eos.test_delay_ms = v;
        else if (sscanf(p, "pause-after-commit=%ld", &v) == 1)
            r->eos.test_pause_ms = v;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (r->eos.test_delay_ms > 0 || r->eos.test_pause_ms > 0)
        log_warn("slot=%s: test hooks on (OUTBOX_RELAY_TEST_EOS=%s): never in production",
                 r->cfg->slot, env);
}

static void test_sleep(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void test_delay_commit(struct relay *r)
{
    if (!r->eos.test_read)
        test_hooks_read(r);
    if (r->eos.test_delay_ms > 0)
        test_sleep(r->eos.test_delay_ms);
}

static void test_pause_after_commit(struct relay *r, lsn_t lsn)
{
    if (r->eos.test_pause_ms <= 0)
        return;
    log_warn("slot=%s lsn=" LSN_FMT ": test hook: Kafka committed, the slot not confirmed yet; "
             "pausing %ld ms", r->cfg->slot, LSN_ARGS(lsn), r->eos.test_pause_ms);
    test_sleep(r->eos.test_pause_ms);
}

/* What a verdict other than OK and RETRY means. */
static void failed(struct relay *r, int v)
{
    if (v == KAFKA_TXN_FENCED)
        fenced(r, sink_errstr(r->sink));
    else if (v == KAFKA_TXN_FATAL)
        relay_set_fatal(r, "slot=%s: %s; nothing past " LSN_FMT " is confirmed", r->cfg->slot,
                        sink_errstr(r->sink), LSN_ARGS(tracker_confirmed(r->tracker)));
}

int relay_eos_abort(struct relay *r, const char *why)
{
    r->eos.abort_pending = false;
    r->eos.nheld = 0; /* never acked: their transactions are produced again */
    r->eos.batch_events = 0;
    if (!sink_txn_open(r->sink))
        return 0;
    int v;
    double t0 = mono_now(), said = t0;
    while ((v = sink_txn_abort(r->sink, TXN_END_MS)) == KAFKA_TXN_RETRY && !*r->stop) {
        relay_keep_status(r);
        say_waiting(r, "abort", t0, &said);
    }
    if (v != KAFKA_TXN_OK && v != KAFKA_TXN_RETRY) {
        failed(r, v == KAFKA_TXN_ABORT ? KAFKA_TXN_FATAL : v);
        return -1;
    }
    r->eos.nheld = 0;
    r->eos.said_open = 0;
    if (why != NULL)
        rewind_after_abort(r, why);
    relay_keep_status(r);
    return 0;
}

int relay_eos_begin(struct relay *r)
{
    if (sink_txn_open(r->sink))
        return 0;
    if (r->eos.fenced || !r->eos.ready) {
        if (!r->eos.fenced)
            relay_set_fatal(r, "slot=%s: producing before the transactional producer was "
                            "initialised", r->cfg->slot);
        return -1;
    }
    int v = sink_txn_begin(r->sink);
    if (v != KAFKA_TXN_OK) {
        failed(r, v == KAFKA_TXN_ABORT || v == KAFKA_TXN_RETRY ? KAFKA_TXN_FATAL : v);
        return -1;
    }
    r->eos.batch_events = 0;
    r->eos.batch_since = mono_now();
    r->eos.said_open = 0;
    r->eos.nheld = 0;
    return 0;
}

void relay_eos_produced(struct relay *r)
{
    r->eos.batch_events++;
}

/* The progress record for everything read so far, into the open
 * transaction. Returns 0, or -1 with the transaction to be aborted. */
static int produce_progress(struct relay *r, lsn_t lsn)
{
    struct progress_record rec = {.version = PROGRESS_RECORD_VERSION, .lsn = lsn,
                                  .committed_at_ms = wall_now_us() / 1000};
    snprintf(rec.slot, sizeof rec.slot, "%s", r->cfg->slot);
    const char *sysid = stream_system_id(r->stream);
    snprintf(rec.system_id, sizeof rec.system_id, "%s", sysid ? sysid : "");
    const char *db = stream_database(r->stream);
    snprintf(rec.database, sizeof rec.database, "%s", db ? db : "");
    snprintf(rec.transactional_id, sizeof rec.transactional_id, "%s", r->eos.txn_id);
    char value[PROGRESS_VALUE_MAX];
    int n = progress_record_format(&rec, value, sizeof value);
    if (n < 0) {
        relay_set_fatal(r, "slot=%s: cannot write its progress record", r->cfg->slot);
        return -1;
    }
    int rc = SINK_FULL;
    while (rc == SINK_FULL && !*r->stop) {
        rc = sink_produce_raw_to(r->sink, r->cfg->progress_topic, r->eos.partition,
                                 r->eos.key, strlen(r->eos.key), value, (size_t) n, NULL, 0,
                                 PROGRESS_TOKEN);
        if (rc == SINK_FULL) {
            sink_poll(r->sink, 100);
            relay_keep_status(r);
        }
    }
    return rc == SINK_OK ? 0 : -1;
}

int relay_eos_commit(struct relay *r)
{
    if (!sink_txn_open(r->sink))
        return 0;
    if (r->eos.abort_pending) {
        char why[RELAY_ERRLEN];
        snprintf(why, sizeof why, "%s", r->rewind_why);
        return relay_eos_abort(r, why);
    }
    lsn_t lsn = r->eos.last_commit;
    if (produce_progress(r, lsn) < 0) {
        char why[RELAY_ERRLEN];
        snprintf(why, sizeof why, "cannot produce the progress record to %s: %s",
                 r->cfg->progress_topic, sink_errstr(r->sink));
        return relay_eos_abort(r, why);
    }
    test_delay_commit(r);
    int v;
    double t0 = mono_now(), said = t0;
    while ((v = sink_txn_commit(r->sink, TXN_END_MS)) == KAFKA_TXN_RETRY && !*r->stop) {
        relay_keep_status(r);
        say_waiting(r, "commit", t0, &said);
    }
    double took = mono_now() - t0;
    if (v == KAFKA_TXN_RETRY) { /* stopping */
        return relay_eos_abort(r, NULL);
    }
    if (v == KAFKA_TXN_ABORT) {
        char why[RELAY_ERRLEN];
        snprintf(why, sizeof why, "%s", sink_errstr(r->sink));
        return relay_eos_abort(r, why);
    }
    if (v != KAFKA_TXN_OK) {
        failed(r, v);
        return -1;
    }
    /* Committed: what it held is in Kafka for good. */
    test_pause_after_commit(r, lsn);
    for (size_t i = 0; i < r->eos.nheld; i++)
        for (uint32_t k = 0; k < r->eos.held[i].n; k++)
            tracker_ack(r->tracker, r->eos.held[i].token);
    r->eos.nheld = 0;
    r->eos.commits++;
    log_debug("slot=%s lsn=" LSN_FMT ": Kafka transaction committed (%zu events, open %.0f ms, "
              "commit %.1f ms)", r->cfg->slot, LSN_ARGS(lsn), r->eos.batch_events,
              (t0 - r->eos.batch_since) * 1000, took * 1000);
    if (lsn > r->eos.progress)
        r->eos.progress = lsn;
    r->eos.batch_events = 0;
    r->eos.said_open = 0;
    /* The slot moved: say so now. A commit blocks the loop for a broker's
     * round trips (hundreds of ms on a loaded cluster), and the loop checks
     * status only every READ_BATCH frames (relay_session.c): with a
     * commit per PostgreSQL transaction those frames took longer than
     * wal_sender_timeout, and the server closed the connection again and
     * again (CI, test_progress_read_after_compaction). */
    relay_keep_status(r);
    return 0;
}

double relay_eos_due_in(const struct relay *r, double now)
{
    if (!sink_txn_open(r->sink) || tracker_in_tx(r->tracker))
        return 1e9;
    if (r->eos.batch_events >= (size_t) r->cfg->transaction_max_events)
        return 0;
    double due = r->eos.batch_since + r->cfg->transaction_max_ms / 1000.0 - now;
    return due > 0 ? due : 0;
}

void relay_eos_watch(struct relay *r, double now)
{
    if (!relay_eos_on(r) || !sink_txn_open(r->sink))
        return;
    double open = now - r->eos.batch_since;
    if (open < r->cfg->transaction_max_ms / 1000.0 + TXN_SAY_EVERY ||
        now - r->eos.said_open < TXN_SAY_EVERY)
        return;
    r->eos.said_open = now;
    size_t inflight = sink_inflight(r->sink);
    const char *why = inflight > 0 ? "Kafka has not acknowledged every message produced into it"
                      : tracker_in_tx(r->tracker)
                          ? "the PostgreSQL transaction it holds has not been read to its commit"
                          : "its commit is not due";
    log_warn("slot=%s: the Kafka transaction has been open for %.0f s (%zu events, %zu "
             "deliveries in flight): %s%s%s; nothing past " LSN_FMT " is confirmed meanwhile",
             r->cfg->slot, open, r->eos.batch_events, inflight, why,
             inflight > 0 && *sink_errstr(r->sink) ? "; last Kafka error: " : "",
             inflight > 0 ? sink_errstr(r->sink) : "", LSN_ARGS(tracker_confirmed(r->tracker)));
}

void relay_eos_check_fenced(struct relay *r)
{
    if (sink_fenced(r->sink))
        fenced(r, sink_errstr(r->sink));
}

int relay_eos_tick(struct relay *r)
{
    if (!relay_eos_on(r) || r->rewind || r->fatal || r->eos.fenced)
        return 0;
    if (relay_eos_due_in(r, mono_now()) > 0)
        return 0;
    return relay_eos_commit(r);
}

void relay_eos_after_frame(struct relay *r, bool was_in_tx, lsn_t wal_start)
{
    if (was_in_tx && !tracker_in_tx(r->tracker))
        r->eos.last_commit = wal_start; /* a commit frame: the end of its record */
}

int relay_eos_end(struct relay *r)
{
    if (!relay_eos_on(r) || !sink_txn_open(r->sink))
        return 0;
    if (r->rewind || r->fatal || r->eos.fenced || tracker_in_tx(r->tracker))
        return relay_eos_abort(r, NULL);
    return relay_eos_commit(r);
}

/* The progress reader's wait: status updates go on meanwhile. */
static void keep_status_tick(void *ctx)
{
    relay_keep_status(ctx);
}

int relay_eos_prepare(struct relay *r, lsn_t started_at, char *err, size_t errlen)
{
    if (r->eos.ready)
        return 0;
    int n = progress_topic_ensure(r->sink, r->cfg->progress_topic, 10000, keep_status_tick, r,
                                  err, errlen);
    if (n <= 0)
        return n < 0 ? -1 : -2;
    if (progress_record_key(stream_system_id(r->stream), r->cfg->slot, r->eos.key,
                            sizeof r->eos.key) < 0) {
        snprintf(err, errlen, "slot=%s: the slot's name is too long for a progress record key",
                 r->cfg->slot);
        return -1;
    }
    r->eos.partition = progress_partition(r->eos.key, strlen(r->eos.key), n);
    relay_keep_status(r);
    if (!r->eos.inited) { /* once per producer */
        int v = KAFKA_TXN_RETRY;
        double t0 = mono_now(), said = t0;
        for (int i = 0; i < TXN_INIT_TRIES && v == KAFKA_TXN_RETRY && !*r->stop; i++) {
            v = sink_txn_init(r->sink, TXN_INIT_MS);
            relay_keep_status(r);
            if (v == KAFKA_TXN_RETRY)
                say_waiting(r, "init_transactions (the coordinator's producer id)", t0, &said);
        }
        if (v != KAFKA_TXN_OK) {
            snprintf(err, errlen, "slot=%s: %s", r->cfg->slot, sink_errstr(r->sink));
            return v == KAFKA_TXN_RETRY || v == KAFKA_TXN_ABORT ? -2 : -1;
        }
        r->eos.inited = true;
    }
    const char *kafka[2 * CONFIG_MAX_KAFKA_PROPS];
    for (size_t i = 0; i < r->cfg->nkafka; i++) {
        kafka[2 * i] = r->cfg->kafka[i].key;
        kafka[2 * i + 1] = r->cfg->kafka[i].value;
    }
    struct progress_reader_options po = {.brokers = r->cfg->brokers, .kafka = kafka,
                                         .nkafka = r->cfg->nkafka, .tick = keep_status_tick,
                                         .tick_ctx = r};
    struct progress_owner_id who = {.slot = r->cfg->slot, .database = stream_database(r->stream),
                                     .system_id = stream_system_id(r->stream),
                                     .txn_id = r->eos.txn_id};
    struct progress_record rec;
    int rc = progress_read(&po, r->cfg->progress_topic, n, &who, PROGRESS_READ_MS, &rec, err,
                           errlen);
    if (rc < 0)
        return rc;
    r->eos.ready = true;
    r->eos.fenced = false;
    if (r->metrics)
        metrics_set_delivery_waiting(r->metrics, NULL);
    if (rc == 0) {
        log_info("slot=%s: exactly-once: no progress record in %s yet (a first start); "
                 "transactional.id %s", r->cfg->slot, r->cfg->progress_topic, r->eos.txn_id);
        return 0;
    }
    if (rec.lsn > r->eos.progress)
        r->eos.progress = rec.lsn;
    lsn_t start = progress_start_lsn(started_at, r->eos.progress);
    log_info("slot=%s: exactly-once: Kafka has everything committed up to " LSN_FMT
             " (progress record of %s); transactional.id %s%s", r->cfg->slot,
             LSN_ARGS(r->eos.progress), r->cfg->progress_topic, r->eos.txn_id,
             start > started_at ? "; starting replication again from there" : "");
    if (start > started_at) {
        tracker_reset(r->tracker, start);
        return 1;
    }
    return 0;
}
