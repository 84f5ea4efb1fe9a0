/*
 * reaper.h — deletes outbox rows that are both past retention and delivered,
 * on an ordinary (non-replication) connection, in short transactions.
 *
 * THE RULE (exact, not a heuristic). Every batch is one REPEATABLE READ
 * transaction:
 *
 *   1. Its first statement reads W0 = pg_current_wal_insert_lsn(). That
 *      statement also takes the transaction's snapshot, so every row the
 *      transaction can see was inserted by a transaction whose commit record
 *      was already in the WAL, i.e. ends at or before W0.
 *   2. It reads the slot's confirmed_flush_lsn (shared memory, not MVCC:
 *      live) until it is >= W0, polling every 100 ms for at most
 *      confirm_wait seconds. The relayer confirms a position only once every
 *      event committed before it has a successful Kafka delivery report, so
 *      confirmed >= W0 means every row this snapshot can see is delivered.
 *      If the slot never gets there (Kafka down, relayer stopped or behind),
 *      the transaction rolls back and every row stays: try again next run.
 *   3. It deletes at most `batch` of the visible rows with
 *      created_at < now() - retention, oldest first, and commits.
 *
 * The insert position rather than pg_current_wal_lsn() (the write position):
 * under synchronous_commit = off a transaction becomes visible before its
 * commit record is written, so only the insert position is certain to be
 * past it.
 *
 * Range-partitioned on created_at: whole partitions whose upper bound is at
 * or before now() - retention are dropped instead. The partition is locked
 * in SHARE mode first — which conflicts with the ROW EXCLUSIVE lock every
 * inserting transaction holds until it ends, so it waits for all of them
 * and keeps new ones out, while readers still pass — then W0 is read and
 * waited for as above, then it is dropped. Rows in the DEFAULT partition
 * are deleted in batches as for a plain table. (DROP takes ACCESS
 * EXCLUSIVE on the partition and the parent, with a 1 s lock_timeout so
 * writers are not stalled behind it for long; on timeout the partition is
 * tried again next run.)
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

#include "outbox_relay/lsn.h"

#define REAPER_ERRLEN 512
#define REAPER_CONFIRM_WAIT 30.0 /* s: see reaper_options.confirm_wait */

enum reaper_rc {
    REAPER_OK = 0,
    REAPER_RETRY = -1, /* connection lost, slot not there yet: try next run */
    REAPER_FATAL = -2  /* no such table or column, bad retention, slot of another database */
};

struct reaper_options {
    const char *slot;
    const char *table_schema;
    const char *table_name;
    const char *retention;   /* PostgreSQL interval text; "0" (or <= 0) = off */
    long batch;              /* rows per DELETE transaction */
    double pause;            /* seconds between batches */
    /* Longest wait for the slot to confirm W0, per batch. 30 s covers an
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
};

struct reaper_result {
    uint64_t rows;       /* deleted rows, plus the planner's estimate of dropped partitions' */
    uint64_t batches;    /* committed transactions that deleted rows or dropped a partition */
    uint64_t partitions; /* partitions dropped */
    double seconds;      /* wall time of the run */
    bool off;            /* retention <= 0: nothing was looked at */
    bool held_back;      /* stopped because the slot had not confirmed W0 in time */
    lsn_t w0, confirmed; /* the positions compared when held_back */
};

/* False when retention turns the reaper off ("0", "", "0 days", ...
 * anything PostgreSQL reads as a zero interval is caught by reaper_run). */
bool reaper_enabled(const char *retention);

/* One reaper run on conn (an ordinary connection, idle, not in a
 * transaction; the caller keeps owning it). Deletes or drops until a batch
 * comes back short, the slot holds it back (res->held_back, still
 * REAPER_OK: keeping rows is the correct outcome), should_stop says so, or
 * an error. *res is filled in every case. Returns an enum reaper_rc with a
 * message in err for the negative ones. */
int reaper_run(PGconn *conn, const struct reaper_options *opts, struct reaper_result *res,
               char *err, size_t errlen);

#endif
