/*
 * test_backfill.c — the pure parts of the backfill: the marker's states, and
 * the progress that becomes backfill_done_id (an id must never be recorded
 * before every row up to it is acknowledged, or a resume would skip rows),
 * and the rows as events (backfill_rows.h): the SELECT list in the layout's
 * column names, and a fetched row, built with libpq's result constructors,
 * into an event.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/core/backfill_ckpt.h"
#include "outbox_relay/relay/backfill.h"
#include "../../src/relay/backfill_rows.h"

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

static void test_select_list(void)
{
    char buf[4096];
    /* The default layout: every role by its name, quoted, through concat(). */
    CHECK_EQ_INT(backfill_select_list(&OUTBOX_DEFAULT_COLUMNS, buf, sizeof buf), 0);
    CHECK(strncmp(buf, "CASE WHEN o.\"id\" IS NOT NULL THEN concat(o.\"id\") END, ", 54) == 0);
    CHECK(strstr(buf, "concat(o.\"created_at\") END") != NULL);

    /* A mapped layout: its id column is the first, a role without a column
     * is NULL::text, the extra columns follow in order. */
    struct outbox_columns_map m = {.id = "event_no", .type = "kind", .payload = "body"};
    CHECK(outbox_columns_add_extra(&m, "tenant", "x-tenant") == 0);
    CHECK_EQ_INT(backfill_select_list(&m, buf, sizeof buf), 0);
    CHECK_STR(buf, "CASE WHEN o.\"event_no\" IS NOT NULL THEN concat(o.\"event_no\") END, "
                   "NULL::text, "
                   "CASE WHEN o.\"kind\" IS NOT NULL THEN concat(o.\"kind\") END, "
                   "CASE WHEN o.\"body\" IS NOT NULL THEN concat(o.\"body\") END, "
                   "NULL::text, "
                   "CASE WHEN o.\"tenant\" IS NOT NULL THEN concat(o.\"tenant\") END");
    CHECK(strstr(buf, "\"id\"") == NULL);

    /* Too small a buffer is an error, never a cut list. */
    CHECK_EQ_INT(backfill_select_list(&m, buf, 40), -1);
}

/* A one-row result with n text columns; NULL values are SQL NULL. */
static PGresult *one_row(int n, const char *const *values)
{
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    PGresAttDesc att[16];
    memset(att, 0, sizeof att);
    for (int i = 0; i < n; i++) {
        att[i].name = (char *) "c";
        att[i].typid = 25; /* text */
        att[i].typlen = -1;
        att[i].atttypmod = -1;
    }
    CHECK(PQsetResultAttrs(res, n, att));
    for (int i = 0; i < n; i++)
        CHECK(PQsetvalue(res, 0, i, (char *) values[i],
                         values[i] ? (int) strlen(values[i]) : -1));
    return res;
}

static void test_row_event(void)
{
    struct outbox_scratch scratch = {0};
    struct outbox_event ev;
    char err[128];

    /* The default layout: an integer id, every field by position. */
    const char *row1[] = {"42", "order-7", "order.created", "{\"a\":1}",
                          "2026-01-01 00:00:00+00"};
    PGresult *res = one_row(5, row1);
    CHECK_EQ_INT(backfill_row_event(&OUTBOX_DEFAULT_COLUMNS, res, 0, &scratch, &ev, err,
                                    sizeof err), 0);
    CHECK_STR(ev.event_id, "42");
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "order-7");
    CHECK_SPAN(ev.type, ev.type_len, "order.created");
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"a\":1}");
    CHECK_SPAN(ev.created_at, ev.created_at_len, "2026-01-01 00:00:00+00");
    PQclear(res);

    /* NULL key and timestamp stay NULL; an extra column is read. */
    struct outbox_columns_map m = {.id = "event_no", .type = "kind", .payload = "body"};
    CHECK(outbox_columns_add_extra(&m, "tenant", NULL) == 0);
    const char *row2[] = {"7", NULL, "k", "{}", NULL, "acme"};
    res = one_row(6, row2);
    CHECK_EQ_INT(backfill_row_event(&m, res, 0, &scratch, &ev, err, sizeof err), 0);
    CHECK(ev.aggregate_id == NULL && ev.created_at == NULL);
    CHECK_SPAN(ev.extra[0].ptr, ev.extra[0].len, "acme");
    PQclear(res);

    /* An integer layout refuses a text id; a row without a type cannot be
     * routed. */
    const char *row3[] = {"abc", NULL, "k", "{}", NULL};
    res = one_row(5, row3);
    CHECK_EQ_INT(backfill_row_event(&OUTBOX_DEFAULT_COLUMNS, res, 0, &scratch, &ev, err,
                                    sizeof err), -1);
    CHECK(strstr(err, "not an integer") != NULL);
    PQclear(res);
    const char *row4[] = {"1", NULL, NULL, "{}", NULL};
    res = one_row(5, row4);
    CHECK_EQ_INT(backfill_row_event(&OUTBOX_DEFAULT_COLUMNS, res, 0, &scratch, &ev, err,
                                    sizeof err), -1);
    CHECK(strstr(err, "no type") != NULL);
    PQclear(res);

    /* A text id layout with a bytea payload: the hex text becomes bytes. */
    struct outbox_columns_map t = {.id = "id", .type = "type", .payload = "payload",
                                   .id_kind = OUTBOX_ID_TEXT, .payload_bytea = true};
    const char *row5[] = {"3f2c1e8a-0000-4000-8000-000000000001", NULL, "t", "\\x00ff41", NULL};
    res = one_row(5, row5);
    CHECK_EQ_INT(backfill_row_event(&t, res, 0, &scratch, &ev, err, sizeof err), 0);
    CHECK_STR(ev.event_id, "3f2c1e8a-0000-4000-8000-000000000001");
    CHECK(ev.payload_len == 3 && memcmp(ev.payload, "\x00\xff\x41", 3) == 0);
    PQclear(res);
    const char *row6[] = {"u", NULL, "t", "\\000", NULL};
    res = one_row(5, row6);
    CHECK_EQ_INT(backfill_row_event(&t, res, 0, &scratch, &ev, err, sizeof err), -1);
    CHECK(strstr(err, "bytea") != NULL);
    PQclear(res);
    outbox_scratch_free(&scratch);
}

int main(void)
{
    test_states();
    test_progress();
    test_select_list();
    test_row_event();
    CHECK_DONE();
}
