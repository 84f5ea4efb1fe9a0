/*
 * polling_relayer.c — the seed's polling outbox relayer, rebuilt in C for
 * the benchmark so that it is compared with outbox-relay on equal terms
 * (same language, same libpq and librdkafka, same producer guarantees).
 *
 * The loop is the seed's, unchanged:
 *
 *   loop {
 *     BEGIN;
 *     SELECT id, aggregate_id, type, payload, created_at FROM events_outbox
 *      WHERE dispatched_at IS NULL ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED;
 *     produce each row, keyed by aggregate_id, to the topic of its type;
 *     flush (wait for every delivery report);
 *     UPDATE events_outbox SET dispatched_at = now() WHERE id = ANY($1);
 *     COMMIT;
 *   }
 *
 * When a poll finds nothing it sleeps --idle-ms (100 ms) before the next.
 * created_at is selected too, only so that the Kafka record carries the
 * same headers as outbox-relay's (event_id, event_type, created_at) and the
 * same benchmark consumer can check every event arrived. The producer has
 * outbox-relay's guarantees: idempotent, acks=all, message.timeout.ms=0,
 * and, like outbox-relay, produces through topic handles
 * (rd_kafka_topic_new asks for a new topic's metadata at once; producing by
 * name would stall the first batch of each topic up to a second).
 *
 * Usage: polling-relayer --dsn CONNINFO --brokers HOST:PORT
 *                        [--batch 100] [--idle-ms 100] [--exit-when-empty]
 * --exit-when-empty: stop after the first empty poll (backlog drains).
 * SIGTERM/SIGINT stop it after the current batch. Prints the number of
 * events dispatched and the CPU it used on stdout at exit.
 */
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    stop = 1;
}

static int delivery_errors;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    if (m->err) {
        fprintf(stderr, "polling-relayer: delivery failed: %s\n", rd_kafka_err2str(m->err));
        delivery_errors++;
    }
}

/* A topic handle per topic name, created on first use. */
static rd_kafka_topic_t *topic_handle(rd_kafka_t *rk, const char *name)
{
    static struct {
        char name[256];
        rd_kafka_topic_t *rkt;
    } cache[64];
    static int n;
    for (int i = 0; i < n; i++)
        if (strcmp(cache[i].name, name) == 0)
            return cache[i].rkt;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, name, NULL);
    if (rkt != NULL && n < 64) {
        snprintf(cache[n].name, sizeof cache[n].name, "%s", name);
        cache[n++].rkt = rkt;
    }
    return rkt;
}

static bool exec_ok(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "polling-relayer: %s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

int main(int argc, char **argv)
{
    const char *dsn = NULL, *brokers = NULL;
    int batch = 100, idle_ms = 100;
    bool exit_when_empty = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--exit-when-empty") == 0)
            exit_when_empty = true;
        else if (i + 1 < argc && strcmp(argv[i], "--dsn") == 0)
            dsn = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--brokers") == 0)
            brokers = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0)
            batch = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--idle-ms") == 0)
            idle_ms = atoi(argv[++i]);
        else
            dsn = NULL, i = argc;
    }
    if (dsn == NULL || brokers == NULL || batch <= 0) {
        fprintf(stderr, "usage: %s --dsn CONNINFO --brokers HOST:PORT [--batch N] "
                "[--idle-ms MS] [--exit-when-empty]\n", argv[0]);
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *props[][2] = {
        {"bootstrap.servers", brokers}, {"client.id", "polling-relayer"},
        {"enable.idempotence", "true"}, {"acks", "all"},
        {"message.timeout.ms", "0"},    {"log_level", "3"},
    };
    for (size_t i = 0; i < sizeof props / sizeof props[0]; i++)
        if (rd_kafka_conf_set(conf, props[i][0], props[i][1], err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
            fprintf(stderr, "polling-relayer: %s: %s\n", props[i][0], err);
            return 2;
        }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "polling-relayer: %s\n", err);
        return 1;
    }
    PGconn *conn = PQconnectdb(dsn);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "polling-relayer: %s", PQerrorMessage(conn));
        return 1;
    }

    char select_sql[512];
    snprintf(select_sql, sizeof select_sql,
             "SELECT id, aggregate_id, type, payload, created_at FROM events_outbox "
             "WHERE dispatched_at IS NULL ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED", batch);
    const char *update_sql = "UPDATE events_outbox SET dispatched_at = now() WHERE id = ANY($1)";
    size_t idcap = (size_t) batch * 21 + 3;
    char *ids = malloc(idcap);
    long long dispatched = 0;
    int rc = 0;

    while (!stop) {
        if (!exec_ok(conn, "BEGIN")) {
            rc = 1;
            break;
        }
        PGresult *res = PQexec(conn, select_sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            fprintf(stderr, "polling-relayer: select: %s", PQerrorMessage(conn));
            PQclear(res);
            rc = 1;
            break;
        }
        int n = PQntuples(res);
        if (n == 0) {
            PQclear(res);
            if (!exec_ok(conn, "COMMIT")) {
                rc = 1;
                break;
            }
            if (exit_when_empty)
                break;
            struct timespec ts = {idle_ms / 1000, (long) (idle_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        size_t len = 0;
        ids[len++] = '{';
        for (int i = 0; i < n; i++) {
            const char *id = PQgetvalue(res, i, 0);
            const char *type = PQgetvalue(res, i, 2);
            const char *dot = strchr(type, '.');
            char topic[256];
            snprintf(topic, sizeof topic, "%.*s", dot ? (int) (dot - type) : (int) strlen(type),
                     type);
            rd_kafka_topic_t *rkt = topic_handle(rk, topic);
            if (rkt == NULL) {
                fprintf(stderr, "polling-relayer: topic %s: %s\n", topic,
                        rd_kafka_err2str(rd_kafka_last_error()));
                rc = 1;
                break;
            }
            rd_kafka_resp_err_t e;
            do {
                e = rd_kafka_producev(
                    rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_KEY(PQgetvalue(res, i, 1), (size_t) PQgetlength(res, i, 1)),
                    RD_KAFKA_V_VALUE(PQgetvalue(res, i, 3), (size_t) PQgetlength(res, i, 3)),
                    RD_KAFKA_V_HEADER("event_id", id, -1),
                    RD_KAFKA_V_HEADER("event_type", type, -1),
                    RD_KAFKA_V_HEADER("created_at", PQgetvalue(res, i, 4), -1), RD_KAFKA_V_END);
                if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                    rd_kafka_poll(rk, 100);
            } while (e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
            if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                fprintf(stderr, "polling-relayer: produce: %s\n", rd_kafka_err2str(e));
                rc = 1;
                break;
            }
            len += (size_t) snprintf(ids + len, idcap - len, "%s%s", i ? "," : "", id);
        }
        ids[len++] = '}';
        ids[len] = '\0';
        PQclear(res);
        if (rc != 0)
            break;
        while (rd_kafka_flush(rk, 1000) == RD_KAFKA_RESP_ERR__TIMED_OUT && !stop)
            ;
        if (delivery_errors > 0 || rd_kafka_outq_len(rk) > 0) {
            exec_ok(conn, "ROLLBACK");
            rc = 1;
            break;
        }
        const char *params[1] = {ids};
        res = PQexecParams(conn, update_sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            fprintf(stderr, "polling-relayer: update: %s", PQerrorMessage(conn));
            PQclear(res);
            rc = 1;
            break;
        }
        PQclear(res);
        if (!exec_ok(conn, "COMMIT")) {
            rc = 1;
            break;
        }
        dispatched += n;
    }
    free(ids);
    PQfinish(conn);
    rd_kafka_flush(rk, 5000);
    rd_kafka_destroy(rk);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("dispatched=%lld cpu_ms=%ld\n", dispatched,
           (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
               (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L);
    return rc;
}
