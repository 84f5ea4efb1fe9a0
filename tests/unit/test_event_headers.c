/*
 * test_event_headers.c — the Kafka headers of an event (event_headers.h):
 * ours, Debezium's id, columns as headers (a NULL column adds none).
 */
#include "outbox_relay/kafka/event_headers.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

static const struct event_header *find(const struct event_headers *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->h[i].name, name) == 0)
            return &h->h[i];
    return NULL;
}

static bool value_is(const struct event_headers *h, const char *name, const char *v)
{
    const struct event_header *x = find(h, name);
    return x != NULL && x->len == strlen(v) && memcmp(x->value, v, x->len) == 0;
}

static void test_plain(void)
{
    struct outbox_event ev;
    struct event_headers h;
    outbox_event_reset(&ev, 1);
    snprintf(ev.event_id, sizeof ev.event_id, "42");
    ev.type = "order.placed";
    ev.type_len = 12;
    struct event_headers_options o = {0};
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 2);
    CHECK(value_is(&h, "event_id", "42") && value_is(&h, "event_type", "order.placed"));
    CHECK(find(&h, "created_at") == NULL);
    ev.created_at = "2026-12-02 03:00:00+00";
    ev.created_at_len = strlen(ev.created_at);
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 3);
    CHECK(value_is(&h, "created_at", "2026-12-02 03:00:00+00"));

    struct outbox_columns_map m = OUTBOX_DEFAULT_COLUMNS;
    outbox_columns_add_extra(&m, "aggregatetype", NULL);       /* topic only */
    outbox_columns_add_extra(&m, "tenant_id", "x-tenant");
    outbox_columns_add_extra(&m, "traceparent", "traceparent");
    o.map = &m;
    o.id_header = "id";
    ev.extra[0] = (struct outbox_field){"order", 5};
    ev.extra[1] = (struct outbox_field){"acme", 4};
    /* traceparent NULL: no header */
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 5);
    CHECK(value_is(&h, "id", "42"));
    CHECK(value_is(&h, "x-tenant", "acme"));
    CHECK(find(&h, "aggregatetype") == NULL && find(&h, "traceparent") == NULL);
    ev.extra[2] = (struct outbox_field){"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                        55};
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 6);
    CHECK(value_is(&h, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
    /* an empty string is a header with an empty value, not NULL */
    ev.extra[1] = (struct outbox_field){"", 0};
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 6);
    CHECK(value_is(&h, "x-tenant", ""));
}

/* --envelope cloudevents: the Kafka binding's binary mode. */
static void test_cloudevents(void)
{
    struct outbox_event ev;
    struct event_headers h;
    struct outbox_columns_map m = OUTBOX_DEFAULT_COLUMNS;
    outbox_columns_add_extra(&m, "traceparent", "traceparent");
    struct event_headers_options o = {.map = &m, .id_header = "id",
                                      .envelope = EVENT_ENVELOPE_CLOUDEVENTS,
                                      .ce_source = "/postgresql/app/public.events_outbox"};
    outbox_event_reset(&ev, 1);
    snprintf(ev.event_id, sizeof ev.event_id, "4711");
    ev.type = "order.placed";
    ev.type_len = 12;
    ev.created_at = "2026-11-30 15:38:02.7964+01";
    ev.created_at_len = strlen(ev.created_at);
    ev.extra[0] = (struct outbox_field){"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                        55};
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 7);
    CHECK(value_is(&h, "ce_specversion", "1.0"));
    CHECK(value_is(&h, "ce_id", "4711"));
    CHECK(value_is(&h, "ce_source", "/postgresql/app/public.events_outbox"));
    CHECK(value_is(&h, "ce_type", "order.placed"));
    CHECK(value_is(&h, "ce_time", "2026-11-30T14:38:02.7964Z"));
    CHECK(value_is(&h, "content-type", "application/json"));
    CHECK(find(&h, "traceparent") != NULL);
    /* none of the plain envelope's */
    CHECK(find(&h, "event_id") == NULL && find(&h, "event_type") == NULL);
    CHECK(find(&h, "created_at") == NULL && find(&h, "id") == NULL);

    /* no time, a bytea or text payload: no ce_time, no content-type */
    ev.created_at = NULL;
    m.payload_bytea = true;
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 5);
    CHECK(find(&h, "ce_time") == NULL && find(&h, "content-type") == NULL);
    m.payload_bytea = false;
    m.payload_text = true;
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 5);
    CHECK(find(&h, "content-type") == NULL);
    /* a logical message's payload is JSON whatever the table's is */
    outbox_event_set_message_id(&ev);
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 5);
    CHECK(value_is(&h, "content-type", "application/json"));
    CHECK(value_is(&h, "ce_id", ev.event_id));
    /* an unparsable time (a timestamp without zone mapped anyway): left out */
    ev.created_at = "soon";
    ev.created_at_len = 4;
    CHECK_EQ_INT(event_headers_build(&o, &ev, &h), 5);
}

static void test_default_source(void)
{
    char buf[128];
    CHECK_EQ_INT(event_headers_default_source("app", "public", "events_outbox", buf, sizeof buf),
                 36);
    CHECK(strcmp(buf, "/postgresql/app/public.events_outbox") == 0);
    CHECK(event_headers_default_source("my db", "S", "Out$box", buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "/postgresql/my%20db/S.Out%24box") == 0);
    CHECK(event_headers_default_source("caf\xc3\xa9", "a", "b", buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "/postgresql/caf%C3%A9/a.b") == 0);
    CHECK_EQ_INT(event_headers_default_source("app", "public", "events_outbox", buf, 20), -1);
}

int main(void)
{
    test_cloudevents();
    test_default_source();
    test_plain();
    CHECK_DONE();
}
