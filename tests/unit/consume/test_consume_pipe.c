/*
 * test_consume_pipe.c — the pure pieces of the pipelined batch and of the
 * asynchronous offset commit: the text[] literal of a batch's event ids
 * (quoting and escaping), and what an offset commit callback does to the
 * offsets still pending (confirmed ones dropped, a refusal schedules a
 * retry and drops nothing), and when the main loop's asynchronous retry
 * goes ahead. No PostgreSQL, no broker.
 */
#include <stdlib.h>
#include <string.h>

#include "../../../src/consume/consume_internal.h"
#include "check.h"

static void test_ids_literal(void)
{
    struct msg_view v[5];
    memset(v, 0, sizeof v);
    const char *ids[5] = {"1", "b\"c", "d\\e", "NULL", "{x},y z"};
    for (int i = 0; i < 5; i++)
        snprintf(v[i].event_id, sizeof v[i].event_id, "%s", ids[i]);
    char *s = consume_ids_literal(v, 5);
    CHECK(s != NULL);
    CHECK(s && strcmp(s, "{\"1\",\"b\\\"c\",\"d\\\\e\",\"NULL\",\"{x},y z\"}") == 0);
    free(s);

    s = consume_ids_literal(v, 1);
    CHECK(s && strcmp(s, "{\"1\"}") == 0);
    free(s);

    /* The longest id, all of it to escape: still one element, quoted. */
    memset(v[0].event_id, '"', 255);
    v[0].event_id[255] = '\0';
    s = consume_ids_literal(v, 1);
    CHECK(s && strlen(s) == 2 + 2 + 2 * 255);
    free(s);
}

static rd_kafka_topic_partition_list_t *parts(int n, const int32_t *p, const int64_t *o)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, "order", p[i])->offset = o[i];
    return l;
}

static void test_on_commit(void)
{
    struct consumer *c = calloc(1, sizeof *c);
    c->pending = parts(2, (int32_t[]){0, 1}, (int64_t[]){10, 5});

    /* Partition 0 confirmed at 10; partition 1 only at 3 (an older commit). */
    rd_kafka_topic_partition_list_t *ok = parts(2, (int32_t[]){0, 1}, (int64_t[]){10, 3});
    consume_on_commit(c, RD_KAFKA_RESP_ERR_NO_ERROR, ok);
    CHECK(c->pending != NULL);
    CHECK_EQ_INT(c->pending->cnt, 1);
    CHECK_EQ_INT(c->pending->elems[0].partition, 1);
    CHECK_EQ_INT(c->pending->elems[0].offset, 5);
    rd_kafka_topic_partition_list_destroy(ok);

    /* Refused: nothing dropped, a synchronous retry scheduled. */
    c->commit_retry_at = 0;
    rd_kafka_topic_partition_list_t *no = parts(1, (int32_t[]){1}, (int64_t[]){5});
    consume_on_commit(c, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, no);
    CHECK_EQ_INT(c->pending->cnt, 1);
    CHECK(c->commit_retry_at > 0);
    no->elems[0].err = RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION; /* per partition too */
    c->commit_retry_at = 0;
    consume_on_commit(c, RD_KAFKA_RESP_ERR_NO_ERROR, no);
    CHECK_EQ_INT(c->pending->cnt, 1);
    CHECK(c->commit_retry_at > 0);
    rd_kafka_topic_partition_list_destroy(no);

    /* "Nothing to commit" is no failure. */
    c->commit_retry_at = 0;
    consume_on_commit(c, RD_KAFKA_RESP_ERR__NO_OFFSET, NULL);
    CHECK(c->commit_retry_at == 0);

    /* Inside a synchronous commit the list is kept (the caller frees it). */
    ok = parts(1, (int32_t[]){1}, (int64_t[]){7});
    c->commit_sync = true;
    consume_on_commit(c, RD_KAFKA_RESP_ERR_NO_ERROR, ok);
    CHECK(c->pending != NULL && c->pending->cnt == 0);
    c->commit_sync = false;

    /* The last one confirmed: nothing pending any more. */
    rd_kafka_topic_partition_list_add(c->pending, "order", 1)->offset = 7;
    consume_on_commit(c, RD_KAFKA_RESP_ERR_NO_ERROR, ok);
    CHECK(c->pending == NULL);
    rd_kafka_topic_partition_list_destroy(ok);
    free(c);
}

/* The main loop's retry is asynchronous and one at a time: an answer to an
 * asynchronous commit (refusal or not) ends its flight, a synchronous
 * commit's does not; no retry while one is in flight (unless unanswered for
 * 30 s) or before the retry time. c->rk is NULL: a retry that went ahead
 * would call rd_kafka_commit() on it and crash. */
static void test_retry_gate(void)
{
    struct consumer *c = calloc(1, sizeof *c);
    c->pending = parts(1, (int32_t[]){0}, (int64_t[]){10});
    rd_kafka_topic_partition_list_t *no = parts(1, (int32_t[]){0}, (int64_t[]){10});

    c->commits_in_flight = 2;
    c->commit_sync = true;
    consume_on_commit(c, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, no);
    CHECK_EQ_INT(c->commits_in_flight, 2);
    c->commit_sync = false;
    consume_on_commit(c, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, no);
    CHECK_EQ_INT(c->commits_in_flight, 1);
    CHECK(c->commit_retry_at > 0);

    /* One still in flight, sent just now: no second one. */
    c->commit_retry_at = 0;
    c->commit_async_at = mono_now();
    consume_commit_retry(c);
    CHECK_EQ_INT(c->commits_in_flight, 1);

    /* Answered, but the retry time has not come. */
    consume_on_commit(c, RD_KAFKA_RESP_ERR__NO_OFFSET, NULL);
    CHECK_EQ_INT(c->commits_in_flight, 0);
    c->commit_retry_at = mono_now() + 60;
    consume_commit_retry(c);
    CHECK_EQ_INT(c->commits_in_flight, 0);

    /* Never below zero; this answer confirms the last pending offset. */
    consume_on_commit(c, RD_KAFKA_RESP_ERR_NO_ERROR, no);
    CHECK_EQ_INT(c->commits_in_flight, 0);
    CHECK(c->pending == NULL);

    /* Nothing pending: nothing to retry, whenever. */
    c->commit_retry_at = 0;
    c->commit_async_at = -1000;
    consume_commit_retry(c);
    CHECK_EQ_INT(c->commits_in_flight, 0);
    rd_kafka_topic_partition_list_destroy(no);
    free(c);
}

int main(void)
{
    test_ids_literal();
    test_on_commit();
    test_retry_gate();
    CHECK_DONE();
}
