/*
 * pg_watchdog.c — a deadline for blocking PostgreSQL work (see
 * pg_watchdog.h).
 *
 * One thread sleeps on a condition variable (CLOCK_MONOTONIC) until armed,
 * then until the deadline or a disarm. Everything it shares with the armed
 * thread is under the mutex, so once pg_watchdog_disarm() returns the socket
 * is not touched again. The cancel request (a new connection to the server,
 * which can take long when the server is unreachable) runs outside the
 * mutex, as does the on_fire callback; if the watchdog is freed meanwhile,
 * the thread frees it when that request is done.
 */
#include "outbox_relay/pg/pg_watchdog.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "outbox_relay/base/clock.h"

struct pg_watchdog {
    struct pg_watchdog_options opts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool armed;
    bool fired;
    bool quit;
    bool cancelling; /* the thread is sending a cancel request or in on_fire, unlocked */
    bool detached;   /* freed while cancelling: the thread frees itself */
    int fd;
    PGcancel *cancel; /* owned here while armed */
    struct timespec deadline;
};

static bool reached(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

static void destroy(struct pg_watchdog *w)
{
    if (w->cancel != NULL)
        PQfreeCancel(w->cancel);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static void *run(void *arg)
{
    struct pg_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        if (!w->armed) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &w->deadline);
        if (w->quit || !w->armed || !reached(&w->deadline))
            continue;
        /* The deadline passed while armed: cut the connection. */
        shutdown(w->fd, SHUT_RDWR);
        w->fired = true;
        w->armed = false;
        PGcancel *cancel = w->cancel;
        w->cancel = NULL;
        w->cancelling = true;
        pthread_mutex_unlock(&w->mu);
        if (cancel != NULL) {
            char err[256];
            PQcancel(cancel, err, sizeof err); /* best effort */
            PQfreeCancel(cancel);
        }
        if (w->opts.on_fire != NULL)
            w->opts.on_fire(w->opts.arg);
        pthread_mutex_lock(&w->mu);
        w->cancelling = false;
    }
    bool self_free = w->detached;
    pthread_mutex_unlock(&w->mu);
    if (self_free)
        destroy(w);
    return NULL;
}

struct pg_watchdog *pg_watchdog_new(const struct pg_watchdog_options *opts)
{
    struct pg_watchdog *w = calloc(1, sizeof *w);
    pthread_condattr_t attr;
    if (w == NULL)
        return NULL;
    if (opts != NULL)
        w->opts = *opts;
    w->fd = -1;
    if (pthread_condattr_init(&attr) != 0)
        goto fail_alloc;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        goto fail_alloc;
    if (pthread_mutex_init(&w->mu, NULL) != 0)
        goto fail_cond;
    if (pthread_create(&w->thread, NULL, run, w) != 0)
        goto fail_mutex;
    return w;

fail_mutex:
    pthread_mutex_destroy(&w->mu);
fail_cond:
    pthread_cond_destroy(&w->cv);
fail_alloc:
    free(w);
    return NULL;
}

void pg_watchdog_arm(struct pg_watchdog *w, PGconn *conn, double seconds)
{
    struct timespec d = mono_deadline(seconds);
    /* NULL is fine: no cancel request */
    PGcancel *cancel = w->opts.no_cancel ? NULL : PQgetCancel(conn);
    pthread_mutex_lock(&w->mu);
    if (w->cancel != NULL)
        PQfreeCancel(w->cancel);
    w->cancel = cancel;
    w->fd = PQsocket(conn);
    w->deadline = d;
    w->fired = false;
    w->armed = w->fd >= 0;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

bool pg_watchdog_disarm(struct pg_watchdog *w)
{
    pthread_mutex_lock(&w->mu);
    bool fired = w->fired;
    w->armed = false;
    w->fired = false;
    w->fd = -1;
    if (w->cancel != NULL)
        PQfreeCancel(w->cancel);
    w->cancel = NULL;
    pthread_mutex_unlock(&w->mu);
    return fired;
}

void pg_watchdog_free(struct pg_watchdog *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    w->armed = false;
    bool busy = w->cancelling;
    if (busy)
        w->detached = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (busy) {
        pthread_detach(w->thread);
        return;
    }
    pthread_join(w->thread, NULL);
    destroy(w);
}
