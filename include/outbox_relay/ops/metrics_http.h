/*
 * metrics_http.h — the HTTP endpoint of the metrics registry (metrics.h).
 *
 * libmicrohttpd, on its own thread, serves:
 *   /metrics  the registry as Prometheus text
 *   /healthz  200 while the process runs
 *   /readyz   200 when connected to PostgreSQL and Kafka, streaming (not a
 *             standby waiting for the slot), no table of the outbox
 *             unlogged, and slot lag under the threshold; 503 with the
 *             reason otherwise
 */
#ifndef OUTBOX_RELAY_METRICS_HTTP_H
#define OUTBOX_RELAY_METRICS_HTTP_H

#include <stdint.h>

#include "outbox_relay/core/metrics.h"

struct metrics_http;

/* Starts the HTTP endpoint on addr ("HOST:PORT", port 0 = any), reading m
 * (which must outlive the endpoint). Returns NULL with a message in err when
 * it cannot listen. */
struct metrics_http *metrics_http_start(struct metrics *m, const char *addr,
                                        int64_t max_lag_bytes, char *err, size_t errlen);
/* The port actually bound (useful with port 0). */
int metrics_http_port(const struct metrics_http *h);
/* Stops the server thread and frees h. NULL is fine. */
void metrics_http_stop(struct metrics_http *h);

#endif
