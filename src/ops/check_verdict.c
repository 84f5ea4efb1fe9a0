/*
 * check_verdict.c — the pure verdicts of `outbox-relay check` on settings,
 * column types, slots, record sizes and replication (see check_verdict.h).
 */
#include "outbox_relay/ops/check_verdict.h"

#include <stdio.h>
#include <string.h>

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

enum check_status check_classify_txn_timeout(long long ours_ms, long long broker_max_ms)
{
    if (broker_max_ms < 0)
        return CHECK_WARN;
    if (ours_ms > broker_max_ms)
        return CHECK_FAIL;
    return ours_ms > broker_max_ms - broker_max_ms / 10 ? CHECK_WARN : CHECK_PASS;
}

enum check_status check_classify_progress_policy(const char *policy)
{
    if (policy == NULL)
        return CHECK_PASS;
    return strstr(policy, "compact") != NULL ? CHECK_PASS : CHECK_FAIL;
}
