/*
 * pgconn.h — opening the relayer's ordinary (non-replication) PostgreSQL
 * connections, the maintenance thread's (maint.c) and `status`'s
 * (status.c), the same way: our defaults (an application name, libpq's
 * connect_timeout of 10 s) with the user's DSN last so that it can override
 * them, and libpq's multi-line messages turned into one log line.
 */
#ifndef OUTBOX_RELAY_PGCONN_H
#define OUTBOX_RELAY_PGCONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* Connects to dsn, blocking (libpq's connect_timeout applies).
 * application_name is used unless the DSN names one. Returns the
 * connection (the caller's, PQfinish it), or NULL with libpq's reason in err
 * as one line. */
PGconn *pgconn_open(const char *dsn, const char *application_name, char *err,
                    size_t errlen);

/* The same without blocking past timeout seconds or a stop request: it
 * connects with PQconnectStartParams and polls the socket, asking
 * stopping(arg) every 100 ms. NULL with err "stopping", "connection timed
 * out" or libpq's reason. */
PGconn *pgconn_open_interruptible(const char *dsn, const char *application_name,
                                  double timeout, bool (*stopping)(void *arg), void *arg,
                                  char *err, size_t errlen);

/* Copies conn's last error message into buf (capacity cap) as one line:
 * newlines become spaces, trailing ones are dropped. */
void pgconn_error(const PGconn *conn, char *buf, size_t cap);

#endif
