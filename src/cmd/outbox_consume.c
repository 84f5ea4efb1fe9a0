/*
 * outbox_consume.c — outbox-consume: apply the events of Kafka topics to
 * PostgreSQL exactly once with one SQL statement (--apply), using the
 * consumer library (consumer.h). Parses the options, installs signal
 * handlers, prepares the statement on every connection. The only place that
 * exits.
 *
 * The --apply statement is prepared with parameter types
 *   $1 text (event_id), $2 unspecified (aggregate_id: PostgreSQL infers it,
 *   e.g. uuid when compared with a uuid column), $3 text (type),
 *   $4 jsonb (payload), $5 text (topic);
 * when PostgreSQL cannot infer $2 (it is unused, or used where any type
 * fits) it is prepared again with $2 as text.
 */
#include <stdio.h>
#include <string.h>

#include "outbox_relay/consume/consume_config.h"
#include "outbox_relay/consume/consumer.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/base/signals.h"

extern char **environ;

#define APPLY_STMT "outbox_consume_apply"
#define TEXTOID 25
#define JSONBOID 3802

struct apply_ctx {
    const char *sql;
    bool bad_sql; /* the statement does not prepare: a configuration error */
};

static int prepare_apply(void *arg, PGconn *conn, struct consumer_failure *why)
{
    struct apply_ctx *ctx = arg;
    Oid types[5] = {TEXTOID, 0, TEXTOID, JSONBOID, TEXTOID};
    PGresult *res = PQprepare(conn, APPLY_STMT, ctx->sql, 5, types);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state != NULL && strcmp(state, "42P18") == 0) { /* indeterminate_datatype */
            PQclear(res);
            types[1] = TEXTOID;
            res = PQprepare(conn, APPLY_STMT, ctx->sql, 5, types);
        }
    }
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        consumer_failure_from_result(why, res, conn);
        PQclear(res);
        if (PQstatus(conn) == CONNECTION_OK) {
            ctx->bad_sql = true;
            char msg[CONSUMER_ERRLEN];
            snprintf(msg, sizeof msg, "--apply statement does not prepare: %.800s (SQLSTATE %s); "
                     "it may use $1 event_id, $2 aggregate_id, $3 type, $4 payload (jsonb), "
                     "$5 topic", why->message, why->sqlstate);
            snprintf(why->message, sizeof why->message, "%s", msg);
        }
        return CONSUMER_FAIL;
    }
    PQclear(res);
    return CONSUMER_OK;
}

static int apply(void *arg, PGconn *conn, const struct consumer_message *msg,
                 struct consumer_failure *why)
{
    if (msg->payload != NULL && strlen(msg->payload) != msg->payload_len) {
        snprintf(why->sqlstate, sizeof why->sqlstate, "22P05"); /* untranslatable_character */
        snprintf(why->message, sizeof why->message, "payload contains NUL bytes");
        return CONSUMER_FAIL;
    }
    const char *values[5] = {msg->event_id, msg->aggregate_id, msg->type, msg->payload,
                             msg->topic};
    PGresult *res = PQexecPrepared(conn, APPLY_STMT, 5, values, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(res);
        return CONSUMER_OK;
    }
    consumer_failure_from_result(why, res, conn);
    PQclear(res);
    return CONSUMER_FAIL;
}

int main(int argc, char **argv)
{
    struct consume_config cfg;
    char err[CONSUMER_ERRLEN];
    int code;

    enum config_result cr = consume_config_load(&cfg, argc, argv, environ, err, sizeof err);
    if (cr != CONFIG_OK) {
        if (cr == CONFIG_ERROR)
            fprintf(stderr, "outbox-consume: %s\n", err);
        consume_config_free(&cfg);
        return cr == CONFIG_EXIT ? 0 : 2;
    }
    log_setup(cfg.log_level, cfg.log_format);
    consume_config_register_secrets(&cfg);

    volatile sig_atomic_t *stop = signals_install_stop();

    struct apply_ctx ctx = {.sql = cfg.apply};
    struct consumer_options o;
    memset(&o, 0, sizeof o);
    consume_config_to_options(&cfg, &o);
    o.handler = apply;
    o.on_connect = prepare_apply;
    o.apply_stmt = APPLY_STMT; /* pipelined batches; apply() for one by one */
    o.arg = &ctx;

    struct consumer *c = consumer_new(&o, err, sizeof err);
    if (c == NULL) {
        log_error("%s", err);
        code = 2;
    } else {
        int rc = consumer_run(c, stop);
        if (rc != CONSUMER_OK)
            log_error("%s", consumer_errstr(c));
        /* 2: a setup that can never work (the statement, processed_events) */
        code = rc == CONSUMER_OK ? 0 : (ctx.bad_sql || rc == CONSUMER_SETUP ? 2 : 1);
        consumer_free(c);
    }
    consume_config_free(&cfg);
    log_shutdown();
    return code;
}
