/*
 * metrics.h — the metrics registry and its Prometheus text exposition.
 *
 * The registry is written by the relay thread (events, deliveries,
 * in-flight, confirmed LSN), by the maintenance thread (slot lag, WAL
 * status, reaper, table size) and read by the HTTP server's thread, so every
 * call here is thread-safe. Rendering follows the Prometheus text exposition
 * format (version 0.0.4) with base units (seconds, bytes). No I/O: the
 * HTTP endpoint that serves it is metrics_http.h.
 */
#ifndef OUTBOX_RELAY_METRICS_H
#define OUTBOX_RELAY_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

struct metrics;
struct progress;

/* Creates an empty registry. slot labels the slot gauges. NULL on OOM. */
struct metrics *metrics_new(const char *slot);
void metrics_free(struct metrics *m);

/* Relay thread. */
void metrics_event_produced(struct metrics *m, const char *topic);
/* latency_s: commit (the transaction's timestamp in the WAL) to the
 * broker's acknowledgement; ack_s: the event handed to the Kafka producer
 * to that acknowledgement (the broker's share, retries included). Either
 * < 0: unknown, not observed. */
void metrics_event_delivered(struct metrics *m, const char *topic, double latency_s,
                             double ack_s);
/* The latency histograms' bucket upper bounds in seconds, ascending (+Inf
 * implied): *n of them, static. For tools that bin other samples alike. */
const double *metrics_latency_bounds(size_t *n);
void metrics_delivery_error(struct metrics *m);
void metrics_dead_lettered(struct metrics *m);
void metrics_reconnected(struct metrics *m);
/* The relayer re-produces everything unconfirmed after a delivery error of
 * reason "retriable", "topic_missing" or "authorization" (other strings are
 * ignored). */
void metrics_delivery_retried(struct metrics *m, const char *reason);
/* What deliveries are stuck on (one of the reasons above), NULL when
 * nothing is. */
void metrics_set_delivery_waiting(struct metrics *m, const char *reason);
void metrics_set_inflight(struct metrics *m, size_t events, size_t bytes);
void metrics_set_confirmed_lsn(struct metrics *m, lsn_t lsn);
void metrics_set_received_lsn(struct metrics *m, lsn_t lsn);
/* Age in seconds of the oldest event produced and not yet delivered (0 when
 * none). */
void metrics_set_oldest_pending_age(struct metrics *m, double seconds);
/* streaming: we hold the slot; standby: waiting for another relayer's slot. */
void metrics_set_state(struct metrics *m, bool pg_connected, bool streaming,
                       bool kafka_up);

/* Maintenance thread. */
void metrics_set_slot(struct metrics *m, int64_t lag_bytes, const char *wal_status,
                      int64_t safe_wal_size /* -1 when NULL */);
void metrics_set_table_rows(struct metrics *m, int64_t estimate);
/* Outbox tables (it, its partitions) that are UNLOGGED or temporary, and
 * the statement(s) that fix them (copied, truncated to 255 bytes); readiness
 * fails while tables > 0. */
void metrics_set_unlogged(struct metrics *m, int64_t tables, const char *fix);
/* pgoutput: whether the publication serves the outbox (1), does not (0: why
 * says what is wrong and the fix, copied, truncated to 511 bytes), or is
 * unknown/not used (-1: the gauge is not exported); readiness fails at 0. */
void metrics_set_publication(struct metrics *m, int ok, const char *why);
/* The server refuses the slot's output plugin: why (copied, truncated to
 * 1023 bytes) says so with the fix; NULL: it does not (any more). Readiness
 * fails while it does, with that text. */
void metrics_set_plugin_refused(struct metrics *m, const char *why);
/* After a promotion (or on a standby holding only a synced copy) the slot
 * cannot be streamed safely: why (copied, truncated to 1023 bytes) says
 * what was found and the fix; NULL: no more. Readiness fails meanwhile. */
void metrics_set_failover_refused(struct metrics *m, const char *why);
/* The slot's failover protection as the maintenance thread last saw it
 * (failover.h): failover_slot 1/0 (-1 unknown: nothing is rendered);
 * protected_ 1 when synchronized_standby_slots names existing physical
 * slots, 0 when not, -1 when it does not apply (no failover slot, before
 * PostgreSQL 17, a standby); standby_slots and inactive: slots named and
 * of them without a standby connected; lag_bytes: the primary's WAL
 * position minus their oldest restart_lsn (-1 unknown). */
void metrics_set_failover(struct metrics *m, int failover_slot, int protected_,
                          int64_t standby_slots, int64_t inactive, int64_t lag_bytes);
/* pgoutput: whether the publication has a row filter on the outbox (1: the
 * rows it filters out never reach Kafka), none (0), unknown (-1: the gauge
 * is not exported). */
void metrics_set_publication_filter(struct metrics *m, int filtered);
void metrics_reaped(struct metrics *m, uint64_t rows, uint64_t batches, double seconds);

/* Long work (progress.h): the backfill (relay thread) and a reaper run
 * (maintenance thread). Copies rows done, expected, rate and time left;
 * active false: the work ended, and the gauges keep its final numbers
 * (expected = done, 0 s left). Nothing is rendered for work that never
 * started in this process. */
enum metrics_work { METRICS_WORK_BACKFILL, METRICS_WORK_REAPER, METRICS_WORKS };
void metrics_set_progress(struct metrics *m, enum metrics_work w, const struct progress *p,
                          bool active);

/* Renders the registry as Prometheus text. Returns a malloc'ed
 * NUL-terminated string the caller frees, NULL on OOM. */
char *metrics_render(struct metrics *m);

/* True when ready; otherwise false with the reason in why. */
bool metrics_ready(struct metrics *m, int64_t max_lag_bytes, char *why, size_t whylen);

#endif
