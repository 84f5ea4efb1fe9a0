/*
 * test_rowcount.c — reading the planner's row estimate out of EXPLAIN
 * (FORMAT JSON) output (the counting itself needs a server: it is covered
 * by tests/integration/test_progress.py, both the exact count and the
 * estimate past ROWCOUNT_MAX).
 */
#include "outbox_relay/pg/rowcount.h"

#include "check.h"

int main(void)
{
    /* As PostgreSQL 15 prints it: the top node first. */
    CHECK_EQ_INT(rowcount_plan_rows(
                     "[\n  {\n    \"Plan\": {\n      \"Node Type\": \"Seq Scan\",\n"
                     "      \"Parallel Aware\": false,\n      \"Startup Cost\": 0.00,\n"
                     "      \"Total Cost\": 12034.00,\n      \"Plan Rows\": 599988,\n"
                     "      \"Plan Width\": 4,\n      \"Plans\": [{\"Plan Rows\": 7}]\n"
                     "    }\n  }\n]"),
                 599988);
    CHECK_EQ_INT(rowcount_plan_rows("{\"Plan\": {\"Plan Rows\": 1}}"), 1);
    CHECK_EQ_INT(rowcount_plan_rows("{\"Plan\": {\"Plan Rows\":0}}"), 0);
    CHECK_EQ_INT(rowcount_plan_rows("{\"Plan\": {\"Plan Rows\": 1e12}}"), 1000000000000LL);
    CHECK_EQ_INT(rowcount_plan_rows("{\"Plan\": {\"Plan Rows\": \"x\"}}"), -1);
    CHECK_EQ_INT(rowcount_plan_rows("{\"Plan\": {\"Plan Rows\": -3}}"), -1);
    CHECK_EQ_INT(rowcount_plan_rows("{\"Plan\": {}}"), -1);
    CHECK_EQ_INT(rowcount_plan_rows(""), -1);
    CHECK_EQ_INT(rowcount_plan_rows(NULL), -1);
    CHECK_DONE();
}
