/*
 * pgconn.c — ordinary PostgreSQL connections opened one way (see pgconn.h).
 */
#include "outbox_relay/pg/pgconn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "outbox_relay/base/clock.h"

/* Our defaults, then the user's DSN ("dbname" with expand_dbname = 1 takes
 * a whole connection string), which comes last so that it can override
 * them, then "replication" for a walsender. The values are in
 * pgconn.h. */
enum { K_APP, K_TIMEOUT, K_KA, K_KA_IDLE, K_KA_INTERVAL, K_KA_COUNT, K_USER_TIMEOUT, K_DSN,
       K_REPLICATION, K_END };
static const char *const keys[] = {"fallback_application_name", "connect_timeout",
                                   "keepalives", "keepalives_idle", "keepalives_interval",
                                   "keepalives_count", "tcp_user_timeout", "dbname",
                                   "replication", NULL};

static void fill(const char **vals, const char *dsn, const char *application_name,
                 const char *replication)
{
    vals[K_APP] = application_name;
    vals[K_TIMEOUT] = PGCONN_CONNECT_TIMEOUT;
    vals[K_KA] = "1";
    vals[K_KA_IDLE] = PGCONN_KEEPALIVES_IDLE;
    vals[K_KA_INTERVAL] = PGCONN_KEEPALIVES_INTERVAL;
    vals[K_KA_COUNT] = PGCONN_KEEPALIVES_COUNT;
    vals[K_USER_TIMEOUT] = PGCONN_TCP_USER_TIMEOUT_MS;
    vals[K_DSN] = dsn;
    vals[K_REPLICATION] = replication; /* NULL ends the list here */
    vals[K_END] = NULL;
}

void pgconn_trim(char *buf, size_t cap, const char *msg)
{
    snprintf(buf, cap, "%s", msg ? msg : "");
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

/* libpq keeps a failed command's message in two places: its result, and
 * the connection's message, which later calls on the connection may have
 * emptied (seen with START_REPLICATION refused by the server: the result
 * held the ERROR and its HINT, PQerrorMessage was ""). The result comes
 * first; an empty text is never passed on. */
void pgconn_failure(const PGconn *conn, const PGresult *res, char *buf, size_t cap)
{
    const char *text = res != NULL ? PQresultErrorMessage(res) : "";
    if ((text == NULL || *text == '\0') && conn != NULL)
        text = PQerrorMessage(conn);
    pgconn_trim(buf, cap, text);
    if (*buf != '\0')
        return;
    if (res != NULL && PQresultStatus(res) != PGRES_FATAL_ERROR)
        snprintf(buf, cap, "unexpected answer from the server (%s)",
                 PQresStatus(PQresultStatus(res)));
    else if (conn == NULL)
        snprintf(buf, cap, "out of memory");
    else if (PQstatus(conn) != CONNECTION_OK)
        snprintf(buf, cap, "the connection to the server was lost (libpq gave no message)");
    else
        snprintf(buf, cap, "the command failed and libpq gave no message");
}

void pgconn_error(const PGconn *conn, char *buf, size_t cap)
{
    pgconn_failure(conn, NULL, buf, cap);
}

void pgconn_result_error(const PGresult *res, char *buf, size_t cap)
{
    pgconn_failure(NULL, res, buf, cap);
}

/* Takes a connection that did not come up: its reason into err, then frees
 * it. Always NULL. */
static PGconn *fail(PGconn *c, char *err, size_t errlen)
{
    if (c == NULL)
        snprintf(err, errlen, "out of memory");
    else
        pgconn_error(c, err, errlen);
    PQfinish(c);
    return NULL;
}

PGconn *pgconn_connectdb(const char *dsn, const char *application_name,
                         const char *replication)
{
    const char *vals[K_END + 1];
    fill(vals, dsn, application_name, replication);
    return PQconnectdbParams(keys, vals, 1);
}

PGconn *pgconn_open(const char *dsn, const char *application_name, char *err,
                    size_t errlen)
{
    PGconn *c = pgconn_connectdb(dsn, application_name, NULL);
    if (PQstatus(c) != CONNECTION_OK)
        return fail(c, err, errlen);
    return c;
}

PGconn *pgconn_open_interruptible(const char *dsn, const char *application_name,
                                  double timeout, bool (*stopping)(void *arg), void *arg,
                                  char *err, size_t errlen)
{
    const char *vals[K_END + 1];
    fill(vals, dsn, application_name, NULL);
    PGconn *c = PQconnectStartParams(keys, vals, 1);
    if (c == NULL)
        return fail(c, err, errlen);
    double deadline = mono_now() + timeout;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
           st != PGRES_POLLING_FAILED) {
        if (stopping(arg) || mono_now() >= deadline) {
            snprintf(err, errlen, stopping(arg) ? "stopping" : "connection timed out");
            PQfinish(c);
            return NULL;
        }
        struct pollfd pfd = {.fd = PQsocket(c),
                             .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT};
        int n = poll(&pfd, 1, 100);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0)
            st = PQconnectPoll(c);
    }
    if (PQstatus(c) != CONNECTION_OK)
        return fail(c, err, errlen);
    return c;
}

/* Ends a connection that did not answer in time: shutdown() makes libpq
 * read EOF, so PQstatus turns CONNECTION_BAD and every caller's "connection
 * lost" path applies; the socket itself is closed by PQfinish. */
static void give_up(PGconn *c)
{
    if (PQsocket(c) >= 0)
        shutdown(PQsocket(c), SHUT_RDWR);
    PQconsumeInput(c);
}

/* Puts a connection that pgconn_exec made non-blocking back in blocking
 * mode once the query has been sent whole (flushing 0), before any result
 * is read: libpq 15's PQsetnonblocking() clears the connection's error
 * message, so done after the results it left PQerrorMessage() empty for
 * every caller that reads the server's reason there. Reading never blocks
 * either way (PQconsumeInput, and PQgetResult only once PQisBusy is
 * false). */
static void sent_whole(PGconn *c, int flushing, bool *restore)
{
    if (*restore && flushing == 0) {
        PQsetnonblocking(c, 0);
        *restore = false;
    }
}

PGresult *pgconn_exec(PGconn *c, const char *sql, int nparams, const char *const *params,
                      double timeout, char *err, size_t errlen)
{
    bool restore = !PQisnonblocking(c); /* blocking again once sent */
    bool timed_out = false;
    PGresult *last = NULL;
    ExecStatusType st;
    double deadline = mono_now() + timeout;
    if (restore && PQsetnonblocking(c, 1) != 0)
        goto fail;
    int sent = nparams > 0 ? PQsendQueryParams(c, sql, nparams, NULL, params, NULL, NULL, 0)
                           : PQsendQuery(c, sql);
    if (!sent)
        goto fail;
    for (;;) {
        int flushing = PQflush(c);
        if (flushing < 0)
            goto fail;
        sent_whole(c, flushing, &restore);
        while (flushing == 1 || PQisBusy(c)) {
            int wait_ms = -1;
            if (timeout > 0) {
                double left = deadline - mono_now();
                if (left <= 0) {
                    give_up(c);
                    snprintf(err, errlen, "no answer from the server within %.0f s (a stalled "
                             "network path?); closed the connection", timeout);
                    timed_out = true;
                    goto fail;
                }
                wait_ms = (int) (left * 1000) + 1;
            }
            struct pollfd pfd = {.fd = PQsocket(c),
                                 .events = POLLIN | (flushing == 1 ? POLLOUT : 0)};
            int n = poll(&pfd, 1, wait_ms);
            if (n < 0 && errno != EINTR)
                goto fail;
            if (n > 0 && PQconsumeInput(c) == 0)
                goto fail;
            if ((flushing = PQflush(c)) < 0)
                goto fail;
            sent_whole(c, flushing, &restore);
        }
        PGresult *r = PQgetResult(c);
        if (r == NULL)
            break;
        PQclear(last);
        last = r;
        st = PQresultStatus(r);
        if (st == PGRES_COPY_BOTH || st == PGRES_COPY_OUT || st == PGRES_COPY_IN)
            break; /* the copy has begun: no more results until it ends */
    }
    if (last == NULL)
        goto fail;
    st = PQresultStatus(last);
    if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR || st == PGRES_BAD_RESPONSE)
        pgconn_result_error(last, err, errlen); /* the server's reason, for every caller */
    return last;
fail:
    if (!timed_out)
        pgconn_error(c, err, errlen);
    if (!timed_out && *err == '\0')
        snprintf(err, errlen, "libpq gave no reason (connection %s)",
                 PQstatus(c) == CONNECTION_OK ? "up" : "lost");
    PQclear(last);
    if (restore && PQstatus(c) == CONNECTION_OK)
        PQsetnonblocking(c, 0);
    return NULL;
}

int pgconn_show(PGconn *conn, const char *name, double timeout, char *buf, size_t cap)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SHOW %s", name);
    PGresult *res = pgconn_exec(conn, sql, 0, NULL, timeout, buf, cap);
    int rc;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        snprintf(buf, cap, "%s", PQgetvalue(res, 0, 0));
        rc = 1;
    } else {
        const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        if (state != NULL && strcmp(state, "42704") == 0) /* undefined_object */
            rc = 0;
        else if (state != NULL && strcmp(state, "42501") == 0) /* insufficient_privilege */
            rc = 2;
        else
            rc = -1;
        if (rc >= 0)
            *buf = '\0';
        else if (res != NULL)
            pgconn_failure(conn, res, buf, cap);
    }
    PQclear(res);
    return rc;
}

void pgconn_print_library(void)
{
    int v = PQlibVersion();
    printf("libpq %d.%d\n", v / 10000, v % 10000);
}
