/*
 * tracker.h — the ack tracker: which WAL position may be confirmed to the
 * server, given which Kafka deliveries have succeeded. Pure: no I/O.
 *
 * The replication stream delivers transactions in commit order. Each
 * transaction's events are produced to Kafka and their delivery reports
 * come back in any order. The slot may only be confirmed up to the end LSN
 * of a transaction when every event of that transaction and of every
 * transaction before it has been delivered.
 *
 * The tracker keeps a ring of in-flight transaction groups in commit order.
 * A transaction without events never takes a slot: it is folded into the
 * newest group (or, when nothing is in flight, confirmed at once). When the
 * ring is full, a new transaction is folded into the newest group: the group
 * then confirms a little later, never earlier, so the ring never blocks.
 *
 * Tokens: tracker_add() returns a token for each event; the delivery report
 * hands it back to tracker_ack(). Tokens of a previous generation (before
 * tracker_reset) are ignored, so a late report after a reconnect cannot
 * corrupt the count.
 *
 * A token names a group, not an event: every event of a transaction, and
 * of every transaction folded into the same group, gets the same token.
 * Acking a group more often than it has pending events is refused, but the
 * tracker cannot tell which event a surplus ack was meant for, so the
 * caller must ack each event exactly once (librdkafka calls the delivery
 * report exactly once per message).
 */
#ifndef OUTBOX_RELAY_TRACKER_H
#define OUTBOX_RELAY_TRACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

struct tracker;

/* Creates a tracker with room for `groups` in-flight groups (>= 2) starting
 * at confirmed position `confirmed`. Returns NULL on allocation failure or
 * when groups < 2. This is the tracker's only allocation.
 * The caller owns the tracker and frees it with tracker_free(). */
struct tracker *tracker_new(size_t groups, lsn_t confirmed);
void tracker_free(struct tracker *t);

/* A transaction begins ('B'). Calling it while a transaction is open is a
 * protocol error: returns -1 and leaves the tracker unchanged. */
int tracker_begin(struct tracker *t);

/* One event of the open transaction is about to be produced; returns its
 * token (never 0). Returns 0 when no transaction is open (the caller treats
 * that as a protocol error). */
uint64_t tracker_add(struct tracker *t);

/* The open transaction committed ('C'); end_lsn is the end of its commit
 * record. Returns -1 when no transaction is open. */
int tracker_commit(struct tracker *t, lsn_t end_lsn);

/* An event outside any transaction (a non-transactional logical message)
 * at end_lsn: returns its token, tracked like a one-event transaction.
 * Returns 0 (and changes nothing) while a transaction is open: logical
 * decoding emits a transaction's changes in one piece at its commit, so a
 * non-transactional message between 'B' and 'C' is a protocol error. */
uint64_t tracker_add_single(struct tracker *t, lsn_t end_lsn);

/* A delivery succeeded. Returns 0, or -1 and changes nothing for a token
 * that is unknown, stale (issued before tracker_reset) or whose group has
 * no pending events left (a duplicate ack). */
int tracker_ack(struct tracker *t, uint64_t token);

/* True while token names a group of the current generation that is not
 * retired yet (it may be fully acked but wait behind an older group):
 * false for 0, for a token issued before tracker_reset and for a retired
 * group. A failed delivery of a token that is not live needs
 * no handling: its event is sent again from the confirmed position. */
bool tracker_token_live(const struct tracker *t, uint64_t token);

/* The position that may be confirmed now. Never moves backwards. */
lsn_t tracker_confirmed(const struct tracker *t);

/* The server says it has sent everything up to lsn (keepalive). Outside a
 * transaction that position becomes confirmable once everything received
 * before it is delivered (at once when nothing is pending), so an idle
 * outbox never holds WAL back, also after an outage drains. */
void tracker_idle(struct tracker *t, lsn_t lsn);

/* Events produced and not yet acknowledged. */
size_t tracker_pending(const struct tracker *t);

/* True while a transaction is open (between begin and commit). */
bool tracker_in_tx(const struct tracker *t);

/* The commit LSN of the group a token belongs to (0 while its transaction
 * is still open or the token is unknown), for error messages. For a folded
 * group this is the newest commit folded in; while a later transaction is
 * being folded into the group it is 0 again until that one commits. A
 * group that is fully acked and retired is unknown (0). */
lsn_t tracker_token_lsn(const struct tracker *t, uint64_t token);

/* Forgets every group and the open transaction (after the replication
 * connection was lost; the server resends from the confirmed position) and
 * starts a new token generation. The confirmed position is kept, or raised to
 * `confirmed` when that is larger. */
void tracker_reset(struct tracker *t, lsn_t confirmed);

/* Notes: each group carries one int64 the caller chooses (the relay stores
 * the commit time of the group's first transaction, for latency metrics).
 * tracker_stamp sets it for the token's group unless already set;
 * tracker_token_stamp reads it (0 for a stale token); tracker_oldest_stamp
 * is the oldest in-flight group's (0 when nothing is in flight). */
void tracker_stamp(struct tracker *t, uint64_t token, int64_t stamp);
int64_t tracker_token_stamp(const struct tracker *t, uint64_t token);
int64_t tracker_oldest_stamp(const struct tracker *t);

#endif
