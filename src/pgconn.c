/*
 * pgconn.c — ordinary PostgreSQL connections opened one way (see pgconn.h).
 */
#include "outbox_relay/pgconn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Our defaults, then the user's DSN ("dbname" with expand_dbname = 1 takes
 * a whole connection string), which comes last so that it can override
 * them. */
static const char *const keys[] = {"fallback_application_name", "connect_timeout", "dbname",
                                   NULL};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void one_line(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
    for (; *s; s++)
        if (*s == '\n')
            *s = ' ';
}

void pgconn_error(const PGconn *conn, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", PQerrorMessage(conn));
    one_line(buf);
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

PGconn *pgconn_open(const char *dsn, const char *application_name, char *err,
                    size_t errlen)
{
    const char *vals[] = {application_name, "10", dsn, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(c) != CONNECTION_OK)
        return fail(c, err, errlen);
    return c;
}

PGconn *pgconn_open_interruptible(const char *dsn, const char *application_name,
                                  double timeout, bool (*stopping)(void *arg), void *arg,
                                  char *err, size_t errlen)
{
    const char *vals[] = {application_name, "10", dsn, NULL};
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
