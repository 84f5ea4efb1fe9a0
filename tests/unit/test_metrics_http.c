/*
 * test_metrics_http.c — the metrics registry's HTTP endpoint over a real
 * loopback socket: bad and busy addresses, /metrics (valid exposition,
 * values that move), /healthz, /readyz, 404, 405, and a clean stop.
 */
#include "outbox_relay/ops/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "expo.h"

/* ---------------------------------------------------------------------
 * HTTP
 * --------------------------------------------------------------------- */

/* Sends one request to 127.0.0.1:port; returns the status code and the
 * body in a malloc'ed string (*body), or -1. */
static int http(int port, const char *method, const char *path, char **body)
{
    *body = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t) port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
    if (write(fd, req, (size_t) n) != n) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t) r;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[len] = '\0';
    int status = -1;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    char *sep = strstr(buf, "\r\n\r\n");
    *body = strdup(sep ? sep + 4 : "");
    if (strstr(buf, "text/plain") == NULL)
        status = -2;
    free(buf);
    return status;
}

static void test_http(void)
{
    struct metrics *m = metrics_new("s");
    char err[256];
    char *body;

    CHECK(metrics_http_start(m, "nonsense", 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "HOST:PORT") != NULL);
    CHECK(metrics_http_start(m, "127.0.0.1:99999", 0, err, sizeof err) == NULL);

    struct metrics_http *h = metrics_http_start(m, "127.0.0.1:0", 1000, err, sizeof err);
    CHECK(h != NULL);
    if (h == NULL) {
        fprintf(stderr, "metrics_http_start: %s\n", err);
        metrics_free(m);
        return;
    }
    int port = metrics_http_port(h);
    CHECK(port > 0);

    /* The same port again: refused with a message. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    CHECK(metrics_http_start(m, addr, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "cannot listen") != NULL);

    metrics_event_delivered(m, "orders", 0.01, 0.001);
    CHECK_EQ_INT(http(port, "GET", "/metrics", &body), 200);
    struct expo e;
    CHECK_EQ_INT(expo_validate(&e, body ? body : ""), 0);
    expo_free(&e);
    CHECK(value_of(body, "outbox_relay_events_delivered_total{topic=\"orders\"}") == 1);
    free(body);
    metrics_event_delivered(m, "orders", 0.01, 0.001);
    CHECK_EQ_INT(http(port, "GET", "/metrics", &body), 200);
    CHECK(value_of(body, "outbox_relay_events_delivered_total{topic=\"orders\"}") == 2);
    free(body);

    CHECK_EQ_INT(http(port, "GET", "/healthz", &body), 200);
    free(body);
    CHECK_EQ_INT(http(port, "GET", "/readyz", &body), 503);
    CHECK(strstr(body, "not ready: starting") != NULL);
    free(body);
    metrics_set_state(m, true, true, true);
    metrics_set_slot(m, 10, "reserved", -1);
    CHECK_EQ_INT(http(port, "GET", "/readyz", &body), 200);
    free(body);
    metrics_set_slot(m, 5000, "reserved", -1); /* above max_lag_bytes = 1000 */
    CHECK_EQ_INT(http(port, "GET", "/readyz", &body), 503);
    CHECK(strstr(body, "5000") != NULL);
    free(body);
    CHECK_EQ_INT(http(port, "GET", "/nope", &body), 404);
    free(body);
    CHECK_EQ_INT(http(port, "POST", "/metrics", &body), 405);
    free(body);

    metrics_http_stop(h);
    CHECK_EQ_INT(http(port, "GET", "/healthz", &body), -1);
    free(body);
    metrics_http_stop(NULL);
    metrics_free(m);
}

int main(void)
{
    test_http();
    CHECK_DONE();
}
