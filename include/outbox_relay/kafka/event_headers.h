/*
 * event_headers.h — the Kafka headers of an outbox event, as name/value
 * pairs the sink hands to librdkafka. Pure: no I/O, no allocation.
 *
 * The plain envelope (the default): event_id, event_type and, when the row
 * has one, created_at; then the event id again under id_header (Debezium's
 * "id" with --layout debezium).
 *
 * --envelope cloudevents: the Kafka protocol binding of CloudEvents 1.0 in
 * binary mode: the value is the event's data unchanged, its attributes are
 * headers: ce_specversion "1.0", ce_id (the event id), ce_source, ce_type
 * (the event type), ce_time (RFC 3339, UTC, from created_at, when there is
 * one) and content-type "application/json" for a JSON payload (jsonb, json,
 * a logical message's), none for text and bytea.
 *
 * Either way, then one header per extra column that has a header name
 * (--header-column NAME[:HEADER], traceparent/tracestate); a NULL column
 * adds none.
 */
#ifndef OUTBOX_RELAY_EVENT_HEADERS_H
#define OUTBOX_RELAY_EVENT_HEADERS_H

#include <stdbool.h>
#include <stddef.h>

#include "outbox_relay/decode/outbox_event.h"

#define EVENT_HEADERS_MAX (8 + OUTBOX_MAX_EXTRA)

enum event_envelope { EVENT_ENVELOPE_PLAIN = 0, EVENT_ENVELOPE_CLOUDEVENTS };

struct event_headers_options {
    const struct outbox_columns_map *map; /* extra columns, payload type; NULL: none */
    const char *id_header;             /* plain: NULL for no second id header */
    enum event_envelope envelope;
    const char *ce_source;             /* cloudevents: ce_source (NUL-terminated) */
};

struct event_header {
    const char *name;  /* NUL-terminated */
    const char *value; /* NOT NUL-terminated */
    size_t len;
};

/* The headers of one event; values point into the event, the options or
 * this struct, valid while all three are. */
struct event_headers {
    size_t n;
    struct event_header h[EVENT_HEADERS_MAX];
    size_t bytes;               /* names and values, for the size check */
    char time[OUTBOX_TIME_MAX]; /* ce_time's text */
};

/* Fills out with ev's headers, in the order above. Returns out->n. */
size_t event_headers_build(const struct event_headers_options *o, const struct outbox_event *ev,
                           struct event_headers *out);

/* The default ce_source: "/postgresql/<database>/<schema>.<table>", each
 * name percent-encoded where it is not an unreserved URI character, into
 * buf (capacity cap). Returns the length, or -1 when it does not fit. */
int event_headers_default_source(const char *database, const char *schema, const char *table,
                                 char *buf, size_t cap);

#endif
