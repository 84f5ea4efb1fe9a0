/*
 * backfill_rows.c — the backlog's rows as outbox events (backfill_rows.h):
 * what backfill.c selects from the outbox table and how one fetched row
 * becomes a struct outbox_event, in the layout's column names and id kind.
 * No I/O.
 */
#include "backfill_rows.h"

#include <stdio.h>
#include <string.h>

/* The SELECT list of the rows (id, key, type, payload, created_at, then
 * the extra columns), as text, in the map's column names; NULL for a role
 * without a column. Names are plain identifiers (config.c), quoted. The
 * text is each type's output function's, as the plugins send it
 * (docs/producing.md, "Column types"): concat() calls it, where a ::text
 * cast would make a boolean "true" instead of "t". */
int backfill_select_list(const struct outbox_columns_map *m, char *buf, size_t cap)
{
    const char *names[5 + OUTBOX_MAX_EXTRA] = {m->id, m->aggregate_id, m->type, m->payload,
                                               m->created_at};
    size_t n = 5, used = 0;
    for (size_t i = 0; i < m->nextra && i < OUTBOX_MAX_EXTRA; i++)
        names[n++] = m->extra[i].column;
    for (size_t i = 0; i < n; i++) {
        int w = names[i] != NULL
                    ? snprintf(buf + used, cap - used,
                               "%sCASE WHEN o.\"%s\" IS NOT NULL THEN concat(o.\"%s\") END",
                               i ? ", " : "", names[i], names[i])
                    : snprintf(buf + used, cap - used, "%sNULL::text", i ? ", " : "");
        if (w < 0 || (size_t) w >= cap - used)
            return -1;
        used += (size_t) w;
    }
    return 0;
}

/* Fills ev from one row (backfill_select_list()'s columns); a bytea payload is
 * decoded into scratch. Returns 0, or -1 with why in err. */
int backfill_row_event(const struct outbox_columns_map *m, const PGresult *res, int row,
                       struct outbox_scratch *scratch, struct outbox_event *ev, char *err,
                       size_t errlen)
{
    memset(ev, 0, sizeof *ev);
    const char *id = PQgetvalue(res, row, 0);
    size_t id_len = (size_t) PQgetlength(res, row, 0);
    if (m->id_kind == OUTBOX_ID_TEXT ? outbox_event_set_text_id(ev, id, id_len) < 0
                                     : outbox_event_set_id(ev, id, id_len, true) < 0) {
        snprintf(err, errlen, "its id is not %s", m->id_kind == OUTBOX_ID_TEXT
                 ? "1 to 63 bytes without control characters" : "an integer");
        return -1;
    }
#define FIELD(col, ptr, len)                                                  \
    do {                                                                      \
        if (!PQgetisnull(res, row, col)) {                                    \
            ev->ptr = PQgetvalue(res, row, col);                              \
            ev->len = (size_t) PQgetlength(res, row, col);                    \
        }                                                                     \
    } while (0)
    FIELD(1, aggregate_id, aggregate_id_len);
    FIELD(2, type, type_len);
    FIELD(3, payload, payload_len);
    FIELD(4, created_at, created_at_len);
    for (size_t i = 0; i < m->nextra && i < OUTBOX_MAX_EXTRA; i++)
        FIELD(5 + (int) i, extra[i].ptr, extra[i].len);
#undef FIELD
    if (ev->type == NULL || ev->type_len == 0) {
        snprintf(err, errlen, "it has no type; cannot route it");
        return -1;
    }
    if (m->payload_bytea && ev->payload != NULL) {
        long n = outbox_scratch_reserve(scratch, ev->payload_len / 2 + 1) < 0
                     ? -1 : outbox_bytea_decode(ev->payload, ev->payload_len, scratch->buf);
        if (n < 0) {
            snprintf(err, errlen, "its bytea payload is not in hex format (bytea_output = hex)");
            return -1;
        }
        ev->payload = scratch->buf;
        ev->payload_len = (size_t) n;
    }
    return 0;
}
