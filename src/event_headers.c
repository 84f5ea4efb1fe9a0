/*
 * event_headers.c — the Kafka headers of an outbox event (see
 * event_headers.h).
 */
#include "outbox_relay/event_headers.h"

#include <string.h>

static void add(struct event_headers *out, const char *name, const char *value, size_t len)
{
    if (out->n >= EVENT_HEADERS_MAX)
        return;
    out->h[out->n++] = (struct event_header){name, value, len};
    out->bytes += strlen(name) + len;
}

size_t event_headers_build(const struct event_headers_options *o, const struct outbox_event *ev,
                           struct event_headers *out)
{
    out->n = 0;
    out->bytes = 0;
    size_t id_len = strlen(ev->event_id);
    add(out, "event_id", ev->event_id, id_len);
    add(out, "event_type", ev->type != NULL ? ev->type : "", ev->type_len);
    if (ev->created_at != NULL)
        add(out, "created_at", ev->created_at, ev->created_at_len);
    if (o->id_header != NULL)
        add(out, o->id_header, ev->event_id, id_len);
    if (o->map != NULL)
        for (size_t i = 0; i < o->map->nextra && i < OUTBOX_MAX_EXTRA; i++)
            if (o->map->extra[i].header != NULL && ev->extra[i].ptr != NULL)
                add(out, o->map->extra[i].header, ev->extra[i].ptr, ev->extra[i].len);
    return out->n;
}
