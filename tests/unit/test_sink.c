/*
 * test_sink.c — the sink's delivery reports against librdkafka's in-process
 * mock cluster (test.mock.num.brokers: the real producer, a real protocol
 * exchange, no network): what a report carries, and lazy reports
 * (sink_set_lazy), which must neither wake the caller nor change the time a
 * report says the broker answered, and must not lose a wake-up when turned
 * off with reports already waiting; and a configuration librdkafka refuses.
 */
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "outbox_relay/base/clock.h"
#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/kafka/sink.h"

struct seen {
    int n;
    uint64_t token;
    uint64_t token_sum; /* of every report's token */
    int err;
    int64_t acked_unix_us;
    int64_t ack_latency_us;
    int64_t served_unix_us;
};

static void on_report(void *ctx, uint64_t token, const struct sink_report *rep)
{
    struct seen *s = ctx;
    s->n++;
    s->token = token;
    s->token_sum += token;
    s->err = rep->err;
    s->acked_unix_us = rep->acked_unix_us;
    s->ack_latency_us = rep->ack_latency_us;
    s->served_unix_us = wall_now_us();
}

static bool readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static struct outbox_event event(const char *id)
{
    struct outbox_event ev = {0};
    snprintf(ev.event_id, sizeof ev.event_id, "%s", id);
    ev.aggregate_id = "order-1";
    ev.aggregate_id_len = 7;
    ev.type = "order.created";
    ev.type_len = 13;
    ev.payload = "{\"n\":1}";
    ev.payload_len = 7;
    return ev;
}

/* Serves until n reports have come or timeout_ms passed, waiting on the fd
 * as the relay's loop does. */
static void serve_until(struct sink *sk, const struct seen *s, int n, int timeout_ms)
{
    for (int waited = 0; s->n < n && waited < timeout_ms; waited += 50) {
        readable(sink_fd(sk), 50);
        sink_poll(sk, 0);
    }
}

int main(void)
{
    /* A configuration librdkafka refuses at rd_kafka_new(): an error, not
     * a crash (before 2.13 destroying the refused configuration freed its
     * interceptors twice; sink.c keeps it instead). */
    const char *bad[] = {"security.protocol", "ssl", "ssl.ca.location", "/nonexistent/ca.pem"};
    struct sink_options bad_opts = {.brokers = "127.0.0.1:1", .topic_template = "{type}",
                                    .kafka = bad, .nkafka = 2};
    char err[256];
    struct seen s = {0};
    CHECK(sink_new(&bad_opts, on_report, &s, err, sizeof err) == NULL);
    CHECK(strstr(err, "ssl.ca.location") != NULL);

    const char *kafka[] = {"test.mock.num.brokers", "1"};
    struct sink_options opts = {.topic_template = "{type}", .kafka = kafka, .nkafka = 1};
    struct sink *sk = sink_new(&opts, on_report, &s, err, sizeof err);
    CHECK(sk != NULL);
    if (sk == NULL) {
        fprintf(stderr, "sink_new: %s\n", err);
        return 1;
    }

    /* Eager (the default): the report wakes the fd; it carries the token
     * and an ack time between the produce and the serving. */
    struct outbox_event ev = event("1");
    int64_t t0 = wall_now_us();
    CHECK_EQ_INT(sink_produce(sk, &ev, 41), SINK_OK);
    CHECK_EQ_INT(sink_inflight(sk), 1);
    serve_until(sk, &s, 1, 10000);
    CHECK_EQ_INT(s.n, 1);
    CHECK_EQ_INT(s.token, 41);
    CHECK_EQ_INT(s.err, 0);
    CHECK(s.acked_unix_us >= t0);
    CHECK(s.acked_unix_us <= s.served_unix_us);
    /* produce to answer: no longer than t0 to the answer (2 ms for the
     * two clocks' reading) */
    CHECK(s.ack_latency_us >= 0);
    CHECK(s.ack_latency_us <= s.acked_unix_us - t0 + 2000);
    CHECK_EQ_INT(sink_inflight(sk), 0);

    /* Lazy: the broker answers, nothing wakes the fd, and the report,
     * served a second later, still says when the answer came. */
    sink_set_lazy(sk, true);
    sink_poll(sk, 0); /* a wake-up of before (a log line, say) */
    ev = event("2");
    t0 = wall_now_us();
    CHECK_EQ_INT(sink_produce(sk, &ev, 42), SINK_OK);
    sleep_ms(1000);
    CHECK(!readable(sink_fd(sk), 0));
    CHECK_EQ_INT(s.n, 1);
    /* Turned off with the report waiting: readable at once, although the
     * queue's callback came (and wrote nothing) long before. */
    sink_set_lazy(sk, false);
    CHECK(readable(sink_fd(sk), 0));
    sink_poll(sk, 0);
    CHECK_EQ_INT(s.n, 2);
    CHECK_EQ_INT(s.token, 42);
    CHECK_EQ_INT(s.err, 0);
    CHECK(s.acked_unix_us >= t0);
    CHECK(s.acked_unix_us <= s.served_unix_us - 500000);
    CHECK(s.ack_latency_us >= 0); /* the broker's answer, not the serving */
    CHECK(s.ack_latency_us <= s.acked_unix_us - t0 + 2000);
    CHECK(!readable(sink_fd(sk), 0));

    /* Records are recycled: three chunks' worth of produces in flight at
     * once, and each report still hands back its own message's token. */
    uint64_t want = s.token_sum;
    int goal = s.n + 3000;
    for (uint64_t i = 0; i < 3000; i++) {
        ev = event("3");
        while (sink_produce(sk, &ev, 1000 + i) == SINK_FULL)
            sink_poll(sk, 10);
        want += 1000 + i;
    }
    serve_until(sk, &s, goal, 20000);
    CHECK_EQ_INT(s.n, goal);
    CHECK_EQ_INT(s.token_sum, want);
    CHECK_EQ_INT(sink_inflight(sk), 0);

    sink_free(sk, 1000);
    printf("test_sink: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
