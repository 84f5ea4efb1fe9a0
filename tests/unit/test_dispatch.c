/*
 * test_dispatch.c — every transition of the dispatch core (dispatch.h),
 * against a real tracker and a fake world: a fake decoder (frames are
 * struct decoder_record bytes; a row whose raw data starts "bad" maps to no
 * event) and fake sink, dead-letter and partition operations that record
 * what they were asked.
 *
 * Covered: one-event and empty transactions (the confirmed position moves
 * past both), the commit time stamped on tokens, foreign tables and
 * prefixes, non-transactional messages, a change outside a transaction,
 * commit without begin, begin inside a transaction, keepalives in and out
 * of a transaction, undecodable rows under both poison policies, a refused
 * produce, a full window, partition membership yes/no/unknown, undecodable
 * frames, and the first fatal cause kept.
 */
#include "outbox_relay/core/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/core/partition_rule.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/decode/w2j.h"

#include "check.h"

#define TS_BEGIN 1700000000000000LL

/* ---- the fake world ---------------------------------------------------- */

struct world {
    int produced;
    uint64_t tokens[16];
    char ids[16][OUTBOX_EVENT_ID_MAX];
    int produce_rc; /* what produce answers */
    int dead_letters;
    uint64_t dl_token;
    lsn_t dl_lsn;
    char dl_id[OUTBOX_EVENT_ID_MAX];
    char dl_key[40]; /* "(null)" for no key */
    char dl_why[256];
    size_t dl_len;
    int dl_rc;
    int member_answer;
    int member_calls;
    int tx_begins, tx_commits;
    int64_t last_xid;
    lsn_t last_commit_end;
};

static int w_produce(void *ctx, const struct outbox_event *ev, uint64_t token)
{
    struct world *w = ctx;
    if (w->produced < 16) {
        w->tokens[w->produced] = token;
        snprintf(w->ids[w->produced], sizeof w->ids[0], "%s", ev->event_id);
    }
    w->produced++;
    return w->produce_rc;
}

static int w_dead_letter(void *ctx, uint64_t token, lsn_t lsn, const struct outbox_event *ev,
                         const char *value, size_t value_len, const char *why)
{
    struct world *w = ctx;
    (void) value;
    w->dead_letters++;
    w->dl_token = token;
    w->dl_lsn = lsn;
    w->dl_len = value_len;
    snprintf(w->dl_id, sizeof w->dl_id, "%s", ev->event_id);
    if (ev->aggregate_id != NULL)
        snprintf(w->dl_key, sizeof w->dl_key, "%.*s", (int) ev->aggregate_id_len,
                 ev->aggregate_id);
    else
        snprintf(w->dl_key, sizeof w->dl_key, "(null)");
    snprintf(w->dl_why, sizeof w->dl_why, "%s", why);
    return w->dl_rc;
}

static int w_member(void *ctx, const struct decoder_record *rec, char *why, size_t whylen)
{
    struct world *w = ctx;
    (void) rec;
    w->member_calls++;
    if (w->member_answer == PARTITION_UNKNOWN)
        snprintf(why, whylen, "cannot tell whether table public.p1 belongs to the outbox");
    return w->member_answer;
}

static void w_tx_begin(void *ctx, int64_t xid)
{
    struct world *w = ctx;
    w->tx_begins++;
    w->last_xid = xid;
}

static void w_tx_commit(void *ctx, int64_t xid, lsn_t end)
{
    struct world *w = ctx;
    w->tx_commits++;
    w->last_xid = xid;
    w->last_commit_end = end;
}

static int fake_decode(struct decoder *d, const char *data, size_t len, lsn_t wal_start,
                       struct decoder_record *rec, char *err, size_t errlen)
{
    (void) d;
    if (len != sizeof *rec) {
        snprintf(err, errlen, "cannot parse fake output (%zu bytes)", len);
        return -1;
    }
    memcpy(rec, data, sizeof *rec);
    rec->wal_start = wal_start;
    return 0;
}

static int fake_event(struct decoder *d, const struct decoder_record *rec,
                      struct outbox_event *ev, char *err, size_t errlen)
{
    (void) d;
    if (rec->data != NULL && rec->data_len >= 6 && memcmp(rec->data, "badkey", 6) == 0) {
        /* as a real decoder leaves a row whose id and key it read */
        snprintf(ev->event_id, sizeof ev->event_id, "42");
        ev->aggregate_id = "cust-7";
        ev->aggregate_id_len = 6;
        snprintf(err, errlen, "column \"type\" is NULL");
        return -1;
    }
    if (rec->data != NULL && rec->data_len >= 3 && memcmp(rec->data, "bad", 3) == 0) {
        snprintf(err, errlen, "column \"type\" is missing");
        return -1;
    }
    memset(ev, 0, sizeof *ev);
    snprintf(ev->event_id, sizeof ev->event_id, "e-%llx", (unsigned long long) rec->lsn);
    ev->type = "t";
    ev->type_len = 1;
    ev->lsn = rec->lsn;
    return 0;
}

static void fake_free(struct decoder *d)
{
    (void) d;
}

static const struct decoder_ops FAKE_OPS = {
    .plugin = "fake", .decode = fake_decode, .event = fake_event, .free = fake_free};

struct fixture {
    struct world w;
    struct tracker *t;
    struct decoder dec;
    struct dispatch *d;
};

static void setup_opts(struct fixture *f, bool dead_letter, const char *prefix)
{
    memset(&f->w, 0, sizeof f->w);
    f->w.member_answer = PARTITION_NO;
    f->t = tracker_new(64, 0x100);
    f->dec.ops = &FAKE_OPS;
    struct dispatch_options o = {.slot = "s1", .table_schema = "public",
                                 .table_name = "outbox", .message_prefix = prefix,
                                 .dead_letter = dead_letter};
    struct dispatch_ops ops = {.produce = w_produce, .dead_letter = w_dead_letter,
                               .member = w_member, .tx_begin = w_tx_begin,
                               .tx_commit = w_tx_commit, .ctx = &f->w};
    f->d = dispatch_new(&o, f->t, &f->dec, &ops);
    CHECK(f->t != NULL && f->d != NULL);
}

static void setup(struct fixture *f)
{
    setup_opts(f, false, "outbox");
}

static void teardown(struct fixture *f)
{
    dispatch_free(f->d);
    tracker_free(f->t);
}

/* ---- records ------------------------------------------------------------ */

static int begin(struct fixture *f, lsn_t at, int64_t xid)
{
    struct decoder_record r = {.kind = DECODER_BEGIN, .wal_start = at, .lsn = at, .xid = xid,
                               .timestamp_us = TS_BEGIN};
    return dispatch_record(f->d, &r);
}

static int commit(struct fixture *f, lsn_t at, lsn_t end, int64_t xid)
{
    struct decoder_record r = {.kind = DECODER_COMMIT, .wal_start = at, .lsn = at,
                               .end_lsn = end, .xid = xid};
    return dispatch_record(f->d, &r);
}

static int insert_raw(struct fixture *f, lsn_t at, const char *schema, const char *table,
                      const char *data)
{
    struct decoder_record r = {.kind = DECODER_INSERT, .wal_start = at, .lsn = at, .xid = -1,
                               .schema = schema, .schema_len = schema ? strlen(schema) : 0,
                               .table = table, .table_len = table ? strlen(table) : 0,
                               .data = data, .data_len = data ? strlen(data) : 0};
    return dispatch_record(f->d, &r);
}

static int insert(struct fixture *f, lsn_t at, const char *schema, const char *table)
{
    return insert_raw(f, at, schema, table, "{\"action\":\"I\"}");
}

static int message(struct fixture *f, lsn_t at, bool transactional, const char *prefix,
                   int64_t ts)
{
    struct decoder_record r = {.kind = DECODER_MESSAGE, .wal_start = at, .lsn = at, .xid = -1,
                               .transactional = transactional, .timestamp_us = ts,
                               .prefix = prefix, .prefix_len = prefix ? strlen(prefix) : 0};
    return dispatch_record(f->d, &r);
}

/* ---- the tests ---------------------------------------------------------- */

static void test_one_event_transaction(void)
{
    struct fixture f;
    setup(&f);
    CHECK_EQ_INT(begin(&f, 0x1000, 7), DISPATCH_OK);
    CHECK(tracker_in_tx(f.t));
    CHECK_EQ_INT(dispatch_commit_us(f.d), TS_BEGIN);
    CHECK_EQ_INT(insert(&f, 0x1010, "public", "outbox"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 1);
    CHECK(f.w.tokens[0] != 0);
    CHECK(strcmp(f.w.ids[0], "e-1010") == 0);
    CHECK_EQ_INT(tracker_pending(f.t), 1);
    /* the commit time is stamped on the token */
    CHECK_EQ_INT(tracker_token_stamp(f.t, f.w.tokens[0]), TS_BEGIN);
    CHECK_EQ_INT(commit(&f, 0x1020, 0x1030, 7), DISPATCH_OK);
    CHECK(!tracker_in_tx(f.t));
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x100); /* not delivered yet */
    CHECK_EQ_INT(tracker_ack(f.t, f.w.tokens[0]), 0);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x1030);
    /* not partitioned: the partition hooks are never called */
    CHECK_EQ_INT(f.w.tx_begins + f.w.tx_commits + f.w.member_calls, 0);
    CHECK(!dispatch_failed(f.d));
    teardown(&f);
}

static void test_empty_transactions(void)
{
    struct fixture f;
    setup(&f);
    /* nothing in flight: an empty transaction is confirmed at once */
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(commit(&f, 0x1008, 0x1010, 1), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x1010);
    CHECK_EQ_INT(f.w.produced, 0);
    /* behind an undelivered event: it moves the position once that is acked */
    CHECK_EQ_INT(begin(&f, 0x2000, 2), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x2008, "public", "outbox"), DISPATCH_OK);
    CHECK_EQ_INT(commit(&f, 0x2010, 0x2018, 2), DISPATCH_OK);
    CHECK_EQ_INT(begin(&f, 0x3000, 3), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x3008, "public", "other_table"), DISPATCH_OK); /* skipped */
    CHECK_EQ_INT(commit(&f, 0x3010, 0x3018, 3), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x1010);
    CHECK_EQ_INT(tracker_ack(f.t, f.w.tokens[0]), 0);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x3018);
    teardown(&f);
}

static void test_foreign_tables_and_other_records(void)
{
    struct fixture f;
    setup(&f);
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x1001, "other", "outbox"), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x1002, "public", "outbox2"), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x1003, "public", "outbo"), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x1004, NULL, "outbox"), DISPATCH_OK);  /* unreadable schema */
    CHECK_EQ_INT(insert(&f, 0x1005, "public", NULL), DISPATCH_OK);  /* unreadable table */
    struct decoder_record none = {.kind = DECODER_NONE, .wal_start = 0x1006};
    CHECK_EQ_INT(dispatch_record(f.d, &none), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 0);
    CHECK_EQ_INT(tracker_pending(f.t), 0);
    CHECK_EQ_INT(f.w.member_calls, 0);
    CHECK_EQ_INT(commit(&f, 0x1010, 0x1018, 1), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x1018);
    CHECK(!dispatch_failed(f.d));
    teardown(&f);
}

static void test_messages(void)
{
    struct fixture f;
    setup(&f);
    /* non-transactional: skipped, but its time is kept */
    CHECK_EQ_INT(message(&f, 0x0f00, false, "outbox", 42), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 0);
    CHECK_EQ_INT(dispatch_commit_us(f.d), 42);
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1001, true, "other", 0), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1002, true, "outbox2", 0), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1003, true, NULL, 0), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1004, false, "outbox", 0), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 0);
    CHECK_EQ_INT(dispatch_commit_us(f.d), 0); /* that one had no time */
    CHECK_EQ_INT(message(&f, 0x1005, true, "outbox", 0), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 1);
    CHECK(strcmp(f.w.ids[0], "e-1005") == 0);
    CHECK_EQ_INT(tracker_pending(f.t), 1);
    CHECK_EQ_INT(commit(&f, 0x1010, 0x1018, 1), DISPATCH_OK);
    teardown(&f);

    /* no prefix configured: no message is relayed, whatever its prefix */
    setup_opts(&f, false, "");
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1001, true, "", 0), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1002, true, "outbox", 0), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 0);
    teardown(&f);
    setup_opts(&f, false, NULL);
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(message(&f, 0x1001, true, "", 0), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 0);
    teardown(&f);
}

static void test_change_outside_transaction(void)
{
    struct fixture f;
    setup(&f);
    CHECK_EQ_INT(insert(&f, 0x1234, "public", "outbox"), DISPATCH_FATAL);
    CHECK(dispatch_failed(f.d));
    CHECK(strstr(dispatch_errstr(f.d), "protocol violation") != NULL);
    CHECK(strstr(dispatch_errstr(f.d), "slot=s1 lsn=0/1234") != NULL);
    CHECK_EQ_INT(f.w.produced, 0);
    teardown(&f);

    /* the same for a transactional message; a foreign row is not asked */
    setup(&f);
    CHECK_EQ_INT(insert(&f, 0x1234, "public", "elsewhere"), DISPATCH_OK);
    CHECK(!dispatch_failed(f.d));
    CHECK_EQ_INT(message(&f, 0x1235, true, "outbox", 0), DISPATCH_FATAL);
    CHECK(strstr(dispatch_errstr(f.d), "protocol violation") != NULL);
    CHECK_EQ_INT(f.w.produced, 0);
    teardown(&f);
}

static void test_commit_without_begin(void)
{
    struct fixture f;
    setup(&f);
    CHECK_EQ_INT(commit(&f, 0x2000, 0x2008, 1), DISPATCH_FATAL);
    CHECK(strstr(dispatch_errstr(f.d), "commit without a transaction") != NULL);
    CHECK(strstr(dispatch_errstr(f.d), "lsn=0/2000") != NULL);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x100); /* the position did not move */
    teardown(&f);
}

static void test_begin_inside_transaction(void)
{
    struct fixture f;
    setup(&f);
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(begin(&f, 0x1100, 2), DISPATCH_FATAL);
    CHECK(strstr(dispatch_errstr(f.d), "transaction begins inside another one") != NULL);
    CHECK(strstr(dispatch_errstr(f.d), "lsn=0/1100") != NULL);
    teardown(&f);
}

static void test_keepalives(void)
{
    struct fixture f;
    setup(&f);
    /* idle: the server's position becomes confirmed */
    CHECK_EQ_INT(dispatch_keepalive(f.d, 0x5000, false), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x5000);
    CHECK_EQ_INT(dispatch_keepalive(f.d, 0x5100, true), DISPATCH_STATUS);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x5100);
    /* inside a transaction: nothing moves past its commit */
    CHECK_EQ_INT(begin(&f, 0x6000, 1), DISPATCH_OK);
    CHECK_EQ_INT(dispatch_keepalive(f.d, 0x9000, true), DISPATCH_STATUS);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x5100);
    CHECK(tracker_in_tx(f.t));
    CHECK_EQ_INT(commit(&f, 0x6010, 0x6018, 1), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x6018);
    /* with a delivery pending: not before it is acked */
    CHECK_EQ_INT(begin(&f, 0x7000, 2), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x7008, "public", "outbox"), DISPATCH_OK);
    CHECK_EQ_INT(commit(&f, 0x7010, 0x7018, 2), DISPATCH_OK);
    CHECK_EQ_INT(dispatch_keepalive(f.d, 0x8000, false), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x6018);
    CHECK_EQ_INT(tracker_ack(f.t, f.w.tokens[0]), 0);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x8000);
    teardown(&f);
}

static void test_undecodable_halt(void)
{
    struct fixture f;
    setup_opts(&f, false, "outbox");
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(insert_raw(&f, 0x1010, "public", "outbox", "bad row"), DISPATCH_FATAL);
    CHECK_EQ_INT(f.w.dead_letters, 0);
    CHECK_EQ_INT(f.w.produced, 0);
    CHECK(strstr(dispatch_errstr(f.d), "undecodable outbox change") != NULL);
    CHECK(strstr(dispatch_errstr(f.d), "column \"type\" is missing") != NULL);
    CHECK(strstr(dispatch_errstr(f.d), "lsn=0/1010") != NULL);
    teardown(&f);
}

static void test_undecodable_dead_letter(void)
{
    struct fixture f;
    setup_opts(&f, true, "outbox");
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(insert_raw(&f, 0x1010, "public", "outbox", "bad row"), DISPATCH_OK);
    CHECK(!dispatch_failed(f.d));
    CHECK_EQ_INT(f.w.produced, 0);
    CHECK_EQ_INT(f.w.dead_letters, 1);
    CHECK(strcmp(f.w.dl_id, "lsn-0/1010") == 0);
    CHECK(strcmp(f.w.dl_key, "(null)") == 0);
    CHECK_EQ_INT(f.w.dl_lsn, 0x1010);
    CHECK_EQ_INT(f.w.dl_len, 7); /* the raw frame */
    CHECK(strstr(f.w.dl_why, "column \"type\" is missing") != NULL);
    /* under the row's own token: its dead letter's ack confirms it */
    CHECK(tracker_token_live(f.t, f.w.dl_token));
    CHECK_EQ_INT(commit(&f, 0x1020, 0x1028, 1), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x100);
    CHECK_EQ_INT(tracker_ack(f.t, f.w.dl_token), 0);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x1028);
    /* deferred to a rewind (1) is not fatal either */
    f.w.dl_rc = 1;
    CHECK_EQ_INT(begin(&f, 0x2000, 2), DISPATCH_OK);
    CHECK_EQ_INT(insert_raw(&f, 0x2010, "public", "outbox", "bad"), DISPATCH_OK);
    CHECK(!dispatch_failed(f.d));
    /* the dead letter cannot be produced: fatal */
    f.w.dl_rc = -1;
    CHECK_EQ_INT(insert_raw(&f, 0x2020, "public", "outbox", "bad"), DISPATCH_FATAL);
    CHECK(strstr(dispatch_errstr(f.d), "undecodable outbox change") != NULL);
    CHECK_EQ_INT(f.w.dead_letters, 3);
    teardown(&f);
}

/* A row the decoder read its id and key of before refusing it: its dead
 * letter carries them, not "lsn-<LSN>" and no key. */
static void test_undecodable_dead_letter_names_the_row(void)
{
    struct fixture f;
    setup_opts(&f, true, "outbox");
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(insert_raw(&f, 0x1010, "public", "outbox", "badkey"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.dead_letters, 1);
    CHECK(strcmp(f.w.dl_id, "42") == 0);
    CHECK(strcmp(f.w.dl_key, "cust-7") == 0);
    CHECK(strstr(f.w.dl_why, "column \"type\" is NULL") != NULL);
    /* the next undecodable row knows nothing of it: nothing carried over */
    CHECK_EQ_INT(insert_raw(&f, 0x1020, "public", "outbox", "bad row"), DISPATCH_OK);
    CHECK(strcmp(f.w.dl_id, "lsn-0/1020") == 0);
    CHECK(strcmp(f.w.dl_key, "(null)") == 0);
    teardown(&f);
}

static void test_produce_refused(void)
{
    struct fixture f;
    setup(&f);
    f.w.produce_rc = 1; /* the sink did not take it (a rewind, a stop…) */
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x1010, "public", "outbox"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 1);
    CHECK_EQ_INT(tracker_token_stamp(f.t, f.w.tokens[0]), 0); /* not stamped */
    CHECK(!dispatch_failed(f.d));
    CHECK_EQ_INT(commit(&f, 0x1020, 0x1028, 1), DISPATCH_OK);
    CHECK_EQ_INT(tracker_confirmed(f.t), 0x100); /* its ack never comes: not confirmed */
    teardown(&f);
}

static void test_window(void)
{
    struct dispatch_window w = {.inflight = 0, .inflight_bytes = 0, .max_inflight = 2,
                                .max_inflight_bytes = 100};
    CHECK(dispatch_window_open(&w));
    w.inflight = 1;
    w.inflight_bytes = 99;
    CHECK(dispatch_window_open(&w));
    w.inflight = 2; /* full by count */
    CHECK(!dispatch_window_open(&w));
    w.inflight = 1;
    w.inflight_bytes = 100; /* full by bytes */
    CHECK(!dispatch_window_open(&w));
    w.inflight_bytes = 0;
    w.rewinding = true; /* a rewind waits: nothing is read */
    CHECK(!dispatch_window_open(&w));
}

static void test_partitions(void)
{
    struct fixture f;
    setup(&f);
    dispatch_set_partitioned(f.d, true);
    CHECK_EQ_INT(begin(&f, 0x1000, 77), DISPATCH_OK);
    CHECK_EQ_INT(f.w.tx_begins, 1);
    CHECK_EQ_INT(f.w.last_xid, 77);
    /* the outbox's own name needs no question */
    CHECK_EQ_INT(insert(&f, 0x1001, "public", "outbox"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.member_calls, 0);
    CHECK_EQ_INT(f.w.produced, 1);
    /* another schema is never asked */
    CHECK_EQ_INT(insert(&f, 0x1002, "other", "p1"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.member_calls, 0);
    /* a partition: yes */
    f.w.member_answer = PARTITION_YES;
    CHECK_EQ_INT(insert(&f, 0x1003, "public", "p1"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.member_calls, 1);
    CHECK_EQ_INT(f.w.produced, 2);
    /* not a member: skipped */
    f.w.member_answer = PARTITION_NO;
    CHECK_EQ_INT(insert(&f, 0x1004, "public", "business"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.member_calls, 2);
    CHECK_EQ_INT(f.w.produced, 2);
    CHECK_EQ_INT(tracker_pending(f.t), 2);
    CHECK_EQ_INT(commit(&f, 0x1010, 0x1018, 77), DISPATCH_OK);
    CHECK_EQ_INT(f.w.tx_commits, 1);
    CHECK_EQ_INT(f.w.last_commit_end, 0x1018);
    /* undecidable: fatal, nothing produced */
    f.w.member_answer = PARTITION_UNKNOWN;
    CHECK_EQ_INT(begin(&f, 0x2000, 78), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x2004, "public", "p2"), DISPATCH_FATAL);
    CHECK_EQ_INT(f.w.produced, 2);
    CHECK(strstr(dispatch_errstr(f.d), "slot=s1 lsn=0/2004: cannot tell whether table") != NULL);
    teardown(&f);

    /* not partitioned: a foreign name is skipped without asking */
    setup(&f);
    f.w.member_answer = PARTITION_YES;
    CHECK_EQ_INT(begin(&f, 0x1000, 1), DISPATCH_OK);
    CHECK_EQ_INT(insert(&f, 0x1001, "public", "p1"), DISPATCH_OK);
    CHECK_EQ_INT(f.w.member_calls, 0);
    CHECK_EQ_INT(f.w.produced, 0);
    teardown(&f);
}

static void test_frames(void)
{
    struct fixture f;
    setup(&f);
    struct decoder_record r = {.kind = DECODER_BEGIN, .timestamp_us = 5, .xid = 1};
    CHECK_EQ_INT(dispatch_frame(f.d, (const char *) &r, sizeof r, 0x1000), DISPATCH_OK);
    CHECK(tracker_in_tx(f.t));
    CHECK_EQ_INT(dispatch_commit_us(f.d), 5);
    r = (struct decoder_record){.kind = DECODER_INSERT, .lsn = 0x1001, .schema = "public",
                                .schema_len = 6, .table = "outbox", .table_len = 6};
    CHECK_EQ_INT(dispatch_frame(f.d, (const char *) &r, sizeof r, 0x1001), DISPATCH_OK);
    CHECK_EQ_INT(f.w.produced, 1);
    /* a frame the decoder cannot read stops everything */
    CHECK_EQ_INT(dispatch_frame(f.d, "garbage", 7, 0x1002), DISPATCH_FATAL);
    CHECK(strstr(dispatch_errstr(f.d), "slot=s1 lsn=0/1002: cannot parse fake output") != NULL);
    teardown(&f);
}

static void test_first_cause_kept(void)
{
    struct fixture f;
    setup(&f);
    CHECK_EQ_INT(commit(&f, 0x2000, 0x2008, 1), DISPATCH_FATAL);
    CHECK_EQ_INT(insert(&f, 0x3000, "public", "outbox"), DISPATCH_FATAL);
    CHECK(strstr(dispatch_errstr(f.d), "commit without a transaction") != NULL);
    CHECK(strstr(dispatch_errstr(f.d), "protocol violation") == NULL);
    teardown(&f);
}

/* The wal2json decoder behind the interface: records and options. */
static void test_w2j_decoder(void)
{
    struct decoder *d = decoder_w2j_new();
    struct decoder_record rec;
    char err[DECODER_ERRLEN];
    CHECK(d != NULL);
    CHECK(strcmp(decoder_plugin(d), "wal2json") == 0);
    const char *b = "{\"action\":\"B\",\"timestamp\":\"2026-11-30 14:38:02.796452+00\"}";
    CHECK_EQ_INT(decoder_decode(d, b, strlen(b), 0x10, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(rec.kind, DECODER_BEGIN);
    CHECK(rec.timestamp_us == 1796049482796452LL);
    const char *i = "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"outbox\",\"columns\":["
                    "{\"name\":\"id\",\"value\":5},{\"name\":\"aggregate_id\",\"value\":\"a\"},"
                    "{\"name\":\"type\",\"value\":\"t.x\"},{\"name\":\"payload\",\"value\":"
                    "\"{}\"},{\"name\":\"created_at\",\"value\":null}]}";
    CHECK_EQ_INT(decoder_decode(d, i, strlen(i), 0x20, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(rec.kind, DECODER_INSERT);
    CHECK_EQ_INT(rec.lsn, 0x20);
    CHECK_SPAN(rec.schema, rec.schema_len, "public");
    CHECK_SPAN(rec.table, rec.table_len, "outbox");
    struct outbox_event ev;
    CHECK_EQ_INT(decoder_event(d, &rec, &ev, err, sizeof err), 0);
    CHECK(strcmp(ev.event_id, "5") == 0);
    CHECK_SPAN(ev.type, ev.type_len, "t.x");
    const char *esc = "{\"action\":\"I\",\"schema\":\"pub\\u006cic\",\"table\":\"outbox\","
                      "\"columns\":[]}";
    CHECK_EQ_INT(decoder_decode(d, esc, strlen(esc), 0x30, &rec, err, sizeof err), 0);
    CHECK(rec.schema == NULL); /* escaped: compared as nothing */
    const char *c = "{\"action\":\"C\"}";
    CHECK_EQ_INT(decoder_decode(d, c, strlen(c), 0x40, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(rec.kind, DECODER_COMMIT);
    CHECK_EQ_INT(rec.end_lsn, 0x40);
    const char *u = "{\"action\":\"U\",\"schema\":\"public\",\"table\":\"outbox\"}";
    CHECK_EQ_INT(decoder_decode(d, u, strlen(u), 0x50, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(rec.kind, DECODER_NONE);
    CHECK_EQ_INT(decoder_decode(d, "{\"action\":", 10, 0x60, &rec, err, sizeof err), -1);
    CHECK(strstr(err, "cannot parse wal2json output") != NULL);

    char opts[512];
    struct decoder_slot slot = {.table_schema = "public", .table_name = "outbox",
                                .message_prefix = "outbox"};
    CHECK(decoder_start_options(d, &slot, opts, sizeof opts) > 0);
    CHECK(strcmp(opts, "\"format-version\" '2', \"include-timestamp\" '1', \"include-types\" "
                       "'0', \"add-tables\" 'public.outbox', \"actions\" 'insert', "
                       "\"add-msg-prefixes\" 'outbox'") == 0);
    slot.partitioned = true;
    slot.message_prefix = "";
    CHECK(decoder_start_options(d, &slot, opts, sizeof opts) > 0);
    CHECK(strstr(opts, "\"add-tables\" 'public.*'") != NULL);
    CHECK(strstr(opts, "\"include-xids\" '1'") != NULL);
    CHECK(strstr(opts, "add-msg-prefixes") == NULL);
    CHECK_EQ_INT(decoder_start_options(d, &slot, opts, 20), -1);
    decoder_free(d);
}

int main(void)
{
    test_one_event_transaction();
    test_empty_transactions();
    test_foreign_tables_and_other_records();
    test_messages();
    test_change_outside_transaction();
    test_commit_without_begin();
    test_begin_inside_transaction();
    test_keepalives();
    test_undecodable_halt();
    test_undecodable_dead_letter();
    test_undecodable_dead_letter_names_the_row();
    test_produce_refused();
    test_window();
    test_partitions();
    test_frames();
    test_first_cause_kept();
    test_w2j_decoder();
    CHECK_DONE();
}
