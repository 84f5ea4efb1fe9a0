/*
 * relay.h — the relay itself: the loop that ties the replication stream,
 * the output plugin's decoder (decoder.h), dispatch (dispatch.h: what each
 * record means for the ack tracker and the sink) and the Kafka sink
 * together, and rides out connection losses with a capped, jittered
 * exponential backoff, and delivery errors that are waited out
 * (kafka_errors.h) by producing again from the confirmed position.
 *
 * The guarantee it keeps: the slot's confirmed position only moves past a
 * transaction once every event of it and of every transaction before it has
 * a successful Kafka delivery report. Anything else (a crash, a kill, a lost
 * connection) at worst sends some events again.
 */
#ifndef OUTBOX_RELAY_RELAY_H
#define OUTBOX_RELAY_RELAY_H

#include <signal.h>
#include <stdint.h>

#include "outbox_relay/config/config.h"
#include "outbox_relay/base/lsn.h"

/* Counters the relay keeps; read by metrics. */
struct relay_stats {
    uint64_t events_produced;
    uint64_t events_delivered;
    uint64_t delivery_errors;
    uint64_t dead_lettered;
    uint64_t reconnects;
    uint64_t rewinds; /* re-productions from the confirmed position after a
                         delivery error that is waited out */
    uint64_t fenced;  /* exactly-once: times another replica fenced this one */
    lsn_t received_lsn;
    lsn_t confirmed_lsn;
};

struct relay;
struct metrics;

/* Creates a relay for cfg (which must outlive it). stop is set by signal
 * handlers; the relay checks it between steps. metrics (may be NULL) is
 * borrowed and must outlive the relay. Returns NULL with a message in err
 * when the Kafka producer cannot be configured. */
struct relay *relay_new(const struct relay_config *cfg, volatile sig_atomic_t *stop,
                        struct metrics *metrics, char *err, size_t errlen);
void relay_free(struct relay *r);

/* relay_run's answer when --plugin was not given and the slot or the
 * server wants the plugin that this relay was not made with: make a new
 * relay with relay_switch_plugin()'s (nothing was streamed yet). */
#define RELAY_SWITCH_PLUGIN 3

/* Runs until *stop is set (returns 0 after a clean stop: deliveries waited
 * for, final status sent), a fatal error (returns 1, error logged) or
 * RELAY_SWITCH_PLUGIN. */
int relay_run(struct relay *r);

/* After RELAY_SWITCH_PLUGIN: "wal2json" or "pgoutput". */
const char *relay_switch_plugin(const struct relay *r);

const struct relay_stats *relay_stats(const struct relay *r);

#endif
