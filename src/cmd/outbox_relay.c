/*
 * outbox_relay.c — outbox-relay: stream a PostgreSQL transactional outbox to Kafka
 * from the WAL. Parses the configuration, installs signal handlers and
 * dispatches to one of four commands:
 *   run     the relay, with the metrics registry, the HTTP endpoint (when
 *           --metrics-addr is set) and the maintenance thread (slot polls,
 *           reaper, heartbeat) beside it;
 *   reap    the reaper, once (for cron);
 *   status  a health report whose exit code a probe can use;
 *   check   the preflight of PostgreSQL and Kafka (check.h).
 * The only place that exits.
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/ops/check.h"
#include "outbox_relay/config/config.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/ops/maint.h"
#include "outbox_relay/core/metrics.h"
#include "outbox_relay/ops/metrics_http.h"
#include "outbox_relay/relay/relay.h"
#include "outbox_relay/base/signals.h"
#include "outbox_relay/ops/status.h"

#define MAINT_STOP_TIMEOUT 10.0 /* s to wait for the maintenance thread at exit */

extern char **environ;

/* `run`: 0 after a clean stop, 1 on a fatal relay error, 2 when something
 * cannot even start (bad Kafka configuration, metrics address in use). stop
 * is the signal handlers' flag. Without --plugin the relay may ask once to
 * start over with the plugin the slot or the server wants
 * (RELAY_SWITCH_PLUGIN): cfg->plugin is then set to it and a new relay and
 * maintenance thread are made, before anything was streamed. */
static int cmd_run(struct relay_config *cfg, volatile sig_atomic_t *stop, bool *cfg_borrowed)
{
    char err[CONFIG_ERRLEN];
    struct metrics_http *http = NULL;
    struct maint *maint = NULL;
    struct relay *relay = NULL;
    bool maint_gone = true;
    int code = 2;

    struct metrics *metrics = metrics_new(cfg->slot);
    if (metrics == NULL) {
        log_error("out of memory");
        return 2;
    }
    if (cfg->metrics_addr != NULL && *cfg->metrics_addr != '\0') {
        http = metrics_http_start(metrics, cfg->metrics_addr, cfg->max_lag_bytes, err,
                                  sizeof err);
        if (http == NULL) {
            log_error("%s", err);
            goto out;
        }
        log_info("serving /metrics, /healthz and /readyz on %s (port %d)", cfg->metrics_addr,
                 metrics_http_port(http));
    }
    for (;;) {
        code = 2; /* what a relay or thread that cannot start means, on every round */
        relay = relay_new(cfg, stop, metrics, err, sizeof err);
        if (relay == NULL) {
            log_error("%s", err);
            goto out;
        }
        maint = maint_start(cfg, stop, metrics, err, sizeof err);
        if (maint == NULL) {
            log_error("%s", err);
            goto out;
        }
        code = relay_run(relay);
        if (code != RELAY_SWITCH_PLUGIN || cfg->plugin != PLUGIN_AUTO)
            break;
        /* The maintenance thread reads cfg: stopped before cfg changes. */
        maint_gone = maint_stop(maint, MAINT_STOP_TIMEOUT);
        maint = NULL;
        if (!maint_gone) {
            code = 1;
            goto out;
        }
        cfg->plugin = strcmp(relay_switch_plugin(relay), "pgoutput") == 0 ? PLUGIN_PGOUTPUT
                                                                         : PLUGIN_WAL2JSON;
        relay_free(relay);
        relay = NULL;
    }

out:
    /* The maintenance thread and the HTTP server borrow metrics and cfg:
     * stop them first. A thread that would not stop keeps them (leaked at
     * exit rather than freed under it). */
    if (maint != NULL)
        maint_gone = maint_stop(maint, MAINT_STOP_TIMEOUT);
    relay_free(relay);
    metrics_http_stop(http);
    if (maint_gone)
        metrics_free(metrics);
    *cfg_borrowed = !maint_gone;
    return code;
}

int main(int argc, char **argv)
{
    struct relay_config cfg;
    char err[CONFIG_ERRLEN];
    bool cfg_borrowed = false;
    int code;

    /* Two malloc arenas, not glibc's 8 per core: librdkafka's threads
     * allocate and free the in-flight window's messages, and with an arena
     * each the freed memory stays spread over them, so a long-running
     * relayer's RSS creeps up after each fault that fills the window
     * (the soak's numbers: docs/failure-modes.md, "Soak"). The
     * environment's MALLOC_ARENA_MAX still wins. */
    if (getenv("MALLOC_ARENA_MAX") == NULL)
        mallopt(M_ARENA_MAX, 2);

    enum config_result cr = config_load(&cfg, argc, argv, environ, err, sizeof err);
    if (cr != CONFIG_OK) {
        if (cr == CONFIG_ERROR)
            fprintf(stderr, "outbox-relay: %s\n", err);
        config_free(&cfg);
        return cr == CONFIG_EXIT ? 0 : 2;
    }
    log_setup(cfg.log_level, cfg.log_format);
    config_register_secrets(&cfg);

    volatile sig_atomic_t *stop = signals_install_stop();

    switch (cfg.command) {
    case RELAY_CMD_REAP:
        code = maint_reap_once(&cfg, stop);
        break;
    case RELAY_CMD_STATUS:
        code = status_run(&cfg, stdout);
        break;
    case RELAY_CMD_CHECK:
        code = check_run(&cfg, cfg.format, stdout);
        break;
    case RELAY_CMD_RUN:
    default:
        code = cmd_run(&cfg, stop, &cfg_borrowed);
        break;
    }
    if (!cfg_borrowed)
        config_free(&cfg);
    log_shutdown();
    return code;
}
