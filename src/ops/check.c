/*
 * check.c — `outbox-relay check` (see check.h): the table of checks
 * check_run goes through, in order, and the report printed at the end.
 * The checks' I/O is in check_pg.c, check_table.c, check_kafka.c and check_eos.c; the
 * report (check_report.c) and the verdicts (check_verdict.c) are pure, and
 * the checks call them, never this file.
 */
#include "outbox_relay/ops/check.h"

#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "check_internal.h"

/* In the order a person fixes things: the server, the role, then what
 * the relayer will create or read. */
static void (*const checks[])(struct check_ctx *) = {
    /* slots and senders are counted before the role check opens (and
     * closes) a replication connection, whose WAL sender may linger */
    check_server,         check_wal_level,      check_replication_slots, check_wal_senders,
    check_role,           check_plugin,         check_keep_size,     check_sender_timeout,
    check_table,          check_columns,        check_logged,        check_indexes,
    check_privileges,     check_bookkeeping,    check_slot,          check_publication,
    check_failover,       check_contents,       check_kafka,         check_exactly_once,
};

/* The DSN's password (PQconninfoParse), for scrubbing; malloc'ed or NULL. */
static char *dsn_password(const char *dsn)
{
    char *errmsg = NULL, *out = NULL;
    PQconninfoOption *opts = PQconninfoParse(dsn, &errmsg);
    PQfreemem(errmsg);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && *o->val)
            out = strdup(o->val);
    PQconninfoFree(opts);
    return out;
}

int check_run(const struct relay_config *cfg, enum report_format format, FILE *out)
{
    struct check_report report = {0};
    struct check_ctx ctx = {.cfg = cfg, .report = &report, .max_payload = -1,
                            .plugin = cfg->plugin};
    char *password = dsn_password(cfg->dsn);
    check_report_secret(&report, password);
    for (size_t i = 0; i < cfg->nkafka; i++)
        if (strstr(cfg->kafka[i].key, "password") || strstr(cfg->kafka[i].key, "secret"))
            check_report_secret(&report, cfg->kafka[i].value);

    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        checks[i](&ctx);

    if (format == REPORT_FORMAT_JSON)
        check_format_json(&report, out);
    else
        check_format_text(&report, out);
    fflush(out);
    int code = check_report_exit_code(&report);
    if (ctx.conn != NULL)
        PQfinish(ctx.conn);
    for (size_t i = 0; i < ctx.ntopics; i++)
        free(ctx.topics[i]);
    check_report_free(&report);
    free(password);
    return code;
}
