/*
 * test_event_headers.c — the Kafka headers of an event (event_headers.h):
 * ours, Debezium's id, columns as headers (a NULL column adds none).
 */
#include "outbox_relay/event_headers.h"

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

    struct w2j_columns_map m = W2J_DEFAULT_COLUMNS;
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

int main(void)
{
    test_plain();
    CHECK_DONE();
}
