/*
 * partition_rule.c — the rule of a partitioned outbox's membership (see
 * partition_rule.h): the commits the stream delivered and the decision on a
 * table's catalog facts. Pure: memory only.
 */
#include "outbox_relay/core/partition_rule.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- commits seen ------------------------------------------------------ */

struct seen_entry {
    uint32_t xid;
    lsn_t commit_end;
};

struct partition_seen {
    struct seen_entry *ring;
    size_t cap, max, head, len; /* head: index of the oldest */
};

struct partition_seen *partition_seen_new(size_t capacity)
{
    struct partition_seen *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->max = capacity ? capacity : 1;
    s->cap = s->max < 1024 ? s->max : 1024;
    s->ring = malloc(s->cap * sizeof *s->ring);
    if (s->ring == NULL) {
        free(s);
        return NULL;
    }
    return s;
}

void partition_seen_free(struct partition_seen *s)
{
    if (s == NULL)
        return;
    free(s->ring);
    free(s);
}

void partition_seen_add(struct partition_seen *s, uint32_t xid, lsn_t commit_end)
{
    if (s->len == s->cap && s->cap < s->max) {
        size_t ncap = s->cap * 2 > s->max ? s->max : s->cap * 2;
        struct seen_entry *n = malloc(ncap * sizeof *n);
        if (n != NULL) {
            for (size_t i = 0; i < s->len; i++)
                n[i] = s->ring[(s->head + i) % s->cap];
            free(s->ring);
            s->ring = n;
            s->cap = ncap;
            s->head = 0;
        }
    }
    if (s->len == s->cap) { /* full: forget the oldest */
        s->head = (s->head + 1) % s->cap;
        s->len--;
    }
    s->ring[(s->head + s->len) % s->cap] = (struct seen_entry){xid, commit_end};
    s->len++;
}

bool partition_seen_before(const struct partition_seen *s, uint32_t xid, lsn_t lsn)
{
    /* Newest first: the transactions asked about are usually recent. A
     * reconnect replays commits, so one xid may be there twice (same
     * position). */
    for (size_t i = s->len; i-- > 0;) {
        const struct seen_entry *e = &s->ring[(s->head + i) % s->cap];
        if (e->xid == xid && e->commit_end <= lsn)
            return true;
    }
    return false;
}

/* ---- the decision ------------------------------------------------------ */

int partition_decide(const struct partition_facts *f, const struct partition_seen *seen,
                     uint32_t tx_xid, lsn_t at, char *why, size_t whylen)
{
    if (!f->exists) {
        snprintf(why, whylen, "no table has that name now: it was renamed or dropped after "
                 "these rows were written");
        return PARTITION_UNKNOWN;
    }
    if (f->member && f->since_birth)
        return PARTITION_YES;
    for (size_t i = 0; i < f->nchain; i++) {
        uint32_t x = f->xmin[i];
        if (f->xmin_old[i] || (tx_xid != 0 && x == tx_xid) ||
            (seen != NULL && partition_seen_before(seen, x, at)))
            continue;
        snprintf(why, whylen, "its catalog entry%s was changed by transaction %u, not known "
                 "to have committed before these rows (a DETACH, ATTACH, RENAME or other ALTER "
                 "TABLE while the relayer was stopped or behind?)",
                 i == 0 ? "" : " (of a parent)", x);
        return PARTITION_UNKNOWN;
    }
    return f->member ? PARTITION_YES : PARTITION_NO;
}
