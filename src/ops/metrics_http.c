/*
 * metrics_http.c — the HTTP endpoint of the metrics registry (see
 * metrics_http.h): libmicrohttpd with its own polling thread. The handlers
 * only read the registry (metrics_render, metrics_ready), so a slow scraper
 * never blocks the relay.
 */
#include "outbox_relay/ops/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "outbox_relay/base/log.h"


struct metrics_http {
    struct MHD_Daemon *daemon;
    struct metrics *m;
    int64_t max_lag_bytes;
    int port;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body,
                             const char *content_type)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status,
                                  const char *text)
{
    char *body = strdup(text);
    if (body == NULL)
        return MHD_NO;
    return reply(conn, status, body, "text/plain; charset=utf-8");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    struct metrics_http *h = cls;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    if (strcmp(url, "/metrics") == 0) {
        char *body = metrics_render(h->m);
        if (body == NULL)
            return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        return reply(conn, MHD_HTTP_OK, body, "text/plain; version=0.0.4; charset=utf-8");
    }
    if (strcmp(url, "/healthz") == 0)
        return reply_text(conn, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/readyz") == 0) {
        char why[1280], text[1300];
        bool ok = metrics_ready(h->m, h->max_lag_bytes, why, sizeof why);
        snprintf(text, sizeof text, ok ? "%s\n" : "not ready: %s\n", why);
        return reply_text(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, text);
    }
    return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found (try /metrics, /healthz, /readyz)\n");
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    log_warn("metrics http: %s", line);
}

/* Splits "HOST:PORT" / "[V6]:PORT" / ":PORT" and resolves it for a
 * listening socket. Returns the getaddrinfo result or NULL with err set. */
static struct addrinfo *resolve(const char *addr, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon[1] == '\0') {
        snprintf(err, errlen, "--metrics-addr \"%s\" must be HOST:PORT (e.g. 0.0.0.0:9187)",
                 addr);
        return NULL;
    }
    size_t hlen = (size_t) (colon - addr);
    const char *h = addr;
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']')
        h = addr + 1, hlen -= 2;
    if (hlen >= sizeof host) {
        snprintf(err, errlen, "--metrics-addr: host name too long");
        return NULL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
        snprintf(err, errlen, "--metrics-addr \"%s\": bad port", addr);
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(hlen ? host : NULL, colon + 1, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "--metrics-addr \"%s\": %s", addr, gai_strerror(rc));
        return NULL;
    }
    return res;
}

struct metrics_http *metrics_http_start(struct metrics *m, const char *addr,
                                        int64_t max_lag_bytes, char *err, size_t errlen)
{
    struct addrinfo *ai = resolve(addr, err, errlen);
    if (ai == NULL)
        return NULL;
    struct metrics_http *h = calloc(1, sizeof *h);
    if (h == NULL) {
        snprintf(err, errlen, "out of memory");
        freeaddrinfo(ai);
        return NULL;
    }
    h->m = m;
    h->max_lag_bytes = max_lag_bytes;
    /* Prefer IPv4 when a name resolves to both (the first IPv4 answer),
     * the first answer otherwise. */
    struct addrinfo *pick = ai;
    for (struct addrinfo *p = ai; p; p = p->ai_next)
        if (p->ai_family == AF_INET) {
            pick = p;
            break;
        }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (pick->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    uint16_t port = ntohs(pick->ai_family == AF_INET6
                              ? ((struct sockaddr_in6 *) pick->ai_addr)->sin6_port
                              : ((struct sockaddr_in *) pick->ai_addr)->sin_port);
    h->daemon = MHD_start_daemon(flags, port, NULL, NULL, handle, h,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                 MHD_OPTION_SOCK_ADDR, pick->ai_addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned) 32,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) 10,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->daemon == NULL) {
        snprintf(err, errlen, "cannot listen on --metrics-addr %s (address in use or not "
                 "local?)", addr);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int) info->port : -1;
    return h;
}

int metrics_http_port(const struct metrics_http *h)
{
    return h ? h->port : -1;
}

void metrics_http_stop(struct metrics_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->daemon);
    free(h);
}
