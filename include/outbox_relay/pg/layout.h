/*
 * layout.h — the outbox table's layout against the column map: at startup
 * (each connect, beside slot_check_table) the relayer reads the table's
 * columns from the catalog and refuses, naming the column and the option
 * that maps it, a table it cannot relay, instead of streaming until the
 * first INSERT and halting then. The types it reads decide how values are
 * taken: a uuid or text id is an id as is, a bytea payload is decoded to
 * its bytes. Columns named traceparent and tracestate become the W3C trace
 * context headers of the same names without any flag.
 *
 * layout_apply() is pure (tested without a server); layout_check() runs
 * the catalog query on the stream's replication connection.
 */
#ifndef OUTBOX_RELAY_LAYOUT_H
#define OUTBOX_RELAY_LAYOUT_H

#include <stddef.h>

#include "outbox_relay/decode/outbox_event.h"

struct slot; /* slot.h */

/* One column of the table: its name and its type as format_type() prints
 * the base type ("bigint", "uuid", "text", "character varying", "jsonb",
 * "json", "bytea", "timestamp with time zone", ...). */
struct layout_column {
    const char *name;
    const char *type;
};

/* Checks map against the table's n columns (table: "schema.name", for the
 * messages) and sets map->id_kind and map->payload_bytea from the types;
 * adds traceparent/tracestate as headers when the table has them. Returns
 * 0, or -1 with err naming the column, the option and what to do. */
int layout_apply(struct outbox_columns_map *map, const struct layout_column *cols, size_t n,
                 const char *table, char *err, size_t errlen);

/* Reads the outbox table's columns on s's connection and layout_apply()s
 * them to map. Returns STREAM_OK, STREAM_FATAL (the layout, with s->err)
 * or STREAM_RETRY (the connection). */
int layout_check(struct slot *s, struct outbox_columns_map *map);

#endif
