/*
 * test_tracker.c — the ack tracker: out-of-order acks, empty transactions,
 * a full ring, keepalives while deliveries are pending or a transaction is
 * open, stale tokens after a reset, duplicate acks, stamps. The randomized
 * comparison against a reference model is test_tracker_model.c.
 */
#include "outbox_relay/core/tracker.h"

#include <stdlib.h>

#include "check.h"

/* One event transaction: begin, one add, commit. Returns the token. */
static uint64_t tx1(struct tracker *t, lsn_t end)
{
    uint64_t tok;

    CHECK_EQ_INT(tracker_begin(t), 0);
    tok = tracker_add(t);
    CHECK(tok != 0);
    CHECK_EQ_INT(tracker_commit(t, end), 0);
    return tok;
}

static void test_new_free(void)
{
    struct tracker *t;

    CHECK(tracker_new(0, 0) == NULL);
    CHECK(tracker_new(1, 0) == NULL);
    t = tracker_new(2, 0x1234);
    CHECK(t != NULL);
    CHECK(tracker_confirmed(t) == 0x1234);
    CHECK_EQ_INT(tracker_pending(t), 0);
    CHECK(!tracker_in_tx(t));
    tracker_free(t);
    tracker_free(NULL);
}

static void test_basic(void)
{
    struct tracker *t = tracker_new(4, 100);
    uint64_t a, b;

    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK(tracker_in_tx(t));
    a = tracker_add(t);
    b = tracker_add(t);
    CHECK(a != 0);
    CHECK(a == b); /* one token per transaction group */
    CHECK_EQ_INT(tracker_pending(t), 2);
    CHECK(tracker_token_lsn(t, a) == 0); /* still open */
    CHECK_EQ_INT(tracker_commit(t, 200), 0);
    CHECK(!tracker_in_tx(t));
    CHECK(tracker_token_lsn(t, a) == 200);
    CHECK(tracker_confirmed(t) == 100);

    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_pending(t), 1);
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK(tracker_confirmed(t) == 200);
    CHECK_EQ_INT(tracker_pending(t), 0);
    CHECK(tracker_token_lsn(t, a) == 0); /* retired: unknown */
    tracker_free(t);
}

/* Events acked before their transaction commits: confirmed waits for the
 * commit, then moves at once. */
static void test_ack_before_commit(void)
{
    struct tracker *t = tracker_new(4, 0);
    uint64_t a;

    CHECK_EQ_INT(tracker_begin(t), 0);
    a = tracker_add(t);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 0);
    CHECK_EQ_INT(tracker_pending(t), 0);
    CHECK_EQ_INT(tracker_ack(t, a), -1); /* nothing left to ack */
    CHECK(tracker_add(t) == a);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 0);
    CHECK_EQ_INT(tracker_commit(t, 300), 0);
    CHECK(tracker_confirmed(t) == 300);
    tracker_free(t);
}

static void test_out_of_order(void)
{
    struct tracker *t = tracker_new(8, 100);
    uint64_t a, b, c;

    /* A (200, 2 events), B (300, 1), C (400, 3). */
    CHECK_EQ_INT(tracker_begin(t), 0);
    a = tracker_add(t);
    tracker_add(t);
    CHECK_EQ_INT(tracker_commit(t, 200), 0);
    b = tx1(t, 300);
    CHECK_EQ_INT(tracker_begin(t), 0);
    c = tracker_add(t);
    tracker_add(t);
    tracker_add(t);
    CHECK_EQ_INT(tracker_commit(t, 400), 0);
    CHECK(a != b && b != c && a != c);
    CHECK_EQ_INT(tracker_pending(t), 6);

    /* Newest first: nothing moves until the oldest is done. */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(tracker_ack(t, c), 0);
        CHECK(tracker_confirmed(t) == 100);
    }
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 400); /* all three retire together */
    CHECK_EQ_INT(tracker_pending(t), 0);
    tracker_free(t);

    /* Oldest done first, then a gap in the middle. */
    t = tracker_new(8, 100);
    a = tx1(t, 200);
    b = tx1(t, 300);
    c = tx1(t, 400);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 200);
    CHECK(tracker_token_live(t, c) && !tracker_token_live(t, a));
    CHECK_EQ_INT(tracker_ack(t, c), 0);
    CHECK(tracker_confirmed(t) == 200);
    CHECK(tracker_token_live(t, c)); /* acked, but not retired before b */
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK(tracker_confirmed(t) == 400);
    CHECK(!tracker_token_live(t, b) && !tracker_token_live(t, c)); /* retired */
    tracker_free(t);
}

static void test_empty_transactions(void)
{
    struct tracker *t = tracker_new(4, 100);
    uint64_t a, b;

    /* Alone: confirmed at once, no slot taken. */
    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK_EQ_INT(tracker_commit(t, 500), 0);
    CHECK(tracker_confirmed(t) == 500);
    CHECK_EQ_INT(tracker_pending(t), 0);

    /* Many empty ones in a row never fill a ring of 4. */
    for (lsn_t l = 510; l < 600; l += 10) {
        CHECK_EQ_INT(tracker_begin(t), 0);
        CHECK_EQ_INT(tracker_commit(t, l), 0);
        CHECK(tracker_confirmed(t) == l);
    }

    /* Behind a pending transaction: confirmed only after it. */
    a = tx1(t, 600);
    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK_EQ_INT(tracker_commit(t, 700), 0);
    CHECK(tracker_confirmed(t) == 590);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 700);

    /* Between two pending ones: moves to the empty one's end when the first
     * is done, to the second's when both are. */
    a = tx1(t, 800);
    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK_EQ_INT(tracker_commit(t, 850), 0);
    b = tx1(t, 900);
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK(tracker_confirmed(t) == 700);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 900);

    a = tx1(t, 1000);
    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK_EQ_INT(tracker_commit(t, 1050), 0);
    b = tx1(t, 1100);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 1050);
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK(tracker_confirmed(t) == 1100);
    tracker_free(t);
}

/* Capacity 2, ten one-event transactions: the third to the tenth fold into
 * the second group, which then confirms at the tenth commit. */
static void test_full_ring(void)
{
    struct tracker *t = tracker_new(2, 0);
    uint64_t tok[10];

    for (int i = 0; i < 10; i++)
        tok[i] = tx1(t, (lsn_t) (i + 1) * 100);
    CHECK(tok[0] != tok[1]);
    for (int i = 2; i < 10; i++)
        CHECK(tok[i] == tok[1]);
    CHECK_EQ_INT(tracker_pending(t), 10);
    CHECK(tracker_token_lsn(t, tok[0]) == 100);
    CHECK(tracker_token_lsn(t, tok[1]) == 1000);

    CHECK_EQ_INT(tracker_ack(t, tok[0]), 0);
    CHECK(tracker_confirmed(t) == 100);
    for (int i = 1; i < 9; i++) {
        CHECK_EQ_INT(tracker_ack(t, tok[i]), 0);
        CHECK(tracker_confirmed(t) == 100); /* later, never earlier */
    }
    CHECK_EQ_INT(tracker_ack(t, tok[9]), 0);
    CHECK(tracker_confirmed(t) == 1000);
    CHECK_EQ_INT(tracker_pending(t), 0);

    /* The ring is free again: new transactions get their own groups. */
    uint64_t x = tx1(t, 1100), y = tx1(t, 1200);
    CHECK(x != y && x != tok[1] && y != tok[1]);
    CHECK_EQ_INT(tracker_ack(t, x), 0);
    CHECK(tracker_confirmed(t) == 1100);
    CHECK_EQ_INT(tracker_ack(t, y), 0);
    CHECK(tracker_confirmed(t) == 1200);

    /* Acks in reverse order with a full ring. */
    for (int i = 0; i < 10; i++)
        tok[i] = tx1(t, 2000 + (lsn_t) i * 100);
    for (int i = 9; i >= 1; i--) {
        CHECK_EQ_INT(tracker_ack(t, tok[i]), 0);
        CHECK(tracker_confirmed(t) == 1200);
    }
    CHECK_EQ_INT(tracker_ack(t, tok[0]), 0);
    CHECK(tracker_confirmed(t) == 2900);
    tracker_free(t);
}

/* Folding a transaction into a group whose own events are already acked
 * (the group is held only by an older one) must not let that group retire
 * before the folded transaction commits and is delivered. */
static void test_fold_into_acked_group(void)
{
    struct tracker *t = tracker_new(2, 0);
    uint64_t a, b, c, c2;

    a = tx1(t, 100);
    b = tx1(t, 200);
    CHECK_EQ_INT(tracker_ack(t, b), 0); /* B done, held by A */
    CHECK(tracker_confirmed(t) == 0);

    CHECK_EQ_INT(tracker_begin(t), 0);
    c = tracker_add(t); /* ring full: folds into B's group */
    CHECK(c == b);
    CHECK(tracker_token_lsn(t, b) == 0); /* reopened until C commits */
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_ack(t, c), 0); /* acked but C still open */
    CHECK(tracker_confirmed(t) == 100);
    tracker_idle(t, 5000); /* open transaction: must not move */
    CHECK(tracker_confirmed(t) == 100);
    c2 = tracker_add(t);
    CHECK(c2 == c);
    CHECK_EQ_INT(tracker_commit(t, 300), 0);
    CHECK(tracker_confirmed(t) == 100); /* c2 still pending */
    CHECK(tracker_token_lsn(t, c2) == 300);
    CHECK_EQ_INT(tracker_ack(t, c2), 0);
    CHECK(tracker_confirmed(t) == 300);
    tracker_free(t);

    /* Same, but the folded transaction acks fully before commit and the
     * older group is still pending when it commits. */
    t = tracker_new(2, 0);
    a = tx1(t, 100);
    b = tx1(t, 200);
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK_EQ_INT(tracker_begin(t), 0);
    c = tracker_add(t);
    CHECK_EQ_INT(tracker_ack(t, c), 0);
    CHECK_EQ_INT(tracker_commit(t, 300), 0);
    CHECK(tracker_confirmed(t) == 0);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 300);
    tracker_free(t);
}

static void test_idle(void)
{
    struct tracker *t = tracker_new(4, 100);
    uint64_t a;

    /* Nothing in flight: a keepalive confirms its position. */
    tracker_idle(t, 150);
    CHECK(tracker_confirmed(t) == 150);
    tracker_idle(t, 120); /* never backwards */
    CHECK(tracker_confirmed(t) == 150);

    /* Deliveries pending: must not move; once they are delivered, the
     * keepalive seen meanwhile is confirmed without waiting for another. */
    a = tx1(t, 200);
    tracker_idle(t, 5000);
    CHECK(tracker_confirmed(t) == 150);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 5000);
    tracker_idle(t, 5000);
    CHECK(tracker_confirmed(t) == 5000);

    /* Transaction open, no events yet: must not move. */
    CHECK_EQ_INT(tracker_begin(t), 0);
    tracker_idle(t, 6000);
    CHECK(tracker_confirmed(t) == 5000);
    CHECK_EQ_INT(tracker_commit(t, 7000), 0);
    CHECK(tracker_confirmed(t) == 7000);

    /* Transaction open, its events all acked (pending == 0): must not move. */
    CHECK_EQ_INT(tracker_begin(t), 0);
    a = tracker_add(t);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK_EQ_INT(tracker_pending(t), 0);
    tracker_idle(t, 8000);
    CHECK(tracker_confirmed(t) == 7000);
    CHECK_EQ_INT(tracker_commit(t, 9000), 0);
    CHECK(tracker_confirmed(t) == 9000);

    /* Pending non-transactional event: must not move until it is acked. */
    a = tracker_add_single(t, 9500);
    tracker_idle(t, 9900);
    CHECK(tracker_confirmed(t) == 9000);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 9900);
    tracker_idle(t, 9950);
    CHECK(tracker_confirmed(t) == 9950);
    tracker_free(t);
}

static void test_single(void)
{
    struct tracker *t = tracker_new(2, 0);
    uint64_t s, a, s2;

    s = tracker_add_single(t, 100);
    CHECK(s != 0);
    CHECK(tracker_token_lsn(t, s) == 100); /* closed at once */
    CHECK_EQ_INT(tracker_pending(t), 1);
    CHECK(!tracker_in_tx(t));
    CHECK_EQ_INT(tracker_ack(t, s), 0);
    CHECK(tracker_confirmed(t) == 100);

    /* Behind a pending transaction. */
    a = tx1(t, 200);
    s = tracker_add_single(t, 250);
    CHECK(s != a);
    CHECK_EQ_INT(tracker_ack(t, s), 0);
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 250);

    /* Ring full: folds into the newest group. */
    a = tx1(t, 300);
    s = tracker_add_single(t, 350);
    s2 = tracker_add_single(t, 360);
    CHECK(s2 == s);
    CHECK(tracker_token_lsn(t, s) == 360);
    CHECK(tracker_add_single(t, 340) == s); /* out of order: keeps 360 */
    CHECK(tracker_token_lsn(t, s) == 360);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 300);
    CHECK_EQ_INT(tracker_ack(t, s), 0);
    CHECK_EQ_INT(tracker_ack(t, s), 0);
    CHECK(tracker_confirmed(t) == 300);
    CHECK_EQ_INT(tracker_ack(t, s2), 0);
    CHECK(tracker_confirmed(t) == 360);

    /* Inside a transaction: refused, nothing changes. */
    CHECK_EQ_INT(tracker_begin(t), 0);
    a = tracker_add(t);
    CHECK(tracker_add_single(t, 400) == 0);
    CHECK_EQ_INT(tracker_pending(t), 1);
    CHECK(tracker_in_tx(t));
    CHECK_EQ_INT(tracker_commit(t, 500), 0);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 500);
    CHECK_EQ_INT(tracker_pending(t), 0);
    tracker_free(t);
}

static void test_protocol_errors(void)
{
    struct tracker *t = tracker_new(4, 10);
    uint64_t a;

    CHECK(tracker_add(t) == 0);
    CHECK_EQ_INT(tracker_commit(t, 20), -1);
    CHECK(tracker_confirmed(t) == 10);
    CHECK_EQ_INT(tracker_pending(t), 0);

    CHECK_EQ_INT(tracker_begin(t), 0);
    a = tracker_add(t);
    CHECK_EQ_INT(tracker_begin(t), -1); /* unchanged: same tx, same event */
    CHECK(tracker_in_tx(t));
    CHECK_EQ_INT(tracker_pending(t), 1);
    CHECK(tracker_add(t) == a);
    CHECK_EQ_INT(tracker_commit(t, 30), 0);
    CHECK_EQ_INT(tracker_commit(t, 40), -1);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 10);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 30);
    tracker_free(t);
}

static void test_stale_tokens(void)
{
    struct tracker *t = tracker_new(2, 100);
    uint64_t a, b, c, d;

    a = tx1(t, 200);
    CHECK_EQ_INT(tracker_begin(t), 0);
    b = tracker_add(t);
    CHECK(tracker_token_live(t, a) && tracker_token_live(t, b));
    CHECK(!tracker_token_live(t, 0));
    tracker_reset(t, 50); /* lower than confirmed: kept */
    CHECK(!tracker_token_live(t, a) && !tracker_token_live(t, b));
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_pending(t), 0);
    CHECK(!tracker_in_tx(t));
    CHECK(tracker_add(t) == 0);
    CHECK_EQ_INT(tracker_commit(t, 300), -1);

    /* Late reports from before the reset change nothing. */
    CHECK_EQ_INT(tracker_ack(t, a), -1);
    CHECK_EQ_INT(tracker_ack(t, b), -1);
    CHECK(tracker_token_lsn(t, a) == 0);

    /* The server resends; new tokens land in the same slots but differ. */
    c = tx1(t, 200);
    d = tx1(t, 300);
    CHECK(c != a && c != b && d != a && d != b && c != d);
    CHECK_EQ_INT(tracker_ack(t, a), -1);
    CHECK_EQ_INT(tracker_ack(t, b), -1);
    CHECK_EQ_INT(tracker_pending(t), 2);
    CHECK(tracker_confirmed(t) == 100);
    CHECK_EQ_INT(tracker_ack(t, c), 0);
    CHECK(tracker_confirmed(t) == 200);

    tracker_reset(t, 1000); /* higher: raised */
    CHECK(tracker_confirmed(t) == 1000);
    CHECK_EQ_INT(tracker_ack(t, d), -1);
    CHECK_EQ_INT(tracker_ack(t, c), -1);
    CHECK_EQ_INT(tracker_pending(t), 0);

    /* Many resets in a row: every older token stays stale. */
    uint64_t old[50];
    for (int i = 0; i < 50; i++) {
        old[i] = tx1(t, 2000 + (lsn_t) i);
        tracker_reset(t, 0);
    }
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(tracker_ack(t, old[i]), -1);
    CHECK(tracker_confirmed(t) == 1000);
    tracker_free(t);
}

static void test_bad_acks(void)
{
    struct tracker *t = tracker_new(4, 0);
    uint64_t a, b;

    CHECK_EQ_INT(tracker_ack(t, 0), -1);
    CHECK_EQ_INT(tracker_ack(t, 1), -1); /* nothing issued yet */
    CHECK_EQ_INT(tracker_ack(t, UINT64_MAX), -1);

    a = tx1(t, 100);
    CHECK_EQ_INT(tracker_begin(t), 0);
    b = tracker_add(t);
    tracker_add(t);
    CHECK_EQ_INT(tracker_commit(t, 200), 0);
    CHECK_EQ_INT(tracker_ack(t, b + 1), -1); /* not issued */
    CHECK_EQ_INT(tracker_ack(t, 0), -1);

    /* Double ack of a group with one pending event. */
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK_EQ_INT(tracker_ack(t, b), 0);
    CHECK_EQ_INT(tracker_ack(t, b), -1); /* no underflow */
    CHECK_EQ_INT(tracker_ack(t, b), -1);
    CHECK_EQ_INT(tracker_pending(t), 1);
    CHECK(tracker_confirmed(t) == 0);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 200);
    CHECK_EQ_INT(tracker_ack(t, a), -1); /* retired */
    CHECK_EQ_INT(tracker_pending(t), 0);
    CHECK(tracker_confirmed(t) == 200);
    tracker_free(t);
}

/* Tokens beyond the newest one issued are unknown, even when the slot they
 * would use still holds counts from before a reset. */
static void test_unissued_tokens(void)
{
    struct tracker *t = tracker_new(4, 0);
    uint64_t hi = 0, c;

    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(tracker_begin(t), 0);
        for (int j = 0; j < 3; j++)
            hi = tracker_add(t);
        CHECK_EQ_INT(tracker_commit(t, 100 + (lsn_t) i), 0);
    }
    tracker_reset(t, 0);
    for (uint64_t k = 1; k <= 8; k++)
        CHECK_EQ_INT(tracker_ack(t, hi + k), -1);
    c = tx1(t, 200);
    for (uint64_t k = 1; k <= 8; k++) {
        CHECK_EQ_INT(tracker_ack(t, c + k), -1);
        CHECK(tracker_token_lsn(t, c + k) == 0);
    }
    CHECK_EQ_INT(tracker_pending(t), 1);
    CHECK(tracker_confirmed(t) == 0);
    CHECK_EQ_INT(tracker_ack(t, c), 0);
    CHECK(tracker_confirmed(t) == 200);
    tracker_free(t);
}

static void test_never_backwards(void)
{
    struct tracker *t = tracker_new(4, 1000);
    uint64_t a;

    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK_EQ_INT(tracker_commit(t, 500), 0); /* an old commit resent */
    CHECK(tracker_confirmed(t) == 1000);
    a = tx1(t, 600);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 1000);
    a = tracker_add_single(t, 700);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 1000);
    tracker_idle(t, 10);
    CHECK(tracker_confirmed(t) == 1000);
    tracker_reset(t, 0);
    CHECK(tracker_confirmed(t) == 1000);

    /* A folded commit with a smaller end keeps the group's larger end. */
    a = tx1(t, 2000);
    CHECK_EQ_INT(tracker_begin(t), 0);
    CHECK_EQ_INT(tracker_commit(t, 1500), 0);
    CHECK(tracker_token_lsn(t, a) == 2000);
    CHECK_EQ_INT(tracker_ack(t, a), 0);
    CHECK(tracker_confirmed(t) == 2000);

    /* Same when the ring is full and the smaller commit has events. */
    uint64_t b, c;
    a = tx1(t, 3000);
    b = tx1(t, 3100);
    tx1(t, 3200);
    tx1(t, 3300);
    c = tx1(t, 3250); /* folded into the newest group */
    CHECK(tracker_token_lsn(t, c) == 3300);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(tracker_ack(t, i == 0 ? a : i == 1 ? b : c), 0);
    CHECK(tracker_confirmed(t) == 3100); /* 3200 still pending */
    CHECK_EQ_INT(tracker_pending(t), 1);
    tracker_free(t);
}

/* Stamps: the first stamp of a group sticks; the oldest in-flight group's
 * stamp is what the relay reports as the oldest pending event's age. */
static void test_stamps(void)
{
    struct tracker *t = tracker_new(8, 0);
    CHECK_EQ_INT(tracker_oldest_stamp(t), 0);
    tracker_begin(t);
    uint64_t a = tracker_add(t);
    tracker_stamp(t, a, 100);
    tracker_stamp(t, a, 200); /* second event of the same group: kept 100 */
    tracker_commit(t, 10);
    tracker_begin(t);
    uint64_t b = tracker_add(t);
    tracker_stamp(t, b, 300);
    tracker_commit(t, 20);
    CHECK_EQ_INT(tracker_token_stamp(t, a), 100);
    CHECK_EQ_INT(tracker_token_stamp(t, b), 300);
    CHECK_EQ_INT(tracker_oldest_stamp(t), 100);
    tracker_ack(t, a);
    CHECK_EQ_INT(tracker_oldest_stamp(t), 300);
    CHECK_EQ_INT(tracker_token_stamp(t, a), 0); /* retired */
    tracker_ack(t, b);
    CHECK_EQ_INT(tracker_oldest_stamp(t), 0);
    tracker_begin(t);
    uint64_t c = tracker_add(t);
    tracker_reset(t, 0);
    tracker_stamp(t, c, 5); /* stale: ignored */
    CHECK_EQ_INT(tracker_token_stamp(t, c), 0);
    tracker_free(t);
}

int main(void)
{
    test_stamps();
    test_new_free();
    test_basic();
    test_ack_before_commit();
    test_out_of_order();
    test_empty_transactions();
    test_full_ring();
    test_fold_into_acked_group();
    test_idle();
    test_single();
    test_protocol_errors();
    test_stale_tokens();
    test_bad_acks();
    test_unissued_tokens();
    test_never_backwards();
    CHECK_DONE();
}
