/*
 * test_pgconn.c — every connection pgconn opens carries our keepalive,
 * tcp_user_timeout and connect_timeout defaults, the DSN can override each,
 * and "replication" is added only for a walsender. Connects to a port
 * nothing listens on (refused at once) and reads the options libpq used
 * back with PQconninfo; no server needed.
 */
#include "outbox_relay/pg/pgconn.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

/* The value libpq used for keyword, or "" when unset. */
static const char *opt(PGconn *c, const char *keyword, char *buf, size_t cap)
{
    PQconninfoOption *info = PQconninfo(c);
    buf[0] = '\0';
    for (PQconninfoOption *o = info; o && o->keyword; o++)
        if (strcmp(o->keyword, keyword) == 0 && o->val)
            snprintf(buf, cap, "%s", o->val);
    PQconninfoFree(info);
    return buf;
}

#define CHECK_OPT(c, k, want)                                         \
    do {                                                              \
        char b_[128];                                                 \
        CHECK(strcmp(opt((c), (k), b_, sizeof b_), (want)) == 0);     \
    } while (0)

static void test_defaults_and_overrides(void)
{
    PGconn *c = pgconn_connectdb("host=127.0.0.1 port=1 dbname=x", "outbox-relay test", NULL);
    CHECK(c != NULL);
    CHECK(PQstatus(c) == CONNECTION_BAD);
    CHECK_OPT(c, "connect_timeout", "10");
    CHECK_OPT(c, "keepalives", "1");
    CHECK_OPT(c, "keepalives_idle", "10");
    CHECK_OPT(c, "keepalives_interval", "5");
    CHECK_OPT(c, "keepalives_count", "3");
    CHECK_OPT(c, "tcp_user_timeout", "30000");
    CHECK_OPT(c, "fallback_application_name", "outbox-relay test");
    CHECK_OPT(c, "replication", "");
    CHECK_OPT(c, "dbname", "x");
    PQfinish(c);

    c = pgconn_connectdb("postgresql://127.0.0.1:1/y?keepalives_idle=99&tcp_user_timeout=0",
                         "outbox-relay", "database");
    CHECK_OPT(c, "keepalives_idle", "99");
    CHECK_OPT(c, "tcp_user_timeout", "0");
    CHECK_OPT(c, "keepalives_count", "3");
    CHECK_OPT(c, "replication", "database");
    CHECK_OPT(c, "dbname", "y");
    PQfinish(c);
}

static void test_open_reports_one_line(void)
{
    char err[512];
    PGconn *c = pgconn_open("host=127.0.0.1 port=1 dbname=x", "t", err, sizeof err);
    CHECK(c == NULL);
    CHECK(*err != '\0' && strchr(err, '\n') == NULL);
}

/* The one trimmer: libpq's multi-line messages become one log line. */
static void test_trim(void)
{
    char buf[64];
    pgconn_trim(buf, sizeof buf, "ERROR:  relation \"x\" does not exist\nLINE 1: SELECT\n\n");
    CHECK(strcmp(buf, "ERROR:  relation \"x\" does not exist LINE 1: SELECT") == 0);
    pgconn_trim(buf, sizeof buf, NULL);
    CHECK(strcmp(buf, "") == 0);
    pgconn_trim(buf, sizeof buf, "no newline");
    CHECK(strcmp(buf, "no newline") == 0);
    pgconn_trim(buf, 8, "truncated message\n");
    CHECK(strcmp(buf, "truncat") == 0);
    pgconn_error(NULL, buf, sizeof buf);
    CHECK(strcmp(buf, "out of memory") == 0);
    pgconn_result_error(NULL, buf, sizeof buf);
    CHECK(strcmp(buf, "out of memory") == 0);
}

int main(void)
{
    test_defaults_and_overrides();
    test_open_reports_one_line();
    test_trim();
    CHECK_DONE();
}
