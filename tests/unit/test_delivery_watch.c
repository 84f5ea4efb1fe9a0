/*
 * test_delivery_watch.c — when the relay says deliveries are stuck
 * (delivery_watch.h): not before DELIVERY_WATCH_AFTER without a report,
 * then every DELIVERY_WATCH_REPEAT, once resumed on the next report or
 * when nothing is in flight, never while nothing waits.
 */
#include "outbox_relay/core/delivery_watch.h"

#include "check.h"

static void test_stuck_then_repeats_then_resumes(void)
{
    struct delivery_watch w;
    delivery_watch_init(&w, 100);
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 100), DELIVERY_WATCH_OK);
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 114.9), DELIVERY_WATCH_OK);
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 115), DELIVERY_WATCH_STUCK);
    CHECK(delivery_watch_stalled(&w, 115) == 15);
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 116), DELIVERY_WATCH_OK); /* once */
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 144.9), DELIVERY_WATCH_OK);
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 145), DELIVERY_WATCH_STUCK);
    CHECK_EQ_INT(delivery_watch_check(&w, 5, 0, 175), DELIVERY_WATCH_STUCK);
    /* a report, whatever its outcome: resumed, once, with the stall's length */
    CHECK_EQ_INT(delivery_watch_check(&w, 4, 1, 180), DELIVERY_WATCH_RESUMED);
    CHECK(w.stalled == 80);
    CHECK_EQ_INT(delivery_watch_check(&w, 4, 1, 181), DELIVERY_WATCH_OK);
    /* the next stall counts from the last report, with the first delay again */
    CHECK_EQ_INT(delivery_watch_check(&w, 4, 1, 194.9), DELIVERY_WATCH_OK);
    CHECK_EQ_INT(delivery_watch_check(&w, 4, 1, 195), DELIVERY_WATCH_STUCK);
}

static void test_reports_keep_it_quiet(void)
{
    struct delivery_watch w;
    delivery_watch_init(&w, 0);
    /* a slow but moving producer: a report every 10 s, never stuck */
    for (int i = 1; i <= 20; i++)
        CHECK_EQ_INT(delivery_watch_check(&w, 100, (unsigned long long) i, 10.0 * i),
                     DELIVERY_WATCH_OK);
}

static void test_nothing_in_flight_is_not_stuck(void)
{
    struct delivery_watch w;
    delivery_watch_init(&w, 0);
    CHECK_EQ_INT(delivery_watch_check(&w, 0, 0, 1000), DELIVERY_WATCH_OK);
    CHECK(delivery_watch_stalled(&w, 1000) == 0);
    /* in flight from 1000 on: counts from there, not from the start */
    CHECK_EQ_INT(delivery_watch_check(&w, 1, 0, 1010), DELIVERY_WATCH_OK);
    CHECK_EQ_INT(delivery_watch_check(&w, 1, 0, 1015), DELIVERY_WATCH_STUCK);
    /* the window emptied without a report (a purge): resumed too */
    CHECK_EQ_INT(delivery_watch_check(&w, 0, 0, 1020), DELIVERY_WATCH_RESUMED);
    CHECK(w.stalled == 20);
}

int main(void)
{
    test_stuck_then_repeats_then_resumes();
    test_reports_keep_it_quiet();
    test_nothing_in_flight_is_not_stuck();
    CHECK_DONE();
}
