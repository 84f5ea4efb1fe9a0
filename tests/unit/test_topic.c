/*
 * test_topic.c — event type → topic: the template (the configuration's
 * expansion) and the handle cache (lookup, an empty slot where a type
 * belongs, types of equal prefix, the cap, clearing with release).
 */
#include "outbox_relay/kafka/topic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int released;

static void release(void *h)
{
    (void) h;
    released++;
}

static void test_name(void)
{
    char out[256];
    CHECK_EQ_INT(topic_name("ev.{type}", "order.placed", 12, out, sizeof out), 15);
    CHECK(strcmp(out, "ev.order.placed") == 0);
    CHECK_EQ_INT(topic_name("{prefix}", "order.placed", 12, out, sizeof out), 5);
    CHECK(strcmp(out, "order") == 0);
    CHECK_EQ_INT(topic_name("fixed", "x", 1, out, sizeof out), 5);
    CHECK_EQ_INT(topic_name("{type}", "bad type", 8, out, sizeof out), -1);
    CHECK_EQ_INT(topic_name("{type}", "", 0, out, sizeof out), -1);
}

static void test_cache(void)
{
    struct topic_cache *c = calloc(1, sizeof *c);
    int h1, h2;
    CHECK(c != NULL);
    struct topic_entry *e = topic_cache_find(c, "order.placed", 12);
    CHECK(e != NULL && e->type == NULL);
    CHECK_EQ_INT(topic_cache_put(c, e, "order.placed", 12, &h1), 0);
    CHECK_EQ_INT(topic_cache_put(c, e, "order.placed", 12, &h1), -1); /* taken */
    e = topic_cache_find(c, "order.placed", 12);
    CHECK(e->type != NULL && e->handle == &h1);
    /* a prefix of a cached type is another type */
    e = topic_cache_find(c, "order", 5);
    CHECK(e->type == NULL);
    CHECK_EQ_INT(topic_cache_put(c, e, "order", 5, &h2), 0);
    CHECK(topic_cache_find(c, "order", 5)->handle == &h2);
    CHECK(topic_cache_find(c, "order.placed", 12)->handle == &h1);
    /* the empty type is a type too */
    e = topic_cache_find(c, "", 0);
    CHECK(e->type == NULL);
    CHECK_EQ_INT(topic_cache_put(c, e, "", 0, &h2), 0);
    CHECK(topic_cache_find(c, "", 0)->type != NULL);
    /* up to the cap, then nothing more is cached; every one found */
    char t[32];
    int n = 3;
    while (!topic_cache_full(c)) {
        snprintf(t, sizeof t, "type.%d", n);
        e = topic_cache_find(c, t, strlen(t));
        CHECK(e->type == NULL);
        CHECK_EQ_INT(topic_cache_put(c, e, t, strlen(t), &h1), 0);
        n++;
    }
    CHECK_EQ_INT(n, TOPIC_CACHE_MAX);
    snprintf(t, sizeof t, "type.%d", n);
    e = topic_cache_find(c, t, strlen(t));
    CHECK(e->type == NULL);
    CHECK_EQ_INT(topic_cache_put(c, e, t, strlen(t), &h1), -1);
    for (int i = 3; i < n; i++) {
        snprintf(t, sizeof t, "type.%d", i);
        CHECK(topic_cache_find(c, t, strlen(t))->type != NULL);
    }
    topic_cache_clear(c, release);
    CHECK_EQ_INT(released, TOPIC_CACHE_MAX);
    CHECK(!topic_cache_full(c));
    CHECK(topic_cache_find(c, "order", 5)->type == NULL);
    free(c);
}

/* {column} placeholders: Debezium's outbox.event.{aggregatetype}. */
static void test_columns(void)
{
    char out[256], name[64], err[256];
    struct outbox_columns_map m = OUTBOX_DEFAULT_COLUMNS;
    struct outbox_event ev;
    outbox_event_reset(&ev, 0);
    ev.type = "OrderCreated";
    ev.type_len = 12;
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "tenant", "x-tenant"), 0);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "aggregatetype", NULL), 1);
    ev.extra[1] = (struct outbox_field){"order", 5};
    CHECK_EQ_INT(topic_name_event("outbox.event.{aggregatetype}", &ev, &m, out, sizeof out), 18);
    CHECK(strcmp(out, "outbox.event.order") == 0);
    /* with {type} too; the tenant is NULL: no topic */
    CHECK_EQ_INT(topic_name_event("{aggregatetype}-{type}", &ev, &m, out, sizeof out), 18);
    CHECK(strcmp(out, "order-OrderCreated") == 0);
    CHECK_EQ_INT(topic_name_event("t.{tenant}", &ev, &m, out, sizeof out), -1);
    ev.extra[0] = (struct outbox_field){"acme", 4};
    CHECK_EQ_INT(topic_name_event("t.{tenant}.{aggregatetype}", &ev, &m, out, sizeof out), 12);
    CHECK(strcmp(out, "t.acme.order") == 0);
    /* a value Kafka refuses, an unmapped column */
    ev.extra[1] = (struct outbox_field){"or der", 6};
    CHECK_EQ_INT(topic_name_event("x.{aggregatetype}", &ev, &m, out, sizeof out), -1);
    CHECK_EQ_INT(topic_name_event("x.{region}", &ev, &m, out, sizeof out), -1);

    /* what a failed expansion leaves in out (the dead letter's
     * original_topic): never a name a real topic could have */
    CHECK(strcmp(out, "x.{region}") == 0);
    ev.extra[0] = (struct outbox_field){NULL, 0}; /* NULL tenant */
    ev.extra[1] = (struct outbox_field){"order", 5};
    CHECK_EQ_INT(topic_name_event("outbox.event.{tenant}", &ev, &m, out, sizeof out), -1);
    CHECK(strcmp(out, "outbox.event.{tenant}") == 0);
    CHECK_EQ_INT(topic_name_event("{aggregatetype}.{tenant}.{type}", &ev, &m, out, sizeof out),
                 -1);
    CHECK(strcmp(out, "order.{tenant}.OrderCreated") == 0);
    char huge[300];
    memset(huge, 'r', sizeof huge);
    ev.extra[0] = (struct outbox_field){huge, sizeof huge}; /* longer than out */
    CHECK_EQ_INT(topic_name_event("outbox.event.{tenant}", &ev, &m, out, sizeof out), -1);
    CHECK(strcmp(out, "outbox.event.{tenant}") == 0);
    ev.extra[0] = (struct outbox_field){huge, 240}; /* fits, but past 249 bytes */
    CHECK_EQ_INT(topic_name_event("outbox.event.{tenant}", &ev, &m, out, sizeof out), -1);
    CHECK_EQ_INT(strlen(out), 13 + 240);
    ev.extra[1] = (struct outbox_field){"or der", 6}; /* refused character: shown */
    CHECK_EQ_INT(topic_name_event("x.{aggregatetype}", &ev, &m, out, sizeof out), -1);
    CHECK(strcmp(out, "x.or der") == 0);

    CHECK_EQ_INT(topic_check_template("outbox.event.{aggregatetype}", err, sizeof err), 0);
    CHECK_EQ_INT(topic_check_template("{Region_2}.{type}", err, sizeof err), 0);
    CHECK_EQ_INT(topic_check_template("x.{no-pe}", err, sizeof err), -1);
    CHECK(strstr(err, "only {type} and {prefix}") != NULL);
    CHECK_EQ_INT(topic_check_template("x.{}", err, sizeof err), -1);
    CHECK_EQ_INT(topic_check_template("x.{open", err, sizeof err), -1);

    const char *pos = "a.{type}.{tenant}-{prefix}.{aggregatetype}";
    CHECK_EQ_INT(topic_next_column(&pos, name, sizeof name), 1);
    CHECK(strcmp(name, "tenant") == 0);
    CHECK_EQ_INT(topic_next_column(&pos, name, sizeof name), 1);
    CHECK(strcmp(name, "aggregatetype") == 0);
    CHECK_EQ_INT(topic_next_column(&pos, name, sizeof name), 0);
    CHECK(topic_uses_type("a.{prefix}"));
    CHECK(!topic_uses_type("outbox.event.{aggregatetype}"));
}

int main(void)
{
    test_columns();
    test_name();
    test_cache();
    CHECK_DONE();
}
