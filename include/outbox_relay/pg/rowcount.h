/*
 * rowcount.h — how many rows long work expects, taken once as it starts
 * (progress.h): an exact count when it is small, else the planner's
 * estimate.
 *
 * The count reads at most ROWCOUNT_MAX + 1 rows (count(*) over the query
 * with a LIMIT), so its cost is bounded whatever the table's size; past
 * that, or when it takes longer than ROWCOUNT_TIMEOUT_MS (a
 * statement_timeout, e.g. a scan that finds few matching rows in a huge
 * table), EXPLAIN's row estimate of the same query is taken instead: it
 * reads statistics only, so it is as good as the table's last ANALYZE
 * (autovacuum's, normally), and never below the rows already counted.
 * Everything runs inside a savepoint when the connection is in a
 * transaction (the backfill's snapshot stays usable) or in a transaction
 * of its own when it is idle (the reaper's), rolled back either way.
 */
#ifndef OUTBOX_RELAY_ROWCOUNT_H
#define OUTBOX_RELAY_ROWCOUNT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#define ROWCOUNT_MAX 100000      /* rows counted exactly */
#define ROWCOUNT_TIMEOUT_MS 2000 /* per statement */

/* The rows select_sql (a SELECT without LIMIT, with text parameters
 * $1..) returns, on conn (borrowed; idle or in a transaction that has not
 * failed, and in the same state on return). Returns the count (*exact
 * true) or the estimate (*exact false), or -1 when neither could be had
 * (connection lost, a failed transaction, a query that does not plan).
 * Never fails the work: the caller just goes on without a total. */
int64_t rowcount_bounded(PGconn *conn, const char *select_sql, int nparams,
                         const char *const *params, bool *exact);

/* The top plan node's "Plan Rows" in EXPLAIN (FORMAT JSON) output; -1
 * when there is none. Pure. */
int64_t rowcount_plan_rows(const char *explain_json);

#endif
