/*
 * test_partition_gate.c — a new producer's second record to a partition
 * waits for its first one's delivery (partition_gate.h): one at a time
 * until a delivery opens the partition, failures open nothing, a new
 * producer closes everything again, an open partition closes after
 * PARTITION_GATE_OPEN_FOR, records of unknown partition hold their
 * whole topic, and topic numbers stay.
 */
#include "outbox_relay/core/partition_gate.h"

#include "check.h"

static void test_one_at_a_time_until_delivered(void)
{
    struct partition_gate *g = partition_gate_new();
    int t = partition_gate_topic(g, "t"), u = partition_gate_topic(g, "u");
    CHECK(g != NULL);
    CHECK_EQ_INT(t, 0);
    CHECK_EQ_INT(u, 1);
    CHECK_EQ_INT(partition_gate_topic(g, "t"), t); /* the same for the gate's life */
    CHECK_EQ_INT(partition_gate_topic(g, "u"), u);
    CHECK(partition_gate_may_send(g, t, 0, 10));
    CHECK_EQ_INT(partition_gate_sent(g, t, 0), 0);
    CHECK(!partition_gate_may_send(g, t, 0, 10)); /* the first is in flight */
    CHECK(partition_gate_may_send(g, t, 1, 10));  /* another partition */
    CHECK(partition_gate_may_send(g, u, 0, 10));  /* another topic */
    partition_gate_reported(g, t, 0, 0, true, 11);
    CHECK(partition_gate_may_send(g, t, 0, 11));
    /* open: pipelined from now on */
    CHECK_EQ_INT(partition_gate_sent(g, t, 0), 0);
    CHECK_EQ_INT(partition_gate_sent(g, t, 0), 0);
    CHECK(partition_gate_may_send(g, t, 0, 11));
    partition_gate_free(g);
}

static void test_a_failure_opens_nothing(void)
{
    struct partition_gate *g = partition_gate_new();
    int t = partition_gate_topic(g, "t");
    CHECK_EQ_INT(partition_gate_sent(g, t, 2), 2);
    CHECK(!partition_gate_may_send(g, t, 2, 0));
    partition_gate_reported(g, t, 2, 2, false, 1); /* refused: too large */
    CHECK(partition_gate_may_send(g, t, 2, 1));     /* nothing in flight */
    CHECK_EQ_INT(partition_gate_sent(g, t, 2), 2);
    CHECK(!partition_gate_may_send(g, t, 2, 1)); /* still one at a time */
    partition_gate_free(g);
}

static void test_a_new_producer_closes_every_partition(void)
{
    struct partition_gate *g = partition_gate_new();
    int t = partition_gate_topic(g, "t");
    partition_gate_sent(g, t, 0);
    partition_gate_reported(g, t, 0, 0, true, 5);
    partition_gate_sent(g, t, 0);
    partition_gate_reported(g, t, 0, 0, true, 5);
    CHECK(partition_gate_may_send(g, t, 0, 6));
    partition_gate_reset(g);
    CHECK(partition_gate_may_send(g, t, 0, 6)); /* nothing in flight */
    partition_gate_sent(g, t, 0);
    CHECK(!partition_gate_may_send(g, t, 0, 6));
    partition_gate_free(g);
}

static void test_an_idle_partition_closes(void)
{
    struct partition_gate *g = partition_gate_new();
    int t = partition_gate_topic(g, "t");
    partition_gate_sent(g, t, 1);
    partition_gate_reported(g, t, 1, 1, true, 100);
    partition_gate_sent(g, t, 1);
    CHECK(partition_gate_may_send(g, t, 1, 100 + PARTITION_GATE_OPEN_FOR - 1));
    CHECK(!partition_gate_may_send(g, t, 1, 100 + PARTITION_GATE_OPEN_FOR));
    /* each delivery keeps it open from then on */
    partition_gate_reported(g, t, 1, 1, true, 100 + PARTITION_GATE_OPEN_FOR);
    partition_gate_sent(g, t, 1);
    CHECK(partition_gate_may_send(g, t, 1, 100 + 2 * PARTITION_GATE_OPEN_FOR - 1));
    partition_gate_free(g);
}

static void test_unassigned_records_hold_their_topic(void)
{
    struct partition_gate *g = partition_gate_new();
    int t = partition_gate_topic(g, "t"), u = partition_gate_topic(g, "u");
    /* an open partition, then a record whose partition is not known yet */
    partition_gate_sent(g, t, 0);
    partition_gate_reported(g, t, 0, 0, true, 1);
    CHECK(partition_gate_topic_clear(g, t));
    CHECK_EQ_INT(partition_gate_sent(g, t, -1), PARTITION_GATE_UNASSIGNED);
    CHECK(!partition_gate_topic_clear(g, t));
    CHECK(!partition_gate_may_send(g, t, 0, 1)); /* it may have gone there */
    CHECK(!partition_gate_may_send(g, t, 7, 1));
    CHECK(partition_gate_topic_clear(g, u));
    /* delivered to partition 3: that one opens, the topic clears */
    partition_gate_reported(g, t, PARTITION_GATE_UNASSIGNED, 3, true, 2);
    CHECK(partition_gate_topic_clear(g, t));
    partition_gate_sent(g, t, 3);
    CHECK(partition_gate_may_send(g, t, 3, 2));
    partition_gate_free(g);
}

static void test_reports_of_uncounted_records(void)
{
    struct partition_gate *g = partition_gate_new();
    int t = partition_gate_topic(g, "t");
    /* a dead letter or a record produced before the gate knew the topic:
     * its delivery still opens its partition, and counts nothing down */
    partition_gate_sent(g, t, 4);
    partition_gate_reported(g, t, PARTITION_GATE_NOT_COUNTED, 4, true, 1);
    partition_gate_sent(g, t, 4); /* open: goes */
    CHECK(partition_gate_may_send(g, t, 4, 1));
    partition_gate_reset(g);
    CHECK(!partition_gate_may_send(g, t, 4, 1)); /* two still counted in flight */
    partition_gate_reported(g, t, 4, 4, false, 1);
    partition_gate_reported(g, t, 4, 4, false, 1);
    CHECK(partition_gate_may_send(g, t, 4, 1));
    /* a record that got no topic number (out of memory) */
    partition_gate_reported(g, -1, PARTITION_GATE_NOT_COUNTED, -1, false, 1); /* no topic */
    CHECK(partition_gate_topic_clear(g, -1));
    CHECK_EQ_INT((int) partition_gate_lost(g), 0);
    partition_gate_free(g);
}

int main(void)
{
    test_one_at_a_time_until_delivered();
    test_a_failure_opens_nothing();
    test_a_new_producer_closes_every_partition();
    test_an_idle_partition_closes();
    test_unassigned_records_hold_their_topic();
    test_reports_of_uncounted_records();
    CHECK_DONE();
}
