/*
 * test_deadletter_judge.c — the dead-letter policy (deadletter_judge.h):
 * halt, send, skip while a rewind is pending, never a dead letter of a
 * dead letter; then the same rules over all 16 combinations of the facts.
 */
#include "outbox_relay/core/deadletter_judge.h"

#include "check.h"

static void test_judge(void)
{
    /* halt policy: every failure halts, unless a rewind judges it later */
    CHECK_EQ_INT(deadletter_judge(false, true, false, false), DEADLETTER_HALT);
    CHECK_EQ_INT(deadletter_judge(false, false, false, false), DEADLETTER_HALT);
    CHECK_EQ_INT(deadletter_judge(false, true, true, false), DEADLETTER_SKIP);
    /* dead-letter policy: poison is sent, the producer's own failure halts */
    CHECK_EQ_INT(deadletter_judge(true, true, false, false), DEADLETTER_SEND);
    CHECK_EQ_INT(deadletter_judge(true, false, false, false), DEADLETTER_HALT);
    CHECK_EQ_INT(deadletter_judge(true, false, true, false), DEADLETTER_HALT);
    CHECK_EQ_INT(deadletter_judge(true, true, true, false), DEADLETTER_SKIP);
    /* a dead letter that is poison itself is not dead-lettered again */
    CHECK_EQ_INT(deadletter_judge(true, true, false, true), DEADLETTER_HALT);
}

static void test_rules(void)
{
    for (int bits = 0; bits < 16; bits++) {
        bool policy = bits & 1, poison = bits & 2, rewinding = bits & 4, dl = bits & 8;
        enum deadletter_verdict v = deadletter_judge(policy, poison, rewinding, dl);
        /* only poison is ever skipped or sent; the rest halts */
        if (!poison)
            CHECK_EQ_INT(v, DEADLETTER_HALT);
        /* a pending rewind judges poison again later */
        if (poison && rewinding)
            CHECK_EQ_INT(v, DEADLETTER_SKIP);
        /* sent only under the policy, and never a dead letter again */
        if (v == DEADLETTER_SEND)
            CHECK(policy && poison && !rewinding && !dl);
    }
}

int main(void)
{
    test_judge();
    test_rules();
    CHECK_DONE();
}
