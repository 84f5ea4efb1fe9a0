/*
 * event_headers.c — the Kafka headers of an outbox event (see
 * event_headers.h).
 */
#include "outbox_relay/kafka/event_headers.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void add(struct event_headers *out, const char *name, const char *value, size_t len)
{
    if (out->n >= EVENT_HEADERS_MAX)
        return;
    out->h[out->n++] = (struct event_header){name, value, len};
    out->bytes += strlen(name) + len;
}

/* ce_time: created_at (PostgreSQL's text) in RFC 3339; 0 when there is
 * none or it does not parse. */
static size_t ce_time(const struct outbox_event *ev, char *buf)
{
    int64_t us;
    if (ev->created_at == NULL || outbox_timestamp_us(ev->created_at, ev->created_at_len, &us) < 0)
        return 0;
    return outbox_time_format(us, true, buf);
}

static bool json_payload(const struct event_headers_options *o, const struct outbox_event *ev)
{
    if (ev->message)
        return true; /* the envelope's payload is JSON */
    return o->map == NULL || (!o->map->payload_bytea && !o->map->payload_text);
}

size_t event_headers_build(const struct event_headers_options *o, const struct outbox_event *ev,
                           struct event_headers *out)
{
    out->n = 0;
    out->bytes = 0;
    size_t id_len = strlen(ev->event_id);
    const char *type = ev->type != NULL ? ev->type : "";
    if (o->envelope == EVENT_ENVELOPE_CLOUDEVENTS) {
        add(out, "ce_specversion", "1.0", 3);
        add(out, "ce_id", ev->event_id, id_len);
        add(out, "ce_source", o->ce_source != NULL ? o->ce_source : "",
            o->ce_source != NULL ? strlen(o->ce_source) : 0);
        add(out, "ce_type", type, ev->type_len);
        size_t t = ce_time(ev, out->time);
        if (t > 0)
            add(out, "ce_time", out->time, t);
        if (json_payload(o, ev))
            add(out, "content-type", "application/json", 16);
    } else {
        add(out, "event_id", ev->event_id, id_len);
        add(out, "event_type", type, ev->type_len);
        if (ev->created_at != NULL)
            add(out, "created_at", ev->created_at, ev->created_at_len);
        if (o->id_header != NULL)
            add(out, o->id_header, ev->event_id, id_len);
    }
    if (o->map != NULL && !ev->message)
        for (size_t i = 0; i < o->map->nextra && i < OUTBOX_MAX_EXTRA; i++)
            if (o->map->extra[i].header != NULL && ev->extra[i].ptr != NULL)
                add(out, o->map->extra[i].header, ev->extra[i].ptr, ev->extra[i].len);
    return out->n;
}

/* Appends s percent-encoded (RFC 3986: all but unreserved characters). */
static int put_encoded(const char *s, char *buf, size_t cap, size_t *n)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '.' || c == '_' || c == '~';
        int w = plain ? snprintf(buf + *n, cap - *n, "%c", c)
                      : snprintf(buf + *n, cap - *n, "%%%02X", c);
        if (w < 0 || (size_t) w >= cap - *n)
            return -1;
        *n += (size_t) w;
    }
    return 0;
}

int event_headers_default_source(const char *database, const char *schema, const char *table,
                                 char *buf, size_t cap)
{
    size_t n = 0;
    if (cap < 14)
        return -1;
    memcpy(buf, "/postgresql/", 13);
    n = 12;
    if (put_encoded(database, buf, cap, &n) < 0 || n + 1 >= cap)
        return -1;
    buf[n++] = '/';
    buf[n] = '\0';
    if (put_encoded(schema, buf, cap, &n) < 0 || n + 1 >= cap)
        return -1;
    buf[n++] = '.';
    buf[n] = '\0';
    if (put_encoded(table, buf, cap, &n) < 0)
        return -1;
    return (int) n;
}
