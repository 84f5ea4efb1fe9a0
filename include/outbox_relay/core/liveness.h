/*
 * liveness.h — when the replication connection must be given up as dead.
 *
 * A path that stalls (a middlebox, NAT or load balancer that keeps the
 * connection open and forwards nothing) never closes the socket, and on a
 * proxy that terminates TCP itself no kernel keepalive or TCP_USER_TIMEOUT
 * ever fires: only the protocol can tell. The server sends something at
 * least every wal_sender_timeout / 2 (a keepalive) and answers at once a
 * status update that asks for a reply, so, as PostgreSQL's own walreceiver
 * does with wal_receiver_timeout:
 *   - after half the timeout without any frame, send one status update
 *     with reply_requested (LIVENESS_PING, once per silence);
 *   - after the whole timeout without any frame, drop the connection and
 *     reconnect (LIVENESS_DEAD).
 * A timeout of 0 turns both off. Pure: the caller passes a monotonic clock
 * in seconds and says when something arrived.
 */
#ifndef OUTBOX_RELAY_LIVENESS_H
#define OUTBOX_RELAY_LIVENESS_H

#include <stdbool.h>

struct liveness {
    double timeout;    /* seconds, 0 = off */
    double last_heard; /* monotonic seconds */
    bool pinged;       /* a reply was asked for in this silence */
};

enum liveness_verdict { LIVENESS_OK, LIVENESS_PING, LIVENESS_DEAD };

/* Starts counting at now (a connection that just started streaming). */
void liveness_init(struct liveness *l, double timeout, double now);

/* Something arrived at now (or the caller chose not to read, see relay_session.c). */
void liveness_heard(struct liveness *l, double now);

/* What is due at now: LIVENESS_PING at most once per silence (the caller
 * then calls liveness_pinged after sending it), LIVENESS_DEAD once the
 * whole timeout passed. Always LIVENESS_OK when off. */
enum liveness_verdict liveness_check(const struct liveness *l, double now);

void liveness_pinged(struct liveness *l);

/* Seconds from now until liveness_check's answer can change (0 = now);
 * a large number when off. For the caller's poll timeout. */
double liveness_due_in(const struct liveness *l, double now);

/* Seconds since something arrived. */
double liveness_silence(const struct liveness *l, double now);

#endif
