/*
 * partition.h — which tables' INSERTs belong to a partitioned outbox, as of
 * the moment each row was written.
 *
 * wal2json names a partitioned outbox's rows after their leaf partition,
 * as the catalogs were when the row was written (decoding reads a historic
 * catalog), and with "add-tables" 'schema.*' it sends the INSERTs of every
 * table of the schema. It gives no relation OID and no parent. The relayer
 * can only ask today's catalog, so each answer is checked for being the
 * answer of that moment, and where that cannot be shown the change is
 * reported as undecidable (the caller stops; it never skips on a guess).
 *
 * THE RULE. For an INSERT at LSN P, in transaction T, into schema.N:
 *   0. A row without the columns the decoder needs (id, aggregate_id, type,
 *      payload, created_at) cannot be an event of the outbox: not a member,
 *      no lookup. Busy business tables of the same schema stop here.
 *   1. Otherwise the catalog is read now (one statement): the relation
 *      named N, its ancestors up to the root, the pg_class xmin of each,
 *      the pg_inherits links' xmin and each child's pg_type xmin (the
 *      transaction that created the child), and the slot's catalog_xmin.
 *   2. N is a member "since birth" when every link on its path to the
 *      outbox was made by the transaction that created the child (CREATE
 *      TABLE … PARTITION OF, pg_inherits.xmin = pg_type.xmin): such a table
 *      has been part of the outbox for every row it ever held (a DETACH
 *      deletes the link; an ATTACH makes a new one). Member.
 *   3. Otherwise the current state is the state at P iff no pg_class row on
 *      the chain changed after P. A row version whose xmin X committed at
 *      or before P is that: X precedes the slot's catalog_xmin (the server
 *      keeps catalog rows only for transactions the slot may still decode,
 *      so X finished before the slot's restart point, which is <= P), or X
 *      is a transaction whose commit this stream delivered at or before P,
 *      or X is T itself. Then the answer is today's membership.
 *   4. Anything else (N no longer exists under that name, or a chain row
 *      was changed by a transaction not known to have committed before P:
 *      a DETACH, ATTACH, RENAME… while the relayer was stopped or behind)
 *      is undecidable.
 * ATTACH and DETACH take locks that conflict with INSERTs into the table,
 * so each INSERT is strictly before or after each such change in commit
 * order: comparing commit positions decides it. See docs/failure-modes.md
 * ("Partitioned outbox") for the argument and the residual cases.
 *
 * Cached answers are asked again: a "not a member" answer on the next
 * transaction that writes the table (a later ATTACH must take effect), a
 * "member" answer after any transaction in which the relayer saw no row of
 * the schema (a catalog-only transaction: a DETACH, RENAME, DROP).
 *
 * The lookup connection is an ordinary one (pgconn_open: connect_timeout
 * 10 s), opened on the first lookup and kept; it is reopened after an error.
 */
#ifndef OUTBOX_RELAY_PARTITION_H
#define OUTBOX_RELAY_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/decode/w2j.h"
#include "outbox_relay/base/lsn.h"

#define PARTITION_MAX_DEPTH 16

enum partition_answer {
    PARTITION_UNKNOWN = -1, /* undecidable or the catalog could not be read: stop */
    PARTITION_NO = 0,
    PARTITION_YES = 1
};

/* What the catalog says now about one table name (step 1). Filled by the
 * lookup; exposed so that the decision can be tested without a server. */
struct partition_facts {
    bool exists;      /* a relation of that name exists in the schema */
    bool member;      /* it is a leaf partition of the outbox's tree */
    bool since_birth; /* member, and every link was made at the child's creation */
    size_t nchain;    /* the relation and its ancestors, nearest first */
    uint32_t xmin[PARTITION_MAX_DEPTH];      /* pg_class.xmin of each */
    bool xmin_old[PARTITION_MAX_DEPTH];      /* precedes the slot's catalog_xmin */
};

/* Commits this stream has delivered: (xid, commit end LSN), newest last,
 * bounded (oldest forgotten first; a forgotten one can only make a lookup
 * undecidable, never wrong). */
struct partition_seen;

struct partition_seen *partition_seen_new(size_t capacity);
void partition_seen_free(struct partition_seen *s);
void partition_seen_add(struct partition_seen *s, uint32_t xid, lsn_t commit_end);
/* True when xid's commit was delivered and ends at or before lsn. */
bool partition_seen_before(const struct partition_seen *s, uint32_t xid, lsn_t lsn);

/* Steps 2-4 (pure). tx_xid is T's xid (0 unknown); at is the INSERT's LSN.
 * Returns an enum partition_answer; for PARTITION_UNKNOWN, why says which
 * fact could not be placed before `at`. */
int partition_decide(const struct partition_facts *f, const struct partition_seen *seen,
                     uint32_t tx_xid, lsn_t at, char *why, size_t whylen);

/* Step 0 (pure): whether an 'I' record has every column the decoder needs. */
bool partition_outbox_shaped(const struct w2j_record *rec);
/* The same for the columns of map (NULL: OUTBOX_DEFAULT_COLUMNS). */
bool partition_outbox_shaped_as(const struct w2j_record *rec, const struct outbox_columns_map *map);

struct partition_map;

/* A map for the outbox schema.table, looking things up over dsn with slot's
 * catalog_xmin. The strings are copied. NULL on OOM. */
struct partition_map *partition_map_new(const char *dsn, const char *slot, const char *schema,
                                        const char *table);
void partition_map_free(struct partition_map *pm);

/* The outbox's columns (borrowed; NULL: OUTBOX_DEFAULT_COLUMNS), for step 0. */
void partition_map_set_columns(struct partition_map *pm, const struct outbox_columns_map *map);

/* The stream's transaction boundaries: xid from the B/C line (wal2json's
 * include-xids; < 0 unknown), commit_end the commit's end LSN. */
void partition_tx_begin(struct partition_map *pm, int64_t xid);
void partition_tx_commit(struct partition_map *pm, int64_t xid, lsn_t commit_end);

/* Whether the 'I' record rec (table != the outbox's own name, schema = the
 * outbox's) at LSN `at` is a row of the outbox. Returns an enum
 * partition_answer; PARTITION_UNKNOWN fills err (table, xids, what to do). */
int partition_member(struct partition_map *pm, const struct w2j_record *rec, lsn_t at,
                     char *err, size_t errlen);

#endif
