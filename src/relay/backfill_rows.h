/*
 * backfill_rows.h — the backlog's rows as outbox events, for backfill.c:
 * the SELECT list that reads them in the layout's column names, and one
 * fetched row into a struct outbox_event. No I/O: text in, an event out.
 * Internal to the relay layer (beside its .c).
 */
#ifndef OUTBOX_RELAY_BACKFILL_ROWS_H
#define OUTBOX_RELAY_BACKFILL_ROWS_H

#include <libpq-fe.h>
#include <stddef.h>

#include "outbox_relay/decode/outbox_event.h"

/* Writes into buf the SELECT list of the rows (id, key, type, payload,
 * created_at, then the extra columns), each as text in the map's column
 * names of the table aliased o, NULL::text for a role without a column.
 * Returns 0, or -1 when it does not fit in cap. */
int backfill_select_list(const struct outbox_columns_map *m, char *buf, size_t cap);

/* Fills ev from row `row` of res, whose columns are backfill_select_list()'s;
 * ev's strings point into res (a bytea payload, decoded, into scratch), so
 * they live as long as both. Returns 0, or -1 with why in err: an id that
 * is not of the layout's kind, no type, a bytea payload not in hex. */
int backfill_row_event(const struct outbox_columns_map *m, const PGresult *res, int row,
                       struct outbox_scratch *scratch, struct outbox_event *ev, char *err,
                       size_t errlen);

#endif
