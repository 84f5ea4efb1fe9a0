/*
 * test_outbox_catalog.c — the one "does the outbox write WAL" query
 * (outbox_catalog.h): built around the caller's table expression, on both
 * the parameter and the literal form, with the columns in the order the
 * callers read them, and refused when the buffer is too small.
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/pg/outbox_catalog.h"

int main(void)
{
    char sql[2000];
    int n = outbox_catalog_logged_sql("to_regclass($1)", sql, sizeof sql);
    CHECK(n > 0 && (size_t) n == strlen(sql));
    CHECK(strstr(sql, "SELECT (to_regclass($1))::oid UNION ALL") != NULL);
    CHECK(strstr(sql, "oid = (to_regclass($1))::oid") != NULL);
    CHECK(strstr(sql, "relpersistence <> 'p'") != NULL);
    /* kind, count, fix, what: the order of enum outbox_logged_col */
    const char *kind = strstr(sql, "relkind::text"), *count = strstr(sql, "count(*)");
    const char *fix = strstr(sql, "SET LOGGED;"), *what = strstr(sql, " is UNLOGGED");
    CHECK(kind && count && fix && what && kind < count && count < fix && fix < what);
    CHECK_EQ_INT(OUTBOX_LOGGED_KIND, 0);
    CHECK_EQ_INT(OUTBOX_LOGGED_WHAT, 3);
    CHECK(strstr(sql, "'recreate ' || name") != NULL); /* a temporary table has no SET LOGGED */
    CHECK(outbox_catalog_logged_sql("$1::oid", sql, sizeof sql) > 0);
    CHECK(strstr(sql, "SELECT ($1::oid)::oid") != NULL);
    char small[64];
    CHECK_EQ_INT(outbox_catalog_logged_sql("$1::oid", small, sizeof small), -1);
    CHECK(strstr(OUTBOX_CATALOG_ROWS_SQL, "to_regclass($1)") != NULL);
    CHECK_DONE();
}
