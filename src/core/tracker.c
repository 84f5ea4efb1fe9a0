/*
 * tracker.c — the ack tracker: a fixed ring of in-flight transaction groups
 * in commit order whose fully delivered prefix moves the confirmed LSN.
 * Pure: no I/O, and no allocation after tracker_new().
 *
 * Groups and tokens. Every group gets the next number of one 64-bit
 * sequence that never repeats for the life of the tracker, and that number
 * is the token of every event in the group. The groups in the ring always
 * hold the consecutive numbers [head_seq, head_seq + count), so a token
 * finds its group in O(1): it is live iff it lies in that range, and its
 * slot is token % capacity (unique because count <= capacity). Retiring
 * the head raises head_seq; tracker_reset() raises it past every number
 * handed out so far. That floor is the generation: a token below it was
 * issued by a retired group or an earlier generation and is stale. The
 * sequence starts at 1, so 0 is never a token.
 *
 * Folding. When the ring is full, a transaction's first event joins the
 * newest group instead of opening one. The group is reopened (closed =
 * false) until that transaction commits, so it cannot retire — and the
 * confirmed position cannot pass the transaction's events — even when all
 * of the group's earlier events were acked meanwhile. The commit then sets
 * the group's end to the later commit LSN. A group's events therefore
 * confirm at the same time or later than they would have without folding,
 * never earlier.
 */
#include "outbox_relay/core/tracker.h"

#include <stdlib.h>

struct group {
    lsn_t end_lsn;  /* largest commit end folded in; valid once closed */
    size_t pending; /* events produced and not yet acked */
    bool closed;    /* every transaction in the group has committed */
    int64_t stamp;  /* caller's note (commit time) of its first event, 0 = none */
};

struct tracker {
    struct group *ring; /* slot of group seq s is s % cap */
    size_t cap;
    size_t count;      /* groups in flight */
    uint64_t head_seq; /* number of the oldest group in flight */
    lsn_t confirmed;
    size_t pending; /* sum of the groups' pending */
    bool in_tx;
    bool tx_has_group; /* the open transaction has events, in group tx_seq */
    uint64_t tx_seq;
};

static struct group *group_at(const struct tracker *t, uint64_t seq)
{
    return &t->ring[seq % t->cap];
}

static struct group *newest(const struct tracker *t)
{
    return group_at(t, t->head_seq + t->count - 1);
}

static bool token_live(const struct tracker *t, uint64_t token)
{
    return token >= t->head_seq && token - t->head_seq < t->count;
}

static void raise_confirmed(struct tracker *t, lsn_t lsn)
{
    if (lsn > t->confirmed)
        t->confirmed = lsn;
}

/* Retires every fully delivered, committed group at the head. */
static void retire(struct tracker *t)
{
    while (t->count > 0) {
        struct group *g = group_at(t, t->head_seq);

        if (!g->closed || g->pending > 0)
            break;
        raise_confirmed(t, g->end_lsn);
        t->head_seq++;
        t->count--;
    }
}

/* Appends a fresh group; the caller has checked that there is room.
 * Returns its number. */
static uint64_t push_group(struct tracker *t, lsn_t end_lsn, bool closed)
{
    uint64_t seq = t->head_seq + t->count;
    struct group *g = group_at(t, seq);

    g->end_lsn = end_lsn;
    g->pending = 0;
    g->closed = closed;
    g->stamp = 0;
    t->count++;
    return seq;
}

struct tracker *tracker_new(size_t groups, lsn_t confirmed)
{
    struct tracker *t;

    if (groups < 2)
        return NULL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ring = calloc(groups, sizeof(*t->ring));
    if (t->ring == NULL) {
        free(t);
        return NULL;
    }
    t->cap = groups;
    t->head_seq = 1;
    t->confirmed = confirmed;
    return t;
}

void tracker_free(struct tracker *t)
{
    if (t == NULL)
        return;
    free(t->ring);
    free(t);
}

int tracker_begin(struct tracker *t)
{
    if (t->in_tx)
        return -1;
    t->in_tx = true;
    t->tx_has_group = false;
    return 0;
}

uint64_t tracker_add(struct tracker *t)
{
    struct group *g;

    if (!t->in_tx)
        return 0;
    if (!t->tx_has_group) {
        if (t->count < t->cap) {
            t->tx_seq = push_group(t, 0, false);
        } else {
            /* Full: join the newest group and keep it from retiring until
             * this transaction commits (see the top of the file). */
            t->tx_seq = t->head_seq + t->count - 1;
            group_at(t, t->tx_seq)->closed = false;
        }
        t->tx_has_group = true;
    }
    g = group_at(t, t->tx_seq);
    g->pending++;
    t->pending++;
    return t->tx_seq;
}

int tracker_commit(struct tracker *t, lsn_t end_lsn)
{
    struct group *g;

    if (!t->in_tx)
        return -1;
    t->in_tx = false;
    if (t->tx_has_group) {
        t->tx_has_group = false;
        g = group_at(t, t->tx_seq);
        if (end_lsn > g->end_lsn)
            g->end_lsn = end_lsn;
        g->closed = true;
        retire(t); /* its events may all be acked already */
    } else if (t->count > 0) {
        /* No events: confirmable as soon as everything before it is, which
         * is exactly when the newest group is. */
        g = newest(t);
        if (end_lsn > g->end_lsn)
            g->end_lsn = end_lsn;
    } else {
        raise_confirmed(t, end_lsn);
    }
    return 0;
}

uint64_t tracker_add_single(struct tracker *t, lsn_t end_lsn)
{
    uint64_t seq;
    struct group *g;

    if (t->in_tx)
        return 0;
    if (t->count < t->cap) {
        seq = push_group(t, end_lsn, true);
    } else {
        seq = t->head_seq + t->count - 1;
        if (end_lsn > group_at(t, seq)->end_lsn)
            group_at(t, seq)->end_lsn = end_lsn;
    }
    g = group_at(t, seq);
    g->pending++;
    t->pending++;
    return seq;
}

bool tracker_token_live(const struct tracker *t, uint64_t token)
{
    return token != 0 && token_live(t, token);
}

int tracker_ack(struct tracker *t, uint64_t token)
{
    struct group *g;

    if (!token_live(t, token))
        return -1;
    g = group_at(t, token);
    if (g->pending == 0)
        return -1;
    g->pending--;
    t->pending--;
    retire(t);
    return 0;
}

lsn_t tracker_confirmed(const struct tracker *t)
{
    return t->confirmed;
}

void tracker_idle(struct tracker *t, lsn_t lsn)
{
    /* Outside a transaction a keepalive is like an empty transaction at its
     * position: everything before it has been received, so it may be
     * confirmed as soon as everything before it is delivered — at once with
     * nothing in flight, else together with the newest group (which is
     * closed, as no transaction is open). Inside a transaction the commit
     * that follows is later anyway. */
    if (t->in_tx)
        return;
    if (t->count == 0) {
        raise_confirmed(t, lsn);
    } else {
        struct group *g = newest(t);
        if (lsn > g->end_lsn)
            g->end_lsn = lsn;
    }
}

size_t tracker_pending(const struct tracker *t)
{
    return t->pending;
}

bool tracker_in_tx(const struct tracker *t)
{
    return t->in_tx;
}

lsn_t tracker_token_lsn(const struct tracker *t, uint64_t token)
{
    const struct group *g;

    if (!token_live(t, token))
        return 0;
    g = group_at(t, token);
    return g->closed ? g->end_lsn : 0;
}

void tracker_reset(struct tracker *t, lsn_t confirmed)
{
    t->head_seq += t->count;
    t->count = 0;
    t->pending = 0;
    t->in_tx = false;
    t->tx_has_group = false;
    raise_confirmed(t, confirmed);
}

void tracker_stamp(struct tracker *t, uint64_t token, int64_t stamp)
{
    if (token_live(t, token) && group_at(t, token)->stamp == 0)
        group_at(t, token)->stamp = stamp;
}

int64_t tracker_token_stamp(const struct tracker *t, uint64_t token)
{
    return token_live(t, token) ? group_at(t, token)->stamp : 0;
}

int64_t tracker_oldest_stamp(const struct tracker *t)
{
    return t->count > 0 ? group_at(t, t->head_seq)->stamp : 0;
}
