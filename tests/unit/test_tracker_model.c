/*
 * test_tracker_model.c — the ack tracker against a reference model of what
 * may be confirmed: random schedules (fixed seed) of begins, adds,
 * commits, acks, keepalives and resets. With a ring larger than anything
 * in flight the tracker must equal the model; with small rings folding may
 * make it lag, never pass it. The hand-written cases are test_tracker.c.
 */
#include "outbox_relay/core/tracker.h"

#include <string.h>

#include "check.h"

/* ---- randomized comparison against a reference model ---------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rng(void)
{
    /* xorshift64*: fixed seed, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static unsigned rnd(unsigned n)
{
    return (unsigned) (rng() % n);
}

#define MAX_TX 128
#define MAX_EV (MAX_TX * 5)

struct model_tx {
    lsn_t end; /* commit end; valid once committed */
    bool committed;
    size_t nev, nacked;
};

struct model_ev {
    size_t tx;
    uint64_t token;
    bool acked;
};

struct model {
    struct model_tx tx[MAX_TX];
    size_t ntx;
    struct model_ev ev[MAX_EV];
    size_t nev;
    lsn_t confirmed;
    lsn_t wal; /* the server's position: every commit is after it */
    bool in_tx;
    uint64_t stale[64]; /* tokens from before the last reset */
    size_t nstale;
};

/* The reference: the largest commit end such that every event of every
 * transaction up to it is acked; never below what was confirmed before. */
static lsn_t model_confirm(struct model *m)
{
    for (size_t i = 0; i < m->ntx; i++) {
        if (!m->tx[i].committed || m->tx[i].nacked < m->tx[i].nev)
            break;
        if (m->tx[i].end > m->confirmed)
            m->confirmed = m->tx[i].end;
    }
    return m->confirmed;
}

static size_t model_pending(const struct model *m)
{
    size_t n = 0;

    for (size_t i = 0; i < m->nev; i++)
        n += !m->ev[i].acked;
    return n;
}

static bool model_all_done(const struct model *m)
{
    return !m->in_tx && model_pending(m) == 0;
}

static void model_reset(struct model *m, struct tracker *t, lsn_t to)
{
    m->nstale = 0;
    for (size_t i = 0; i < m->nev && m->nstale < 64; i++)
        m->stale[m->nstale++] = m->ev[i].token;
    m->ntx = m->nev = 0;
    m->in_tx = false;
    if (to > m->confirmed)
        m->confirmed = to;
    if (to > m->wal)
        m->wal = to;
    tracker_reset(t, to);
}

/* One random step. With exact == true the ring is never full and the
 * tracker must equal the model; otherwise folding may make it lag, but it
 * must never pass the model and must catch up when nothing is in flight. */
static void property_step(struct model *m, struct tracker *t, bool exact,
                          lsn_t *last_confirmed)
{
    unsigned op = rnd(100);
    size_t unacked[MAX_EV], nun = 0;

    for (size_t i = 0; i < m->nev; i++)
        if (!m->ev[i].acked)
            unacked[nun++] = i;

    if (op < 40 && nun > 0) {
        /* Ack a random pending event. */
        struct model_ev *e = &m->ev[unacked[rnd((unsigned) nun)]];
        CHECK_EQ_INT(tracker_ack(t, e->token), 0);
        e->acked = true;
        m->tx[e->tx].nacked++;
    } else if (op < 60 && !m->in_tx && m->ntx < MAX_TX) {
        CHECK_EQ_INT(tracker_begin(t), 0);
        m->tx[m->ntx++] = (struct model_tx){ 0 };
        m->in_tx = true;
    } else if (op < 75 && m->in_tx && m->tx[m->ntx - 1].nev < 5) {
        /* Add an event; an open transaction gets 0–5 of them. */
        uint64_t tok = tracker_add(t);
        CHECK(tok != 0);
        m->ev[m->nev++] = (struct model_ev){ .tx = m->ntx - 1, .token = tok };
        m->tx[m->ntx - 1].nev++;
    } else if (op < 88 && m->in_tx) {
        m->wal += 1 + rnd(1000);
        CHECK_EQ_INT(tracker_commit(t, m->wal), 0);
        m->tx[m->ntx - 1].committed = true;
        m->tx[m->ntx - 1].end = m->wal;
        m->in_tx = false;
    } else if (op < 91 && !m->in_tx && m->ntx < MAX_TX) {
        uint64_t tok;

        m->wal += 1 + rnd(100);
        tok = tracker_add_single(t, m->wal);
        CHECK(tok != 0);
        m->tx[m->ntx++] = (struct model_tx){ .end = m->wal, .committed = true, .nev = 1 };
        m->ev[m->nev++] = (struct model_ev){ .tx = m->ntx - 1, .token = tok };
    } else if (op < 95) {
        /* Keepalive. */
        m->wal += rnd(50);
        tracker_idle(t, m->wal);
        /* Outside a transaction: an empty committed transaction at the
         * keepalive's position (folded into the newest one). */
        if (!m->in_tx && m->ntx > 0 && m->wal > m->tx[m->ntx - 1].end)
            m->tx[m->ntx - 1].end = m->wal;
        else if (!m->in_tx && m->ntx == 0 && m->wal > m->confirmed)
            m->confirmed = m->wal;
    } else if (op < 98) {
        /* Bogus or stale ack: refused, nothing changes. */
        size_t before = tracker_pending(t);
        lsn_t conf = tracker_confirmed(t);
        uint64_t tok = m->nstale > 0 && rnd(2) ? m->stale[rnd((unsigned) m->nstale)]
                                              : (rnd(2) ? 0 : UINT64_MAX - rnd(5));
        CHECK_EQ_INT(tracker_ack(t, tok), -1);
        CHECK_EQ_INT(tracker_pending(t), before);
        CHECK(tracker_confirmed(t) == conf);
    } else if (op < 99) {
        /* Lost connection: the server resends from what we confirmed. */
        model_reset(m, t, rnd(2) ? m->confirmed : m->confirmed + rnd(10));
    }

    /* Drop fully confirmed prefixes from the model once nothing is in
     * flight, so long runs fit in the fixed arrays. */
    if (model_all_done(m) && m->ntx > MAX_TX / 2) {
        model_confirm(m);
        m->ntx = m->nev = 0;
    }

    lsn_t want = model_confirm(m);
    lsn_t got = tracker_confirmed(t);

    CHECK_EQ_INT(tracker_pending(t), model_pending(m));
    CHECK(tracker_in_tx(t) == m->in_tx);
    CHECK(got >= *last_confirmed); /* never backwards */
    if (exact) {
        if (got != want)
            fprintf(stderr, "exact: confirmed %llu, model %llu\n",
                    (unsigned long long) got, (unsigned long long) want);
        CHECK(got == want);
    } else {
        CHECK(got <= want); /* never past a pending event */
        if (model_all_done(m))
            CHECK(got == want);
    }
    *last_confirmed = got;

    /* A committed transaction's tokens report at least its own commit end;
     * open ones report 0 (exact mode: no folding reopens groups). */
    if (exact && m->nev > 0) {
        struct model_ev *e = &m->ev[rnd((unsigned) m->nev)];
        if (!e->acked) {
            lsn_t l = tracker_token_lsn(t, e->token);
            if (m->tx[e->tx].committed)
                CHECK(l >= m->tx[e->tx].end);
            else
                CHECK(l == 0);
        }
    }
}

static void property_run(size_t cap, bool exact, int episodes, int steps)
{
    static struct model m;
    int failures_before = check_failures;

    for (int ep = 0; ep < episodes && check_failures == failures_before; ep++) {
        lsn_t start = rnd(1000);
        struct tracker *t = tracker_new(cap, start);
        lsn_t last = start;

        memset(&m, 0, sizeof(m));
        m.confirmed = start;
        m.wal = start;
        for (int s = 0; s < steps && check_failures == failures_before; s++)
            property_step(&m, t, exact, &last);

        /* Drain: commit, ack everything, and the two must agree. */
        if (m.in_tx) {
            m.wal += 1;
            CHECK_EQ_INT(tracker_commit(t, m.wal), 0);
            m.tx[m.ntx - 1].committed = true;
            m.tx[m.ntx - 1].end = m.wal;
            m.in_tx = false;
        }
        for (size_t i = 0; i < m.nev; i++) {
            if (!m.ev[i].acked) {
                CHECK_EQ_INT(tracker_ack(t, m.ev[i].token), 0);
                m.ev[i].acked = true;
                m.tx[m.ev[i].tx].nacked++;
            }
        }
        CHECK(tracker_confirmed(t) == model_confirm(&m));
        CHECK_EQ_INT(tracker_pending(t), 0);
        tracker_free(t);
    }
    if (check_failures != failures_before)
        fprintf(stderr, "property run (cap %zu, exact %d) failed\n", cap, exact);
}

static void test_property(void)
{
    /* Ring larger than anything in flight: must equal the model exactly. */
    property_run(MAX_TX + 1, true, 400, 2000);
    /* Small rings: folding may delay but never pass the model. */
    for (size_t cap = 2; cap <= 5; cap++)
        property_run(cap, false, 200, 2000);
}

int main(void)
{
    test_property();
    CHECK_DONE();
}
