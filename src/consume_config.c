/*
 * consume_config.c — outbox-consume's options (see consume_config.h). Its
 * own small table, like the relayer's config.c, which it leaves alone; the
 * secret rules and topic-name checks are config.c's.
 */
#include "outbox_relay/consume_config.h"
#include "outbox_relay/config.h"

#include <ctype.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum opt_kind { OPT_STR, OPT_LONG, OPT_SECONDS, OPT_LOGLEVEL, OPT_LOGFORMAT, OPT_ONERROR };

struct opt_def {
    const char *name; /* long option name, dashes */
    enum opt_kind kind;
    size_t offset;
    const char *defval;
    const char *arg;
    const char *help;
};

#define OFF(field) offsetof(struct consume_config, field)

static const struct opt_def options[] = {
    {"brokers", OPT_STR, OFF(brokers), NULL, "HOST:PORT[,...]",
     "Kafka bootstrap servers; required"},
    {"group", OPT_STR, OFF(group), NULL, "NAME", "Kafka consumer group; required"},
    {"topics", OPT_STR, OFF(topics), NULL, "TOPIC[,...]",
     "topics to consume (a name starting with ^ is a regex); required"},
    {"dsn", OPT_STR, OFF(dsn), NULL, "CONNINFO",
     "PostgreSQL connection string of the database to apply to; required"},
    {"consumer", OPT_STR, OFF(consumer), NULL, "NAME",
     "this consumer's name in processed_events and failed_events; required"},
    {"apply", OPT_STR, OFF(apply), NULL, "SQL",
     "statement run once per new event: $1 event_id, $2 aggregate_id (key), $3 type, "
     "$4 payload (jsonb), $5 topic; required"},
    {"on-error", OPT_ONERROR, OFF(on_error), "halt", "failed|halt",
     "an event whose apply fails with a data error: record it in failed_events and go on, "
     "or stop"},
    {"batch", OPT_LONG, OFF(batch), "100", "N", "at most N messages per transaction"},
    {"batch-ms", OPT_LONG, OFF(batch_ms), "100", "MS",
     "how long a batch waits to fill after its first message"},
    {"reconnect-max", OPT_SECONDS, OFF(reconnect_max), "30", "SECONDS",
     "cap of the PostgreSQL reconnect backoff"},
    {"log-level", OPT_LOGLEVEL, OFF(log_level), "info", "debug|info|warn|error", "log level"},
    {"log-format", OPT_LOGFORMAT, OFF(log_format), "text", "text|json", "log line format"},
};

#define NOPTIONS (sizeof options / sizeof options[0])

static const struct opt_def *find_option(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *o = options[i].name;
        if (strlen(o) != len)
            continue;
        size_t j = 0;
        for (; j < len; j++) {
            char c = name[j] == '_' ? '-' : (char) tolower((unsigned char) name[j]);
            if (c != o[j])
                break;
        }
        if (j == len)
            return &options[i];
    }
    return NULL;
}

static int set_option(struct consume_config *cfg, const struct opt_def *o, const char *value,
                      const char *source, char *err, size_t errlen)
{
    void *field = (char *) cfg + o->offset;

    switch (o->kind) {
    case OPT_STR: {
        char *copy = strdup(value);
        if (copy == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        free(*(char **) field);
        *(char **) field = copy;
        return 0;
    }
    case OPT_LONG:
        if (config_parse_long(value, (long *) field) == 0)
            return 0;
        snprintf(err, errlen, "%s: --%s expects a whole number, got \"%s\"", source, o->name,
                 value);
        return -1;
    case OPT_SECONDS:
        if (config_parse_seconds(value, (double *) field) == 0)
            return 0;
        snprintf(err, errlen, "%s: --%s expects seconds (e.g. 10 or 0.5), got \"%s\"", source,
                 o->name, value);
        return -1;
    case OPT_LOGLEVEL: {
        int lvl = log_level_parse(value);
        if (lvl >= 0) {
            *(enum log_level *) field = (enum log_level) lvl;
            return 0;
        }
        snprintf(err, errlen, "%s: --%s expects debug, info, warn or error, got \"%s\"", source,
                 o->name, value);
        return -1;
    }
    case OPT_LOGFORMAT:
        if (strcmp(value, "text") == 0 || strcmp(value, "json") == 0) {
            *(enum log_format *) field =
                strcmp(value, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
            return 0;
        }
        snprintf(err, errlen, "%s: --%s expects text or json, got \"%s\"", source, o->name,
                 value);
        return -1;
    case OPT_ONERROR:
        if (strcmp(value, "failed") == 0 || strcmp(value, "halt") == 0) {
            *(enum consumer_on_error *) field = strcmp(value, "failed") == 0
                                                    ? CONSUMER_ON_ERROR_FAILED
                                                    : CONSUMER_ON_ERROR_HALT;
            return 0;
        }
        snprintf(err, errlen, "%s: --%s expects failed or halt, got \"%s\"", source, o->name,
                 value);
        return -1;
    }
    return -1;
}

static int set_kafka(struct consume_config *cfg, const char *key, size_t keylen,
                     const char *value, char *err, size_t errlen)
{
    return config_kafka_set(cfg->kafka, &cfg->nkafka, key, keylen, value, err, errlen);
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
    for (size_t i = 0; i < NOPTIONS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s %s", options[i].name,
                 options[i].arg ? options[i].arg : "");
        printf("  %-28s %s", left, options[i].help);
        if (options[i].defval)
            printf(" (default: %s)", options[i].defval);
        printf("\n");
    }
    printf("  %-28s %s\n", "-X PROPERTY=VALUE",
           "librdkafka consumer property (TLS, SASL, session.timeout.ms...), repeatable;");
    printf("  %-28s %s\n", "", "env OUTBOX_CONSUME_KAFKA_<PROPERTY> with '_' for '.'");
    printf("  %-28s %s\n", "-h, --help", "this help");
    printf("  %-28s %s\n", "-V, --version", "print the version");
    printf("\nExit status: 0 after a clean stop (SIGTERM/SIGINT), 1 when --on-error halt\n"
           "stopped at a failing event or on a fatal error, 2 on bad usage or configuration\n"
           "(including an --apply statement PostgreSQL cannot prepare).\n");
}

static int load_env(struct consume_config *cfg, char **envp, char *err, size_t errlen)
{
    static const char pfx[] = "OUTBOX_CONSUME_";
    static const char kpfx[] = "OUTBOX_CONSUME_KAFKA_";
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, pfx, sizeof pfx - 1) != 0)
            continue;
        const char *name = *e + sizeof pfx - 1;
        const char *eq = strchr(name, '=');
        if (eq == NULL)
            continue;
        if (strncmp(*e, kpfx, sizeof kpfx - 1) == 0) {
            const char *k = *e + sizeof kpfx - 1;
            char key[256];
            size_t n = (size_t) (eq - k);
            if (n >= sizeof key)
                continue;
            for (size_t i = 0; i < n; i++)
                key[i] = k[i] == '_' ? '.' : (char) tolower((unsigned char) k[i]);
            key[n] = '\0';
            if (set_kafka(cfg, key, n, eq + 1, err, errlen) < 0)
                return -1;
            continue;
        }
        const struct opt_def *o = find_option(name, (size_t) (eq - name));
        if (o == NULL)
            continue; /* not ours */
        char source[128];
        snprintf(source, sizeof source, "environment %.*s", (int) (eq - *e), *e);
        if (set_option(cfg, o, eq + 1, source, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static int load_args(struct consume_config *cfg, int argc, char **argv, char *err,
                     size_t errlen, bool *exit_now)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            print_help(argv[0]);
            *exit_now = true;
            return 0;
        }
        if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
            printf("outbox-consume %s\n", OUTBOX_RELAY_VERSION);
            *exit_now = true;
            return 0;
        }
        if (strncmp(a, "-X", 2) == 0) {
            const char *kv = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            const char *eq = kv ? strchr(kv, '=') : NULL;
            if (eq == NULL) {
                if (kv != NULL && config_safe_to_echo(kv))
                    snprintf(err, errlen, "-X expects property=value, got \"%s\"", kv);
                else
                    snprintf(err, errlen, "-X expects property=value%s", kv ? " (the argument "
                             "is not shown: it may hold a secret)" : "");
                return -1;
            }
            if (set_kafka(cfg, kv, (size_t) (eq - kv), eq + 1, err, errlen) < 0)
                return -1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (config_safe_to_echo(a))
                snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", a);
            else
                snprintf(err, errlen, "unexpected argument #%d (options start with --; not "
                         "shown: it may hold a secret; see --help)", i);
            return -1;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t) (eq - name) : strlen(name);
        const struct opt_def *o = find_option(name, nlen);
        if (o == NULL || memchr(name, '_', nlen) != NULL) {
            snprintf(err, errlen, "unknown option --%.*s (see --help)", (int) nlen, name);
            return -1;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (value == NULL) {
            snprintf(err, errlen, "--%s needs a value (%s)", o->name, o->arg ? o->arg : "");
            return -1;
        }
        if (set_option(cfg, o, value, "command line", err, errlen) < 0)
            return -1;
    }
    return 0;
}

static const char *kafka_get(const struct consume_config *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->nkafka; i++)
        if (strcmp(cfg->kafka[i].key, key) == 0)
            return cfg->kafka[i].value;
    return NULL;
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
            char e[256];
            if (n > 249 || strchr(t, '{') != NULL ||
                config_check_topic_template(t, e, sizeof e) < 0) {
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
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(cfg->dsn, &errmsg);
    if (opts == NULL) {
        /* libpq's message may quote the DSN, password included: do not echo it. */
        snprintf(err, errlen, "--dsn is not a valid PostgreSQL connection string (%s)",
                 errmsg && strstr(errmsg, "missing") ? "missing \"=\" after a keyword"
                                                     : "syntax error");
        PQfreemem(errmsg);
        return -1;
    }
    PQconninfoFree(opts);
    if (split_topics(cfg, err, errlen) < 0)
        return -1;
    if (cfg->batch < 1 || cfg->batch > 100000) {
        snprintf(err, errlen, "--batch must be between 1 and 100000, got %ld", cfg->batch);
        return -1;
    }
    if (cfg->batch_ms < 0 || cfg->batch_ms > 600000) {
        snprintf(err, errlen, "--batch-ms must be between 0 and 600000, got %ld", cfg->batch_ms);
        return -1;
    }
    if (cfg->reconnect_max < 0.1) {
        snprintf(err, errlen, "--reconnect-max must be at least 0.1 seconds");
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
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].defval && set_option(cfg, &options[i], options[i].defval, "default",
                                            err, errlen) < 0)
            return CONFIG_ERROR;
    if (load_env(cfg, envp, err, errlen) < 0)
        return CONFIG_ERROR;
    if (load_args(cfg, argc, argv, err, errlen, &exit_now) < 0)
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
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].kind == OPT_STR) {
            char **f = (char **) ((char *) cfg + options[i].offset);
            free(*f);
            *f = NULL;
        }
    for (size_t i = 0; i < cfg->ntopics; i++)
        free(cfg->topic_list[i]);
    cfg->ntopics = 0;
    for (size_t i = 0; i < cfg->nkafka; i++) {
        free(cfg->kafka[i].key);
        free(cfg->kafka[i].value);
    }
    cfg->nkafka = 0;
}

void consume_config_register_secrets(const struct consume_config *cfg)
{
    /* config_register_secrets knows which DSN keywords and librdkafka
     * properties are secret; hand it a view of ours. */
    static struct relay_config view; /* large: keep it off the stack */
    memset(&view, 0, sizeof view);
    view.dsn = cfg->dsn;
    for (size_t i = 0; i < cfg->nkafka; i++)
        view.kafka[i] = cfg->kafka[i];
    view.nkafka = cfg->nkafka;
    config_register_secrets(&view);
    memset(&view, 0, sizeof view);
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
    o->reconnect_max = cfg->reconnect_max;
    o->kafka = cfg->kafka_view;
    o->nkafka = cfg->nkafka;
}
