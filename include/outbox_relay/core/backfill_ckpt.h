/*
 * backfill_ckpt.h — the backfill's checkpoint queue: which row id may be
 * recorded as backfill_done_id once Kafka has acknowledged that many rows
 * of the run (the rule is in relay/backfill.h). Pure: no I/O.
 *
 * After each fetched batch the backfill notes (n, id): rows 1..n of the run
 * have been emitted, the n-th with the batch's last id. Given how many rows
 * are acknowledged in order (every row 1..acked), backfill_progress_done
 * yields the newest noted id all of whose rows are acknowledged: every row
 * of the run with an id up to it was delivered, because rows are emitted in
 * id order. Checkpoints are dropped once passed.
 *
 * Ownership: the caller owns the struct (zero it to start) and frees what
 * the queue grew with backfill_progress_free.
 */
#ifndef OUTBOX_RELAY_BACKFILL_CKPT_H
#define OUTBOX_RELAY_BACKFILL_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BACKFILL_ID_MAX 64 /* longest id text a checkpoint holds, with its NUL */

struct backfill_ckpt {
    uint64_t n;
    char id[BACKFILL_ID_MAX];
};

struct backfill_progress {
    struct backfill_ckpt *v;
    size_t head, tail, cap;
};

/* Notes a checkpoint. An id too long to hold, or no memory, skips it (a
 * later one covers its rows): progress is only recorded later, never
 * wrongly. */
void backfill_progress_note(struct backfill_progress *p, uint64_t n, const char *id);

/* Pops every checkpoint with n <= acked; copies the newest popped id into
 * done_id (capacity BACKFILL_ID_MAX) and returns true, or false when none
 * was passed. */
bool backfill_progress_done(struct backfill_progress *p, uint64_t acked, char *done_id);

/* Frees the queue and zeroes it; it can be used again. */
void backfill_progress_free(struct backfill_progress *p);

#endif
