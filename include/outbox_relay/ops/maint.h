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

#include "outbox_relay/config/config.h"

#define MAINT_POLL_INTERVAL 2.0 /* s between slot polls */
#define MAINT_MARK_INTERVAL 10.0 /* s between reaper marks (reaper_take_mark) */
#define MAINT_HEARTBEAT_PREFIX "outbox-relay-heartbeat"

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
