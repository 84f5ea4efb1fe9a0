/*
 * metrics.c — PLACEHOLDER so the tree links while the real registry is
 * written (issue 4). Every call is a no-op. Replace wholesale.
 */
#include "outbox_relay/metrics.h"

#include <stdlib.h>

struct metrics {
    int unused;
};

struct metrics *metrics_new(const char *slot) { return calloc(1, sizeof(struct metrics)); }
void metrics_free(struct metrics *m) { free(m); }
void metrics_event_produced(struct metrics *m, const char *topic) {}
void metrics_event_delivered(struct metrics *m, const char *topic, double latency_s) {}
void metrics_delivery_error(struct metrics *m) {}
void metrics_dead_lettered(struct metrics *m) {}
void metrics_reconnected(struct metrics *m) {}
void metrics_set_inflight(struct metrics *m, size_t events, size_t bytes) {}
void metrics_set_confirmed_lsn(struct metrics *m, lsn_t lsn) {}
void metrics_set_received_lsn(struct metrics *m, lsn_t lsn) {}
void metrics_set_oldest_pending_age(struct metrics *m, double seconds) {}
void metrics_set_state(struct metrics *m, bool pg_connected, bool streaming, bool kafka_up) {}
