/*
 * partition_gate.h — holds a partition's next produce request until a new
 * producer's first one there is acknowledged.
 *
 * The idempotent producer's order guarantee rests on the broker: it appends
 * a producer's batch only if its first sequence number follows the last
 * one it appended for that producer id on the partition, so a refused
 * batch makes the broker refuse every batch pipelined behind it. But a
 * broker that has no state for the producer id on a partition (a new
 * producer: a new process, a producer replaced at a gap, or one whose state
 * the broker expired after producer.id.expiration.ms) accepts any first
 * sequence number. If that first batch is refused (a record over the topic's
 * max.message.bytes) or must be retried (NOT_ENOUGH_REPLICAS while the ISR
 * changes), a later batch of the same partition, already in flight, is
 * appended ahead of it: a later event of the aggregate before an earlier
 * one (seen on the real cluster: tests/integration/test_real_kafka_faults.py,
 * test_first_request_of_a_new_producer_refused).
 *
 * So a partition is "open" once this producer had a record delivered
 * there, within PARTITION_GATE_OPEN_FOR seconds (well under Kafka's
 * default producer.id.expiration.ms of a day). Until it is, one record at a
 * time may be in flight to it; the next waits for that one's report. A
 * record produced while its topic's partitions were not known yet (the
 * topic's metadata not there: librdkafka assigns it later) counts as in
 * flight to every partition of its topic. What this costs: one round trip
 * per partition a new producer writes to, not per record.
 *
 * Pure: topics are names, the clock is passed in (monotonic seconds). The
 * caller (src/kafka/sink.c) asks before each produce, counts what it sent
 * and tells every report. Not thread-safe: one thread (the sink's caller).
 */
#ifndef OUTBOX_RELAY_PARTITION_GATE_H
#define OUTBOX_RELAY_PARTITION_GATE_H

#include <stdbool.h>
#include <stdint.h>

#define PARTITION_GATE_OPEN_FOR 600.0 /* s a delivery keeps its partition open */

/* What a record in flight was counted as (partition_gate_sent). */
#define PARTITION_GATE_NOT_COUNTED (-1)
#define PARTITION_GATE_UNASSIGNED (-2) /* its topic's partitions were not known */

struct partition_gate; /* owned by its creator: partition_gate_free */

/* A gate with nothing open; NULL when out of memory. */
struct partition_gate *partition_gate_new(void);
void partition_gate_free(struct partition_gate *g);

/* A new producer: no partition is open (the counts of records in flight
 * are kept; the caller resets only once nothing is in flight). */
void partition_gate_reset(struct partition_gate *g);

/* The gate's number for topic (>= 0, the same for the gate's life), or -1
 * when out of memory (the record then goes ungated, and is counted in
 * partition_gate_lost). The calls below take it, so that the hot path
 * compares one name per record. */
int partition_gate_topic(struct partition_gate *g, const char *topic);

/* Whether a record may go to topic before its partition is known: no
 * record unassigned when it was sent is in flight to topic (the partition
 * it went to is not known until its report). */
bool partition_gate_topic_clear(const struct partition_gate *g, int topic);

/* Whether a record may go to (topic, partition) now: the partition is
 * open, or nothing is in flight to it and nothing unassigned to its
 * topic. */
bool partition_gate_may_send(const struct partition_gate *g, int topic, int32_t partition,
                             double now);

/* A record went to (topic, partition), or to topic with partition < 0
 * (unassigned). Returns what it was counted as, which the caller keeps
 * with the record for partition_gate_reported: partition,
 * PARTITION_GATE_UNASSIGNED, or PARTITION_GATE_NOT_COUNTED when out of
 * memory (it then holds nothing back; partition_gate_lost counts it). */
int32_t partition_gate_sent(struct partition_gate *g, int topic, int32_t partition);

/* A record's report: counted is what partition_gate_sent returned for it,
 * partition where it went (-1 when never assigned), delivered whether the
 * broker appended it. A delivery opens its partition until now +
 * PARTITION_GATE_OPEN_FOR. */
void partition_gate_reported(struct partition_gate *g, int topic, int32_t counted,
                             int32_t partition, bool delivered, double now);

/* Records that went ungated for want of memory. */
unsigned long long partition_gate_lost(const struct partition_gate *g);

#endif
