/*
 * deadletter.h — dead letters (--on-poison dead-letter): the queue that
 * keeps a poison delivery report until the main loop can send it, the
 * dead-letter record, and its sending. Which failed events become dead
 * letters is the pure policy of core/deadletter_judge.h.
 *
 * The queue and the record are memory only (unit-tested without a broker,
 * tests/unit/test_deadletter.c); deadletter_produce hands the record to the
 * sink (sink_produce_raw), the one call here that reaches librdkafka.
 *
 * A dead letter goes out under the poison event's own token, so its
 * delivery report acks the original event and the slot moves past it. A
 * poison delivery report arrives inside sink_poll(), where nothing may be
 * produced and whose buffers die when the callback returns: the report is
 * copied into the queue, and the loop sends it after the poll
 * (relay_sink.c: relay_serve_dead_letters).
 *
 * The record: key = the event's aggregate id, value = its payload (left
 * out when it would not fit in message.max.bytes with the headers), and
 * headers event_id, event_type, aggregate_id, lsn, original_topic, error.
 */
#ifndef OUTBOX_RELAY_DEADLETTER_H
#define OUTBOX_RELAY_DEADLETTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

struct sink;
struct sink_report;

/* A poison report, copied. Strings are NUL-terminated; key and value may
 * be NULL (then their length is 0). */
struct deadletter_job {
    struct deadletter_job *next;
    uint64_t token;
    lsn_t lsn;
    char *event_id, *type, *topic, *error;
    char *key, *value;
    size_t key_len, value_len;
};

/* Jobs, oldest first. Zero-initialised is empty; the queue owns its jobs. */
struct deadletter_queue {
    struct deadletter_job *head, *tail;
};

/* Copies rep (a failed delivery of token, whose event is at lsn) to the
 * end of q. Returns 0, or -1 (out of memory: nothing queued). */
int deadletter_queue_push(struct deadletter_queue *q, uint64_t token, lsn_t lsn,
                          const struct sink_report *rep);

/* Takes the oldest job off q (NULL when empty); the caller owns it and
 * frees it with deadletter_job_free(). */
struct deadletter_job *deadletter_queue_pop(struct deadletter_queue *q);

bool deadletter_queue_empty(const struct deadletter_queue *q);

/* Frees every job (a rewind or reconnect since: the events come again). */
void deadletter_queue_clear(struct deadletter_queue *q);

void deadletter_job_free(struct deadletter_job *j);

#define DEADLETTER_NHEADERS 6

/* One dead-letter record. headers point into the struct itself (and into
 * the strings given to deadletter_build): do not copy it. */
struct deadletter_msg {
    char lsn[32];
    char aggregate[128];
    const char *headers[2 * DEADLETTER_NHEADERS];
    const char *key, *value;
    size_t key_len, value_len;
};

/* Builds the record for a poison event (see the top). max_message_bytes:
 * the producer's limit. Memory only. */
void deadletter_build(struct deadletter_msg *m, lsn_t lsn, const char *event_id,
                      const char *type, const char *topic, const char *key, size_t key_len,
                      const char *value, size_t value_len, const char *error,
                      size_t max_message_bytes);

/* Produces m to topic under token through the sink (I/O: librdkafka's
 * queue; the delivery report comes from sink_poll). Returns an enum
 * sink_rc (sink.h). */
int deadletter_produce(struct sink *sk, const char *topic, const struct deadletter_msg *m,
                       uint64_t token);

#endif
