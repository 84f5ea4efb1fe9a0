/*
 * check.c — `outbox-relay check` (see check.h): the report, its two
 * formats, the pure verdicts on settings, column types and slots, and the
 * table of checks check_run goes through. The checks' I/O is in
 * check_pg.c, check_table.c and check_kafka.c.
 */
#include "outbox_relay/ops/check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "check_internal.h"
#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/pg/pgconn.h"

#define CHECK_TEXT_MAX 4096

const char *check_status_name(enum check_status s)
{
    return s == CHECK_FAIL ? "FAIL" : s == CHECK_WARN ? "WARN" : "PASS";
}

char *check_scrub(const char *src, const char *const *secrets, size_t nsecrets, char *dst,
                  size_t cap)
{
    size_t o = 0;
    if (cap == 0)
        return dst;
    for (const char *p = src; *p && o + 1 < cap;) {
        size_t hit = 0;
        for (size_t i = 0; i < nsecrets && hit == 0; i++) {
            size_t n = secrets[i] ? strlen(secrets[i]) : 0;
            if (n > 0 && strncmp(p, secrets[i], n) == 0)
                hit = n;
        }
        if (hit > 0) {
            for (const char *s = "***"; *s && o + 1 < cap; s++)
                dst[o++] = *s;
            p += hit;
        } else {
            dst[o++] = *p++;
        }
    }
    dst[o] = '\0';
    return dst;
}

void check_report_secret(struct check_report *r, const char *secret)
{
    if (secret != NULL && *secret != '\0' && r->nsecrets < CHECK_MAX_SECRETS)
        r->secrets[r->nsecrets++] = secret;
}

static char *scrubbed_copy(const struct check_report *r, const char *s)
{
    if (s == NULL || *s == '\0')
        return NULL;
    char buf[CHECK_TEXT_MAX];
    check_scrub(s, r->secrets, r->nsecrets, buf, sizeof buf);
    return strdup(buf);
}

int check_report_add(struct check_report *r, const char *name, enum check_status status,
                     const char *detail, const char *fix)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        struct check_item *items = realloc(r->items, cap * sizeof *items);
        if (items == NULL)
            return -1;
        r->items = items;
        r->cap = cap;
    }
    struct check_item *it = &r->items[r->n];
    it->name = strdup(name);
    it->status = status;
    it->detail = scrubbed_copy(r, detail ? detail : "");
    if (it->detail == NULL)
        it->detail = strdup("");
    it->fix = scrubbed_copy(r, fix);
    if (it->name == NULL || it->detail == NULL || (fix && *fix && it->fix == NULL)) {
        free(it->name);
        free(it->detail);
        free(it->fix);
        return -1;
    }
    r->n++;
    return 0;
}

int check_report_addf(struct check_report *r, const char *name, enum check_status status,
                      const char *fix, const char *fmt, ...)
{
    char detail[CHECK_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return check_report_add(r, name, status, detail, fix);
}

void check_report_free(struct check_report *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->items[i].name);
        free(r->items[i].detail);
        free(r->items[i].fix);
    }
    free(r->items);
    r->items = NULL;
    r->n = r->cap = 0;
}

const struct check_item *check_report_find(const struct check_report *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].name, name) == 0)
            return &r->items[i];
    return NULL;
}

int check_report_exit_code(const struct check_report *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->items[i].status == CHECK_FAIL)
            return 1;
    return 0;
}

/* s with every control character (a server message's tab or newline) as
 * a space: one check, one line. */
static void put_line(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *) s; *p; p++)
        fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, out);
}

void check_format_text(const struct check_report *r, FILE *out)
{
    size_t count[3] = {0, 0, 0};
    for (size_t i = 0; i < r->n; i++) {
        const struct check_item *it = &r->items[i];
        count[it->status]++;
        fprintf(out, "%s %-22s ", check_status_name(it->status), it->name);
        put_line(out, it->detail);
        if (it->fix != NULL) {
            fputs("  fix: ", out);
            put_line(out, it->fix);
        }
        fputc('\n', out);
    }
    fprintf(out, "check: %zu passed, %zu warning%s, %zu failed\n", count[CHECK_PASS],
            count[CHECK_WARN], count[CHECK_WARN] == 1 ? "" : "s", count[CHECK_FAIL]);
}

void check_json_escape(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
}

void check_format_json(const struct check_report *r, FILE *out)
{
    fputc('[', out);
    for (size_t i = 0; i < r->n; i++) {
        const struct check_item *it = &r->items[i];
        fputs(i ? ",\n {\"check\": \"" : "\n {\"check\": \"", out);
        check_json_escape(out, it->name);
        fprintf(out, "\", \"status\": \"%s\", \"detail\": \"", check_status_name(it->status));
        check_json_escape(out, it->detail);
        if (it->fix != NULL) {
            fputs("\", \"fix\": \"", out);
            check_json_escape(out, it->fix);
            fputs("\"}", out);
        } else {
            fputs("\", \"fix\": null}", out);
        }
    }
    fputs(r->n ? "\n]\n" : "]\n", out);
}

/* --- verdicts ---------------------------------------------------------- */

enum check_status check_classify_keep_size(long long mb)
{
    return mb < 0 ? CHECK_WARN : CHECK_PASS;
}

enum check_status check_classify_sender_timeout(long long timeout_ms, double status_interval)
{
    if (timeout_ms <= 0)
        return CHECK_WARN;
    double t = (double) timeout_ms / 1000.0;
    if (status_interval >= t)
        return CHECK_FAIL;
    if (status_interval > t / 2)
        return CHECK_WARN;
    return CHECK_PASS;
}

enum check_status check_classify_free(long max, long used, bool need_new)
{
    long free_n = max - used;
    if (need_new && free_n < 1)
        return CHECK_FAIL;
    if (max < 1)
        return CHECK_FAIL;
    return CHECK_PASS;
}

enum check_status check_classify_topics(size_t needed, size_t missing, int auto_create)
{
    if (missing > 0)
        return auto_create == 1 ? CHECK_PASS : auto_create == 0 ? CHECK_FAIL : CHECK_WARN;
    if (needed == 0)
        return auto_create == 1 ? CHECK_PASS : CHECK_WARN;
    return CHECK_PASS;
}

long long check_record_limit(long long client_max, long long broker_max, long long topic_max,
                             const char **which)
{
    long long limit = client_max;
    *which = "the producer's message.max.bytes";
    if (broker_max >= 0 && broker_max < limit)
        limit = broker_max, *which = "the broker's message.max.bytes";
    if (topic_max >= 0 && topic_max < limit)
        limit = topic_max, *which = "max.message.bytes of a topic";
    return limit;
}

enum check_status check_record_fits(long long max_payload, long long limit)
{
    return max_payload + CHECK_RECORD_OVERHEAD > limit ? CHECK_FAIL : CHECK_PASS;
}

enum check_status check_classify_replication(int rf, int min_isr)
{
    if (min_isr > rf)
        return CHECK_FAIL;
    if (rf < 3 || min_isr < 2)
        return CHECK_WARN;
    return CHECK_PASS;
}

const char *check_column_name(enum check_column c)
{
    const struct outbox_columns_map *m = &OUTBOX_DEFAULT_COLUMNS;
    const char *names[CHECK_NCOLUMNS] = {m->id, m->aggregate_id, m->type, m->payload,
                                         m->created_at};
    return c < CHECK_NCOLUMNS ? names[c] : "?";
}

const char *check_mapped_column(const struct outbox_columns_map *m, enum check_column c)
{
    switch (c) {
    case CHECK_COL_ID: return m->id;
    case CHECK_COL_AGGREGATE_ID: return m->aggregate_id;
    case CHECK_COL_TYPE: return m->type;
    case CHECK_COL_PAYLOAD: return m->payload;
    case CHECK_COL_CREATED_AT: return m->created_at;
    default: return NULL;
    }
}

int check_payload_size_sql(const char *qcolumn, const char *type, char *buf, size_t cap)
{
    bool raw = type != NULL && strcmp(type, "bytea") == 0;
    int n = snprintf(buf, cap, raw ? "octet_length(%s)" : "octet_length(%s::text)", qcolumn);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

const char *check_column_type(enum check_column c)
{
    static const char *const types[CHECK_NCOLUMNS] = {
        "bigint", "uuid", "text", "jsonb", "timestamp with time zone"};
    return c < CHECK_NCOLUMNS ? types[c] : "?";
}

static bool one_of(const char *type, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(type, *list) == 0)
            return true;
    return false;
}

/* Types wal2json prints as a JSON number, boolean or raw JSON, not as a
 * string. */
static const char *const W2J_NOT_STRING[] = {"smallint", "integer", "bigint", "numeric",
                                             "real", "double precision", "oid", "boolean",
                                             "json", "jsonb", NULL};
static const char *const INTEGER_TYPES[] = {"smallint", "integer", "bigint", NULL};
static const char *const TEXT_TYPES[] = {"text", "character varying", "character", NULL};

/* format_type prints a typmod: "character varying(64)", "numeric(20,0)". */
static void base_type(const char *type, char *buf, size_t cap)
{
    size_t n = strcspn(type, "(");
    while (n > 0 && type[n - 1] == ' ')
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, type, n);
    buf[n] = '\0';
    /* "timestamp(3) with time zone" */
    const char *paren = strchr(type, ')');
    if (paren != NULL && strncmp(buf, "timestamp", 9) == 0 && n + strlen(paren + 1) < cap)
        strcat(buf, paren + 1);
}

enum check_status check_classify_column(enum check_column c, const char *type,
                                        enum relay_plugin plugin, char *why, size_t whylen)
{
    char t[96];
    base_type(type, t, sizeof t);
    bool w2j = plugin == PLUGIN_WAL2JSON;
    const char *name = check_column_name(c);
    switch (c) {
    case CHECK_COL_ID:
        if (one_of(t, INTEGER_TYPES) || strcmp(t, "uuid") == 0)
            break;
        if (one_of(t, TEXT_TYPES)) {
            snprintf(why, whylen, "\"%s\" is %s: taken as is; a value over 63 bytes makes its "
                     "event poison", name, type);
            return CHECK_WARN;
        }
        if (strcmp(t, "numeric") == 0) {
            snprintf(why, whylen, "\"%s\" is %s: every value must be 1 to 19 digits, or its "
                     "event is refused", name, type);
            return CHECK_WARN;
        }
        snprintf(why, whylen, "\"%s\" is %s: the relayer needs an integer, uuid or text event "
                 "id", name, type);
        return CHECK_FAIL;
    case CHECK_COL_AGGREGATE_ID:
    case CHECK_COL_TYPE:
        if (w2j && one_of(t, W2J_NOT_STRING)) {
            snprintf(why, whylen, "\"%s\" is %s, which wal2json sends as a JSON %s, not a "
                     "string: every event would be refused (use text%s)", name, type,
                     one_of(t, INTEGER_TYPES) || strcmp(t, "numeric") == 0 ||
                             strcmp(t, "real") == 0 || strcmp(t, "double precision") == 0 ||
                             strcmp(t, "oid") == 0
                         ? "number"
                     : strcmp(t, "boolean") == 0 ? "boolean"
                                                 : "value",
                     c == CHECK_COL_AGGREGATE_ID ? " or uuid" : "");
            return CHECK_FAIL;
        }
        if (c == CHECK_COL_TYPE && strcmp(t, "bytea") == 0) {
            snprintf(why, whylen, "\"%s\" is bytea: topics would be named from its hex text",
                     name);
            return CHECK_FAIL;
        }
        break;
    case CHECK_COL_PAYLOAD:
        if (strcmp(t, "jsonb") == 0 || strcmp(t, "json") == 0)
            break;
        if (strcmp(t, "bytea") == 0 || one_of(t, TEXT_TYPES))
            break; /* published as the bytes, or the text, as is (layout.h) */
        snprintf(why, whylen, "\"%s\" is %s: published as its text, never checked to be JSON",
                 name, type);
        return CHECK_WARN;
    case CHECK_COL_CREATED_AT:
        if (strcmp(t, "timestamp with time zone") == 0)
            break;
        if (strcmp(t, "timestamp without time zone") == 0 || strcmp(t, "timestamp") == 0) {
            snprintf(why, whylen, "\"%s\" is %s: the created_at header carries no UTC offset "
                     "and the reaper compares it with now() in the server's time zone", name,
                     type);
            return CHECK_WARN;
        }
        snprintf(why, whylen, "\"%s\" is %s: the reaper needs a timestamp (created_at < now() "
                 "- retention) and the created_at header one to print", name, type);
        return CHECK_FAIL;
    default:
        break;
    }
    snprintf(why, whylen, "\"%s\" %s", name, type);
    return CHECK_PASS;
}

enum check_status check_classify_slot(const struct check_slot_row *row, const char *slot,
                                      const char *plugin, long max_lag_bytes, char *detail,
                                      size_t dlen, char *fix, size_t flen)
{
    fix[0] = '\0';
    if (row->slot_type == NULL || strcmp(row->slot_type, "logical") != 0) {
        snprintf(detail, dlen, "slot %s is a %s slot, not a logical one", slot,
                 row->slot_type ? row->slot_type : "?");
        snprintf(fix, flen, "choose another --slot");
        return CHECK_FAIL;
    }
    if (row->plugin == NULL || strcmp(row->plugin, plugin) != 0) {
        snprintf(detail, dlen, "slot %s has output plugin %s, the relayer runs with --plugin %s",
                 slot, row->plugin ? row->plugin : "?", plugin);
        snprintf(fix, flen, "run with --plugin %s, or drop the slot if nothing else uses it "
                 "(SELECT pg_drop_replication_slot('%s')), or choose another --slot",
                 row->plugin ? row->plugin : "?", slot);
        return CHECK_FAIL;
    }
    if (!row->same_database) {
        snprintf(detail, dlen, "slot %s belongs to database %s, not the one --dsn connects to",
                 slot, row->database ? row->database : "?");
        snprintf(fix, flen, "connect to database %s or choose another --slot",
                 row->database ? row->database : "?");
        return CHECK_FAIL;
    }
    const char *ws = row->wal_status ? row->wal_status : "unknown";
    char lag[48];
    if (row->lag_bytes >= 0)
        snprintf(lag, sizeof lag, "%lld bytes", row->lag_bytes);
    else
        snprintf(lag, sizeof lag, "unknown");
    char held[64];
    if (row->active)
        snprintf(held, sizeof held, "active (PID %s)", row->active_pid ? row->active_pid : "?");
    else
        snprintf(held, sizeof held, "inactive");
    snprintf(detail, dlen, "slot %s (%s): %s, wal_status %s, lag %s", slot, plugin, held, ws,
             lag);
    if (row->invalidation_reason != NULL) {
        snprintf(detail, dlen, "slot %s (%s) was invalidated by the server: "
                 "invalidation_reason %s, wal_status %s", slot, plugin, row->invalidation_reason,
                 ws);
        snprintf(fix, flen, "events committed since its confirmed position may be missing: "
                 "drop it and start with --recreate-slot --backfill pending; %s",
                 strcmp(row->invalidation_reason, "idle_timeout") == 0
                     ? "set idle_replication_slot_timeout to 0 (off) or above the longest "
                       "time the relayer may be stopped"
                     : "raise max_slot_wal_keep_size");
        return CHECK_FAIL;
    }
    if (strcmp(ws, "lost") == 0) {
        snprintf(fix, flen, "WAL the slot needs was removed and events may be missing: drop "
                 "it and start with --recreate-slot --backfill pending; raise "
                 "max_slot_wal_keep_size");
        return CHECK_FAIL;
    }
    if (strcmp(ws, "unreserved") == 0) {
        snprintf(fix, flen, "WAL the slot needs is past max_slot_wal_keep_size and goes at the "
                 "next checkpoint: start the relayer now, or raise max_slot_wal_keep_size");
        return CHECK_WARN;
    }
    if (max_lag_bytes > 0 && row->lag_bytes > max_lag_bytes) {
        snprintf(fix, flen, "the lag is above --max-lag-bytes %ld: is a relayer streaming from "
                 "it? (outbox-relay status)", max_lag_bytes);
        return CHECK_WARN;
    }
    return CHECK_PASS;
}

/* --- the run ----------------------------------------------------------- */

PGresult *check_query(struct check_ctx *c, ExecStatusType want, const char *sql, int nparams,
                      const char *const *params, char *msg, size_t msglen)
{
    PGresult *res = pgconn_exec(c->conn, sql, nparams, params, CHECK_QUERY_TIMEOUT, msg,
                                msglen);
    if (res != NULL && PQresultStatus(res) == want)
        return res;
    if (res != NULL)
        pgconn_result_error(res, msg, msglen);
    PQclear(res);
    return NULL;
}

/* In the order a person fixes things: the server, the role, then what
 * the relayer will create or read. */
static void (*const checks[])(struct check_ctx *) = {
    /* slots and senders are counted before the role check opens (and
     * closes) a replication connection, whose WAL sender may linger */
    check_server,         check_wal_level,      check_replication_slots, check_wal_senders,
    check_role,           check_plugin,         check_keep_size,     check_sender_timeout,
    check_table,          check_columns,        check_logged,        check_indexes,
    check_privileges,     check_bookkeeping,    check_slot,          check_publication,
    check_contents,       check_kafka,
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
