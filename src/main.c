/*
 * main.c — outbox-relay: stream a PostgreSQL transactional outbox to Kafka
 * from the WAL. Parses the configuration, installs signal handlers, runs the
 * relay. The only place that exits.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "outbox_relay/config.h"
#include "outbox_relay/log.h"
#include "outbox_relay/relay.h"

extern char **environ;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = 1;
}

int main(int argc, char **argv)
{
    struct relay_config cfg;
    char err[CONFIG_ERRLEN];
    int code;

    enum config_result cr = config_load(&cfg, argc, argv, environ, err, sizeof err);
    if (cr != CONFIG_OK) {
        if (cr == CONFIG_ERROR)
            fprintf(stderr, "outbox-relay: %s\n", err);
        config_free(&cfg);
        return cr == CONFIG_EXIT ? 0 : 2;
    }
    log_setup(cfg.log_level, cfg.log_format);
    config_register_secrets(&cfg);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (cfg.command != RELAY_CMD_RUN) {
        fprintf(stderr, "outbox-relay: the %s command is not available in this build\n",
                cfg.command == RELAY_CMD_REAP ? "reap" : "status");
        config_free(&cfg);
        return 2;
    }

    struct relay *relay = relay_new(&cfg, &stop_requested, NULL, err, sizeof err);
    if (relay == NULL) {
        log_error("%s", err);
        code = 2;
    } else {
        code = relay_run(relay);
        relay_free(relay);
    }
    config_free(&cfg);
    log_shutdown();
    return code;
}
