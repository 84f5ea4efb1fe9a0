/*
 * test_deadletter.c — the queue of poison reports (copies, order, clear)
 * and the dead-letter record (headers, a payload too big for
 * message.max.bytes left out). The policy is test_deadletter_judge.c's.
 */
#include "outbox_relay/kafka/deadletter.h"

#include <stdlib.h>
#include <string.h>

#include "outbox_relay/kafka/sink.h"

#include "check.h"

static void test_queue(void)
{
    struct deadletter_queue q = {0};
    CHECK(deadletter_queue_empty(&q));
    CHECK(deadletter_queue_pop(&q) == NULL);
    char key[] = "agg-1", value[] = "{\"a\":1}";
    struct sink_report rep = {.err = 10, .errstr = "Message size too large", .poison = true,
                              .event_id = "42", .event_type = "order.placed",
                              .topic = "order", .key = key, .key_len = 5, .value = value,
                              .value_len = 7};
    CHECK_EQ_INT(deadletter_queue_push(&q, 7, 0x1234, &rep), 0);
    rep.key = NULL;
    rep.value = NULL;
    rep.event_id = "43";
    CHECK_EQ_INT(deadletter_queue_push(&q, 8, 0x1300, &rep), 0);
    key[0] = 'X'; /* the report's buffers die after the callback: copies */
    CHECK(!deadletter_queue_empty(&q));
    struct deadletter_job *j = deadletter_queue_pop(&q);
    CHECK(j != NULL);
    CHECK_EQ_INT(j->token, 7);
    CHECK_EQ_INT(j->lsn, 0x1234);
    CHECK(strcmp(j->event_id, "42") == 0 && strcmp(j->type, "order.placed") == 0);
    CHECK(strcmp(j->topic, "order") == 0 && strcmp(j->error, "Message size too large") == 0);
    CHECK_SPAN(j->key, j->key_len, "agg-1");
    CHECK_SPAN(j->value, j->value_len, "{\"a\":1}");
    deadletter_job_free(j);
    j = deadletter_queue_pop(&q);
    CHECK(j != NULL && j->token == 8 && j->key == NULL && j->value == NULL);
    CHECK_EQ_INT(j->key_len + j->value_len, 0);
    deadletter_job_free(j);
    CHECK(deadletter_queue_empty(&q));
    CHECK_EQ_INT(deadletter_queue_push(&q, 9, 1, &rep), 0);
    CHECK_EQ_INT(deadletter_queue_push(&q, 10, 2, &rep), 0);
    deadletter_queue_clear(&q);
    CHECK(deadletter_queue_empty(&q));
    CHECK(q.tail == NULL);
    CHECK_EQ_INT(deadletter_queue_push(&q, 11, 3, &rep), 0); /* usable after a clear */
    j = deadletter_queue_pop(&q);
    CHECK(j != NULL && j->token == 11);
    deadletter_job_free(j);
}

static const char *header(const struct deadletter_msg *m, const char *name)
{
    for (size_t i = 0; i < DEADLETTER_NHEADERS; i++)
        if (strcmp(m->headers[2 * i], name) == 0)
            return m->headers[2 * i + 1];
    return NULL;
}

static void test_build(void)
{
    struct deadletter_msg m;
    deadletter_build(&m, 0x16B3A28, "42", "order.placed", "order", "agg-1", 5, "{}", 2,
                     "too large", 1000000);
    CHECK(strcmp(header(&m, "event_id"), "42") == 0);
    CHECK(strcmp(header(&m, "event_type"), "order.placed") == 0);
    CHECK(strcmp(header(&m, "aggregate_id"), "agg-1") == 0);
    CHECK(strcmp(header(&m, "lsn"), "0/16B3A28") == 0);
    CHECK(strcmp(header(&m, "original_topic"), "order") == 0);
    CHECK(strcmp(header(&m, "error"), "too large") == 0);
    CHECK_SPAN(m.key, m.key_len, "agg-1");
    CHECK_SPAN(m.value, m.value_len, "{}");
    /* the payload would not fit with the headers: headers only */
    deadletter_build(&m, 1, "42", "t", "o", "agg-1", 5, "{}", 2, "e", 1030);
    CHECK(m.value == NULL && m.value_len == 0);
    CHECK_SPAN(m.key, m.key_len, "agg-1");
    deadletter_build(&m, 1, "42", "t", "o", "agg-1", 5, "{}", 2, "e", 1031);
    CHECK(m.value != NULL);
    /* an undecodable change: no key */
    deadletter_build(&m, 1, "lsn-0/1", "", "", NULL, 0, "raw", 3, "bad", 1000000);
    CHECK(strcmp(header(&m, "aggregate_id"), "") == 0);
    CHECK(m.key == NULL);
}

int main(void)
{
    test_queue();
    test_build();
    CHECK_DONE();
}
