/*
 * consume_config.c — outbox-consume's options (see consume_config.h). Its
 * own small table, read by the machinery the relayer's config.c uses too
 * (options.c), which also holds the secret rules and the DSN and topic-
 * character checks both programs apply. Nothing of the relayer's config.
 */
#include "outbox_relay/consume/consume_config.h"
#include "outbox_relay/base/options.h"
#include "outbox_relay/kafka/kafka_conf.h"
#include "outbox_relay/pg/pgconn.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(enum consumer_on_error) == sizeof(int), "OPT_ENUM stores an int");

static const struct option_word on_error_words[] = {
    {"failed", CONSUMER_ON_ERROR_FAILED}, {"halt", CONSUMER_ON_ERROR_HALT}, {NULL, 0}};

#define OFF(field) offsetof(struct consume_config, field)
/* A row: name, kind, field, default (NULL: none), placeholder in --help
 * (NULL: none), help text; OPT_WORDS adds the words an OPT_ENUM or OPT_FLAG
 * option takes. */
#define OPT(name, kind, field, defval, arg, help) \
    {name, kind, OFF(field), defval, arg, help, NULL, 0}
#define OPT_WORDS(name, kind, field, defval, arg, help, words) \
    {name, kind, OFF(field), defval, arg, help, words, 0}

static const struct option_def options[] = {
    OPT("brokers", OPT_STR, brokers, NULL, "HOST:PORT[,...]",
        "Kafka bootstrap servers; required"),
    OPT("group", OPT_STR, group, NULL, "NAME", "Kafka consumer group; required"),
    OPT("topics", OPT_STR, topics, NULL, "TOPIC[,...]",
        "topics to consume (a name starting with ^ is a regex); required"),
    OPT("dsn", OPT_STR, dsn, NULL, "CONNINFO",
        "PostgreSQL connection string of the database to apply to; required"),
    OPT("consumer", OPT_STR, consumer, NULL, "NAME",
        "this consumer's name in processed_events and failed_events; required"),
    OPT("apply", OPT_STR, apply, NULL, "SQL",
        "statement run once per new event: $1 event_id, $2 aggregate_id (key), $3 type, "
        "$4 payload (jsonb), $5 topic; required"),
    OPT_WORDS("on-error", OPT_ENUM, on_error, "halt", "failed|halt",
              "an event whose apply fails with a data error: record it in failed_events and "
              "go on, or stop", on_error_words),
    OPT("batch", OPT_LONG, batch, "100", "N", "at most N messages per transaction"),
    OPT("apply-workers", OPT_LONG, apply_workers, CONSUMER_APPLY_WORKERS_DEFAULT_STR, "N",
        "PostgreSQL connections a batch is applied over, split by key (a key always on "
        "the same one)"),
    OPT("apply-key", OPT_STR, apply_key, NULL, "FIELD",
        "with --apply-workers: the payload's top-level JSON member FIELD instead of the "
        "Kafka key chooses the connection (every event of an aggregate must carry the same)"),
    OPT("batch-ms", OPT_LONG, batch_ms, "100", "MS",
        "how long a batch waits to fill after its first message"),
    OPT("reconnect-max", OPT_SECONDS, reconnect_max, "30", "SECONDS",
        "cap of the PostgreSQL reconnect backoff"),
    OPT("revoke-timeout", OPT_SECONDS, revoke_timeout, "5", "SECONDS",
        "longest wait for PostgreSQL when partitions are revoked or at a stop; then the "
        "batch in progress is rolled back and left to the next owner"),
    OPT("log-level", OPT_LOGLEVEL, log_level, "info", "debug|info|warn|error", "log level"),
    OPT_WORDS("log-format", OPT_ENUM, log_format, "text", "text|json", "log line format",
              option_log_formats),
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
    .program = "outbox-consume",
    .print_libraries = print_libraries,
    .defs = options,
    .ndefs = sizeof options / sizeof options[0],
    .env_prefix = "OUTBOX_CONSUME_",
    .kafka_offset = OFF(kafka),
    .nkafka_offset = OFF(nkafka),
    .help_width = 28,
    .kafka_help = "librdkafka consumer property (TLS, SASL, session.timeout.ms...), repeatable;",
    .print_help = print_help,
    .set_kafka_arg = set_kafka_arg,
};

static int set_kafka(struct consume_config *cfg, const char *key, size_t keylen,
                     const char *value, char *err, size_t errlen)
{
    return options_kafka_set(cfg->kafka, &cfg->nkafka, key, keylen, value, err, errlen);
}

static void print_help(const char *prog)
{
    printf("outbox-consume %s — apply Kafka events to PostgreSQL exactly once\n\n",
           OUTBOX_RELAY_VERSION);
    printf("Usage:\n"
           "  %s --brokers HOST:PORT --group NAME --topics A,B --dsn CONNINFO \\\n"
           "     --consumer NAME --apply 'SQL with $1..$5' [options]\n"
           "  %s --help | --version\n\n"
           "Per batch of messages, one transaction: each new (consumer, event_id) is\n"
           "recorded in processed_events and the --apply statement runs; duplicates are\n"
           "skipped. Kafka offsets are committed after COMMIT.\n\n"
           "Options (each also as OUTBOX_CONSUME_<NAME> in the environment; the command\n"
           "line wins):\n",
           prog, prog);
    options_print_table(&spec);
    printf("\nExit status: 0 after a clean stop (SIGTERM/SIGINT), 1 when --on-error halt\n"
           "stopped at a failing event or on a fatal error, 2 on bad usage or configuration\n"
           "(including an --apply statement PostgreSQL cannot prepare, and a\n"
           "processed_events.event_id of a type no event id fits: the message gives the\n"
           "ALTER TABLE).\n");
}

/* -X key=value on the command line (kv NULL: -X was the last argument) */
static int set_kafka_arg(void *cfg, const char *kv, char *err, size_t errlen)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (eq == NULL) {
        if (kv != NULL && options_safe_to_echo(kv))
            snprintf(err, errlen, "-X expects property=value, got \"%s\"", kv);
        else
            snprintf(err, errlen, "-X expects property=value%s", kv ? " (the argument "
                     "is not shown: it may hold a secret)" : "");
        return -1;
    }
    return set_kafka(cfg, kv, (size_t) (eq - kv), eq + 1, err, errlen);
}

static const char *kafka_get(const struct consume_config *cfg, const char *key)
{
    return options_kv_get(cfg->kafka, cfg->nkafka, key);
}

static bool empty(const char *s)
{
    return s == NULL || *s == '\0';
}

/* Splits --topics at commas into topic_list; each a legal Kafka topic name
 * or a regex (^...). */
static int split_topics(struct consume_config *cfg, char *err, size_t errlen)
{
    const char *p = cfg->topics;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t) (comma - p) : strlen(p);
        while (n > 0 && isspace((unsigned char) *p))
            p++, n--;
        while (n > 0 && isspace((unsigned char) p[n - 1]))
            n--;
        if (n == 0) {
            snprintf(err, errlen, "--topics \"%s\" has an empty name", cfg->topics);
            return -1;
        }
        if (cfg->ntopics >= CONSUME_MAX_TOPICS) {
            snprintf(err, errlen, "--topics: at most %d topics", CONSUME_MAX_TOPICS);
            return -1;
        }
        char *t = strndup(p, n);
        if (t == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        cfg->topic_list[cfg->ntopics++] = t;
        if (t[0] != '^') {
            bool ok = n <= 249;
            for (size_t i = 0; ok && i < n; i++)
                ok = options_topic_char_ok(t[i]);
            if (!ok) {
                snprintf(err, errlen, "--topics: \"%s\" is not a Kafka topic name (1-249 of "
                         "[A-Za-z0-9._-]; a regex starts with ^)", t);
                return -1;
            }
        }
        p += n;
        while (*p && *p != ',')
            p++;
        if (*p == ',')
            p++;
        else
            break;
    }
    if (cfg->ntopics == 0) {
        snprintf(err, errlen, "--topics is empty");
        return -1;
    }
    return 0;
}

static int validate(struct consume_config *cfg, char *err, size_t errlen)
{
    if (empty(cfg->brokers) && kafka_get(cfg, "bootstrap.servers") == NULL) {
        snprintf(err, errlen, "--brokers is required (Kafka bootstrap servers, HOST:PORT[,...])");
        return -1;
    }
    if (empty(cfg->group)) {
        snprintf(err, errlen, "--group is required (the Kafka consumer group)");
        return -1;
    }
    if (empty(cfg->topics)) {
        snprintf(err, errlen, "--topics is required (comma-separated topic names)");
        return -1;
    }
    if (empty(cfg->dsn)) {
        snprintf(err, errlen, "--dsn is required (a PostgreSQL connection string, e.g. "
                 "\"host=db dbname=app user=loyalty\")");
        return -1;
    }
    if (empty(cfg->consumer)) {
        snprintf(err, errlen, "--consumer is required (this consumer's name in "
                 "processed_events; keep it stable: a new name applies every event again)");
        return -1;
    }
    if (strlen(cfg->consumer) > 200) {
        snprintf(err, errlen, "--consumer is longer than 200 characters");
        return -1;
    }
    if (empty(cfg->apply)) {
        snprintf(err, errlen, "--apply is required (the SQL statement to run per event, with "
                 "$1 event_id, $2 aggregate_id, $3 type, $4 payload, $5 topic)");
        return -1;
    }
    if (options_check_dsn(cfg->dsn, err, errlen) < 0 || split_topics(cfg, err, errlen) < 0)
        return -1;
    if (cfg->batch < 1 || cfg->batch > 100000) {
        snprintf(err, errlen, "--batch must be between 1 and 100000, got %ld", cfg->batch);
        return -1;
    }
    if (cfg->apply_workers < 1 || cfg->apply_workers > CONSUMER_APPLY_WORKERS_MAX) {
        snprintf(err, errlen, "--apply-workers must be between 1 and %d, got %ld",
                 CONSUMER_APPLY_WORKERS_MAX, cfg->apply_workers);
        return CONFIG_ERROR;
    }
    if (cfg->apply_key != NULL && cfg->apply_key[0] == '\0') {
        snprintf(err, errlen, "--apply-key needs a member name");
        return CONFIG_ERROR;
    }
    if (cfg->batch_ms < 0 || cfg->batch_ms > 600000) {
        snprintf(err, errlen, "--batch-ms must be between 0 and 600000, got %ld", cfg->batch_ms);
        return -1;
    }
    if (cfg->reconnect_max < 0.1) {
        snprintf(err, errlen, "--reconnect-max must be at least 0.1 seconds");
        return -1;
    }
    if (cfg->revoke_timeout < 0.1 || cfg->revoke_timeout > 3600) {
        snprintf(err, errlen, "--revoke-timeout must be between 0.1 and 3600 seconds");
        return -1;
    }
    static const char *const ours[] = {"enable.auto.commit", "enable.auto.offset.store",
                                       "group.id"};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
        if (kafka_get(cfg, ours[i]) != NULL) {
            snprintf(err, errlen, "-X %s cannot be set: the consumer %s", ours[i],
                     strcmp(ours[i], "group.id") == 0
                         ? "takes it from --group"
                         : "commits offsets itself, after the PostgreSQL commit");
            return -1;
        }
    }
    return 0;
}

enum config_result consume_config_load(struct consume_config *cfg, int argc, char **argv,
                                       char **envp, char *err, size_t errlen)
{
    bool exit_now = false;
    memset(cfg, 0, sizeof *cfg);
    if (options_set_defaults(&spec, cfg, err, errlen) < 0)
        return CONFIG_ERROR;
    if (options_load_env(&spec, cfg, envp, err, errlen) < 0)
        return CONFIG_ERROR;
    if (options_load_args(&spec, cfg, argc, argv, 1, err, errlen, &exit_now) < 0)
        return CONFIG_ERROR;
    if (exit_now)
        return CONFIG_EXIT;
    if (validate(cfg, err, errlen) < 0)
        return CONFIG_ERROR;
    for (size_t i = 0; i < cfg->nkafka; i++) {
        cfg->kafka_view[i].key = cfg->kafka[i].key;
        cfg->kafka_view[i].value = cfg->kafka[i].value;
    }
    return CONFIG_OK;
}

void consume_config_free(struct consume_config *cfg)
{
    options_free(&spec, cfg);
    for (size_t i = 0; i < cfg->ntopics; i++)
        free(cfg->topic_list[i]);
    cfg->ntopics = 0;
}

void consume_config_register_secrets(const struct consume_config *cfg)
{
    options_register_secrets(cfg->dsn, cfg->kafka, cfg->nkafka);
}

void consume_config_to_options(const struct consume_config *cfg, struct consumer_options *o)
{
    o->brokers = cfg->brokers;
    o->group = cfg->group;
    o->topics = (const char *const *) cfg->topic_list;
    o->ntopics = cfg->ntopics;
    o->dsn = cfg->dsn;
    o->consumer_name = cfg->consumer;
    o->on_error = cfg->on_error;
    o->batch = (int) cfg->batch;
    o->batch_ms = (int) cfg->batch_ms;
    o->apply_workers = (int) cfg->apply_workers;
    o->apply_key = cfg->apply_key;
    o->reconnect_max = cfg->reconnect_max;
    o->revoke_timeout = cfg->revoke_timeout;
    o->kafka = cfg->kafka_view;
    o->nkafka = cfg->nkafka;
}
