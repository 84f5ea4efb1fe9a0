/*
 * partition.h — which tables' INSERTs belong to a partitioned outbox, as of
 * the moment each row was written: the catalog lookup and the cache of
 * answers around the rule of core/partition_rule.h (steps 0-4, and why
 * they are exact, are written there).
 *
 * The caller (the relay loop) asks the decoder first whether a row has the
 * outbox's columns (step 0, decoder_shaped); only such rows come here.
 * Then the catalog is read (step 1, one statement, after waiting until the
 * row's transaction is visible to other sessions) and partition_decide
 * (steps 2-4) gives the answer. The stream's commits, which step 3 places
 * catalog changes by, come in through the transaction hooks.
 *
 * Cached answers are asked again: a "not a member" answer on the next
 * transaction that writes the table (a later ATTACH must take effect), a
 * "member" answer after any transaction in which the relayer saw no row of
 * the schema (a catalog-only transaction: a DETACH, RENAME, DROP).
 *
 * I/O: the lookup connection is an ordinary one (pgconn_open:
 * connect_timeout 10 s), opened on the first lookup and kept; it is
 * reopened after an error. Every statement on it is bounded (10 s).
 */
#ifndef OUTBOX_RELAY_PARTITION_H
#define OUTBOX_RELAY_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/core/partition_rule.h"

struct partition_map;

/* A map for the outbox schema.table, looking things up over dsn with slot's
 * catalog_xmin. The strings are copied. No connection yet (the first lookup
 * opens it). NULL on OOM. */
struct partition_map *partition_map_new(const char *dsn, const char *slot, const char *schema,
                                        const char *table);
void partition_map_free(struct partition_map *pm);

/* The stream's transaction boundaries: xid from the begin/commit record
 * (wal2json's include-xids; < 0 unknown), commit_end the commit's end LSN. */
void partition_tx_begin(struct partition_map *pm, int64_t xid);
void partition_tx_commit(struct partition_map *pm, int64_t xid, lsn_t commit_end);

/* The open transaction inserted a row into a table of the outbox's schema
 * (with or without the outbox's columns): it is not catalog-only, so the
 * "member" answers stay cached across it. partition_member() implies it. */
void partition_tx_row(struct partition_map *pm);

/* Whether the row inserted at LSN `at` into the table named name (of the
 * outbox's schema, not the outbox itself, and with the outbox's columns:
 * step 0 is the caller's, decoder_shaped) belongs to the outbox. name is
 * the table's name as the server has it (decoder_table_name), NULL when it
 * could not be read. May look the table up in the catalog (blocking,
 * bounded). Returns an enum partition_answer; PARTITION_UNKNOWN fills err
 * (table, xids, what to do). */
int partition_member(struct partition_map *pm, const char *name, lsn_t at, char *err,
                     size_t errlen);

#endif
