/*
 * reaper_internal.h — one reaper run's state and what the reaper's files
 * offer each other. Internal to the reaper: other modules use reaper.h.
 * The calls point one way, top to bottom:
 *   reaper.c            the run, step by step (reaper_run)
 *   reaper_rows.c       expired rows deleted in batches, the run's progress
 *   reaper_partitions.c expired partitions dropped whole
 *   reaper_marks.c      marks, and the slot's confirmed position
 *   reaper_common.c     statements and their errors, stop and nap, the
 *                       backfill marker, the progress note
 * (rows and partitions do not call each other; each calls only below it).
 *
 * Every helper that fails says why in r->err and returns a negative enum
 * reaper_rc; every transaction a helper opens is committed or rolled back
 * before the run returns.
 */
#ifndef OUTBOX_RELAY_REAPER_INTERNAL_H
#define OUTBOX_RELAY_REAPER_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/core/progress.h"
#include "outbox_relay/ops/reaper.h"

#define POLL_SLICE 0.1       /* s between confirmed_flush_lsn polls */
#define LOCK_TIMEOUT "5s"    /* waiting for a lock on the outbox or a partition */
#define DROP_LOCK_TIMEOUT "1s" /* DROP's lock on the parent: writers queue behind it */
#define BATCH_RETRIES 3      /* serialization failures / lock timeouts per batch */

/* SQL pieces for "the row's inserting transaction id is below a mark's X".
 * xmin is 32 bits; SNAP_TOP puts the statement snapshot's xmax - 1 in
 * n.top, and XMIN64(alias) is alias.xmin widened to the 64-bit id in
 * (n.top - 2^32, n.top] with the same low 32 bits — the right one for
 * every row the statement can see that is not frozen (docs/operations.md,
 * "32-bit xmin"). Marks whose X is 2^31 or more below n.top are never
 * used (MARK_FRESH_ENOUGH, reaper_marks.c). XMIN64 goes through snprintf. */
#define SNAP_TOP "(SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 1 AS top) AS n"
#define XMIN64(a) /* for snprintf formats: %% is % */                           \
    "(n.top - (((n.top - " a ".xmin::text::bigint) %% 4294967296 + 4294967296) "   \
    "%% 4294967296))"

/* One run (or one reaper_take_mark): borrowed connection and options, the
 * result being filled, the caller's error buffer. */
struct reap {
    PGconn *conn;
    PGconn *slot_conn; /* where the slot is read (reaper_options.slot_conn);
                          NULL: conn */
    const struct reaper_options *o; /* NULL in reaper_take_mark */
    struct reaper_result *res;
    char *err;
    size_t errlen;
    const char *slot;
    bool slots_table; /* public.outbox_relay_slots exists */
    char mark_x[24]; /* res->used.xmin as decimal text, for the queries */
    char created_at[70]; /* the timestamp column, quoted, for the queries */
    char pqmsg[REAPER_ERRLEN]; /* pq_reason's buffer */
    bool counting;        /* prog runs: rows are being deleted */
    struct progress prog; /* rows done = res->rows */
};

/* --- reaper_common.c ---------------------------------------------------- */

/* After rows were deleted or a partition dropped, notes
 * res->rows in the run's progress: a log line when one is due, the
 * gauges. Nothing before the deleting starts. */
void reap_progress_note(struct reap *r);

/* Whether should_stop asks to stop (never in reaper_take_mark). */
bool reap_stopping(const struct reap *r);

/* Sleeps up to seconds in short slices, calling tick; false when stopped
 * meanwhile. */
bool reap_nap(const struct reap *r, double seconds);

/* Formats the message into r->err and returns rc. */
int reap_err(struct reap *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The server's reason for the last failure on r's connection, as one line
 * (pgconn_error), or "connection lost". Valid until the next call. */
const char *reap_pq_reason(struct reap *r);

/* SQLSTATEs a later retry can cure: serialization failure, deadlock, lock
 * timeout, statement cancelled (e.g. by shutdown). */
bool reap_transient(const PGresult *res);

/* Runs sql with text parameters. Returns the result (caller clears) when
 * its status is `want`; otherwise NULL, with err set and *rc the class of
 * the failure (REAPER_RETRY for a lost connection or a transient error,
 * REAPER_FATAL otherwise). */
PGresult *reap_exec(struct reap *r, ExecStatusType want, int *rc, const char *what,
                    const char *sql, int nparams, const char *const *params);

/* A command without rows: 0 or a negative reaper_rc. */
int reap_command(struct reap *r, const char *what, const char *sql);

/* Ends the transaction in progress, if any. */
void reap_rollback(struct reap *r);

/* Parses an LSN from column col of res row 0 into *out. */
int reap_result_lsn(struct reap *r, PGresult *res, int col, lsn_t *out);

/* 1 when the slot's backfill is unfinished and holds the reaper back, 0
 * when not, or a negative reaper_rc (read FOR SHARE inside the caller's
 * transaction). */
int reap_backfill_holds(struct reap *r);

/* --- reaper_marks.c ------------------------------------------------------ */

/* Runs sql (text parameters) where the slot lives (r->slot_conn, else
 * r->conn), as reap_exec does. */
PGresult *reap_slot_exec(struct reap *r, ExecStatusType want, int *rc, const char *what,
                         const char *sql, int nparams, const char *const *params);

/* Polls the slot until confirmed_flush_lsn >= lsn. Returns
 * 1 when it is, 0 when confirm_wait ran out or a stop was asked, negative
 * on error. res->confirmed gets the last position read. */
int reap_wait_confirmed(struct reap *r, lsn_t lsn);

/* Takes a mark (reaper.h) into *m and stores it. Returns 1
 * stored (or not stored because the slot is missing or REAPER_MARKS_MAX is
 * reached), 0 taken but the table cannot be written (err says why), or a
 * negative reaper_rc when no mark could be taken. */
int reap_take_mark(struct reap *r, struct reaper_mark *m);

/* Removes the marks no later run can need; errors
 * ignored. */
void reap_prune_marks(struct reap *r);

/* Lagging, the stored mark the slot has confirmed with the
 * greatest X into res->used. Returns 1 found, 0 none (or the table is
 * unusable: res->marks_off), negative on error. */
int reap_choose_mark(struct reap *r);

/* --- reaper_partitions.c ------------------------------------------------- */

/* Drops every partition of parent_oid whose upper
 * bound is at or before now() - retention, oldest first; default_oid ("0"
 * when none) is never dropped. */
int reap_drop_expired_partitions(struct reap *r, const char *parent_oid,
                                 const char *default_oid);

/* --- reaper_rows.c ------------------------------------------------------- */

/* The deleting starts: counts the expired rows of `table` (quoted), then
 * the progress from 0. Lines only once it lasts (quiet start). */
void reap_progress_begin(struct reap *r, const char *table);

/* The deleting ended (or stopped): the final line if any was said, the
 * gauges marked ended. */
void reap_progress_end(struct reap *r);

/* Deletes expired rows of `table` (quoted) below the used mark's X, batch
 * by batch until a short batch, a stop, or an error. partitioned: rows are
 * named by (tableoid, ctid). Returns 0 or a negative reaper_rc. */
int reap_rows(struct reap *r, const char *table, bool partitioned);

/* Whether `table` (quoted) still has expired rows visible now: *any.
 * Returns 0 or a negative reaper_rc. */
int reap_any_expired(struct reap *r, const char *table, bool *any);

#endif
