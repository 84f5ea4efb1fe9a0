/*
 * rowcount.h — how many rows long work expects, taken once as it starts
 * (progress.h): an exact count when it is quick, else the planner's
 * estimate.
 *
 * The count runs with a statement_timeout of ROWCOUNT_TIMEOUT_MS, inside
 * a savepoint when the connection is in a transaction (the backfill's
 * snapshot stays usable) or in a transaction of its own when it is idle
 * (the reaper's connection), rolled back either way: it changes nothing.
 * A count that takes longer (a huge backlog; count(*) reads every row it
 * counts) is cancelled and EXPLAIN's row estimate of the same query taken
 * instead, which reads statistics only — right within the planner's
 * error, and cheap whatever the size.
 */
#ifndef OUTBOX_RELAY_ROWCOUNT_H
#define OUTBOX_RELAY_ROWCOUNT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#define ROWCOUNT_TIMEOUT_MS 2000

/* The rows select_sql (a SELECT, with text parameters $1..) returns, on
 * conn (borrowed; idle or in a transaction that has not failed, and in the
 * same state on return). Returns the count (*exact true) or the estimate
 * (*exact false), or -1 when neither could be had (connection lost, a
 * failed transaction, a query that does not plan). Never fails the work:
 * the caller just goes on without a total. */
int64_t rowcount_bounded(PGconn *conn, const char *select_sql, int nparams,
                         const char *const *params, bool *exact);

#endif
