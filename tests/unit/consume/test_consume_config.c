/*
 * test_consume_config.c — outbox-consume's options: defaults, environment
 * and command line precedence, -X passthrough, topic lists, and the
 * messages for bad usage.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/consume/consume_config.h"

static enum config_result load(struct consume_config *cfg, char **envp, char *err, int argc, ...)
{
    char *argv[40];
    va_list ap;
    va_start(ap, argc);
    argv[0] = "outbox-consume";
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    err[0] = '\0';
    return consume_config_load(cfg, argc, argv, envp, err, CONSUMER_ERRLEN);
}

#define REQUIRED "--brokers", "k:9092", "--group", "g1", "--topics", "order", "--dsn", \
                 "dbname=app", "--consumer", "loyalty", "--apply", "SELECT $1"

static void test_defaults(void)
{
    struct consume_config c;
    char err[CONSUMER_ERRLEN];
    char *env[] = {NULL};
    CHECK_EQ_INT(load(&c, env, err, 13, REQUIRED), CONFIG_OK);
    CHECK(strcmp(c.brokers, "k:9092") == 0);
    CHECK(strcmp(c.group, "g1") == 0);
    CHECK_EQ_INT(c.ntopics, 1);
    CHECK(strcmp(c.topic_list[0], "order") == 0);
    CHECK(strcmp(c.consumer, "loyalty") == 0);
    CHECK(strcmp(c.apply, "SELECT $1") == 0);
    CHECK_EQ_INT(c.on_error, CONSUMER_ON_ERROR_HALT);
    CHECK_EQ_INT(c.batch, 100);
    CHECK_EQ_INT(c.batch_ms, 100);
    CHECK_EQ_INT(c.apply_workers, CONSUMER_APPLY_WORKERS_DEFAULT);
    CHECK(c.reconnect_max == 30.0);
    CHECK(c.revoke_timeout == 5.0);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_INFO);
    CHECK_EQ_INT(c.nkafka, 0);

    struct consumer_options o;
    memset(&o, 0, sizeof o);
    consume_config_to_options(&c, &o);
    CHECK(o.group == c.group && o.dsn == c.dsn && o.consumer_name == c.consumer);
    CHECK_EQ_INT(o.ntopics, 1);
    CHECK(strcmp(o.topics[0], "order") == 0);
    CHECK_EQ_INT(o.batch, 100);
    CHECK_EQ_INT(o.apply_workers, CONSUMER_APPLY_WORKERS_DEFAULT);
    CHECK(o.apply_key == NULL);
    CHECK(o.revoke_timeout == 5.0);
    consume_config_free(&c);
}

static void test_precedence_and_kafka(void)
{
    struct consume_config c;
    char err[CONSUMER_ERRLEN];
    char *env[] = {"OUTBOX_CONSUME_BATCH=7", "OUTBOX_CONSUME_BATCH_MS=250",
                   "OUTBOX_CONSUME_ON_ERROR=failed", "OUTBOX_CONSUME_KAFKA_SESSION_TIMEOUT_MS=6000",
                   "OUTBOX_CONSUME_UNRELATED=x", "OUTBOX_RELAY_BATCH=9",
                   "OUTBOX_CONSUME_APPLY_WORKERS=3", NULL};
    CHECK_EQ_INT(load(&c, env, err, 19, REQUIRED, "--batch", "9", "-X", "fetch.wait.max.ms=50",
                      "-Xclient.id=me", "--log-level=debug"),
                 CONFIG_OK);
    CHECK_EQ_INT(c.batch, 9);        /* command line beats environment */
    CHECK_EQ_INT(c.batch_ms, 250);   /* environment beats default */
    CHECK_EQ_INT(c.apply_workers, 3);
    CHECK_EQ_INT(c.on_error, CONSUMER_ON_ERROR_FAILED);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_DEBUG);
    CHECK_EQ_INT(c.nkafka, 3);
    CHECK(strcmp(c.kafka[0].key, "session.timeout.ms") == 0 &&
          strcmp(c.kafka[0].value, "6000") == 0);
    CHECK(strcmp(c.kafka[1].key, "fetch.wait.max.ms") == 0);
    CHECK(strcmp(c.kafka[2].key, "client.id") == 0 && strcmp(c.kafka[2].value, "me") == 0);
    struct consumer_options o;
    memset(&o, 0, sizeof o);
    consume_config_to_options(&c, &o);
    CHECK_EQ_INT(o.nkafka, 3);
    CHECK(strcmp(o.kafka[2].key, "client.id") == 0 && strcmp(o.kafka[2].value, "me") == 0);
    CHECK_EQ_INT(o.on_error, CONSUMER_ON_ERROR_FAILED);
    consume_config_free(&c);

    /* Environment alone can supply every required option. */
    char *env2[] = {"OUTBOX_CONSUME_BROKERS=b:1", "OUTBOX_CONSUME_GROUP=g",
                    "OUTBOX_CONSUME_TOPICS=a", "OUTBOX_CONSUME_DSN=dbname=x",
                    "OUTBOX_CONSUME_CONSUMER=c", "OUTBOX_CONSUME_APPLY=SELECT 1", NULL};
    CHECK_EQ_INT(load(&c, env2, err, 1), CONFIG_OK);
    CHECK(c.apply && strcmp(c.apply, "SELECT 1") == 0);
    consume_config_free(&c);
}

static void test_topics(void)
{
    struct consume_config c;
    char err[CONSUMER_ERRLEN];
    char *env[] = {NULL};
    CHECK_EQ_INT(load(&c, env, err, 15, REQUIRED, "--topics", " order , payment.v2,^audit\\..*"),
                 CONFIG_OK);
    CHECK_EQ_INT(c.ntopics, 3);
    CHECK(strcmp(c.topic_list[0], "order") == 0);
    CHECK(strcmp(c.topic_list[1], "payment.v2") == 0);
    CHECK(strcmp(c.topic_list[2], "^audit\\..*") == 0);
    consume_config_free(&c);

    CHECK_EQ_INT(load(&c, env, err, 15, REQUIRED, "--topics", "a,,b"), CONFIG_ERROR);
    CHECK(strstr(err, "empty name") != NULL);
    consume_config_free(&c);
    CHECK_EQ_INT(load(&c, env, err, 15, REQUIRED, "--topics", "bad topic"), CONFIG_ERROR);
    CHECK(strstr(err, "not a Kafka topic name") != NULL);
    consume_config_free(&c);
    CHECK_EQ_INT(load(&c, env, err, 15, REQUIRED, "--topics", "{type}"), CONFIG_ERROR);
    consume_config_free(&c);
}

/* Each bad usage fails with a message naming the option. */
static void expect_error(const char *needle, int argc, ...)
{
    char *argv[40];
    va_list ap;
    va_start(ap, argc);
    argv[0] = "outbox-consume";
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    char *env[] = {NULL};
    struct consume_config c;
    char err[CONSUMER_ERRLEN] = "";
    CHECK_EQ_INT(consume_config_load(&c, argc, argv, env, err, sizeof err), CONFIG_ERROR);
    if (strstr(err, needle) == NULL) {
        fprintf(stderr, "expected \"%s\" in \"%s\"\n", needle, err);
        CHECK(strstr(err, needle) != NULL);
    }
    consume_config_free(&c);
}

static void test_errors(void)
{
    expect_error("--group is required", 11, "--brokers", "k:1", "--topics", "t", "--dsn",
                 "dbname=x", "--consumer", "c", "--apply", "SELECT 1");
    expect_error("--brokers is required", 11, "--group", "g", "--topics", "t", "--dsn",
                 "dbname=x", "--consumer", "c", "--apply", "SELECT 1");
    expect_error("--apply is required", 11, "--brokers", "k:1", "--group", "g", "--topics",
                 "t", "--dsn", "dbname=x", "--consumer", "c");
    expect_error("--consumer is required", 11, "--brokers", "k:1", "--group", "g", "--topics",
                 "t", "--dsn", "dbname=x", "--apply", "SELECT 1");
    expect_error("--dsn is required", 11, "--brokers", "k:1", "--group", "g", "--topics", "t",
                 "--consumer", "c", "--apply", "SELECT 1");
    expect_error("--topics is required", 11, "--brokers", "k:1", "--group", "g", "--dsn",
                 "dbname=x", "--consumer", "c", "--apply", "SELECT 1");
    expect_error("--on-error expects failed or halt", 15, REQUIRED, "--on-error", "skip");
    expect_error("--batch must be between", 15, REQUIRED, "--batch", "0");
    expect_error("--batch expects a whole number", 15, REQUIRED, "--batch", "ten");
    expect_error("--batch-ms must be between", 15, REQUIRED, "--batch-ms", "-1");
    expect_error("--apply-workers must be between 1 and 64, got 0", 15, REQUIRED,
                 "--apply-workers", "0");
    expect_error("--apply-workers must be between 1 and 64, got 65", 15, REQUIRED,
                 "--apply-workers", "65");
    expect_error("--apply-key needs a member name", 15, REQUIRED, "--apply-key", "");
    expect_error("--revoke-timeout must be between", 15, REQUIRED, "--revoke-timeout", "0");
    expect_error("--revoke-timeout must be between", 15, REQUIRED, "--revoke-timeout", "7200");
    expect_error("unknown option --bacth", 15, REQUIRED, "--bacth", "5");
    expect_error("unknown option --batch_ms", 15, REQUIRED, "--batch_ms", "5");
    expect_error("--log-level expects", 15, REQUIRED, "--log-level", "loud");
    expect_error("needs a value", 14, REQUIRED, "--batch");
    expect_error("-X expects property=value", 15, REQUIRED, "-X", "novalue");
    expect_error("unexpected argument", 14, REQUIRED, "stray");
    expect_error("enable.auto.commit cannot be set", 15, REQUIRED, "-X",
                 "enable.auto.commit=true");
    expect_error("group.id cannot be set", 15, REQUIRED, "-X", "group.id=other");
    /* The DSN is never echoed: it may hold a password. */
    expect_error("not a valid PostgreSQL connection string", 15, REQUIRED, "--dsn",
                 "host=x password=hunter22 bogus");
    char *argv[] = {"outbox-consume", REQUIRED, "--dsn", "host=x password=hunter22 bogus", NULL};
    char *env[] = {NULL};
    struct consume_config c;
    char err[CONSUMER_ERRLEN] = "";
    consume_config_load(&c, 15, argv, env, err, sizeof err);
    CHECK(strstr(err, "hunter22") == NULL);
    consume_config_free(&c);
}

static void test_revoke_timeout(void)
{
    struct consume_config c;
    char err[CONSUMER_ERRLEN];
    char *env[] = {"OUTBOX_CONSUME_REVOKE_TIMEOUT=2.5", NULL};
    CHECK_EQ_INT(load(&c, env, err, 13, REQUIRED), CONFIG_OK);
    CHECK(c.revoke_timeout == 2.5);
    consume_config_free(&c);
    CHECK_EQ_INT(load(&c, env, err, 15, REQUIRED, "--revoke-timeout", "0.5"), CONFIG_OK);
    CHECK(c.revoke_timeout == 0.5); /* the command line wins */
    struct consumer_options o;
    memset(&o, 0, sizeof o);
    consume_config_to_options(&c, &o);
    CHECK(o.revoke_timeout == 0.5);
    consume_config_free(&c);
}

static void test_help_and_version(void)
{
    struct consume_config c;
    char err[CONSUMER_ERRLEN];
    char *env[] = {NULL};
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    CHECK_EQ_INT(load(&c, env, err, 2, "--help"), CONFIG_EXIT);
    consume_config_free(&c);
    CHECK_EQ_INT(load(&c, env, err, 2, "-V"), CONFIG_EXIT);
    consume_config_free(&c);
    fclose(stdout);
    stdout = saved;
}

int main(void)
{
    test_defaults();
    test_precedence_and_kafka();
    test_topics();
    test_errors();
    test_revoke_timeout();
    test_help_and_version();
    CHECK_DONE();
}
