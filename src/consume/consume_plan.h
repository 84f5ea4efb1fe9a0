/*
 * consume_plan.h — the pure decisions of the parallel apply (no I/O, no
 * librdkafka, no libpq; tested in tests/unit/consume/test_consume_plan.c):
 *
 *   which apply worker a message goes to: the same key always to the same
 *   worker, so that the events of one aggregate are applied by one
 *   PostgreSQL connection, in their Kafka order; the key is the Kafka key
 *   or, with --apply-key, a top-level member of the JSON payload;
 *
 *   which offset of each partition may be committed after some messages of
 *   a batch were applied and others not: the lowest unapplied one (so a
 *   restart reads it again), or the last + 1 when all were applied; never
 *   past an unapplied event.
 *
 * Ownership: struct consume_lowmark owns its array (consume_lowmark_free);
 * the topic strings it holds are borrowed from the caller and must outlive
 * its use (librdkafka's topic names do, while the messages are held).
 */
#ifndef OUTBOX_RELAY_CONSUME_PLAN_H
#define OUTBOX_RELAY_CONSUME_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The apply worker (0 .. nworkers-1) of a message: FNV-1a of its key
 * modulo nworkers. A message without a key (key NULL) has no aggregate; it
 * goes by its partition, so that a partition's keyless messages keep their
 * order too. nworkers <= 1: always 0. */
unsigned consume_worker_of(const void *key, size_t keylen, int32_t partition, unsigned nworkers);

/* The raw value of the top-level member name of the JSON object
 * json[0..len) (--apply-key): for a string the bytes between its quotes,
 * still escaped; for any other value its token. The member's name is
 * compared byte for byte with the escaped key as written. false when json
 * is not an object, has no such member, or is malformed before it (the
 * caller then falls back to the Kafka key). *val points into json. */
bool consume_json_member(const char *json, size_t len, const char *name, const char **val,
                         size_t *vlen);

/* One partition's state in a batch. */
struct consume_lowmark_part {
    const char *topic;        /* borrowed */
    int32_t partition;
    int64_t min_unapplied;    /* INT64_MAX when none */
    int64_t min_applied;      /* INT64_MAX when none */
    int64_t max_applied;      /* -1 when none */
};

/* Per (topic, partition): the messages of one batch, applied or not. */
struct consume_lowmark {
    struct consume_lowmark_part *parts;
    size_t nparts, cap;
};

/* Empties t (keeps its memory). */
void consume_lowmark_reset(struct consume_lowmark *t);

/* Frees what t owns; t can be used again after consume_lowmark_reset. */
void consume_lowmark_free(struct consume_lowmark *t);

/* Notes message (topic, partition, offset) as applied or not. Any order.
 * Returns 0, -1 when out of memory (t unchanged). */
int consume_lowmark_note(struct consume_lowmark *t, const char *topic, int32_t partition,
                         int64_t offset, bool applied);

/* The offset to commit for part i (0 .. t->nparts-1): the lowest unapplied
 * offset when some message below it was applied, the highest applied + 1
 * when every message of the partition was applied. false when nothing may
 * move forward (the partition's first message in the batch is unapplied). */
bool consume_lowmark_commit(const struct consume_lowmark *t, size_t i, int64_t *offset);

#endif
