/*
 * test_backfill.c — the pure parts of the backfill: the marker's states, and
 * the progress that becomes backfill_done_id (an id must never be recorded
 * before every row up to it is acknowledged, or a resume would skip rows).
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/core/backfill_ckpt.h"
#include "outbox_relay/relay/backfill.h"

static void test_states(void)
{
    enum backfill_state st = BACKFILL_DONE;
    CHECK_EQ_INT(backfill_parse_state(NULL, &st), 0);
    CHECK_EQ_INT(st, BACKFILL_NONE);
    CHECK_EQ_INT(backfill_parse_state("", &st), 0);
    CHECK_EQ_INT(st, BACKFILL_NONE);
    CHECK_EQ_INT(backfill_parse_state("creating", &st), 0);
    CHECK_EQ_INT(st, BACKFILL_CREATING);
    CHECK_EQ_INT(backfill_parse_state("running", &st), 0);
    CHECK_EQ_INT(st, BACKFILL_RUNNING);
    CHECK_EQ_INT(backfill_parse_state("done", &st), 0);
    CHECK_EQ_INT(st, BACKFILL_DONE);
    CHECK_EQ_INT(backfill_parse_state("Done", &st), -1);
    CHECK_EQ_INT(backfill_parse_state("running ", &st), -1);
}

static void test_progress(void)
{
    struct backfill_progress p = {0};
    char done[BACKFILL_ID_MAX] = "";

    CHECK(!backfill_progress_done(&p, 100, done)); /* nothing noted */
    backfill_progress_note(&p, 1000, "61000");
    backfill_progress_note(&p, 2000, "62000");
    backfill_progress_note(&p, 2500, "62500");
    CHECK(!backfill_progress_done(&p, 999, done)); /* row 1000 not yet */
    CHECK(backfill_progress_done(&p, 1000, done));
    CHECK(strcmp(done, "61000") == 0);
    CHECK(!backfill_progress_done(&p, 1999, done));
    CHECK(backfill_progress_done(&p, 3000, done)); /* both passed: the newest */
    CHECK(strcmp(done, "62500") == 0);
    CHECK(!backfill_progress_done(&p, 1u << 30, done));

    /* An id too long to record is skipped: the next checkpoint covers it. */
    char longid[BACKFILL_ID_MAX + 10];
    memset(longid, '7', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    backfill_progress_note(&p, 3000, longid);
    backfill_progress_note(&p, 4000, "64000");
    CHECK(!backfill_progress_done(&p, 3500, done));
    CHECK(backfill_progress_done(&p, 4000, done));
    CHECK(strcmp(done, "64000") == 0);

    /* Many in flight: the queue grows and keeps its order. */
    for (unsigned i = 1; i <= 1000; i++) {
        char id[32];
        snprintf(id, sizeof id, "%u", 100000 + i);
        backfill_progress_note(&p, 4000 + (uint64_t) i * 10, id);
        if (i % 7 == 0) { /* acks arrive meanwhile */
            CHECK(backfill_progress_done(&p, 4000 + (uint64_t) (i - 3) * 10, done));
            char want[32];
            snprintf(want, sizeof want, "%u", 100000 + i - 3);
            CHECK(strcmp(done, want) == 0);
        }
    }
    CHECK(backfill_progress_done(&p, 4000 + 10000, done));
    CHECK(strcmp(done, "101000") == 0);
    backfill_progress_free(&p);
    CHECK(p.v == NULL);
}

int main(void)
{
    test_states();
    test_progress();
    CHECK_DONE();
}
