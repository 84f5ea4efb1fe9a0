/*
 * test_partition_rule.c — the rule of partition membership
 * (partition_rule.h): the decision for each kind of catalog fact and the
 * bounded memory of delivered commits (ordering, reconnect replays,
 * forgetting the oldest). The shape test of step 0 is the decoders'
 * (test_decoder_w2j.c, test_decoder_pgoutput.c).
 */
#include "outbox_relay/core/partition_rule.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static struct partition_facts facts(bool exists, bool member, bool since_birth, size_t n,
                                    const uint32_t *xmin, const bool *old)
{
    struct partition_facts f = {.exists = exists, .member = member,
                                .since_birth = since_birth, .nchain = n};
    for (size_t i = 0; i < n; i++) {
        f.xmin[i] = xmin[i];
        f.xmin_old[i] = old[i];
    }
    return f;
}

static void test_seen(void)
{
    struct partition_seen *s = partition_seen_new(4);
    CHECK(s != NULL);
    CHECK(!partition_seen_before(s, 10, 1000));
    partition_seen_add(s, 10, 100);
    partition_seen_add(s, 12, 200);
    CHECK(partition_seen_before(s, 10, 100)); /* commit end == the row's LSN: before */
    CHECK(partition_seen_before(s, 10, 150));
    CHECK(!partition_seen_before(s, 12, 150)); /* committed after the row */
    CHECK(partition_seen_before(s, 12, 200));
    /* A reconnect replays commits: the same xid again at the same place. */
    partition_seen_add(s, 12, 200);
    CHECK(partition_seen_before(s, 12, 250));
    /* Full: the oldest is forgotten first. */
    partition_seen_add(s, 13, 300);
    partition_seen_add(s, 14, 400);
    CHECK(!partition_seen_before(s, 10, 1000));
    CHECK(partition_seen_before(s, 14, 400));
    partition_seen_free(s);
    partition_seen_free(NULL);

    /* Growing past the first allocation keeps the order. */
    s = partition_seen_new(5000);
    for (uint32_t x = 1; x <= 3000; x++)
        partition_seen_add(s, x, (lsn_t) x * 10);
    CHECK(partition_seen_before(s, 1, 10));
    CHECK(partition_seen_before(s, 2999, 29990));
    CHECK(!partition_seen_before(s, 3000, 29999));
    partition_seen_free(s);
}

static void test_decide(void)
{
    char why[512];
    struct partition_seen *s = partition_seen_new(16);
    partition_seen_add(s, 500, 1000); /* a DDL the stream delivered at 1000 */

    /* No table of that name: renamed or dropped since. */
    struct partition_facts f = facts(false, false, false, 0, NULL, NULL);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 2000, why, sizeof why), PARTITION_UNKNOWN);
    CHECK(strstr(why, "renamed or dropped") != NULL);

    /* A member since its creation: yes, whatever the xmins. */
    uint32_t x1[] = {900, 901};
    bool o1[] = {false, false};
    f = facts(true, true, true, 2, x1, o1);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 2000, why, sizeof why), PARTITION_YES);

    /* Every catalog row older than the slot's catalog_xmin: today's answer. */
    uint32_t x2[] = {100, 101};
    bool o2[] = {true, true};
    f = facts(true, true, false, 2, x2, o2);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 2000, why, sizeof why), PARTITION_YES);
    f = facts(true, false, false, 2, x2, o2);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 2000, why, sizeof why), PARTITION_NO);

    /* Attached by a transaction the stream delivered before the row: yes;
     * the same attach, if it committed after the row: cannot tell. */
    uint32_t x3[] = {500, 100};
    bool o3[] = {false, true};
    f = facts(true, true, false, 2, x3, o3);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 1500, why, sizeof why), PARTITION_YES);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 999, why, sizeof why), PARTITION_UNKNOWN);
    CHECK(strstr(why, "transaction 500") != NULL);

    /* Detached by a transaction not delivered yet (the relayer was stopped):
     * today's "not a member" cannot be trusted. */
    uint32_t x4[] = {777};
    bool o4[] = {false};
    f = facts(true, false, false, 1, x4, o4);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 2000, why, sizeof why), PARTITION_UNKNOWN);
    CHECK(strstr(why, "777") != NULL);
    /* ... unless it is the row's own transaction. */
    CHECK_EQ_INT(partition_decide(&f, s, 777, 2000, why, sizeof why), PARTITION_NO);

    /* A parent's row changed after the row: cannot tell either. */
    uint32_t x5[] = {100, 778};
    bool o5[] = {true, false};
    f = facts(true, true, false, 2, x5, o5);
    CHECK_EQ_INT(partition_decide(&f, s, 0, 2000, why, sizeof why), PARTITION_UNKNOWN);
    CHECK(strstr(why, "of a parent") != NULL);
    CHECK_EQ_INT(partition_decide(&f, NULL, 0, 2000, why, sizeof why), PARTITION_UNKNOWN);
    partition_seen_free(s);
}

int main(void)
{
    test_seen();
    test_decide();
    CHECK_DONE();
}
