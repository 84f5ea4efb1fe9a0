/*
 * consume_plan.c — the pure decisions of the parallel apply (see
 * consume_plan.h): key → worker, and the lowest unapplied offset of each
 * partition of a batch.
 *
 * The invariant the commit rests on: a batch holds, per partition, a run of
 * consecutive fetched messages; the group's committed offset of a
 * partition is "everything below it is applied". So the offset that may be
 * committed is the lowest one not applied (when anything below it in the
 * batch was applied; else there is no progress to record), or the last
 * one + 1 when all were. Effects applied above the lowest unapplied event
 * (by another worker) are in processed_events: a redelivery skips them.
 */
#include "consume_plan.h"

#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/jscan.h"

unsigned consume_worker_of(const void *key, size_t keylen, int32_t partition, unsigned nworkers)
{
    if (nworkers <= 1)
        return 0;
    uint32_t h = 2166136261u; /* FNV-1a, 32 bits */
    if (key != NULL) {
        const unsigned char *p = key;
        for (size_t i = 0; i < keylen; i++) {
            h ^= p[i];
            h *= 16777619u;
        }
    } else {
        uint32_t v = (uint32_t) partition;
        for (int i = 0; i < 4; i++) {
            h ^= (v >> (8 * i)) & 0xffu;
            h *= 16777619u;
        }
    }
    return h % nworkers;
}

bool consume_json_member(const char *json, size_t len, const char *name, const char **val,
                         size_t *vlen)
{
    struct jscan sc = {.s = json, .len = len};
    size_t nlen = strlen(name);
    jscan_ws(&sc);
    if (jscan_expect(&sc, '{', "{") < 0)
        return false;
    jscan_ws(&sc);
    if (jscan_peek(&sc) == '}')
        return false;
    for (;;) {
        struct jscan_value k, v;
        jscan_ws(&sc);
        if (jscan_peek(&sc) != '"' || jscan_string(&sc, &k) < 0)
            return false;
        jscan_ws(&sc);
        if (jscan_expect(&sc, ':', ":") < 0)
            return false;
        jscan_ws(&sc);
        if (jscan_value(&sc, 1, &v) < 0)
            return false;
        if (k.len == nlen && memcmp(k.ptr, name, nlen) == 0) {
            *val = v.ptr;
            *vlen = v.len;
            return true;
        }
        jscan_ws(&sc);
        if (jscan_peek(&sc) != ',')
            return false;
        sc.pos++;
    }
}

void consume_lowmark_reset(struct consume_lowmark *t)
{
    t->nparts = 0;
}

void consume_lowmark_free(struct consume_lowmark *t)
{
    free(t->parts);
    t->parts = NULL;
    t->nparts = t->cap = 0;
}

int consume_lowmark_note(struct consume_lowmark *t, const char *topic, int32_t partition,
                         int64_t offset, bool applied)
{
    struct consume_lowmark_part *p = NULL;
    for (size_t i = 0; i < t->nparts && p == NULL; i++)
        if (t->parts[i].partition == partition && strcmp(t->parts[i].topic, topic) == 0)
            p = &t->parts[i];
    if (p == NULL) {
        if (t->nparts == t->cap) {
            size_t cap = t->cap ? 2 * t->cap : 16;
            struct consume_lowmark_part *grown = realloc(t->parts, cap * sizeof *grown);
            if (grown == NULL)
                return -1;
            t->parts = grown;
            t->cap = cap;
        }
        p = &t->parts[t->nparts++];
        *p = (struct consume_lowmark_part){topic, partition, INT64_MAX, INT64_MAX, -1};
    }
    if (!applied) {
        if (offset < p->min_unapplied)
            p->min_unapplied = offset;
    } else {
        if (offset < p->min_applied)
            p->min_applied = offset;
        if (offset > p->max_applied)
            p->max_applied = offset;
    }
    return 0;
}

bool consume_lowmark_commit(const struct consume_lowmark *t, size_t i, int64_t *offset)
{
    const struct consume_lowmark_part *p = &t->parts[i];
    if (p->max_applied < 0)
        return false; /* nothing applied */
    if (p->min_unapplied == INT64_MAX) {
        *offset = p->max_applied + 1;
        return true;
    }
    if (p->min_applied > p->min_unapplied)
        return false; /* the first message is unapplied: no progress */
    *offset = p->min_unapplied;
    return true;
}
