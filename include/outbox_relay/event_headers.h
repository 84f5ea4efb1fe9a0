/*
 * event_headers.h — the Kafka headers of an outbox event, as name/value
 * pairs the sink hands to librdkafka. Pure: no I/O, no allocation.
 *
 * Every event carries event_id, event_type and, when the row has one,
 * created_at; then the event id again under id_header (Debezium's "id"
 * with --layout debezium); then one header per extra column that has a
 * header name (--header-column NAME[:HEADER]; a NULL column adds none).
 */
#ifndef OUTBOX_RELAY_EVENT_HEADERS_H
#define OUTBOX_RELAY_EVENT_HEADERS_H

#include <stdbool.h>
#include <stddef.h>

#include "outbox_relay/outbox_event.h"

#define EVENT_HEADERS_MAX (8 + OUTBOX_MAX_EXTRA)

struct event_headers_options {
    const struct w2j_columns_map *map; /* extra columns; NULL: none */
    const char *id_header;             /* NULL: no second id header */
};

struct event_header {
    const char *name;  /* NUL-terminated */
    const char *value; /* NOT NUL-terminated */
    size_t len;
};

/* The headers of one event; values point into the event (or into this
 * struct), valid while both are. */
struct event_headers {
    size_t n;
    struct event_header h[EVENT_HEADERS_MAX];
    size_t bytes; /* names and values, for the size check */
};

/* Fills out with ev's headers, in the order above. Returns out->n. */
size_t event_headers_build(const struct event_headers_options *o, const struct outbox_event *ev,
                           struct event_headers *out);

#endif
