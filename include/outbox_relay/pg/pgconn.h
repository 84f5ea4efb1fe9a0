/*
 * pgconn.h — opening every PostgreSQL connection of the relayer and its
 * tools the same way (the replication stream's, the maintenance thread's,
 * `status`'s, the backfill's, the partition lookup's): our defaults with
 * the user's DSN last so that it can override them, and libpq's multi-line
 * messages turned into one log line.
 *
 * The defaults bound how long a dead path can go unnoticed by the kernel:
 * connect_timeout 10 s; TCP keepalives after 10 s idle, every 5 s, 3 lost
 * (a vanished peer is found within about 25 s); tcp_user_timeout 30 s (data
 * sent and not acknowledged for that long ends the connection). None of
 * them sees a path that a proxy or load balancer terminates and then
 * stalls: its own kernel acknowledges everything. For those, queries run
 * with pgconn_exec's deadline and the replication loop has its
 * --wal-receiver-timeout.
 */
#ifndef OUTBOX_RELAY_PGCONN_H
#define OUTBOX_RELAY_PGCONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#define PGCONN_CONNECT_TIMEOUT "10"
#define PGCONN_KEEPALIVES_IDLE "10"
#define PGCONN_KEEPALIVES_INTERVAL "5"
#define PGCONN_KEEPALIVES_COUNT "3"
#define PGCONN_TCP_USER_TIMEOUT_MS "30000"

/* Connects with the defaults above, blocking (connect_timeout applies).
 * application_name is used unless the DSN names one; replication is NULL
 * for an ordinary connection or "database" for a logical walsender. Returns
 * the connection whatever its state (check PQstatus; PQfinish it in every
 * case), NULL only when out of memory. */
PGconn *pgconn_connectdb(const char *dsn, const char *application_name,
                         const char *replication);

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

/* Runs sql and waits at most timeout seconds (<= 0: no limit) for all of
 * its results, without blocking past the deadline on a stalled path. With
 * nparams > 0 the text parameters go with the extended protocol; with 0 the
 * simple protocol is used, the only one a walsender accepts. Returns the
 * last result (the caller's to PQclear; stops at a COPY result), with the
 * server's reason in err when it is an error result; or NULL with the
 * reason in err: the connection was lost, or no answer came in time, in
 * which case the connection has been shut down (PQstatus is then
 * CONNECTION_BAD: reconnect). err is never left empty on a failure, and
 * PQerrorMessage(conn) still holds the reason afterwards. */
PGresult *pgconn_exec(PGconn *conn, const char *sql, int nparams, const char *const *params,
                      double timeout, char *err, size_t errlen);

/* Copies a libpq message (NULL: "") into buf (capacity cap) as one line:
 * newlines become spaces, trailing ones are dropped. The one trimmer of
 * libpq's messages: every file says a server's reason through it. */
void pgconn_trim(char *buf, size_t cap, const char *msg);

/* SHOW name (a plain parameter name) with pgconn_exec's timeout, on an
 * ordinary or a replication connection: 1 with its text in buf, 0 when the
 * server has no such parameter, 2 when it has it but this role may not
 * read it (superuser-only parameters), -1 with the reason in buf. */
int pgconn_show(PGconn *conn, const char *name, double timeout, char *buf, size_t cap);

/* Why a command failed, as one line (pgconn_trim) in buf: res's message
 * (the server's ERROR with its DETAIL and HINT) when res has one, else
 * conn's last message; never empty (without either, it says what is known:
 * the connection lost, an unexpected result status). Either may be NULL.
 * Use it wherever a result is at hand: libpq may have emptied the
 * connection's message by then, the result's stays. */
void pgconn_failure(const PGconn *conn, const PGresult *res, char *buf, size_t cap);

/* pgconn_failure(conn, NULL, ...): for failures with no result (connect,
 * consume input, send). NULL conn: "out of memory". */
void pgconn_error(const PGconn *conn, char *buf, size_t cap);

/* pgconn_failure(NULL, res, ...). NULL res: "out of memory". */
void pgconn_result_error(const PGresult *res, char *buf, size_t cap);

/* Prints "libpq <major>.<minor>" to stdout (--version). */
void pgconn_print_library(void);

#endif
