/*
 * test_pg_watchdog.c — the deadline for blocking PostgreSQL work
 * (pg_watchdog.h), against a local TCP listener instead of a server: libpq's
 * non-blocking connect gives a PGconn with a socket, the listener accepts
 * the peer end, and a cut shows there as end-of-file. Checked: a deadline
 * that passes cuts the socket, says so through on_fire once, and disarm
 * reports it; a disarm before the deadline cuts nothing; re-arming moves
 * the deadline; a conn without a socket never arms.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "check.h"
#include "outbox_relay/pg/pg_watchdog.h"

static atomic_int fired;

static void on_fire(void *arg)
{
    (void) arg;
    atomic_fetch_add(&fired, 1);
}

static void nap(double s)
{
    struct timespec ts = {.tv_sec = (time_t) s, .tv_nsec = (long) ((s - (time_t) s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A listener on 127.0.0.1; its port into *port. -1 on failure. */
static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof a) < 0 || listen(fd, 4) < 0 ||
        getsockname(fd, (struct sockaddr *) &a, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A PGconn whose socket is connected to the listener (libpq still waits
 * for the server's first answer, which never comes), and the accepted
 * peer end in *peer. */
static PGconn *open_conn(int lfd, int port, int *peer)
{
    char dsn[160];
    snprintf(dsn, sizeof dsn, "host=127.0.0.1 port=%d sslmode=disable gssencmode=disable "
             "connect_timeout=10", port);
    PGconn *conn = PQconnectStart(dsn);
    *peer = -1;
    if (conn == NULL || PQsocket(conn) < 0)
        return conn;
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, 2000) == 1)
        *peer = accept(lfd, NULL, NULL);
    return conn;
}

/* Whether the peer end sees end-of-file (or a reset) within seconds: the
 * watchdog shut the socket down. Startup bytes libpq sent are skipped. */
static int peer_closed(int peer, double seconds)
{
    char buf[512];
    struct pollfd p = {.fd = peer, .events = POLLIN};
    int waited = 0;
    while (waited < (int) (seconds * 1000)) {
        if (poll(&p, 1, 50) == 1) {
            ssize_t n = recv(peer, buf, sizeof buf, MSG_DONTWAIT);
            if (n <= 0)
                return 1;
            continue;
        }
        waited += 50;
    }
    return 0;
}

static void test_deadline_cuts(int lfd, int port)
{
    struct pg_watchdog_options o = {.no_cancel = true, .on_fire = on_fire};
    struct pg_watchdog *w = pg_watchdog_new(&o);
    int peer;
    PGconn *conn = open_conn(lfd, port, &peer);
    CHECK(w != NULL);
    CHECK(PQsocket(conn) >= 0 && peer >= 0);
    atomic_store(&fired, 0);
    pg_watchdog_arm(w, conn, 0.1);
    CHECK(peer_closed(peer, 3.0));
    nap(0.1); /* on_fire runs right after the cut */
    CHECK_EQ_INT(atomic_load(&fired), 1);
    CHECK(pg_watchdog_disarm(w));
    CHECK(!pg_watchdog_disarm(w)); /* said once */
    pg_watchdog_free(w);
    PQfinish(conn);
    close(peer);
}

static void test_disarm_in_time(int lfd, int port)
{
    struct pg_watchdog_options o = {.no_cancel = true, .on_fire = on_fire};
    struct pg_watchdog *w = pg_watchdog_new(&o);
    int peer;
    PGconn *conn = open_conn(lfd, port, &peer);
    atomic_store(&fired, 0);
    pg_watchdog_arm(w, conn, 0.3);
    nap(0.05);
    CHECK(!pg_watchdog_disarm(w));
    CHECK(!peer_closed(peer, 0.5));
    CHECK_EQ_INT(atomic_load(&fired), 0);
    pg_watchdog_free(w);
    PQfinish(conn);
    close(peer);
}

/* The maintenance thread re-arms at each step of the reaper: the deadline
 * bounds one wait, not the whole. */
static void test_rearm_moves_the_deadline(int lfd, int port)
{
    struct pg_watchdog_options o = {.no_cancel = true, .on_fire = on_fire};
    struct pg_watchdog *w = pg_watchdog_new(&o);
    int peer;
    PGconn *conn = open_conn(lfd, port, &peer);
    atomic_store(&fired, 0);
    for (int i = 0; i < 8; i++) { /* 0.4 s in all, past the 0.2 s of one arm */
        pg_watchdog_arm(w, conn, 0.2);
        nap(0.05);
    }
    CHECK_EQ_INT(atomic_load(&fired), 0);
    CHECK(peer_closed(peer, 3.0)); /* the last arm's deadline */
    nap(0.1);
    CHECK_EQ_INT(atomic_load(&fired), 1);
    CHECK(pg_watchdog_disarm(w));
    pg_watchdog_free(w);
    PQfinish(conn);
    close(peer);
}

/* The defaults (NULL options: a cancel request too, no callback) cut just
 * the same; the cancel request goes to the listener and is dropped. */
static void test_defaults(int lfd, int port)
{
    struct pg_watchdog *w = pg_watchdog_new(NULL);
    int peer;
    PGconn *conn = open_conn(lfd, port, &peer);
    pg_watchdog_arm(w, conn, 0.05);
    CHECK(peer_closed(peer, 3.0));
    nap(0.1);
    CHECK(pg_watchdog_disarm(w));
    pg_watchdog_free(w);
    PQfinish(conn);
    close(peer);
}

static void test_no_socket(void)
{
    struct pg_watchdog_options o = {.no_cancel = true, .on_fire = on_fire};
    struct pg_watchdog *w = pg_watchdog_new(&o);
    PGconn *conn = PQconnectStart("host=/nonexistent-dir-for-a-test port=1");
    atomic_store(&fired, 0);
    if (PQsocket(conn) < 0) {
        pg_watchdog_arm(w, conn, 0.01);
        nap(0.1);
        CHECK_EQ_INT(atomic_load(&fired), 0);
        CHECK(!pg_watchdog_disarm(w));
    }
    pg_watchdog_free(w);
    pg_watchdog_free(NULL);
    PQfinish(conn);
}

int main(void)
{
    int port = 0;
    int lfd = listener(&port);
    CHECK(lfd >= 0);
    if (lfd >= 0) {
        test_deadline_cuts(lfd, port);
        test_disarm_in_time(lfd, port);
        test_rearm_moves_the_deadline(lfd, port);
        test_defaults(lfd, port);
        close(lfd);
    }
    test_no_socket();
    CHECK_DONE();
}
