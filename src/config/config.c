/*
 * config.c — the relayer's option table, its --config file and its checks
 * (see config.h). Adding an option means adding one row to `options`; the
 * machinery that reads a table (kinds, environment, command line, --help
 * rows) and the parsers both programs share are options.c, which knows
 * nothing of this file.
 */
#include "outbox_relay/config/config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "outbox_relay/kafka/event_headers.h"
#include "outbox_relay/base/options.h"
#include "outbox_relay/kafka/kafka_conf.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/kafka/topic.h"

_Static_assert(sizeof(enum poison_policy) == sizeof(int), "OPT_ENUM stores an int");
_Static_assert(sizeof(enum relay_plugin) == sizeof(int), "OPT_ENUM stores an int");
_Static_assert(sizeof(enum report_format) == sizeof(int), "OPT_ENUM stores an int");

static const struct option_word poison_words[] = {
    {"halt", POISON_HALT}, {"dead-letter", POISON_DEAD_LETTER}, {NULL, 0}};
static const struct option_word delivery_words[] = {
    {"at-least-once", DELIVERY_AT_LEAST_ONCE}, {"exactly-once", DELIVERY_EXACTLY_ONCE},
    {NULL, 0}};
static const struct option_word plugin_words[] = {
    {"auto", PLUGIN_AUTO}, {"wal2json", PLUGIN_WAL2JSON}, {"pgoutput", PLUGIN_PGOUTPUT},
    {NULL, 0}};
static const struct option_word format_words[] = {
    {"text", REPORT_FORMAT_TEXT}, {"json", REPORT_FORMAT_JSON}, {NULL, 0}};
static const struct option_word backfill_words[] = {{"none", 0}, {"pending", 1}, {NULL, 0}};
static const struct option_word layout_words[] = {
    {"default", LAYOUT_DEFAULT}, {"debezium", LAYOUT_DEBEZIUM}, {NULL, 0}};
_Static_assert(sizeof(enum relay_layout) == sizeof(int), "OPT_ENUM stores an int");
static const struct option_word envelope_words[] = {
    {"plain", EVENT_ENVELOPE_PLAIN}, {"cloudevents", EVENT_ENVELOPE_CLOUDEVENTS}, {NULL, 0}};

#define OFF(field) offsetof(struct relay_config, field)
/* A row: name, kind, field, default (NULL: none), placeholder in --help
 * (NULL: none), help text; OPT_WORDS adds the words an OPT_ENUM or OPT_FLAG
 * option takes. */
#define OPT(name, kind, field, defval, arg, help) \
    {name, kind, OFF(field), defval, arg, help, NULL, 0}
#define OPT_WORDS(name, kind, field, defval, arg, help, words) \
    {name, kind, OFF(field), defval, arg, help, words, 0}

static const struct option_def options[] = {
    OPT("dsn", OPT_STR, dsn, NULL, "CONNINFO",
        "PostgreSQL connection string (key=value or URI); required"),
    OPT("brokers", OPT_STR, brokers, NULL, "HOST:PORT[,...]",
        "Kafka bootstrap servers; required to run"),
    OPT("slot", OPT_STR, slot, "outbox_relay", "NAME",
        "logical replication slot (created with --plugin if missing)"),
    OPT_WORDS("plugin", OPT_ENUM, plugin, "auto", "auto|wal2json|pgoutput",
              "output plugin: wal2json (format-version 2) or PostgreSQL's built-in pgoutput; "
              "auto: an existing slot keeps its own, a new one gets wal2json where the server "
              "allows and has it, else pgoutput",
              plugin_words),
    OPT("publication", OPT_STR, publication, "outbox_relay", "NAME",
        "pgoutput: the publication of the outbox table (created if missing and allowed)"),
    OPT("table", OPT_STR, table, "public.events_outbox", "SCHEMA.TABLE",
        "the outbox table whose INSERTs are relayed"),
    OPT("topic", OPT_STR, topic, NULL, "TEMPLATE",
        "topic: fixed name, or a template with {type}, {prefix} (type before the first '.') "
        "and {column} of the table (default: {prefix}; with --layout debezium "
        "outbox.event.{aggregatetype})"),
    OPT_WORDS("layout", OPT_ENUM, layout, "default", "default|debezium",
              "the outbox table's column names: ours, or Debezium's outbox event router table "
              "(id uuid, aggregatetype, aggregateid, type, payload)", layout_words),
    OPT("column-id", OPT_STR, column_id, NULL, "COLUMN",
        "the event id column: bigint, uuid or text (default: id)"),
    OPT("column-key", OPT_STR, column_key, NULL, "COLUMN",
        "the Kafka key column, none for no key (default: aggregate_id; debezium: aggregateid)"),
    OPT("column-type", OPT_STR, column_type, NULL, "COLUMN",
        "the event type column (default: type)"),
    OPT("column-payload", OPT_STR, column_payload, NULL, "COLUMN",
        "the value column: jsonb, json, text or bytea (raw bytes) (default: payload)"),
    OPT("column-created-at", OPT_STR, column_created_at, NULL, "COLUMN",
        "the timestamptz column, none for none: header created_at and the reaper's age "
        "(default: created_at; debezium: none)"),
    OPT("header-column", OPT_LIST, header_columns, NULL, "NAME[:HEADER]",
        "also send column NAME as Kafka header HEADER (default: NAME), repeatable; a NULL "
        "column adds no header"),
    OPT_WORDS("envelope", OPT_ENUM, envelope, "plain", "plain|cloudevents",
              "plain: headers event_id, event_type, created_at; cloudevents: CloudEvents 1.0 "
              "Kafka binary mode (ce_id, ce_source, ce_type, ce_time...), value unchanged",
              envelope_words),
    OPT("ce-source", OPT_STR, ce_source, NULL, "URI-REFERENCE",
        "--envelope cloudevents: ce_source (default /postgresql/<database>/<schema>.<table>)"),
    OPT("message-prefix", OPT_STR, message_prefix, "outbox", "PREFIX",
        "also relay transactional logical messages with this prefix (\"\" turns it off)"),
    OPT("max-inflight", OPT_LONG, max_inflight, "10000", "N",
        "at most N events produced and not yet delivered; reading WAL pauses beyond"),
    OPT("max-inflight-bytes", OPT_SIZE, max_inflight_bytes, "16M", "BYTES",
        "at most this many payload bytes in flight (K/M/G suffixes)"),
    OPT("status-interval", OPT_SECONDS, status_interval, "10", "SECONDS",
        "interval of standby status updates to the server"),
    OPT("wal-receiver-timeout", OPT_SECONDS, wal_receiver_timeout, "60", "SECONDS",
        "drop and reconnect the replication connection when nothing arrived for this long; "
        "a keepalive is asked for at half of it (0 = never)"),
    OPT("shutdown-timeout", OPT_SECONDS, shutdown_timeout, "30", "SECONDS",
        "on SIGTERM, how long to wait for outstanding deliveries"),
    OPT("reconnect-max", OPT_SECONDS, reconnect_max, "30", "SECONDS",
        "cap of the exponential reconnect backoff"),
    OPT_WORDS("on-poison", OPT_ENUM, on_poison, "halt", "halt|dead-letter",
              "what to do with an event no retry can deliver", poison_words),
    OPT("dead-letter-topic", OPT_STR, dead_letter_topic, "outbox.dead-letter", "TOPIC",
        "where --on-poison dead-letter sends poison events"),
    OPT_WORDS("delivery", OPT_ENUM, delivery, "at-least-once", "at-least-once|exactly-once",
              "at-least-once: the slot is confirmed on delivery reports, a crash can send "
              "events again; exactly-once: Kafka transactions with a progress record, read "
              "them with isolation.level=read_committed (docs/how-it-works.md)",
              delivery_words),
    OPT("progress-topic", OPT_STR, progress_topic, "__outbox_relay_progress", "TOPIC",
        "exactly-once: the compacted topic of progress records (created if missing)"),
    OPT("transaction-max-events", OPT_LONG, transaction_max_events, "5000", "N",
        "exactly-once: commit the Kafka transaction at the first PostgreSQL commit after N "
        "events"),
    OPT("transaction-max-ms", OPT_LONG, transaction_max_ms, "100", "MS",
        "exactly-once: ... or once it has been open this many milliseconds"),
    OPT("retention", OPT_STR, retention, "7 days", "INTERVAL",
        "reaper: delete delivered outbox rows older than this (PostgreSQL interval; 0 = off)"),
    OPT("reap-batch", OPT_LONG, reap_batch, "5000", "N", "reaper: rows per DELETE batch"),
    OPT("reap-interval", OPT_SECONDS, reap_interval, "60", "SECONDS",
        "reaper: pause between runs"),
    OPT("reap-pause", OPT_SECONDS, reap_pause, "0.1", "SECONDS",
        "reaper: pause between batches"),
    OPT("metrics-addr", OPT_STR, metrics_addr, NULL, "HOST:PORT",
        "serve /metrics, /healthz and /readyz over HTTP (off by default)"),
    OPT("heartbeat-interval", OPT_SECONDS, heartbeat_interval, "0", "SECONDS",
        "emit a non-transactional logical message this often so an idle slot advances (0 = off)"),
    OPT("max-lag-bytes", OPT_SIZE, max_lag_bytes, "1G", "BYTES",
        "/readyz and `status`: slot lag above this is unhealthy"),
    OPT("max-age", OPT_SECONDS, max_age, "300", "SECONDS",
        "`status`: confirmation lagging more than this is unhealthy"),
    OPT("takeover-after", OPT_SECONDS, takeover_after, "0", "SECONDS",
        "standby: terminate the slot's walsender when its client has been silent this long "
        "(0 = wait for the server's wal_sender_timeout)"),
    OPT("failover-slot", OPT_BOOL, failover_slot, "false", "true|false",
        "create the slot with FAILOVER so a standby keeps a synced copy and the relayer "
        "follows a promotion (PostgreSQL 17+; --dsn with target_session_attrs=read-write)"),
    OPT("primary-dsn", OPT_STR, primary_dsn, NULL, "DSN",
        "decoding on a standby (--dsn a hot standby, PostgreSQL 16+): the primary, for the "
        "reaper, the heartbeat and pg_log_standby_snapshot() while the slot is created"),
    OPT("recreate-slot", OPT_BOOL, recreate_slot, "false", "true|false",
        "create the slot even though an earlier one made by outbox-relay was dropped or lost "
        "(events committed meanwhile may be missing; see --backfill)"),
    OPT_WORDS("backfill", OPT_FLAG, backfill_pending, "none", "none|pending",
              "when creating the slot, first publish the rows a polling relayer left undispatched",
              backfill_words),
    OPT("log-level", OPT_LOGLEVEL, log_level, "info", "debug|info|warn|error", "log level"),
    OPT_WORDS("log-format", OPT_ENUM, log_format, "text", "text|json", "log line format",
              option_log_formats),
    OPT_WORDS("format", OPT_ENUM, format, "text", "text|json",
              "`check`: one line per check, or a JSON array of {check, status, detail, fix}",
              format_words),
    /* Found before anything else is read (find_config_path); the other
     * sources skip it. */
    {"config", OPT_STR, OFF(config_file), NULL, "FILE",
     "read `name = value` lines (kafka.<property> for librdkafka)", NULL, OPT_READ_FIRST},
};

static void print_help(const char *prog);
static int set_kafka_arg(void *cfg, const char *kv, char *err, size_t errlen);

/* --version: the libraries this binary runs with. */
static void print_libraries(void)
{
    kafka_conf_print_library();
    pgconn_print_library();
}

static const struct options_spec spec = {
    .program = "outbox-relay",
    .print_libraries = print_libraries,
    .defs = options,
    .ndefs = sizeof options / sizeof options[0],
    .env_prefix = "OUTBOX_RELAY_",
    .kafka_offset = OFF(kafka),
    .nkafka_offset = OFF(nkafka),
    .help_width = 34,
    .kafka_help = "librdkafka property (TLS, SASL, compression, linger...), repeatable;",
    .print_help = print_help,
    .set_kafka_arg = set_kafka_arg,
};

static int set_kafka(struct relay_config *cfg, const char *key, size_t keylen,
                     const char *value, char *err, size_t errlen)
{
    return options_kafka_set(cfg->kafka, &cfg->nkafka, key, keylen, value, err, errlen);
}

/* -X key=value on the command line (kv NULL: -X was the last argument) */
static int set_kafka_arg(void *cfg, const char *kv, char *err, size_t errlen)
{
    if (kv == NULL) {
        snprintf(err, errlen, "-X needs property=value");
        return -1;
    }
    const char *eq = strchr(kv, '=');
    if (eq == NULL) {
        if (options_safe_to_echo(kv))
            snprintf(err, errlen, "command line: -X expects property=value, got \"%s\"", kv);
        else
            snprintf(err, errlen, "command line: -X expects property=value, got an argument "
                     "without '=' (not shown: it may hold a secret)");
        return -1;
    }
    return set_kafka(cfg, kv, (size_t) (eq - kv), eq + 1, err, errlen);
}

static char *trim(char *s)
{
    while (isspace((unsigned char) *s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char) s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int load_file(struct relay_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read config file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    bool others_can_read = fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH);
    bool has_secret = false;

    char line[8192];
    int lineno = 0, rc = 0;
    char source[300];
    while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        snprintf(source, sizeof source, "%s:%d", path, lineno);
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "%s: expected `name = value`", source);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && ((value[0] == '"' && value[vlen - 1] == '"') ||
                          (value[0] == '\'' && value[vlen - 1] == '\''))) {
            value[vlen - 1] = '\0';
            value++;
        }
        if (strncmp(name, "kafka.", 6) == 0) {
            rc = set_kafka(cfg, name + 6, strlen(name + 6), value, err, errlen);
            if (strstr(name, "password") || strstr(name, "secret"))
                has_secret = true;
            continue;
        }
        const struct option_def *o = options_find(&spec, name, strlen(name));
        if (o == NULL || (o->flags & OPT_READ_FIRST)) {
            snprintf(err, errlen, "%s: unknown setting \"%s\" (see --help; librdkafka properties "
                     "go as kafka.<property>)", source, name);
            rc = -1;
            break;
        }
        if (strcmp(o->name, "dsn") == 0 && strstr(value, "password") != NULL)
            has_secret = true;
        if (strcmp(o->name, "dsn") == 0 && strstr(value, "://") && strchr(value, '@'))
            has_secret = true;
        rc = options_set(cfg, o, value, source, err, errlen);
    }
    fclose(f);
    if (rc == 0 && has_secret && others_can_read)
        log_warn("config file %s holds secrets and is readable by other users; "
                 "chmod 600 it", path);
    return rc;
}

static void print_help(const char *prog)
{
    printf("outbox-relay %s — stream a PostgreSQL transactional outbox to Kafka from the WAL\n\n",
           OUTBOX_RELAY_VERSION);
    printf("Usage:\n"
           "  %s [run] --dsn CONNINFO --brokers HOST:PORT [options]\n"
           "  %s reap --dsn CONNINFO [--retention INTERVAL] [--reap-batch N]\n"
           "  %s status --dsn CONNINFO [--slot NAME] [--max-lag-bytes N] [--max-age S]\n"
           "  %s check --dsn CONNINFO [--brokers HOST:PORT] [--format text|json]\n"
           "  %s --help | --version\n\n"
           "Options (each also as OUTBOX_RELAY_<NAME> in the environment and as\n"
           "`name = value` in a --config file; command line wins, then environment):\n",
           prog, prog, prog, prog, prog);
    options_print_table(&spec);
    printf("\nExit status: 0 after a clean stop (SIGTERM/SIGINT), 1 on a fatal error,\n"
           "2 on bad usage or configuration.\n");
}

int config_check_slot_name(const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63) {
        snprintf(err, errlen, "slot name must be 1 to 63 characters, got %zu", n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
            snprintf(err, errlen,
                     "slot name \"%s\" may only contain lower-case letters, digits and "
                     "underscores (PostgreSQL's rule)", name);
            return -1;
        }
    }
    return 0;
}

/* pgoutput reads publication_names as an identifier list and folds
 * unquoted names to lower case; the relayer creates the publication with
 * the name quoted. Only names both read the same way are taken. */
static int check_publication_name(const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);
    bool ok = n >= 1 && n <= 63 && !(name[0] >= '0' && name[0] <= '9');
    for (size_t i = 0; ok && i < n; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
             name[i] == '_';
    if (!ok) {
        snprintf(err, errlen, "--publication \"%s\" must be 1 to 63 lower-case letters, digits "
                 "and underscores, not starting with a digit", name);
        return -1;
    }
    return 0;
}

/* librdkafka's default for queue.buffering.max.messages (2.0 and later). */
#define RDKAFKA_QUEUE_MAX_MESSAGES 100000
#define RDKAFKA_QUEUE_MAX_KBYTES 1048576L

/* The value of a librdkafka property under any of its names ("topic."
 * prefixed or an alias), the last one given winning; NULL when unset. */
static const char *kafka_prop(const struct relay_config *cfg, const char *const *names,
                              const char **used)
{
    const char *value = NULL;
    for (size_t i = 0; i < cfg->nkafka; i++) {
        const char *k = cfg->kafka[i].key;
        if (strncmp(k, "topic.", 6) == 0)
            k += 6;
        for (const char *const *n = names; *n; n++)
            if (strcmp(k, *n) == 0)
                value = cfg->kafka[i].value, *used = cfg->kafka[i].key;
    }
    return value;
}

static bool bool_true(const char *v)
{
    return strcasecmp(v, "true") == 0 || strcasecmp(v, "t") == 0 || strcmp(v, "1") == 0;
}

/* --delivery exactly-once and what goes with it (progress_record.h). The
 * backfill publishes rows from a snapshot, outside the slot's transactions
 * and with its own checkpoints: it has no commit LSN a progress record could
 * hold, so it keeps at-least-once and is refused here rather than weakening
 * the guarantee silently. */
static int check_exactly_once(const struct relay_config *cfg, char *err, size_t errlen)
{
    static const char *const txid[] = {"transactional.id", NULL};
    const char *name = NULL, *v;
    if (cfg->transaction_max_events < 1 || cfg->transaction_max_events > 10000000) {
        snprintf(err, errlen, "--transaction-max-events must be between 1 and 10000000, got %ld",
                 cfg->transaction_max_events);
        return -1;
    }
    if (cfg->transaction_max_ms < 0 || cfg->transaction_max_ms > 600000) {
        snprintf(err, errlen, "--transaction-max-ms must be between 0 and 600000, got %ld",
                 cfg->transaction_max_ms);
        return -1;
    }
    if (topic_check_template(cfg->progress_topic, err, errlen) < 0 ||
        strchr(cfg->progress_topic, '{') != NULL) {
        snprintf(err, errlen, "--progress-topic \"%s\" must be a plain Kafka topic name",
                 cfg->progress_topic);
        return -1;
    }
    if (cfg->delivery != DELIVERY_EXACTLY_ONCE) {
        if ((v = kafka_prop(cfg, txid, &name)) != NULL) {
            snprintf(err, errlen, "-X transactional.id=%s needs --delivery exactly-once: the "
                     "at-least-once producer does not use transactions", v);
            return -1;
        }
        return 0;
    }
    if (cfg->backfill_pending) {
        snprintf(err, errlen, "--backfill pending is refused with --delivery exactly-once: the "
                 "backfill publishes rows from a snapshot, outside the slot's transactions, so "
                 "no progress record can say which of them Kafka has and a restart may send "
                 "some again. Run the backfill once with --delivery at-least-once (consumers "
                 "deduplicate those rows on event_id), then switch");
        return -1;
    }
    if (cfg->dead_letter_topic != NULL && strcmp(cfg->dead_letter_topic, cfg->progress_topic) == 0) {
        snprintf(err, errlen, "--progress-topic and --dead-letter-topic must differ");
        return -1;
    }
    return 0;
}

/* Refuses librdkafka settings that void the guarantee: the slot is
 * confirmed on delivery reports, so a report must mean "stored on every
 * in-sync replica, once, in order" (idempotence, acks=all, no event
 * written past one the broker refused: the gapless guarantee) and an outage
 * must make deliveries wait, never fail for lack of time. */
static int check_kafka_guarantees(const struct relay_config *cfg, char *err, size_t errlen)
{
    static const char *const idem[] = {"enable.idempotence", NULL};
    static const char *const gapless[] = {"enable.gapless.guarantee", NULL};
    static const char *const acks[] = {"acks", "request.required.acks", NULL};
    static const char *const inflight[] = {"max.in.flight.requests.per.connection",
                                           "max.in.flight", NULL};
    static const char *const timeout[] = {"message.timeout.ms", "delivery.timeout.ms", NULL};
    static const char *const retries[] = {"message.send.max.retries", "retries", NULL};
    static const char *const qmsgs[] = {"queue.buffering.max.messages", NULL};
    static const char *const qkb[] = {"queue.buffering.max.kbytes", NULL};
    const char *name = NULL, *v;
    long n;

    if ((v = kafka_prop(cfg, idem, &name)) && !bool_true(v)) {
        snprintf(err, errlen, "-X %s=%s is refused: without the idempotent producer a retried "
                 "request can store an event twice or out of order, and a delivery report no "
                 "longer proves per-aggregate order; leave %s at true", name, v, name);
        return -1;
    }
    if ((v = kafka_prop(cfg, gapless, &name)) && !bool_true(v)) {
        snprintf(err, errlen, "-X %s=%s is refused: after a batch the broker refuses (an event "
                 "too large for the topic) the producer would go on with the events behind it, "
                 "and a later event of an aggregate could reach Kafka before an earlier one; "
                 "leave %s at true", name, v, name);
        return -1;
    }
    if ((v = kafka_prop(cfg, acks, &name)) && strcasecmp(v, "all") != 0 && strcmp(v, "-1") != 0) {
        snprintf(err, errlen, "-X %s=%s is refused: the slot is confirmed on delivery reports, "
                 "and with acks other than all a report does not mean the event survives a "
                 "broker failure; leave %s at all (-1)", name, v, name);
        return -1;
    }
    if ((v = kafka_prop(cfg, inflight, &name)) && options_parse_long(v, &n) == 0 && n > 5) {
        snprintf(err, errlen, "-X %s=%s is refused: the idempotent producer keeps per-partition "
                 "order only with at most 5 requests in flight; use 1 to 5", name, v);
        return -1;
    }
    if ((v = kafka_prop(cfg, timeout, &name)) && strcmp(v, "0") != 0) {
        snprintf(err, errlen, "-X %s=%s is refused: a message timeout turns a Kafka outage into "
                 "failed deliveries instead of deliveries that wait; leave %s at 0 (infinite)",
                 name, v, name);
        return -1;
    }
    if ((v = kafka_prop(cfg, retries, &name)) && options_parse_long(v, &n) == 0 && n == 0) {
        snprintf(err, errlen, "-X %s=0 is refused: every transient broker error would fail a "
                 "delivery; leave it unset", name);
        return -1;
    }
    long qmax = RDKAFKA_QUEUE_MAX_MESSAGES;
    if ((v = kafka_prop(cfg, qmsgs, &name)) && options_parse_long(v, &n) == 0)
        qmax = n;
    if (cfg->max_inflight > qmax) {
        snprintf(err, errlen, "--max-inflight %ld is above librdkafka's local queue limit "
                 "queue.buffering.max.messages (%ld): the queue would fill before the window "
                 "does; lower --max-inflight or raise -X queue.buffering.max.messages",
                 cfg->max_inflight, qmax);
        return -1;
    }
    long qkbytes = RDKAFKA_QUEUE_MAX_KBYTES;
    if ((v = kafka_prop(cfg, qkb, &name)) && options_parse_long(v, &n) == 0)
        qkbytes = n;
    if (cfg->max_inflight_bytes / 1024 > qkbytes) {
        snprintf(err, errlen, "--max-inflight-bytes %ld is above librdkafka's local queue limit "
                 "queue.buffering.max.kbytes (%ld KiB): lower --max-inflight-bytes or raise -X "
                 "queue.buffering.max.kbytes", cfg->max_inflight_bytes, qkbytes);
        return -1;
    }
    return 0;
}

static int validate(struct relay_config *cfg, char *err, size_t errlen)
{
    if (cfg->dsn == NULL || *cfg->dsn == '\0') {
        snprintf(err, errlen, "--dsn is required (a PostgreSQL connection string, e.g. "
                 "\"host=db dbname=app user=outbox_relay\")");
        return -1;
    }
    if (cfg->command == RELAY_CMD_RUN && (cfg->brokers == NULL || *cfg->brokers == '\0') &&
        config_kafka_get(cfg, "bootstrap.servers") == NULL) {
        snprintf(err, errlen, "--brokers is required (Kafka bootstrap servers, HOST:PORT[,...])");
        return -1;
    }
    if (cfg->primary_dsn != NULL && *cfg->primary_dsn != '\0') {
        char *errmsg = NULL;
        PQconninfoOption *opts = PQconninfoParse(cfg->primary_dsn, &errmsg);
        PQfreemem(errmsg); /* it may quote the DSN, password included */
        if (opts == NULL) {
            snprintf(err, errlen, "--primary-dsn is not a valid PostgreSQL connection string");
            return -1;
        }
        PQconninfoFree(opts);
    }
    if (options_check_dsn(cfg->dsn, err, errlen) < 0 ||
        config_check_slot_name(cfg->slot, err, errlen) < 0 ||
        check_publication_name(cfg->publication, err, errlen) < 0)
        return -1;

    const char *dot = strchr(cfg->table, '.');
    const char *schema = "public", *name = cfg->table;
    size_t slen = 6, nlen = strlen(cfg->table);
    if (dot != NULL) {
        schema = cfg->table, slen = (size_t) (dot - cfg->table);
        name = dot + 1, nlen = strlen(dot + 1);
    }
    if (!config_ident_ok(schema, slen) || !config_ident_ok(name, nlen)) {
        snprintf(err, errlen, "--table \"%s\" must be SCHEMA.TABLE with plain identifiers "
                 "(letters, digits, '_', '$'; at most 63 each)", cfg->table);
        return -1;
    }
    free(cfg->table_schema);
    free(cfg->table_name);
    cfg->table_schema = strndup(schema, slen);
    cfg->table_name = strndup(name, nlen);

    if (config_build_columns(cfg, err, errlen) < 0)
        return -1;
    if (cfg->ce_source != NULL) {
        bool ok = *cfg->ce_source != '\0' && strlen(cfg->ce_source) < 512;
        for (const char *p = cfg->ce_source; ok && *p; p++)
            ok = isgraph((unsigned char) *p);
        if (!ok) {
            snprintf(err, errlen, "--ce-source must be a URI-reference of 1 to 511 printable "
                     "characters without spaces (e.g. /orders-service or urn:orders)");
            return -1;
        }
    }
    if (topic_check_template(cfg->topic, err, errlen) < 0)
        return -1;
    if (config_topic_columns(cfg, err, errlen) < 0)
        return -1;
    if (topic_check_template(cfg->dead_letter_topic, err, errlen) < 0 ||
        strchr(cfg->dead_letter_topic, '{') != NULL) {
        snprintf(err, errlen, "--dead-letter-topic \"%s\" must be a plain Kafka topic name",
                 cfg->dead_letter_topic);
        return -1;
    }
    /* wal2json prints the prefix JSON-escaped and trims it, splits its
     * option on commas, and the prefix goes into START_REPLICATION inside a
     * quoted literal: only characters that come back from the server exactly
     * as they were asked for. */
    for (const char *p = cfg->message_prefix; *p; p++) {
        if (!isgraph((unsigned char) *p) || strchr("'\"\\,*", *p) != NULL) {
            snprintf(err, errlen, "--message-prefix may only contain printable ASCII without "
                     "spaces, quotes, backslashes, commas or '*' (\"\" turns logical messages "
                     "off)");
            return -1;
        }
    }
    if (cfg->max_inflight < 1 || cfg->max_inflight > 10000000) {
        snprintf(err, errlen, "--max-inflight must be between 1 and 10000000, got %ld",
                 cfg->max_inflight);
        return -1;
    }
    if (cfg->max_inflight_bytes < 1024) {
        snprintf(err, errlen, "--max-inflight-bytes must be at least 1K, got %ld",
                 cfg->max_inflight_bytes);
        return -1;
    }
    if (check_kafka_guarantees(cfg, err, errlen) < 0 || check_exactly_once(cfg, err, errlen) < 0)
        return -1;
    if (cfg->status_interval < 0.05 || cfg->status_interval > 3600) {
        snprintf(err, errlen, "--status-interval must be between 0.05 and 3600 seconds");
        return -1;
    }
    if (cfg->reap_batch < 1 || cfg->reap_batch > 1000000) {
        snprintf(err, errlen, "--reap-batch must be between 1 and 1000000, got %ld",
                 cfg->reap_batch);
        return -1;
    }
    for (const char *p = cfg->retention; *p; p++) {
        if (!isalnum((unsigned char) *p) && *p != ' ' && *p != ':' && *p != '.' && *p != '-') {
            snprintf(err, errlen, "--retention \"%s\" is not a PostgreSQL interval such as "
                     "\"7 days\" or \"2 hours\" (0 turns the reaper off)", cfg->retention);
            return -1;
        }
    }
    if (cfg->takeover_after > 0 && cfg->takeover_after < 2 * cfg->status_interval) {
        snprintf(err, errlen, "--takeover-after (%.1f s) must be at least twice "
                 "--status-interval (%.1f s), or a healthy relayer would be taken over",
                 cfg->takeover_after, cfg->status_interval);
        return -1;
    }
    if (cfg->wal_receiver_timeout > 0 && cfg->wal_receiver_timeout < 1) {
        snprintf(err, errlen, "--wal-receiver-timeout must be 0 (off) or at least 1 second, "
                 "got %.2f", cfg->wal_receiver_timeout);
        return -1;
    }
    if (cfg->reconnect_max < 0.1) {
        snprintf(err, errlen, "--reconnect-max must be at least 0.1 seconds");
        return -1;
    }
    return 0;
}

/* Finds --config in argv or the environment before anything else is read. */
static const char *find_config_path(int argc, char **argv, char **envp)
{
    const char *path = NULL;
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, "OUTBOX_RELAY_CONFIG=", 20) == 0)
            path = *e + 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    return path;
}

/* The command (run, reap, status, check) in argv[1], when there is one: sets
 * cfg->command and returns the index of the first option, or -1 with err. */
static int load_command(struct relay_config *cfg, int argc, char **argv, char *err,
                        size_t errlen)
{
    if (argc <= 1 || argv[1][0] == '-')
        return 1;
    if (strcmp(argv[1], "run") == 0)
        cfg->command = RELAY_CMD_RUN;
    else if (strcmp(argv[1], "reap") == 0)
        cfg->command = RELAY_CMD_REAP;
    else if (strcmp(argv[1], "status") == 0)
        cfg->command = RELAY_CMD_STATUS;
    else if (strcmp(argv[1], "check") == 0)
        cfg->command = RELAY_CMD_CHECK;
    else {
        if (options_safe_to_echo(argv[1]))
            snprintf(err, errlen, "unknown command \"%s\" (expected run, reap, status or check; "
                     "see --help)", argv[1]);
        else
            snprintf(err, errlen, "unknown command in the first argument (expected run, "
                     "reap, status or check, or an option starting with --; not shown: it may "
                     "hold a secret)");
        return -1;
    }
    return 2;
}

enum config_result config_load(struct relay_config *cfg, int argc, char **argv,
                               char **envp, char *err, size_t errlen)
{
    bool exit_now = false;
    memset(cfg, 0, sizeof *cfg);
    if (options_set_defaults(&spec, cfg, err, errlen) < 0)
        return CONFIG_ERROR;

    const char *path = find_config_path(argc, argv, envp);
    if (path != NULL) {
        cfg->config_file = strdup(path);
        if (load_file(cfg, path, err, errlen) < 0)
            return CONFIG_ERROR;
    }
    if (options_load_env(&spec, cfg, envp, err, errlen) < 0)
        return CONFIG_ERROR;
    int first = load_command(cfg, argc, argv, err, errlen);
    if (first < 0 || options_load_args(&spec, cfg, argc, argv, first, err, errlen, &exit_now) < 0)
        return CONFIG_ERROR;
    if (exit_now)
        return CONFIG_EXIT;
    if (validate(cfg, err, errlen) < 0)
        return CONFIG_ERROR;
    return CONFIG_OK;
}

void config_free(struct relay_config *cfg)
{
    options_free(&spec, cfg);
    for (size_t i = 0; i < sizeof cfg->extra_strs / sizeof cfg->extra_strs[0]; i++) {
        free(cfg->extra_strs[i]);
        cfg->extra_strs[i] = NULL;
    }
    free(cfg->table_schema);
    free(cfg->table_name);
    cfg->table_schema = cfg->table_name = NULL;
}

const char *config_kafka_get(const struct relay_config *cfg, const char *key)
{
    return options_kv_get(cfg->kafka, cfg->nkafka, key);
}

void config_register_secrets(const struct relay_config *cfg)
{
    options_register_secrets(cfg->dsn, cfg->kafka, cfg->nkafka);
}
