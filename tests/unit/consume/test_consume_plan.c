/*
 * test_consume_plan.c — the parallel apply's pure decisions
 * (consume_plan.c): a key always goes to the same worker, keys spread over
 * the workers, keyless messages go by partition; the offset committed for
 * a partition never passes an unapplied message, checked on fixed cases
 * and on random batches with random applied sets. No I/O.
 */
#include <stdlib.h>
#include <string.h>

#include "../../../src/consume/consume_plan.h"
#include "check.h"

static void test_worker_of(void)
{
    CHECK_EQ_INT(consume_worker_of("abc", 3, 0, 1), 0);
    CHECK_EQ_INT(consume_worker_of("abc", 3, 0, 0), 0);
    /* stable: the same key, any partition, the same worker */
    for (unsigned n = 2; n <= 8; n++) {
        unsigned w = consume_worker_of("customer-42", 11, 0, n);
        CHECK(w < n);
        for (int32_t p = 1; p < 16; p++)
            CHECK_EQ_INT(consume_worker_of("customer-42", 11, p, n), w);
    }
    /* 1,000 uuid-like keys over 4 workers: each gets a fair share */
    unsigned count[4] = {0};
    char key[40];
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(key, sizeof key, "00000000-0000-4000-8000-%012d", i);
        count[consume_worker_of(key, (size_t) len, 0, 4)]++;
    }
    for (int w = 0; w < 4; w++)
        CHECK(count[w] > 150 && count[w] < 350);
    /* keyless: by partition, stable */
    for (int32_t p = 0; p < 16; p++)
        CHECK_EQ_INT(consume_worker_of(NULL, 0, p, 3), consume_worker_of(NULL, 0, p, 3));
    unsigned seen = 0;
    for (int32_t p = 0; p < 16; p++)
        seen |= 1u << consume_worker_of(NULL, 0, p, 3);
    CHECK_EQ_INT(seen, 7); /* 16 partitions reach all 3 workers */
    /* a key's bytes, not its C string: an embedded NUL counts */
    CHECK(consume_worker_of("a\0b", 3, 0, 1000) != consume_worker_of("a\0c", 3, 0, 1000));
}

static void test_json_member(void)
{
    const char *v = NULL;
    size_t n = 0;
    const char *j = "{\"order_id\": \"o-1\", \"customer_id\":\"c-42\", \"points\": 12, "
                    "\"tags\": [1, {\"customer_id\": \"inner\"}], \"x\": null}";
    CHECK(consume_json_member(j, strlen(j), "customer_id", &v, &n));
    CHECK_SPAN(v, n, "c-42");
    CHECK(consume_json_member(j, strlen(j), "points", &v, &n));
    CHECK_SPAN(v, n, "12");
    CHECK(consume_json_member(j, strlen(j), "tags", &v, &n));
    CHECK_SPAN(v, n, "[1, {\"customer_id\": \"inner\"}]");
    CHECK(consume_json_member(j, strlen(j), "x", &v, &n));
    CHECK_SPAN(v, n, "null");
    CHECK(!consume_json_member(j, strlen(j), "inner", &v, &n)); /* top level only */
    CHECK(!consume_json_member(j, strlen(j), "customer", &v, &n));
    /* a string's escapes are kept: the same value always hashes alike */
    const char *e = " { \"k\" : \"a\\\"b\" } ";
    CHECK(consume_json_member(e, strlen(e), "k", &v, &n));
    CHECK_SPAN(v, n, "a\\\"b");
    /* not an object, empty, truncated, malformed before the member */
    const char *bad[] = {"", "[]", "\"k\"", "{}", "{\"k\"", "{\"k\":", "{\"a\":1 \"k\":2}",
                         "{\"a\":tru, \"k\":1}", "{k:1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!consume_json_member(bad[i], strlen(bad[i]), "k", &v, &n));
    /* the length bounds the scan: a member past len is not seen */
    const char *cut = "{\"a\":1,\"k\":2}";
    CHECK(!consume_json_member(cut, 8, "k", &v, &n));
}

static void test_lowmark_fixed(void)
{
    struct consume_lowmark t = {0};
    int64_t off = -7;
    /* all applied: last + 1 */
    consume_lowmark_note(&t, "order", 0, 10, true);
    consume_lowmark_note(&t, "order", 0, 11, true);
    consume_lowmark_note(&t, "order", 0, 12, true);
    /* a gap in the middle: the lowest unapplied */
    consume_lowmark_note(&t, "order", 1, 5, true);
    consume_lowmark_note(&t, "order", 1, 7, false);
    consume_lowmark_note(&t, "order", 1, 6, false);
    consume_lowmark_note(&t, "order", 1, 8, true);
    /* the first unapplied: nothing to commit */
    consume_lowmark_note(&t, "order", 2, 3, false);
    consume_lowmark_note(&t, "order", 2, 4, true);
    /* the same partition number of another topic is another partition */
    consume_lowmark_note(&t, "shipment", 0, 100, false);
    CHECK_EQ_INT(t.nparts, 4);
    CHECK(consume_lowmark_commit(&t, 0, &off));
    CHECK_EQ_INT(off, 13);
    CHECK(consume_lowmark_commit(&t, 1, &off));
    CHECK_EQ_INT(off, 6);
    off = -7;
    CHECK(!consume_lowmark_commit(&t, 2, &off));
    CHECK(!consume_lowmark_commit(&t, 3, &off));
    CHECK_EQ_INT(off, -7);
    consume_lowmark_reset(&t);
    CHECK_EQ_INT(t.nparts, 0);
    consume_lowmark_note(&t, "order", 9, 0, true);
    CHECK(consume_lowmark_commit(&t, 0, &off));
    CHECK_EQ_INT(off, 1);
    consume_lowmark_free(&t);
    CHECK(t.parts == NULL);
}

/* Random batches: per partition a run of consecutive offsets, shuffled,
 * each applied or not; the committed offset must have every message below
 * it applied, and must be either an unapplied message or the last + 1. */
static void test_lowmark_random(void)
{
    static const char *topics[2] = {"order", "shipment"};
    struct consume_lowmark t = {0};
    srand(29);
    for (int round = 0; round < 2000; round++) {
        enum { MAXM = 64 };
        struct { int tp; int32_t p; int64_t off; bool applied; } m[MAXM];
        int64_t next[2][4];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 4; b++)
                next[a][b] = rand() % 1000;
        int n = 1 + rand() % MAXM;
        int bias = rand() % 4; /* how often a message stays unapplied */
        for (int i = 0; i < n; i++) {
            m[i].tp = rand() % 2;
            m[i].p = rand() % 4;
            m[i].off = next[m[i].tp][m[i].p]++;
            m[i].applied = rand() % 4 >= bias;
        }
        for (int i = n - 1; i > 0; i--) { /* any order of notes */
            int j = rand() % (i + 1);
            __typeof__(m[0]) tmp = m[i];
            m[i] = m[j];
            m[j] = tmp;
        }
        consume_lowmark_reset(&t);
        for (int i = 0; i < n; i++)
            CHECK_EQ_INT(consume_lowmark_note(&t, topics[m[i].tp], m[i].p, m[i].off,
                                              m[i].applied), 0);
        for (size_t k = 0; k < t.nparts; k++) {
            int64_t off;
            bool any_applied_first = false, all = true;
            int64_t lo = INT64_MAX, hi = -1;
            for (int i = 0; i < n; i++) {
                if (strcmp(topics[m[i].tp], t.parts[k].topic) || m[i].p != t.parts[k].partition)
                    continue;
                if (m[i].off < lo) {
                    lo = m[i].off;
                    any_applied_first = m[i].applied;
                }
                if (m[i].off > hi)
                    hi = m[i].off;
                all = all && m[i].applied;
            }
            bool moved = consume_lowmark_commit(&t, k, &off);
            CHECK_EQ_INT(moved, any_applied_first);
            if (!moved)
                continue;
            CHECK(off > lo && off <= hi + 1);
            for (int i = 0; i < n; i++) {
                if (strcmp(topics[m[i].tp], t.parts[k].topic) || m[i].p != t.parts[k].partition)
                    continue;
                if (m[i].off < off)
                    CHECK(m[i].applied);
                if (m[i].off == off)
                    CHECK(!m[i].applied);
            }
            if (all)
                CHECK_EQ_INT(off, hi + 1);
        }
    }
    consume_lowmark_free(&t);
}

int main(void)
{
    test_worker_of();
    test_json_member();
    test_lowmark_fixed();
    test_lowmark_random();
    CHECK_DONE();
}
