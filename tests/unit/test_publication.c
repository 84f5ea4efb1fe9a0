/*
 * test_publication.c — the pure half of publication.h: the statements, and
 * the verdict on what a publication publishes of the outbox.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/pg/publication.h"

static const char *problem(struct publication_state st, bool partitioned, char *buf, size_t cap)
{
    return publication_problem(&st, "outbox_relay", "public", "events_outbox", partitioned, NULL,
                               buf, cap);
}

static void test_verdicts(void)
{
    char buf[1024];
    struct publication_state good = {.exists = true, .pubinsert = true, .viaroot = true,
                                      .covers = true};
    CHECK(problem(good, false, buf, sizeof buf) == NULL);
    CHECK(problem(good, true, buf, sizeof buf) == NULL);

    struct publication_state st = good;
    st.rowfilter = "(type <> 'x')"; /* the owner's choice: warned, not refused */
    CHECK(problem(st, false, buf, sizeof buf) == NULL);

    st = good;
    st.viaroot = false; /* fine for a plain table */
    CHECK(problem(st, false, buf, sizeof buf) == NULL);
    CHECK(problem(st, true, buf, sizeof buf) != NULL &&
          strstr(buf, "SET (publish_via_partition_root = true)") != NULL);

    st = (struct publication_state){0};
    CHECK(problem(st, false, buf, sizeof buf) != NULL && strstr(buf, "does not exist") != NULL);

    st = good;
    st.pubinsert = false;
    CHECK(problem(st, false, buf, sizeof buf) != NULL &&
          strstr(buf, "ALTER PUBLICATION \"outbox_relay\" SET (publish = 'insert')") != NULL);

    st = good;
    st.covers = false;
    CHECK(problem(st, false, buf, sizeof buf) != NULL &&
          strstr(buf, "ADD TABLE \"public\".\"events_outbox\"") != NULL);

    st = good;
    st.attnames = "id,aggregate_id,type,payload,created_at,extra";
    CHECK(problem(st, false, buf, sizeof buf) == NULL);
    st.attnames = "id,aggregate_id,type,created_at";
    CHECK(problem(st, false, buf, sizeof buf) != NULL &&
          strstr(buf, "leaves out \"payload\"") != NULL);
    st.attnames = "id,aggregate_id,types,payload,created_at"; /* a prefix is no match */
    CHECK(problem(st, false, buf, sizeof buf) != NULL && strstr(buf, "\"type\"") != NULL);
    st.attnames = ""; /* an empty list is none */
    CHECK(problem(st, false, buf, sizeof buf) == NULL);
}

static void test_statements(void)
{
    char buf[512];
    CHECK(publication_build_create("outbox_relay", "public", "events_outbox", buf, sizeof buf) >
          0);
    CHECK(strcmp(buf, "CREATE PUBLICATION \"outbox_relay\" FOR TABLE \"public\".\"events_outbox\" "
                      "WITH (publish = 'insert', publish_via_partition_root = true)") == 0);
    CHECK_EQ_INT(publication_build_create("p", "s\"x", "t", buf, sizeof buf), -1);
    CHECK_EQ_INT(publication_build_create("p", "s", "t", buf, 20), -1);

    CHECK(publication_build_query(150004, "'p'", "'s'", "'t'", buf, sizeof buf) > 0);
    CHECK(strstr(buf, "array_to_string(t.attnames, ',')") != NULL &&
          strstr(buf, "t.rowfilter") != NULL && strstr(buf, "p.pubname = 'p'") != NULL);
    CHECK(publication_build_query(140010, "'p'", "'s'", "'t'", buf, sizeof buf) > 0);
    CHECK(strstr(buf, "attnames") == NULL && strstr(buf, "rowfilter") == NULL);
    CHECK_EQ_INT(publication_build_query(150004, "'p'", "'s'", "'t'", buf, 10), -1);
}

/* A row filter changed while the relayer runs: said once per change. */
static void test_filter_change(void)
{
    const char *f = "(type <> 'order.skip'::text)";
    /* the first poll: the stream said at connect what it found */
    CHECK_EQ_INT(publication_filter_change(false, NULL, f), PUBLICATION_FILTER_SAME);
    CHECK_EQ_INT(publication_filter_change(false, NULL, NULL), PUBLICATION_FILTER_SAME);
    CHECK_EQ_INT(publication_filter_change(true, "", f), PUBLICATION_FILTER_ADDED);
    CHECK_EQ_INT(publication_filter_change(true, NULL, f), PUBLICATION_FILTER_ADDED);
    CHECK_EQ_INT(publication_filter_change(true, f, f), PUBLICATION_FILTER_SAME);
    CHECK_EQ_INT(publication_filter_change(true, f, "(type = 'x'::text)"),
                 PUBLICATION_FILTER_CHANGED);
    CHECK_EQ_INT(publication_filter_change(true, f, NULL), PUBLICATION_FILTER_REMOVED);
    CHECK_EQ_INT(publication_filter_change(true, f, ""), PUBLICATION_FILTER_REMOVED);
    CHECK_EQ_INT(publication_filter_change(true, "", NULL), PUBLICATION_FILTER_SAME);
}

int main(void)
{
    test_filter_change();
    test_verdicts();
    test_statements();
    CHECK_DONE();
}
