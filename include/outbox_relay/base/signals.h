/*
 * signals.h — how both programs (outbox-relay, outbox-consume) are asked to
 * stop: SIGTERM or SIGINT sets a flag that their loops poll; nothing else
 * happens in the handler. SIGPIPE is ignored, so that writing to a closed
 * socket is an error return (EPIPE) handled where it happens, not the end of
 * the process.
 */
#ifndef OUTBOX_RELAY_SIGNALS_H
#define OUTBOX_RELAY_SIGNALS_H

#include <signal.h>

/* Installs the handlers (no SA_RESTART: a blocking call returns EINTR and
 * its loop sees the flag) and returns the flag, 0 until SIGTERM or SIGINT
 * arrives, then 1 for good. The flag is this module's, process-wide; call
 * once from main() before any thread starts. */
volatile sig_atomic_t *signals_install_stop(void);

#endif
