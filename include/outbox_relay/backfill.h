/*
 * backfill.h — the zero-gap migration from a polling relayer: publish the
 * outbox rows that were committed before the slot existed and that the
 * poller had not dispatched, read in the snapshot exported when the slot
 * was created.
 *
 * Why nothing is missed or sent twice across the cutover: the exported
 * snapshot sees exactly the transactions that committed before the slot's
 * consistent point, and the slot streams exactly those that commit after
 * it. Rows with dispatched_at set were already published by the poller and
 * are skipped (when the column exists; otherwise every visible row is
 * published).
 *
 * Owns one ordinary (non-replication) connection for the duration of the
 * call.
 */
#ifndef OUTBOX_RELAY_BACKFILL_H
#define OUTBOX_RELAY_BACKFILL_H

#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/decoder.h"

/* Called for each row, in id order. Returns 0 to go on, < 0 to stop. The
 * event's strings are valid only during the call. */
typedef int (*backfill_emit_fn)(void *ctx, const struct outbox_event *ev);

/* Imports `snapshot` in a read-only REPEATABLE READ transaction and emits
 * every row of schema.table (with dispatched_at IS NULL when that column
 * exists) in id order, fetching in batches. *rows counts the rows emitted.
 * Returns 0, or -1 with a message in err (connection, SQL, or emit asked to
 * stop). */
int backfill_run(const char *dsn, const char *snapshot, const char *schema, const char *table,
                 backfill_emit_fn emit, void *ctx, uint64_t *rows, char *err, size_t errlen);

#endif
