/*
 * backfill.h — the zero-gap migration from a polling relayer: publish the
 * outbox rows that were committed before the slot existed and that the
 * poller had not dispatched, and never stream the slot before every one of
 * them is acknowledged by Kafka, whatever crashes meanwhile.
 *
 * The durable record is the slot's row in public.outbox_relay_slots
 * (sql/003_relay_role.sql), column backfill_state:
 *
 *   'creating'  written (committed) BEFORE the slot is created; the bound
 *               of the backlog is not known yet
 *   'running'   the slot exists; backfill_max_id is the largest pending id
 *               visible in the slot's exported snapshot (NULL: none), and
 *               backfill_done_id the largest id up to which every row of
 *               the backfill has a delivery report
 *   'done'      every row was acknowledged; the slot may be streamed
 *   NULL        no backfill was ever asked for this slot
 *
 * A slot whose row says 'creating' or 'running' is never streamed (see
 * stream.c): the next start, on any replica, resumes the backfill first.
 * Only one process backfills a slot: it holds a session advisory lock
 * (BACKFILL_LOCK_CLASS, hashtext(slot name)) on its own ordinary
 * connection from before the marker is written until it is cleared; the
 * lock goes with the connection when the process dies.
 *
 * Why nothing is missed. The first run reads the snapshot exported by
 * CREATE_REPLICATION_SLOT: it sees exactly the transactions that committed
 * before the slot's consistent point, and the slot streams exactly those
 * that commit after it. That snapshot dies with the creating connection, so
 * a resumed run reads a fresh snapshot instead and publishes every row with
 * dispatched_at IS NULL, backfill_done_id < id <= backfill_max_id, in id
 * order. Every row of the exported snapshot has an id <= backfill_max_id (it
 * is their maximum), is still in the table (the reaper deletes nothing while
 * the marker is not 'done', and nobody confirms the slot meanwhile) and, if
 * above backfill_done_id, is not yet acknowledged. The resumed set is thus a
 * superset: the extra rows are the few that transactions still in progress
 * at the consistent point inserted with smaller ids, which the slot streams
 * again (duplicates, never a gap). A 'creating' marker whose slot exists
 * (a crash between CREATE_REPLICATION_SLOT and recording the bound) is
 * resumed with the bound taken now, a larger superset.
 *
 * Rows with dispatched_at set were published by the poller and are skipped
 * (when the column exists; otherwise every row is published).
 *
 * Ownership: a struct backfill owns its lock connection (kept open between
 * attempts, closed by backfill_free) and, during backfill_run, one more
 * ordinary connection that reads the rows. Both use libpq's connect_timeout.
 *
 * Files: backfill.c (the lock and the marker), backfill_run.c (a run),
 * backfill_rows.c (a row into an event); the checkpoint queue that decides
 * backfill_done_id is core/backfill_ckpt.h.
 */
#ifndef OUTBOX_RELAY_BACKFILL_H
#define OUTBOX_RELAY_BACKFILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/core/backfill_ckpt.h" /* BACKFILL_ID_MAX, the checkpoint queue */
#include "outbox_relay/decode/w2j.h"

/* The first key of the advisory lock; the second is hashtext(slot). */
#define BACKFILL_LOCK_CLASS 0x6f627266 /* "obrf" */

enum backfill_rc {
    BACKFILL_OK = 0,
    BACKFILL_BUSY = 1,     /* another process holds the slot's backfill lock,
                              or the slot appeared meanwhile */
    BACKFILL_RETRY = -1,   /* connection lost, lock lost: try again later */
    BACKFILL_FATAL = -2,   /* schema missing, a row that cannot be routed */
    BACKFILL_STOPPED = -3  /* the sink asked to stop (shutdown, fatal Kafka error) */
};

enum backfill_state {
    BACKFILL_NONE,     /* no row, or backfill_state NULL */
    BACKFILL_CREATING,
    BACKFILL_RUNNING,
    BACKFILL_DONE
};

/* Parses a backfill_state value ("creating", ...; NULL or "" is NONE).
 * Returns -1 for anything else. Pure. */
int backfill_parse_state(const char *s, enum backfill_state *out);

struct backfill_options {
    const char *dsn;
    const char *slot;
    const char *table_schema;
    const char *table_name;
    const struct outbox_columns_map *columns; /* borrowed, read at each run
                                              (types filled in at startup);
                                              NULL: the default layout */
};

struct progress;

/* Where the rows go. emit produces the n-th row of this run (n counts from
 * 1; the event's strings are valid only during the call) and returns 0, or
 * < 0 to stop. acked returns the largest n such that rows 1..n all have a
 * successful delivery report. serve waits up to timeout_ms for delivery
 * reports and returns 0, or < 0 to stop. progress (may be NULL) gets the
 * run's progress (progress.h; rows done = rows acknowledged) after every
 * batch and wait, and once more with active false when every row is
 * acknowledged and the marker says 'done' (a run that fails leaves it
 * active: the backfill is not finished, a later run resumes it). */
struct backfill_sink {
    int (*emit)(void *ctx, const struct outbox_event *ev, uint64_t n);
    uint64_t (*acked)(void *ctx);
    int (*serve)(void *ctx, int timeout_ms);
    void (*progress)(void *ctx, const struct progress *p, bool active);
    void *ctx;
};

struct backfill;

/* Copies opts. No connection yet. NULL on allocation failure. */
struct backfill *backfill_new(const struct backfill_options *opts);
/* Closes the connections, which releases the lock. */
void backfill_free(struct backfill *b);

/* Takes the slot's backfill lock without waiting (connecting first when
 * needed). BACKFILL_OK: held; BACKFILL_BUSY: another process holds it;
 * BACKFILL_RETRY: cannot connect. Idempotent while held. */
int backfill_lock(struct backfill *b);

/* Releases the lock if held; the connection stays open for the next try. */
void backfill_unlock(struct backfill *b);

bool backfill_locked(const struct backfill *b);

/* Closes the lock connection (releasing the lock if held), e.g. once the
 * slot streams and no backfill is left to wait for. */
void backfill_close(struct backfill *b);

/* The slot's marker, read on the lock connection. BACKFILL_FATAL when the
 * table or its backfill columns are missing (sql/003_relay_role.sql not
 * loaded). */
int backfill_read_state(struct backfill *b, enum backfill_state *st);

/* Under the lock, just before the slot is created: checks that the slot
 * still does not exist (BACKFILL_BUSY if it does) and commits the marker
 * 'creating'. */
int backfill_begin(struct backfill *b);

/* Under the lock, after a first run failed, before the new slot is dropped:
 * sets the marker back to 'creating' so that the next start creates the slot
 * again. Returns BACKFILL_OK only when that was committed (otherwise keep
 * the slot: the marker makes the next start resume). */
int backfill_abandon(struct backfill *b);

/* Under the lock: publishes the backlog through sink and, once every row is
 * acknowledged, commits the marker 'done'. snapshot non-NULL: the first run,
 * in the snapshot exported at the slot's consistent point `consistent`
 * (valid only while the creating connection stays idle). snapshot NULL:
 * resumes what the marker says is left. *rows counts the rows published by
 * this call. Returns BACKFILL_OK or a negative enum backfill_rc with the
 * reason in backfill_errstr().
 *
 * Progress: the rows of this run are counted once at its start, in its
 * snapshot (rowcount.h: exact up to ROWCOUNT_MAX rows, else the
 * planner's estimate); a line "slot=S: backfill: D of T rows (P %), R rows/s, about
 * L left" is logged at the start, every PROGRESS_INTERVAL s, and a
 * "finished" line at the end. */
int backfill_run(struct backfill *b, const char *snapshot, lsn_t consistent,
                 const struct backfill_sink *sink, uint64_t *rows);

/* Called by the sink while emit waits (a closed window, a slow broker):
 * logs a progress line when one is due and updates the gauges, so that
 * the lines keep their beat however long one row waits. Does nothing
 * outside backfill_run. */
void backfill_progress_tick(struct backfill *b);

/* The last error, with the slot's name. Valid until the next call. */
const char *backfill_errstr(const struct backfill *b);

#endif
