/*
 * relay_internal.h — the relay's state, shared by its four files only
 * (not a public header). They call one way, each only the files below it:
 *   relay.c           the lifecycle and the outer loop: starts, reconnects,
 *                     rewinds, the clean stop; it fills dispatch's ops and
 *                     the sink's and the slot's callbacks with the
 *                     functions of the files below
 *   relay_session.c   one streaming session: reading within the window,
 *                     liveness, status updates, the waits
 *   relay_backfill.c  the slot-creation hooks and backfill runs
 *   relay_sink.c      the relay's side of the sink: producing with a full
 *                     queue waited out, delivery reports (acks, rewinds,
 *                     poison, as report_judge.h decides), dead letters
 *                     (deadletter.h)
 *   relay_eos.c       --delivery exactly-once: Kafka transactions around
 *                     whole PostgreSQL transactions, the progress record,
 *                     acks held until the commit, aborts and fencing
 *   relay_state.c     the bottom: the first fatal error, the in-flight
 *                     window, status updates and their timing, the
 *                     stuck-deliveries warning, gauges
 * Decisions about frames live in dispatch.c, about delivery reports in
 * report_judge.c, not here.
 */
#ifndef OUTBOX_RELAY_RELAY_INTERNAL_H
#define OUTBOX_RELAY_RELAY_INTERNAL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/kafka/deadletter.h"
#include "outbox_relay/kafka/kafka_errors.h"
#include "outbox_relay/core/delivery_watch.h"
#include "outbox_relay/core/liveness.h"
#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/relay/relay.h"

#define RELAY_ERRLEN 2048

/* Backfilled rows are tracked apart from the stream (relay_backfill.c):
 * their tokens carry this bit. The stream tracker's tokens count up from 1
 * and never reach it. */
#define BACKFILL_TOKEN ((uint64_t) 1 << 63)

static inline bool is_backfill(uint64_t token)
{
    return (token & BACKFILL_TOKEN) != 0;
}

/* The progress record's own token (relay_eos.c): never a tracker's. */
#define PROGRESS_TOKEN ((uint64_t) 1 << 62)

struct outbox_event;
struct sink_report;

/* Delivered events' tokens held until their Kafka transaction commits
 * (relay_eos.c): runs of one token. */
struct eos_held {
    uint64_t token;
    uint32_t n;
};

/* --delivery exactly-once's state (relay_eos.c). */
struct relay_eos {
    bool inited;        /* this producer's init_transactions succeeded */
    bool ready;         /* ... and the slot's progress was read */
    bool fenced;        /* another producer of the slot took over: stand by */
    bool abort_pending; /* a delivery failed: abort and rewind (rewind_why) */
    char txn_id[256];   /* the producer's transactional.id */
    char key[300];      /* of its progress records (progress_record_key) */
    int32_t partition;  /* of the progress topic, for that key */
    lsn_t progress;     /* the last committed progress record's lsn */
    lsn_t last_commit;  /* commit end of the last PostgreSQL transaction read */
    size_t batch_events; /* events in the open Kafka transaction */
    double batch_since; /* monotonic s it was begun */
    double said_open;   /* monotonic s relay_eos_watch last said it is still open */
    struct eos_held *held;
    size_t nheld, capheld;
    uint64_t commits;
    bool test_read;     /* the test hooks (relay_eos.c) were read */
    long test_delay_ms, test_pause_ms;
};

struct relay {
    const struct relay_config *cfg;
    char switch_plugin[16]; /* RELAY_SWITCH_PLUGIN: the plugin to start over with */
    struct outbox_columns_map columns; /* cfg's, types filled in at each start
                                       (layout.h): decoder, sink, backfill */
    volatile sig_atomic_t *stop;
    struct stream *stream;
    struct sink *sink;
    struct tracker *tracker;
    struct decoder *decoder;      /* the output plugin's (decoder.h) */
    struct dispatch *dispatch;    /* frames → tracker and sink (dispatch.h) */
    struct backfill *backfill;    /* the slot's backfill lock and marker */
    struct tracker *bf_tracker;   /* acks of backfilled rows: row n of a run
                                     is "LSN" bf_base + n */
    uint64_t bf_base;
    bool bf_at_creation; /* the slot was created with a finished backfill */
    bool bf_retry;       /* a backfilled row failed retriably: this run stops, resumed later */
    /* A backfill batch refused for one record (REPORT_BACKFILL_ISOLATE):
     * the runs after it produce one row at a time until the row bf_isolate_id
     * (the last one produced when the refusal came; every row of the refused
     * batch is at or before it) is acknowledged, that is until bf_tracker
     * confirms bf_isolate_row, the row number it got in the current run (0:
     * not produced yet in it). A finished backfill ends it (an id too long
     * for the buffer never matches: isolation then lasts the run). */
    bool bf_isolating;
    char bf_isolate_id[OUTBOX_EVENT_ID_MAX];
    uint64_t bf_isolate_row;
    char bf_last_id[OUTBOX_EVENT_ID_MAX]; /* of the last row produced */
    struct relay_stats stats;
    struct metrics *metrics; /* borrowed, may be NULL */
    lsn_t sent_flush;   /* flush position in our last status update */
    double last_status; /* monotonic seconds */
    bool force_status;
    struct liveness live; /* --wal-receiver-timeout of the current session */
    struct delivery_watch dwatch; /* says so while deliveries are stuck */
    int64_t seen_commit_us; /* commit time (Unix µs) of the last transaction read */
    bool draining; /* it was read DRAIN_LAG_US or more after its commit: a backlog */
    struct partition_map *partitions; /* membership of a partitioned outbox */
    struct deadletter_queue dlq; /* poison reports, oldest first */
    /* Rewind (see relay.c): asked for by a delivery error that is waited
     * out, carried out once nothing is in flight. */
    bool rewind;
    enum kafka_err_class rewind_class;
    char rewind_why[RELAY_ERRLEN];
    double rewind_backoff;  /* s, the next pause before re-producing */
    lsn_t rewind_progress;  /* confirmed position at the previous rewind */
    double auth_since;      /* monotonic s of the first authorization rewind
                               without progress since; 0 = none */
    /* A batch refused for one record (kafka_err_batch_refusal): events are
     * produced one at a time until the confirmed position passes
     * isolate_until (0: not isolating; relay_isolating). A failed report
     * with nothing else in flight (sink_inflight 0 once it is counted out)
     * is its batch's only record: its refusal is its own. */
    lsn_t isolate_until;
    lsn_t last_produced_lsn; /* of the last event the sink took: while
                                isolating, the one being judged (its
                                transaction may still be open) */
    struct relay_eos eos;
    bool fatal;
    char errstr[RELAY_ERRLEN];
};

/* relay_state.c */
void relay_set_fatal(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether to read more WAL (dispatch_window_open over the sink's counts). */
bool relay_window_open(const struct relay *r);
/* Whether events are being produced one at a time (isolate_until). */
bool relay_isolating(const struct relay *r);
/* Whether backfill rows are being produced one at a time (bf_isolating). */
bool relay_bf_isolating(const struct relay *r);
/* Sends a status update now (write and flush from the trackers) and
 * notes when; 0, or a negative enum stream_rc (stream_errstr says why). */
int relay_send_status(struct relay *r, double now, bool reply_requested);
/* Seconds until the next status update is due (0 = now); blocked: the
 * window is full, so updates go at least every second. */
double relay_status_due_in(const struct relay *r, double now, bool blocked);
/* Sends a status update when one is due, during waits inside one step. */
void relay_keep_status(struct relay *r);
/* Warns while deliveries are stuck, says when they resume (delivery_watch.h);
 * every wait of the loop calls it. */
void relay_watch_deliveries(struct relay *r);
/* Refreshes the gauges the metrics endpoint shows (none without metrics). */
void relay_publish_gauges(struct relay *r, bool streaming);

/* relay_eos.c (--delivery exactly-once; see the file) */
bool relay_eos_on(const struct relay *r);
/* A delivered event's token, acked once its transaction commits. */
void relay_eos_hold(struct relay *r, uint64_t token);
void relay_eos_free(struct relay *r);
/* Begins a Kafka transaction unless one is open: 0, or -1 (fenced or
 * fatal, set on the relay). */
int relay_eos_begin(struct relay *r);
/* One more event went into the open transaction. */
void relay_eos_produced(struct relay *r);
/* Produces the progress record and commits; acks the held tokens. 0, or
 * -1 (fenced or fatal); an abortable failure aborts and asks for a rewind
 * (0). */
int relay_eos_commit(struct relay *r);
/* Aborts the open transaction, drops the held tokens and, with why, asks
 * for a rewind. 0, or -1 (fenced or fatal). */
int relay_eos_abort(struct relay *r, const char *why);
/* Seconds until the open transaction is due for commit (0: now; large:
 * nothing open, or inside a PostgreSQL transaction). */
double relay_eos_due_in(const struct relay *r, double now);
/* Says every 10 s while a Kafka transaction stays open well past
 * --transaction-max-ms, with what it waits for (deliveries, the
 * PostgreSQL commit): a relayer that stops confirming must say why. */
void relay_eos_watch(struct relay *r, double now);
/* Marks the relay fenced when the producer's fatal error says so. */
void relay_eos_check_fenced(struct relay *r);
/* Commits when due. 0 or -1 as relay_eos_commit. */
int relay_eos_tick(struct relay *r);
/* After each frame: notes a PostgreSQL commit's end (was_in_tx: the
 * tracker was inside a transaction before the frame). */
void relay_eos_after_frame(struct relay *r, bool was_in_tx, lsn_t wal_start);
/* At the end of a session or on stop: commits what is whole, aborts what
 * is not. */
int relay_eos_end(struct relay *r);
/* Once replication runs: the progress topic, the producer's init, the
 * slot's progress. 0 to stream on; 1 when replication must start again
 * from the progress (the tracker is raised to it); -2 retriable or -1
 * fatal, err says why. */
int relay_eos_prepare(struct relay *r, lsn_t started_at, char *err, size_t errlen);

/* relay_sink.c */
/* Serves delivery reports for at most timeout_ms, then the dead letters
 * they left. Every wait of the relay goes through here. */
int relay_serve(struct relay *r, int timeout_ms);
void relay_serve_dead_letters(struct relay *r);
/* The sink's report callback (sink_new); ctx is the relay. */
void relay_on_report(void *ctx, uint64_t token, const struct sink_report *rep);
/* dispatch_ops.produce, and the backfill's: produces one event; 0 when the
 * sink took it (see the definition). ctx is the relay. */
int relay_produce(void *ctx, const struct outbox_event *ev, uint64_t token);
/* dispatch_ops.dead_letter: an undecodable change to the dead-letter
 * topic. ctx is the relay. */
int relay_dead_letter_change(void *ctx, uint64_t token, lsn_t lsn, const struct outbox_event *ev,
                             const char *value, size_t value_len, const char *why);

/* relay_session.c */
enum session_rc { SESSION_STOP = 1, SESSION_REWIND = 2, SESSION_FENCED = 3 };
/* Streams until stop, a fatal error, a rewind or a lost connection: an
 * enum session_rc, or a negative enum stream_rc (STREAM_FATAL with the
 * relay's error set, or a lost connection: stream_errstr says why). */
int relay_session(struct relay *r);

/* relay_backfill.c */
int relay_on_slot_creating(void *ctx, bool *export_snapshot, char *err, size_t errlen);
int relay_on_slot_created(void *ctx, const char *snapshot, lsn_t consistent, bool *drop_slot,
                          char *err, size_t errlen);
/* Finishes an unfinished backfill of an existing slot: an enum backfill_rc. */
int relay_resume_backfill(struct relay *r);

#endif
