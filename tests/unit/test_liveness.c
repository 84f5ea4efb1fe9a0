/*
 * test_liveness.c — the wal receiver timeout's schedule (liveness.h), at the
 * default of 60 s and with a short one: the ping once at half, death at the
 * whole, a frame resetting both, 0 turning it off, and the due times a poll
 * loop would sleep for.
 */
#include "outbox_relay/core/liveness.h"

#include "check.h"

static void test_default_schedule(void)
{
    struct liveness l;
    liveness_init(&l, 60, 1000);
    CHECK_EQ_INT(liveness_check(&l, 1000), LIVENESS_OK);
    CHECK(liveness_due_in(&l, 1000) == 30);
    CHECK_EQ_INT(liveness_check(&l, 1029.9), LIVENESS_OK);
    CHECK_EQ_INT(liveness_check(&l, 1030), LIVENESS_PING);
    liveness_pinged(&l);
    CHECK_EQ_INT(liveness_check(&l, 1031), LIVENESS_OK); /* once per silence */
    CHECK(liveness_due_in(&l, 1031) == 29);
    CHECK_EQ_INT(liveness_check(&l, 1059.9), LIVENESS_OK);
    CHECK_EQ_INT(liveness_check(&l, 1060), LIVENESS_DEAD);
    CHECK(liveness_due_in(&l, 1070) == 0);
    CHECK(liveness_silence(&l, 1070) == 70);
}

static void test_frames_reset_the_silence(void)
{
    struct liveness l;
    liveness_init(&l, 60, 0);
    CHECK_EQ_INT(liveness_check(&l, 45), LIVENESS_PING);
    liveness_pinged(&l);
    liveness_heard(&l, 50); /* the server's reply */
    CHECK_EQ_INT(liveness_check(&l, 79), LIVENESS_OK);
    CHECK_EQ_INT(liveness_check(&l, 80), LIVENESS_PING); /* a new silence pings again */
    CHECK_EQ_INT(liveness_check(&l, 110), LIVENESS_DEAD);
    liveness_heard(&l, 40); /* a clock that went back does not extend the past */
    CHECK(liveness_silence(&l, 60) == 10);
    /* A server that keeps sending keepalives every wal_sender_timeout / 2
     * (30 s by default) never lets a 60 s timeout expire. */
    liveness_init(&l, 60, 0);
    for (double t = 0; t < 600; t += 30) {
        CHECK(liveness_check(&l, t) != LIVENESS_DEAD);
        liveness_heard(&l, t);
    }
}

static void test_short_and_off(void)
{
    struct liveness l;
    liveness_init(&l, 5, 0);
    CHECK(liveness_due_in(&l, 1) == 1.5);
    CHECK_EQ_INT(liveness_check(&l, 2.5), LIVENESS_PING);
    CHECK(liveness_due_in(&l, 2.5) == 0);
    liveness_pinged(&l);
    CHECK(liveness_due_in(&l, 2.5) == 2.5);
    CHECK_EQ_INT(liveness_check(&l, 5), LIVENESS_DEAD);

    liveness_init(&l, 0, 0);
    CHECK_EQ_INT(liveness_check(&l, 1e6), LIVENESS_OK);
    CHECK(liveness_due_in(&l, 1e6) >= 3600);
}

int main(void)
{
    test_default_schedule();
    test_frames_reset_the_silence();
    test_short_and_off();
    CHECK_DONE();
}
