/*
 * progress_store.h — the progress topic of --delivery exactly-once: made
 * (or checked) compacted at start, and the slot's last committed progress
 * record read back (progress_record.h says what the record is).
 *
 * The record for a slot always goes to one partition, chosen by
 * progress_partition() of its key (progress_record_key) over the topic's
 * partition count, so the reader reads that partition only (and the one of
 * the slot's name alone, the key of records written before the system
 * identifier was added, when another): from its start to its end as a read_committed
 * consumer sees it (the last stable offset), after the relayer's
 * transactional producer was initialised, which aborts whatever an older
 * producer of the same slot left open. Compaction keeps the last record of
 * each key; the reader keeps the highest lsn among the slot's records, so
 * an uncompacted tail reads the same.
 */
#ifndef OUTBOX_RELAY_PROGRESS_STORE_H
#define OUTBOX_RELAY_PROGRESS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/core/progress_record.h"

struct sink;

/* Makes sure topic exists with cleanup.policy compact, through the sink's
 * producer (an admin request): creates it (1 partition, the brokers'
 * default replication factor) when missing; refuses one whose
 * cleanup.policy has no "compact" (retention would delete the progress).
 * Returns the partition count (> 0), 0 for a retriable failure (brokers
 * unreachable, timeout) or -1 for a permanent one; err says which.
 * tick(tick_ctx), when not NULL, is called while the brokers are waited
 * for (the relay keeps its status updates going): every 100 ms of an admin
 * request, and between the tries of a metadata request, which wait 1 s,
 * then 2 s, 4 s ... up to timeout_ms in all. */
int progress_topic_ensure(struct sink *sk, const char *topic, int timeout_ms,
                          void (*tick)(void *ctx), void *tick_ctx, char *err, size_t errlen);

/* Where the progress store's reader connects: bootstrap servers and the -X
 * properties (pairs; producer-only ones are ignored by the consumer). */
struct progress_reader_options {
    const char *brokers;
    const char *const *kafka;
    size_t nkafka;
    /* Called every 100 ms or so while the reader waits (NULL: none): the
     * relay keeps its replication connection's status updates going. */
    void (*tick)(void *ctx);
    void *tick_ctx;
};

/* Whose progress is read: the slot, its database, the server's system
 * identifier (known once connected) and the producer's transactional.id. */
struct progress_owner_id {
    const char *slot;
    const char *database;
    const char *system_id;
    const char *txn_id;
};

/* Reads the last committed record of `who` from topic, of nparts (> 0)
 * partitions. Records of another cluster under the same slot name
 * (progress_record_owner: PROGRESS_FOREIGN) are passed over. Returns 1
 * with *rec filled, 0 when the slot has none (a first start), -2 for a
 * retriable failure (timeout, brokers unreachable) or -1 for a permanent
 * one (a record of ours that cannot be read, a record of another database
 * under the same slot: database non-NULL and both known, or only records
 * that cannot say which cluster wrote them: PROGRESS_UNKNOWN); err says
 * which, and how to go on. */
int progress_read(const struct progress_reader_options *opts, const char *topic, int32_t nparts,
                  const struct progress_owner_id *who, int timeout_ms,
                  struct progress_record *rec, char *err, size_t errlen);

#endif
