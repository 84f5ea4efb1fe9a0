/*
 * test_report_judge.c — every verdict of report_judge (report_judge.h),
 * then its rules checked over all 512 combinations of the facts: a
 * delivered report is always acked; a failure of a token no longer tracked
 * is stale; a retriable failure rewinds a streamed event and retries a
 * backfill run, never the other way round; a dead letter only for a poison
 * event under the dead-letter policy, no rewind pending, and not a dead
 * letter itself; a poison event while rewinding is skipped; a streamed
 * event refused with its batch (shared) is isolated, never dead-lettered
 * or halted on, until it is refused alone.
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/core/report_judge.h"

static struct report_facts failed(void)
{
    return (struct report_facts){.live = true};
}

static void test_each_verdict(void)
{
    struct report_facts f = failed();
    f.delivered = true;
    f.live = false; /* acked whatever the tracker says */
    CHECK_EQ_INT(report_judge(&f), REPORT_ACK);

    f = failed();
    f.live = false;
    CHECK_EQ_INT(report_judge(&f), REPORT_STALE);
    f.backfill = true; /* a row of an interrupted backfill run */
    CHECK_EQ_INT(report_judge(&f), REPORT_STALE);

    f = failed();
    f.waits = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_REWIND);
    f.backfill = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_BACKFILL_RETRY);

    f = failed();
    f.poison = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_HALT); /* --on-poison halt */
    f.dead_letter_policy = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_DEAD_LETTER);
    f.backfill = true; /* a backfill row's poison is dead-lettered alike */
    CHECK_EQ_INT(report_judge(&f), REPORT_DEAD_LETTER);
    f.rewinding = true; /* a backfill row of a run that is stopping */
    CHECK_EQ_INT(report_judge(&f), REPORT_SKIP);
    f.backfill = false; /* a streamed event's own refusal, a rewind pending:
                           produced alone before it is judged */
    CHECK_EQ_INT(report_judge(&f), REPORT_ISOLATE);
    f.dead_letter_policy = false;
    CHECK_EQ_INT(report_judge(&f), REPORT_ISOLATE);
    f.dead_letter_policy = true;
    f.backfill = true;
    f.rewinding = false;
    f.to_dead_letter_topic = true; /* the dead letter itself failed */
    CHECK_EQ_INT(report_judge(&f), REPORT_HALT);

    f = failed(); /* not poison, not retriable: the producer failed */
    f.dead_letter_policy = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_HALT);

    /* A refusal its batch shared: the event is produced again alone before
     * it is judged, under either policy, even while a rewind is pending
     * (that rewind would batch it again); not a dead letter; a backfill row by
     * its run, resumed one row at a time (even in a rewind, which streams
     * only after the backfill). */
    f = failed();
    f.poison = true;
    f.shared = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_ISOLATE);
    f.dead_letter_policy = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_ISOLATE);
    f.rewinding = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_ISOLATE);
    f.rewinding = false;
    f.backfill = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_BACKFILL_ISOLATE);
    f.dead_letter_policy = false;
    CHECK_EQ_INT(report_judge(&f), REPORT_BACKFILL_ISOLATE);
    f.shared = false; /* alone in its request: its own refusal */
    CHECK_EQ_INT(report_judge(&f), REPORT_HALT);
    f.dead_letter_policy = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_DEAD_LETTER);
    f.shared = true;
    f.backfill = false;
    f.to_dead_letter_topic = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_HALT);
    f = failed(); /* shared but not poison (a retriable batch error): no isolation */
    f.shared = true;
    f.waits = true;
    CHECK_EQ_INT(report_judge(&f), REPORT_REWIND);

    CHECK(strcmp(report_verdict_name(REPORT_ISOLATE), "isolate") == 0);
    CHECK(strcmp(report_verdict_name(REPORT_BACKFILL_ISOLATE), "backfill-isolate") == 0);
    CHECK(strcmp(report_verdict_name(REPORT_BACKFILL_RETRY), "backfill-retry") == 0);
    CHECK(strcmp(report_verdict_name(REPORT_HALT), "halt") == 0);
}

/* The facts of combination `bits` (one bit per field). */
static struct report_facts facts_of(unsigned bits)
{
    return (struct report_facts){
        .delivered = bits & 1, .backfill = bits & 2, .live = bits & 4, .waits = bits & 8,
        .poison = bits & 16, .dead_letter_policy = bits & 32, .rewinding = bits & 64,
        .to_dead_letter_topic = bits & 128, .shared = bits & 256};
}

static void test_rules_over_every_combination(void)
{
    for (unsigned bits = 0; bits < 512; bits++) {
        struct report_facts f = facts_of(bits);
        enum report_verdict v = report_judge(&f);
        CHECK((v == REPORT_ACK) == f.delivered);
        if (f.delivered)
            continue;
        CHECK((v == REPORT_STALE) == !f.live);
        if (!f.live)
            continue;
        CHECK(v != REPORT_REWIND || (!f.backfill && f.waits));
        CHECK(v != REPORT_BACKFILL_RETRY || (f.backfill && f.waits));
        if (f.waits)
            CHECK(v == (f.backfill ? REPORT_BACKFILL_RETRY : REPORT_REWIND));
        CHECK(v != REPORT_DEAD_LETTER || (f.poison && f.dead_letter_policy && !f.rewinding &&
                                          !f.to_dead_letter_topic && !f.shared));
        CHECK((v == REPORT_ISOLATE) == (!f.waits && f.poison && (f.shared || f.rewinding) &&
                                        !f.backfill && !f.to_dead_letter_topic));
        CHECK((v == REPORT_BACKFILL_ISOLATE) == (!f.waits && f.poison && f.shared &&
                                                 f.backfill && !f.to_dead_letter_topic));
        CHECK(v != REPORT_SKIP || (f.poison && f.rewinding &&
                                   (f.backfill || f.to_dead_letter_topic)));
        if (!f.waits && !f.poison)
            CHECK(v == REPORT_HALT);
        CHECK(strcmp(report_verdict_name(v), "?") != 0);
    }
}

/* Every halt names what the operator can do, and the advice fits the case:
 * a backfill row is resumed, poison without the policy points at it, poison
 * with it means the dead-letter topic refused too, anything else is the
 * producer's failure. */
static void test_halt_advice(void)
{
    for (unsigned bits = 0; bits < 512; bits++) {
        struct report_facts f = facts_of(bits);
        if (report_judge(&f) != REPORT_HALT)
            continue;
        const char *a = report_halt_advice(&f);
        CHECK(a != NULL && *a != '\0');
        if (f.backfill)
            CHECK(strstr(a, "backfill stays unfinished") != NULL);
        else if (f.poison && !f.dead_letter_policy)
            CHECK(strstr(a, "--on-poison dead-letter") != NULL);
        else if (f.poison)
            CHECK(strstr(a, "dead-letter topic refused it too") != NULL);
        else
            CHECK(strstr(a, "producer, not the event, failed") != NULL);
    }
}

int main(void)
{
    test_each_verdict();
    test_rules_over_every_combination();
    test_halt_advice();
    CHECK_DONE();
}
