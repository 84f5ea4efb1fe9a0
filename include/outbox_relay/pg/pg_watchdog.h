/*
 * pg_watchdog.h — a deadline for blocking PostgreSQL work.
 *
 * The consumer's handler runs ordinary blocking libpq calls, so a statement
 * that waits on a lock, a server that stops answering or a network that
 * drops packets silently can hold the calling thread for as long as they
 * like. Where that is not acceptable (a Kafka rebalance waits for us), the
 * caller arms the watchdog with a deadline before the work and disarms it
 * after. When the deadline passes first, the watchdog's thread
 *   1. shuts the connection's socket down (shutdown(2)): the blocked libpq
 *      call returns at once with a lost connection (PQstatus bad), and
 *   2. sends PostgreSQL a cancel request for the backend, so that it stops
 *      waiting and rolls the transaction back promptly instead of when it
 *      next writes to the closed socket.
 * The transaction is then gone, exactly as if the connection had broken:
 * whatever it did is rolled back (or, if the deadline met its COMMIT, it
 * committed entirely; the caller cannot tell, and does not need to when the
 * work is idempotent, as processed_events makes it).
 *
 * Options (pg_watchdog_options) leave out the cancel request — the
 * maintenance thread only cuts a stalled path, as it always has — and add
 * a callback run when the deadline cuts the connection (to say so).
 *
 * Re-arming moves the deadline: a caller that makes progress through long
 * work (the reaper's tick) arms again after each step, so the deadline
 * bounds the wait for one answer, not the whole work.
 *
 * One watchdog serves one connection at a time, armed from one thread.
 * Users: the consumer (src/consume/, the batch of a revoke or a stop) and
 * the maintenance thread (src/ops/maint.c, the reaper's statements).
 */
#ifndef OUTBOX_RELAY_PG_WATCHDOG_H
#define OUTBOX_RELAY_PG_WATCHDOG_H

#include <libpq-fe.h>
#include <stdbool.h>

struct pg_watchdog;

/* What the watchdog does when a deadline passes. Zero-initialised (or a
 * NULL pointer to pg_watchdog_new) is: shut the socket down, send a cancel
 * request, say nothing. */
struct pg_watchdog_options {
    bool no_cancel; /* shut the socket down only: no cancel request */
    /* Called from the watchdog's thread each time a deadline cuts the
     * connection, after the cut and outside the watchdog's lock (it may
     * log; it must not free the watchdog). NULL: none. */
    void (*on_fire)(void *arg);
    void *arg; /* passed to on_fire; borrowed, must outlive the watchdog */
};

/* Starts the watchdog's thread with opts (copied; NULL: the defaults
 * above). NULL when out of resources. */
struct pg_watchdog *pg_watchdog_new(const struct pg_watchdog_options *opts);

/* Cuts conn when it is still armed `seconds` from now; arming an armed
 * watchdog moves the deadline. A conn without a socket (PQsocket < 0: lost,
 * or closed) leaves it disarmed. conn must stay open (not PQfinish'ed)
 * until pg_watchdog_disarm() returns. */
void pg_watchdog_arm(struct pg_watchdog *w, PGconn *conn, double seconds);

/* Disarms; returns true when the deadline had passed and conn was cut (it
 * is unusable: close it). After this returns the watchdog no longer touches
 * conn. */
bool pg_watchdog_disarm(struct pg_watchdog *w);

/* Stops the thread and frees the watchdog (a cancel request still in
 * flight finishes on its own). NULL is fine. */
void pg_watchdog_free(struct pg_watchdog *w);

#endif
