/*
 * reaper.h — deletes outbox rows that are both past retention and delivered,
 * on an ordinary (non-replication) connection, in short transactions; it
 * keeps up while the slot lags behind the head of the WAL.
 *
 * THE RULE (exact, not a heuristic; the argument in full is in
 * docs/operations.md, "The rule: marks").
 *
 * A mark is (L, X), taken in one REPEATABLE READ transaction whose first
 * statement takes the snapshot and reads X = pg_snapshot_xmin() of it (the
 * oldest transaction id running then), and whose second reads
 * L = pg_current_wal_insert_lsn(). Marks are stored per slot in
 * REAPER_MARKS_TABLE: by the maintenance thread every few seconds, and by
 * each reaper run as it starts.
 *
 * Once the slot's confirmed_flush_lsn >= L, every row whose inserting
 * transaction id (xmin, widened to 64 bits) is < X is delivered: that
 * transaction — or, for a subtransaction, its top-level one, whose id is
 * smaller — had ended before the snapshot, so its commit record ends at or
 * before L, and the relayer confirms a position only once every event
 * committed before it has a successful delivery report. Rows of
 * transactions still in progress have ids >= X and are kept.
 * pg_visible_in_snapshot() on ids between X and the snapshot's xmax is NOT
 * used: the snapshot lists top-level ids only, so a row written after a
 * SAVEPOINT of a transaction running at the mark would pass.
 *
 * A run: checks the table and its partitions are logged (an UNLOGGED
 * table writes no WAL: the slot's position says nothing about its rows);
 * takes a fresh mark N and waits up to confirm_wait for the slot to
 * confirm N's L; reaps by N if it did, else ("lagging") by the stored
 * confirmed mark with the greatest X; deletes expired rows below that X in
 * batches; prunes the marks no later run can need.
 *
 * Range-partitioned on created_at: whole partitions whose upper bound is at
 * or before now() - retention are dropped instead. The partition is locked
 * in SHARE mode first — which conflicts with the ROW EXCLUSIVE lock every
 * inserting transaction holds until it ends, so it waits for all of them
 * and keeps new ones out, while readers still pass. Then, not lagging: W0
 * = the insert position, waited for as above, then DROP. Lagging: DROP
 * only when no row of the partition has an xmin >= the mark's X. Rows in
 * the DEFAULT partition are deleted in batches as for a plain table. (DROP
 * takes ACCESS EXCLUSIVE on the partition and the parent, with a 1 s
 * lock_timeout so writers are not stalled behind it for long; on timeout
 * the partition is tried again next run.)
 *
 * Progress: once it is about to delete, a run counts the expired rows
 * (rowcount.h: exact up to ROWCOUNT_MAX, else the planner's estimate; rows held
 * back by a lagging slot are counted too, so a run may end below it). A
 * run that lasts longer than PROGRESS_INTERVAL logs "reaper: D of T rows
 * (P %), R rows/s, about L left" every PROGRESS_INTERVAL s and a
 * "finished" line; every run sets the gauges.
 *
 * The reaper's DELETEs and DROPs are never relayed: the relayer's slot only
 * decodes INSERTs (wal2json "actions" 'insert').
 */
#ifndef OUTBOX_RELAY_REAPER_H
#define OUTBOX_RELAY_REAPER_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/core/progress.h"

struct metrics;

#define REAPER_ERRLEN 512
#define REAPER_CONFIRM_WAIT 30.0 /* s: see reaper_options.confirm_wait */
#define REAPER_MARKS_TABLE "public.outbox_relay_reaper_marks" /* sql/003_relay_role.sql */
#define REAPER_MARKS_MAX 100000  /* unconfirmed marks kept per slot; past it none are added */

enum reaper_rc {
    REAPER_OK = 0,
    REAPER_RETRY = -1, /* connection lost, slot not there yet: try next run */
    REAPER_FATAL = -2  /* no such table or column, bad retention, slot of another database,
                          an UNLOGGED table */
};

struct reaper_options {
    const char *slot;
    const char *table_schema;
    const char *table_name;
    const char *retention;   /* PostgreSQL interval text; "0" (or <= 0) = off */
    const char *created_at_column; /* the rows' timestamp column (a plain
                                      identifier); NULL: created_at */
    long batch;              /* rows per DELETE transaction */
    double pause;            /* seconds between batches */
    /* Longest wait for the slot to confirm the fresh mark (once per run)
     * and, not lagging, a partition's W0. 30 s covers an
     * idle cluster, where WAL past the last commit (a heartbeat, say) is
     * only flushed — and so only confirmable — when the background writer
     * logs its next snapshot, every 15 s. */
    double confirm_wait;
    bool (*should_stop)(void *arg); /* polled between steps; NULL = never */
    /* Called every 100 ms while the reaper waits (for the slot, or between
     * batches), possibly inside the batch's transaction: the maintenance
     * thread keeps polling and heartbeating on the same connection through
     * a long wait. It may run read-only queries on the connection; NULL =
     * none. */
    void (*tick)(void *arg);
    void *stop_arg; /* passed to should_stop and tick */
    /* Borrowed, may be NULL: the run's progress gauges (metrics.h,
     * METRICS_WORK_REAPER). */
    struct metrics *metrics;
    /* Borrowed, may be NULL: where the slot lives when that is not conn's
     * server — decoding on a standby, where conn is the primary (rows,
     * marks, the bookkeeping tables) and this the standby (the slot's
     * confirmed_flush_lsn). Sound because a standby replays the primary's
     * WAL at the same positions: a mark's L taken on the primary is
     * confirmed once the standby's slot is past it. NULL: conn. */
    PGconn *slot_conn;
};

/* A mark (see the rule above). */
struct reaper_mark {
    lsn_t insert_lsn; /* L */
    uint64_t xmin;    /* X, the snapshot's xmin as a 64-bit transaction id */
};

struct reaper_result {
    uint64_t rows;       /* deleted rows, plus the planner's estimate of dropped partitions' */
    uint64_t batches;    /* committed transactions that deleted rows or dropped a partition */
    uint64_t partitions; /* partitions dropped */
    double seconds;      /* wall time of the run */
    bool off;            /* retention <= 0: nothing was looked at */
    bool lagging;        /* the slot had not confirmed the fresh mark within confirm_wait */
    bool held_back;      /* lagging, and expired rows (or partitions) had to be kept */
    bool backfill_held;  /* the slot's backfill is unfinished: nothing was deleted */
    bool have_mark;      /* used: the mark rows were reaped by (none: nothing deleted) */
    struct reaper_mark fresh, used;
    lsn_t confirmed;     /* the slot's last position read */
    lsn_t wanted;        /* held_back: the position it did not get to (fresh mark, W0) */
    /* The fresh mark could not be stored (no marks table, no privilege,
     * read-only server): while the slot lags, nothing can be reaped. The
     * reason is in marks_err. */
    bool marks_off;
    char marks_err[256];
    /* The deleting's progress, once it ended (progress_ended): the caller
     * marks the run's gauges ended after it has counted the rows
     * (metrics_reaped), so that no scrape sees a run ended whose rows the
     * deleted-rows counter does not hold yet. */
    bool progress_ended;
    struct progress progress;
};

/* False when retention turns the reaper off ("0", "", "0 days", ...
 * anything PostgreSQL reads as a zero interval is caught by reaper_run). */
bool reaper_enabled(const char *retention);

/* One reaper run on conn (an ordinary connection, idle, not in a
 * transaction; the caller keeps owning it). Deletes or drops until a batch
 * comes back short, should_stop says so, or an error. Keeping rows because
 * the slot has not confirmed them (res->held_back) is still REAPER_OK: it
 * is the correct outcome. An UNLOGGED or temporary table or partition is
 * REAPER_FATAL before anything is deleted. *res is filled in every case.
 * Returns an enum reaper_rc with a message in err for the negative ones. */
int reaper_run(PGconn *conn, const struct reaper_options *opts, struct reaper_result *res,
               char *err, size_t errlen);

/* Takes a mark for slot on conn (ordinary, idle; borrowed) and stores it in
 * REAPER_MARKS_TABLE — unless the slot does not exist in this database or
 * REAPER_MARKS_MAX unconfirmed marks are already there — then removes the
 * slot's confirmed marks but the one with the greatest X. *mark (may be
 * NULL) gets the mark even when it could not be stored. Returns 0,
 * REAPER_RETRY (connection lost, transient), or REAPER_FATAL when the
 * table cannot be written (missing, no privilege, read-only server); err
 * says why. The connection is idle again on return. */
int reaper_take_mark(PGconn *conn, const char *slot, struct reaper_mark *mark, char *err,
                     size_t errlen);

/* The same with the slot on slot_conn (see reaper_options.slot_conn; NULL:
 * conn): the mark is taken and stored on conn, the slot read on slot_conn. */
int reaper_take_mark_on(PGconn *conn, PGconn *slot_conn, const char *slot,
                        struct reaper_mark *mark, char *err, size_t errlen);

/* Builds the DELETE of one batch on table (quoted) into buf (capacity
 * cap): at most $2 rows older than now() - $1 (the retention) whose xmin,
 * widened to 64 bits, is below $3 (the used mark's X), oldest first.
 * partitioned: rows are named by (tableoid, ctid), as ctid alone is not
 * unique across partitions. Pure; exposed for tests. Returns the length or
 * -1 when buf is too small. */
int reaper_build_delete(const char *table, bool partitioned, char *buf, size_t cap);
/* The same on another timestamp column (column: quoted as needed). */
int reaper_build_delete_on(const char *table, const char *column, bool partitioned, char *buf,
                           size_t cap);

#endif
