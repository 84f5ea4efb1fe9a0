/*
 * backfill_ckpt.c — the backfill's checkpoint queue (backfill_ckpt.h):
 * which row ids are safe to record as done once Kafka has acknowledged
 * that many rows. Pure.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/core/backfill_ckpt.h"

void backfill_progress_note(struct backfill_progress *q, uint64_t n, const char *id)
{
    if (strlen(id) >= BACKFILL_ID_MAX)
        return; /* too long to record: a later checkpoint covers it */
    if (q->head == q->tail)
        q->head = q->tail = 0;
    if (q->tail == q->cap) {
        if (q->head > 0) {
            memmove(q->v, q->v + q->head, (q->tail - q->head) * sizeof *q->v);
            q->tail -= q->head;
            q->head = 0;
        } else {
            size_t cap = q->cap ? q->cap * 2 : 64;
            struct backfill_ckpt *v = realloc(q->v, cap * sizeof *v);
            if (v == NULL)
                return; /* no checkpoint: progress is only saved later */
            q->v = v;
            q->cap = cap;
        }
    }
    q->v[q->tail].n = n;
    snprintf(q->v[q->tail].id, BACKFILL_ID_MAX, "%s", id);
    q->tail++;
}

bool backfill_progress_done(struct backfill_progress *q, uint64_t acked, char *done)
{
    bool any = false;
    while (q->head < q->tail && q->v[q->head].n <= acked) {
        snprintf(done, BACKFILL_ID_MAX, "%s", q->v[q->head].id);
        q->head++;
        any = true;
    }
    return any;
}

void backfill_progress_free(struct backfill_progress *q)
{
    free(q->v);
    memset(q, 0, sizeof *q);
}

