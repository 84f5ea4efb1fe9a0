/*
 * status.h — `outbox-relay status`: one look at the slot and the outbox,
 * for people, cron and Kubernetes probes.
 *
 * It prints the slot (plugin, active, walsender pid, confirmed LSN, lag in
 * bytes, wal_status, safe_wal_size), how far behind confirmation is in time,
 * and the oldest outbox row with its age, then "status OK" or one
 * "UNHEALTHY: ..." line per threshold crossed. Sizes and durations come
 * with human units beside the exact figure (human.h): on the same line
 * where the value is already text ("93.000 s = 1 min 33 s"), on a line of
 * their own after an exact number that scripts read (lag_bytes, then
 * "lag 11.8 MiB"; safe_wal_size, then "safe_wal").
 *
 * Unhealthy (exit 1) when:
 *   - the slot does not exist, belongs to another database, or its
 *     wal_status is "lost" or "unreserved" (WAL it needs is gone or about
 *     to be removed);
 *   - no relayer streams from it (not active);
 *   - lag bytes > --max-lag-bytes;
 *   - the confirmation lag in time > --max-age.
 * It also exits 1 when it cannot connect or query: a watchdog that cannot
 * look must not say all is well.
 *
 * The time lag is pg_stat_replication.flush_lag of the slot's walsender.
 * PostgreSQL 15 fills it for logical walsenders (wal2json included): the
 * time from when the walsender sent WAL to when the relayer confirmed it,
 * growing while nothing is confirmed. It is sampled: at most one commit a
 * second gets a timing sample, so a lone stuck commit right after another
 * one can go unseen (docs/operations.md). Reading it needs
 * pg_read_all_stats (or superuser); without it, or while the walsender has
 * no sample yet, the time lag is "unknown" and --max-age is not checked —
 * the output says so.
 */
#ifndef OUTBOX_RELAY_STATUS_H
#define OUTBOX_RELAY_STATUS_H

#include <stdio.h>

#include "outbox_relay/config/config.h"

/* Connects with cfg->dsn, prints the report to out and returns the exit
 * code: 0 healthy, 1 unhealthy or unknown (errors go to the log). */
int status_run(const struct relay_config *cfg, FILE *out);

#endif
