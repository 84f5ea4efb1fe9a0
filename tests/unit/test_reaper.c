/*
 * test_reaper.c — the reaper's pure parts: which --retention values turn it
 * off, and the DELETE of a batch, which carries the rule (reaper.h): only
 * expired rows, only rows whose 64-bit xmin is below the mark's X, oldest
 * first, bounded; on a partitioned table rows named by (tableoid, ctid).
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/ops/reaper.h"

static void test_enabled(void)
{
    CHECK(!reaper_enabled(NULL));
    CHECK(!reaper_enabled(""));
    CHECK(!reaper_enabled("   "));
    CHECK(!reaper_enabled("0"));
    CHECK(!reaper_enabled("  0"));
    CHECK(reaper_enabled("7 days"));
    CHECK(reaper_enabled("0 days")); /* PostgreSQL decides: reaper_run checks > 0 */
}

/* The clauses of the rule, in every form of the DELETE. */
static void check_rule(const char *sql)
{
    CHECK(strstr(sql, "i.created_at < now() - $1::interval") != NULL);
    /* xmin widened against the statement snapshot's top id, then compared
     * with the mark's X: never the raw 32-bit xmin. */
    CHECK(strstr(sql, "pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 1 AS top") != NULL);
    CHECK(strstr(sql, "(n.top - (((n.top - i.xmin::text::bigint) % 4294967296 + 4294967296) "
                      "% 4294967296)) < $3::bigint") != NULL);
    CHECK(strstr(sql, "ORDER BY i.created_at LIMIT $2::bigint") != NULL);
    CHECK(strstr(sql, "%%") == NULL);
}

static void test_delete(void)
{
    char buf[1400];
    int n = reaper_build_delete("\"public\".\"events_outbox\"", false, buf, sizeof buf);
    CHECK(n > 0 && (size_t) n == strlen(buf));
    const char *head = "DELETE FROM \"public\".\"events_outbox\" WHERE ctid = ANY (ARRAY (SELECT "
                       "i.ctid FROM \"public\".\"events_outbox\" AS i, ";
    CHECK(strncmp(buf, head, strlen(head)) == 0);
    check_rule(buf);
    CHECK(strstr(buf, "tableoid") == NULL);

    n = reaper_build_delete("\"public\".\"events_outbox\"", true, buf, sizeof buf);
    CHECK(n > 0);
    check_rule(buf);
    CHECK(strstr(buf, "WHERE o.tableoid = x.toid AND o.ctid = x.tid") != NULL);

    /* Too small a buffer fails cleanly. */
    CHECK_EQ_INT(reaper_build_delete("t", false, buf, 64), -1);
}

int main(void)
{
    test_enabled();
    test_delete();
    CHECK_DONE();
}
