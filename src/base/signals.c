/*
 * signals.c — the stop flag and its handlers (see signals.h). The flag is a
 * static volatile sig_atomic_t, the one kind of object a handler may set.
 */
#include "outbox_relay/base/signals.h"

#include <string.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = 1;
}

volatile sig_atomic_t *signals_install_stop(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return &stop_requested;
}
