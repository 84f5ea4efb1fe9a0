/*
 * partition_rule.h — the rule that decides whether an INSERT into a table
 * of the outbox's schema was a row of a partitioned outbox when it was
 * written. Pure: the facts come in, an answer goes out; the catalog lookup
 * that gathers the facts and the cache around it are pg/partition.h's, the
 * shape test of step 0 is the decoder's (decoder_shaped, decoder.h).
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
 *      payload, created_at, as mapped) cannot be an event of the outbox:
 *      not a member, no lookup (decoder_shaped). Busy business tables of
 *      the same schema stop here.
 *   1. Otherwise the catalog is read now (one statement, partition_member
 *      in pg/partition.h): the relation named N, its ancestors up to the
 *      root, the pg_class xmin of each, the pg_inherits links' xmin and each
 *      child's pg_type xmin (the transaction that created the child), and
 *      the slot's catalog_xmin. That is a struct partition_facts.
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
 *      is a transaction whose commit this stream delivered at or before P
 *      (struct partition_seen), or X is T itself. Then the answer is
 *      today's membership.
 *   4. Anything else (N no longer exists under that name, or a chain row
 *      was changed by a transaction not known to have committed before P:
 *      a DETACH, ATTACH, RENAME… while the relayer was stopped or behind)
 *      is undecidable.
 * Steps 2-4 are partition_decide. ATTACH and DETACH take locks that
 * conflict with INSERTs into the table, so each INSERT is strictly before or
 * after each such change in commit order: comparing commit positions
 * decides it. See docs/failure-modes.md ("Partitioned outbox") for the
 * argument and the residual cases.
 */
#ifndef OUTBOX_RELAY_PARTITION_RULE_H
#define OUTBOX_RELAY_PARTITION_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

#define PARTITION_MAX_DEPTH 16

enum partition_answer {
    PARTITION_UNKNOWN = -1, /* undecidable or the catalog could not be read: stop */
    PARTITION_NO = 0,
    PARTITION_YES = 1
};

/* What the catalog says now about one table name (step 1). Filled by the
 * lookup (pg/partition.h); a plain struct so that the decision can be
 * tested without a server. */
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
 * undecidable, never wrong). Memory only. */
struct partition_seen;

/* At most capacity commits (0: 1); memory grows up to that as they come.
 * NULL on OOM. Free with partition_seen_free(). */
struct partition_seen *partition_seen_new(size_t capacity);
void partition_seen_free(struct partition_seen *s);
/* Remembers xid's commit ending at commit_end (forgetting the oldest when
 * full). */
void partition_seen_add(struct partition_seen *s, uint32_t xid, lsn_t commit_end);
/* True when xid's commit was delivered and ends at or before lsn. */
bool partition_seen_before(const struct partition_seen *s, uint32_t xid, lsn_t lsn);

/* Steps 2-4. tx_xid is T's xid (0 unknown); at is the INSERT's LSN; seen
 * may be NULL (no commit known). Returns an enum partition_answer; for
 * PARTITION_UNKNOWN, why says which fact could not be placed before `at`. */
int partition_decide(const struct partition_facts *f, const struct partition_seen *seen,
                     uint32_t tx_xid, lsn_t at, char *why, size_t whylen);

#endif
