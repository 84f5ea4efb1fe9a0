/*
 * wake.h — a wake-up pipe for one waiting thread and any number of
 * signalling threads: the sink's way to make librdkafka's "reports are
 * waiting" callback wake the main loop's poll(). Tested with threads by
 * tests/unit/test_wake.c.
 *
 * The invariant: `signalled` is true exactly while a byte waits in the
 * pipe, because both change together under the lock. So wake_signal()
 * writes only when no byte waits (no system call per event), and
 * wake_drain() reads only when one does, and never swallows a byte whose
 * flag it does not clear: every signal after a drain writes again. (The
 * first version set and cleared the flag outside any lock; a signaller
 * that had tested the flag, then wrote after a drain and set the flag after
 * the clear, left it set over an empty pipe, and later signals wrote
 * nothing: the loop slept until its next timeout.)
 */
#ifndef OUTBOX_RELAY_WAKE_H
#define OUTBOX_RELAY_WAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct wake {
    int fd[2];            /* fd[0] to poll for POLLIN */
    pthread_mutex_t lock; /* the pipe's content and signalled, together; a
                             leaf lock: nothing is called while holding it */
    atomic_bool signalled;
};

/* Opens the pipe (both ends non-blocking). Returns 0, or -1 with errno. */
int wake_init(struct wake *w);
void wake_destroy(struct wake *w);

/* From any thread: makes wake_fd() readable unless it already is. */
void wake_signal(struct wake *w);

/* From the waiting thread, before it serves what the signals announced:
 * empties the pipe. What is signalled from now on writes again. */
void wake_drain(struct wake *w);

int wake_fd(const struct wake *w);

#endif
