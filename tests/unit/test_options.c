/*
 * test_options.c — the option-table machinery and the parsers both
 * programs share (options.h), with a table of its own: no relayer or
 * consumer configuration involved, which is the point of the module.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/base/options.h"

struct toy {
    char *name;
    long count;
    long size;
    double wait;
    bool on;
    int color;
    struct config_kv kafka[CONFIG_MAX_KAFKA_PROPS];
    size_t nkafka;
};

static const struct option_word colors[] = {{"red", 1}, {"green", 2}, {"blue", 3}, {NULL, 0}};

#define OFF(f) offsetof(struct toy, f)
static const struct option_def defs[] = {
    {"name", OPT_STR, OFF(name), "toy", "NAME", "a name", NULL, 0},
    {"count", OPT_LONG, OFF(count), "3", "N", "a count", NULL, 0},
    {"size", OPT_SIZE, OFF(size), "1K", "BYTES", "a size", NULL, 0},
    {"wait-time", OPT_SECONDS, OFF(wait), "0.5", "SECONDS", "a wait", NULL, 0},
    {"on", OPT_BOOL, OFF(on), "false", NULL, "a switch", NULL, 0},
    {"color", OPT_ENUM, OFF(color), "red", "red|green|blue", "a color", colors, 0},
};

static int toy_kafka_arg(void *cfg, const char *kv, char *err, size_t errlen)
{
    struct toy *t = cfg;
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (eq == NULL) {
        snprintf(err, errlen, "-X needs property=value");
        return -1;
    }
    return options_kafka_set(t->kafka, &t->nkafka, kv, (size_t) (eq - kv), eq + 1, err, errlen);
}

static void toy_help(const char *argv0)
{
    (void) argv0;
}

static const struct options_spec spec = {
    .program = "toy",
    .defs = defs,
    .ndefs = sizeof defs / sizeof defs[0],
    .env_prefix = "TOY_",
    .kafka_offset = OFF(kafka),
    .nkafka_offset = OFF(nkafka),
    .help_width = 20,
    .kafka_help = "a property",
    .print_help = toy_help,
    .set_kafka_arg = toy_kafka_arg,
};

static void test_parsers(void)
{
    long l = -1;
    double d = -1;
    CHECK(options_parse_long("42", &l) == 0 && l == 42);
    CHECK(options_parse_long("-7", &l) == 0 && l == -7);
    CHECK(options_parse_long("", &l) < 0);
    CHECK(options_parse_long("4x", &l) < 0);
    CHECK(options_parse_long("99999999999999999999999", &l) < 0);
    CHECK(options_parse_seconds("0.25", &d) == 0 && d == 0.25);
    CHECK(options_parse_seconds("10", &d) == 0 && d == 10);
    CHECK(options_parse_seconds("-1", &d) < 0);
    CHECK(options_parse_seconds("inf", &d) < 0);
    CHECK(options_parse_seconds("nan", &d) < 0);
    CHECK(options_parse_seconds("1s", &d) < 0);

    CHECK(options_safe_to_echo("batch-ms_2.x"));
    CHECK(!options_safe_to_echo(""));
    CHECK(!options_safe_to_echo("password=hunter2"));
    CHECK(!options_safe_to_echo("0123456789012345678901234567890123456789x"));

    char err[256];
    CHECK(options_check_dsn("host=db dbname=app", err, sizeof err) == 0);
    CHECK(options_check_dsn("postgresql://u:p@db/app", err, sizeof err) == 0);
    CHECK(options_check_dsn("host=db password=hunter2 nonsense", err, sizeof err) < 0);
    CHECK(strstr(err, "hunter2") == NULL);
    CHECK(strstr(err, "missing \"=\"") != NULL);

    CHECK(options_topic_char_ok('a') && options_topic_char_ok('Z') && options_topic_char_ok('9'));
    CHECK(options_topic_char_ok('.') && options_topic_char_ok('_') && options_topic_char_ok('-'));
    CHECK(!options_topic_char_ok('/') && !options_topic_char_ok(' ') && !options_topic_char_ok('{'));
}

static void test_kafka_list(void)
{
    struct config_kv kv[CONFIG_MAX_KAFKA_PROPS];
    size_t n = 0;
    char err[256];
    CHECK(options_kafka_set(kv, &n, "acks=", 4, "all", err, sizeof err) == 0);
    CHECK(options_kafka_set(kv, &n, "linger.ms", 9, "5", err, sizeof err) == 0);
    CHECK(options_kafka_set(kv, &n, "acks", 4, "-1", err, sizeof err) == 0); /* replaces */
    CHECK_EQ_INT(n, 2);
    CHECK(strcmp(options_kv_get(kv, n, "acks"), "-1") == 0);
    CHECK(strcmp(options_kv_get(kv, n, "linger.ms"), "5") == 0);
    CHECK(options_kv_get(kv, n, "linger") == NULL);
    CHECK(options_kafka_set(kv, &n, "x", 0, "1", err, sizeof err) < 0);
    CHECK(strstr(err, "empty librdkafka property name") != NULL);
    char key[32];
    while (n < CONFIG_MAX_KAFKA_PROPS) {
        snprintf(key, sizeof key, "p%zu", n);
        CHECK(options_kafka_set(kv, &n, key, strlen(key), "v", err, sizeof err) == 0);
    }
    CHECK(options_kafka_set(kv, &n, "one.more", 8, "v", err, sizeof err) < 0);
    CHECK(strstr(err, "too many") != NULL);
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
}

static void test_table(void)
{
    struct toy t;
    char err[256];
    bool exit_now = false;
    memset(&t, 0, sizeof t);
    CHECK(options_set_defaults(&spec, &t, err, sizeof err) == 0);
    CHECK(strcmp(t.name, "toy") == 0);
    CHECK_EQ_INT(t.count, 3);
    CHECK_EQ_INT(t.size, 1024);
    CHECK(t.wait == 0.5 && !t.on && t.color == 1);

    /* The environment: '_' finds '-', case does not matter, TOY_KAFKA_ is
     * a property with '_' for '.', other names are skipped. */
    char *env[] = {"TOY_WAIT_TIME=2", "TOY_Color=green", "TOY_KAFKA_LINGER_MS=5",
                   "TOY_UNKNOWN=1", "OTHER_COUNT=9", NULL};
    CHECK(options_load_env(&spec, &t, env, err, sizeof err) == 0);
    CHECK(t.wait == 2 && t.color == 2 && t.count == 3);
    CHECK(strcmp(options_kv_get(t.kafka, t.nkafka, "linger.ms"), "5") == 0);

    /* The command line wins; a lone boolean means true. */
    char *argv[] = {"toy", "--count", "8", "--size=2M", "--on", "-Xacks=all", "--name", "n2",
                    NULL};
    CHECK(options_load_args(&spec, &t, 8, argv, 1, err, sizeof err, &exit_now) == 0);
    CHECK(!exit_now);
    CHECK(t.count == 8 && t.size == 2 * 1024 * 1024 && t.on);
    CHECK(strcmp(t.name, "n2") == 0);
    CHECK(strcmp(options_kv_get(t.kafka, t.nkafka, "acks"), "all") == 0);

    /* A boolean takes the next word when it is a boolean word, and only
     * then: --on false, --on true, --on before another option. */
    char *b1[] = {"toy", "--on", "false", "--count", "9", NULL};
    CHECK(options_load_args(&spec, &t, 5, b1, 1, err, sizeof err, &exit_now) == 0);
    CHECK(!t.on && t.count == 9);
    char *b2[] = {"toy", "--on", "true", NULL};
    CHECK(options_load_args(&spec, &t, 3, b2, 1, err, sizeof err, &exit_now) == 0);
    CHECK(t.on);
    char *b3[] = {"toy", "--on=off", "--on", "--count", "4", NULL};
    CHECK(options_load_args(&spec, &t, 5, b3, 1, err, sizeof err, &exit_now) == 0);
    CHECK(t.on && t.count == 4);
    char *b4[] = {"toy", "--on", "maybe", NULL};
    CHECK(options_load_args(&spec, &t, 3, b4, 1, err, sizeof err, &exit_now) < 0);
    CHECK(strcmp(err, "unexpected argument \"maybe\" (see --help)") == 0);

    /* The messages. */
    char *bad1[] = {"toy", "--count", "many", NULL};
    CHECK(options_load_args(&spec, &t, 3, bad1, 1, err, sizeof err, &exit_now) < 0);
    CHECK(strcmp(err, "command line: --count expects a whole number, got \"many\"") == 0);
    char *bad2[] = {"toy", "--color", "pink", NULL};
    CHECK(options_load_args(&spec, &t, 3, bad2, 1, err, sizeof err, &exit_now) < 0);
    CHECK(strstr(err, "expects red, green or blue") != NULL);
    char *bad3[] = {"toy", "--wait_time", "1", NULL};
    CHECK(options_load_args(&spec, &t, 3, bad3, 1, err, sizeof err, &exit_now) < 0);
    CHECK(strstr(err, "unknown option --wait_time") != NULL);
    char *bad4[] = {"toy", "host=db password=secret", NULL};
    CHECK(options_load_args(&spec, &t, 2, bad4, 1, err, sizeof err, &exit_now) < 0);
    CHECK(strstr(err, "secret") != NULL && strstr(err, "password=") == NULL);
    char *bad5[] = {"toy", "--count", NULL};
    CHECK(options_load_args(&spec, &t, 2, bad5, 1, err, sizeof err, &exit_now) < 0);
    CHECK(strstr(err, "--count needs a value") != NULL);

    options_free(&spec, &t);
    CHECK(t.name == NULL && t.nkafka == 0);
}

int main(void)
{
    test_parsers();
    test_table();
    test_kafka_list();
    CHECK_DONE();
}
