/*
 * maint.h — the maintenance thread of `outbox-relay run`.
 *
 * It owns one ordinary (non-replication) connection to the outbox's
 * database, separate from the replication stream so that nothing it does
 * can stall the relay. On it, it
 *   - polls the slot every few seconds: lag in bytes
 *     (pg_current_wal_lsn() - confirmed_flush_lsn), wal_status,
 *     safe_wal_size, and the outbox table's row estimate, into metrics;
 *   - checks that no table of the outbox is UNLOGGED or temporary (at each
 *     poll, and again right before each reaper run, which it skips while
 *     one is: their rows were never relayed but look delivered);
 *   - runs the reaper every --reap-interval (see reaper.h), and takes a
 *     reaper mark every MAINT_MARK_INTERVAL whatever --retention says, so
 *     that reaping (here or by `outbox-relay reap`) keeps up while the slot
 *     lags;
 *   - with --heartbeat-interval > 0, emits a non-transactional logical
 *     message (prefix "outbox-relay-heartbeat") so that a slot whose
 *     database is idle still has WAL of its own database to confirm. The
 *     relay relays only transactional messages with its own prefix, so the
 *     heartbeat never reaches Kafka.
 * A lost connection is re-established with a capped exponential backoff;
 * nothing here ever ends the process.
 */
#ifndef OUTBOX_RELAY_MAINT_H
#define OUTBOX_RELAY_MAINT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "outbox_relay/config.h"

#define MAINT_POLL_INTERVAL 2.0 /* s between slot polls */
#define MAINT_MARK_INTERVAL 10.0 /* s between reaper marks (reaper_take_mark) */
#define MAINT_HEARTBEAT_PREFIX "outbox-relay-heartbeat"

/* The outbox's row estimate (pg_class.reltuples summed over the leaves of
 * the partition tree; NULL when never vacuumed or analyzed). $1 is the
 * quoted "schema"."table". Reads catalogs only: takes no lock on the table
 * or its partitions. */
#define MAINT_ROWS_ESTIMATE_SQL                                                   \
    "WITH RECURSIVE tree(relid) AS (SELECT to_regclass($1)::oid UNION ALL "      \
    "SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid) " \
    "SELECT CASE WHEN bool_and(c.reltuples < 0) THEN NULL "                      \
    "ELSE sum(greatest(c.reltuples, 0)) END::bigint "                            \
    "FROM tree JOIN pg_class c ON c.oid = tree.relid WHERE c.relkind <> 'p'"

/* The outbox's tables (it and its partitions) that write no WAL
 * (relpersistence 'u' UNLOGGED or 't' temporary): their count and the
 * ALTER TABLE … SET LOGGED statements that fix them. $1 as above. Catalogs
 * only. Logical decoding never sees such a table's rows, while keepalives
 * move the slot past them: the reaper would delete them as delivered. */
#define MAINT_UNLOGGED_SQL                                                        \
    "WITH RECURSIVE tree(relid) AS (SELECT to_regclass($1)::oid UNION ALL "      \
    "SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid) " \
    "SELECT count(*), coalesce(string_agg(format('ALTER TABLE %s.%s SET LOGGED;', " \
    "quote_ident(n.nspname), quote_ident(c.relname)), ' ' ORDER BY c.oid), '') "  \
    "FROM tree JOIN pg_class c ON c.oid = tree.relid "                            \
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relpersistence IN ('u', 't')"

struct maint;
struct metrics;

/* Starts the thread. cfg and metrics (may be NULL) are borrowed and must
 * outlive it (until maint_stop returns true). stop (may be NULL) is the
 * signal handlers' flag: once set, the thread winds down by itself (a
 * reaper wait ends at once) while the relay drains its deliveries. Returns
 * NULL with a message in err when the thread cannot be created. */
struct maint *maint_start(const struct relay_config *cfg, volatile sig_atomic_t *stop,
                          struct metrics *metrics, char *err, size_t errlen);

/* Asks the thread to stop, cancels a running query, and waits up to
 * timeout seconds for it to end; then frees everything. Returns false when
 * the thread did not end in time (it is left detached, still borrowing cfg
 * and metrics: the caller must not free them). NULL is a no-op (true). */
bool maint_stop(struct maint *mt, double timeout);

/* `outbox-relay reap`: connects, runs the reaper once (logging what it did)
 * and disconnects. *stop (set by signal handlers) ends it early. Returns 0
 * when the run completed — including when it kept expired rows because
 * their delivery is not confirmed yet — and 1 on any error. */
int maint_reap_once(const struct relay_config *cfg, volatile sig_atomic_t *stop);

#endif
