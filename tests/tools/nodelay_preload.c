/*
 * nodelay_preload.c — LD_PRELOAD shim that turns Nagle's algorithm off
 * (TCP_NODELAY) on every socket the process accept()s.
 *
 * Why: the benchmark (bench/run.sh), the integration tests (harness.py)
 * and the demo run build/mock-broker, librdkafka's mock cluster, as the
 * Kafka broker. A real Kafka broker sets TCP_NODELAY on its connections;
 * the mock cluster (librdkafka 2.0.2, src/rdkafka_mock.c) does not. With
 * Nagle on at the broker, a second small response (a produce ack, a fetch
 * answer) waits for the client's delayed ACK whenever an earlier one is
 * unacknowledged: up to 40 ms on Linux. Measured here: the polling relayer's
 * flush of a 100-event batch (8 produce requests, one per partition) took
 * 42-47 ms, every batch, with the mock as is. Preloaded into mock-broker
 * only, this makes the mock behave like a broker in that respect and
 * changes nothing else.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <sys/socket.h>

static void nodelay(int fd)
{
    int on = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on); /* fails harmlessly on non-TCP */
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (real == NULL)
        real = (int (*)(int, struct sockaddr *, socklen_t *)) dlsym(RTLD_NEXT, "accept");
    int s = real(fd, addr, len);
    nodelay(s);
    return s;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    static int (*real)(int, struct sockaddr *, socklen_t *, int);
    if (real == NULL)
        real = (int (*)(int, struct sockaddr *, socklen_t *, int)) dlsym(RTLD_NEXT, "accept4");
    int s = real(fd, addr, len, flags);
    nodelay(s);
    return s;
}
