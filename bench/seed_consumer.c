/*
 * seed_consumer.c — the benchmark's baseline for outbox-consume: the
 * idempotent consumer as the seed describes it (sql/002_processed_events.sql,
 * sql/examples/orders.sql), one PostgreSQL transaction per event:
 *
 *   BEGIN;
 *   INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2)
 *       ON CONFLICT DO NOTHING;          -- no row: a duplicate, skip
 *   <the --apply statement>;             -- $1..$5 as outbox-consume's
 *   COMMIT;
 *   then the message's offset is committed (asynchronously: the baseline is
 *   not charged a broker round trip per event).
 *
 * Both statements are prepared once, so the baseline is not charged a parse
 * per event either. The event id is the event_id header (every event the
 * benchmark produces has one). Nothing else of outbox-consume: no batches,
 * no savepoints, no poison handling (a failing event stops it, exit 1).
 *
 * Usage: bench-seed-consumer --brokers HOST:PORT --group G --topics T
 *                            --dsn CONNINFO --consumer NAME --apply SQL
 * Runs until SIGTERM/SIGINT; says "assigned" on stderr when it gets its
 * partitions; at exit prints "applied=N duplicates=N cpu_ms=N" on stdout.
 */
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void) sig;
    stop = 1;
}

static const char *arg(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    fprintf(stderr, "bench-seed-consumer: %s is required\n", name);
    exit(2);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    (void) opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        fprintf(stderr, "assigned %d partition(s)\n", parts->cnt);
        rd_kafka_assign(rk, parts);
    } else {
        rd_kafka_assign(rk, NULL);
    }
}

/* Runs a prepared statement; 1 when it succeeded, the affected rows in *rows. */
static int run(PGconn *pg, const char *stmt, int n, const char *const *vals, long *rows)
{
    PGresult *r = PQexecPrepared(pg, stmt, n, vals, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "bench-seed-consumer: %s: %s", stmt, PQresultErrorMessage(r));
    else if (rows != NULL)
        *rows = strtol(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return ok;
}

static int exec_simple(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "bench-seed-consumer: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

static char *dup_span(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s == NULL)
        abort();
    if (n > 0)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

int main(int argc, char **argv)
{
    const char *brokers = arg(argc, argv, "--brokers"), *group = arg(argc, argv, "--group");
    const char *topic = arg(argc, argv, "--topics"), *dsn = arg(argc, argv, "--dsn");
    const char *name = arg(argc, argv, "--consumer"), *apply = arg(argc, argv, "--apply");
    char err[512];
    int rc = 1;
    unsigned long applied = 0, dups = 0;

    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    PGconn *pg = PQconnectdb(dsn);
    if (PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "bench-seed-consumer: %s", PQerrorMessage(pg));
        PQfinish(pg);
        return 1;
    }
    /* $2 left to PostgreSQL, $4 jsonb, as outbox-consume prepares --apply. */
    Oid types[5] = {25, 0, 25, 3802, 25};
    PGresult *r = PQprepare(pg, "dedup", "INSERT INTO processed_events (consumer, event_id) "
                            "VALUES ($1, $2) ON CONFLICT DO NOTHING", 2, NULL);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    r = PQprepare(pg, "apply", apply, 5, types);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) { /* $2 unused: as text */
        PQclear(r);
        types[1] = 25;
        r = PQprepare(pg, "apply", apply, 5, types);
    }
    ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) {
        fprintf(stderr, "bench-seed-consumer: prepare: %s", PQerrorMessage(pg));
        PQclear(r);
        PQfinish(pg);
        return 2;
    }
    PQclear(r);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err) ||
        rd_kafka_conf_set(conf, "group.id", group, err, sizeof err) ||
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err) ||
        rd_kafka_conf_set(conf, "session.timeout.ms", "10000", err, sizeof err) ||
        rd_kafka_conf_set(conf, "heartbeat.interval.ms", "1000", err, sizeof err)) {
        fprintf(stderr, "bench-seed-consumer: %s\n", err);
        return 2;
    }
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "bench-seed-consumer: %s\n", err);
        return 2;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *t = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(t, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, t);
    rd_kafka_topic_partition_list_destroy(t);

    while (!stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_headers_t *h = NULL;
        const void *v = NULL;
        size_t vn = 0;
        if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR ||
            rd_kafka_header_get_last(h, "event_id", &v, &vn) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "bench-seed-consumer: a message without event_id\n");
            rd_kafka_message_destroy(m);
            goto out;
        }
        char *id = dup_span(v, vn), *type = NULL;
        if (rd_kafka_header_get_last(h, "event_type", &v, &vn) == RD_KAFKA_RESP_ERR_NO_ERROR)
            type = dup_span(v, vn);
        char *key = m->key ? dup_span(m->key, m->key_len) : NULL;
        char *payload = m->payload ? dup_span(m->payload, m->len) : NULL;
        const char *dv[2] = {name, id};
        const char *av[5] = {id, key, type, payload, rd_kafka_topic_name(m->rkt)};
        long inserted = 0;
        ok = exec_simple(pg, "BEGIN") && run(pg, "dedup", 2, dv, &inserted) &&
             (inserted == 0 || run(pg, "apply", 5, av, NULL)) && exec_simple(pg, "COMMIT");
        free(id);
        free(type);
        free(key);
        free(payload);
        if (!ok) {
            rd_kafka_message_destroy(m);
            goto out;
        }
        if (inserted)
            applied++;
        else
            dups++;
        rd_kafka_commit_message(rk, m, 1);
        rd_kafka_message_destroy(m);
    }
    rc = 0;
out:
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    PQfinish(pg);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("applied=%lu duplicates=%lu cpu_ms=%ld\n", applied, dups,
           (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
               (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L);
    return rc;
}
