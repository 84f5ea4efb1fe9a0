/*
 * consume_config.h — the options of outbox-consume, read from defaults, then
 * the environment (OUTBOX_CONSUME_<NAME>, e.g. OUTBOX_CONSUME_BATCH_MS),
 * then the command line; later sources win. Pure: no I/O.
 *
 * librdkafka properties pass through untouched, kcat style, as in the
 * relayer:
 *   command line   -X security.protocol=SASL_SSL
 *   environment    OUTBOX_CONSUME_KAFKA_SECURITY_PROTOCOL=SASL_SSL
 * (in the environment form '_' stands for '.').
 */
#ifndef OUTBOX_RELAY_CONSUME_CONFIG_H
#define OUTBOX_RELAY_CONSUME_CONFIG_H

#include <stddef.h>

#include "outbox_relay/consume/consumer.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/base/options.h" /* struct config_kv, CONFIG_*, enum config_result */

#define CONSUME_MAX_TOPICS 64

struct consume_config {
    char *brokers;
    char *group;         /* Kafka consumer group */
    char *topics;        /* as given: "a,b" */
    char *topic_list[CONSUME_MAX_TOPICS]; /* split and validated */
    size_t ntopics;
    char *dsn;
    char *consumer;      /* the name recorded in processed_events */
    char *apply;         /* SQL with $1..$5 */
    enum consumer_on_error on_error;
    long batch;          /* messages per transaction, at most */
    long batch_ms;       /* ms a batch waits to fill after its first message */
    long apply_workers;  /* PostgreSQL connections a batch is split over, by key */
    char *apply_key;     /* the payload member that is the key of that split (NULL: Kafka key) */
    double reconnect_max; /* seconds: cap of the PostgreSQL reconnect backoff */
    double revoke_timeout; /* seconds a revoke or stop waits for the batch in progress */
    enum log_level log_level;
    enum log_format log_format;
    struct config_kv kafka[CONFIG_MAX_KAFKA_PROPS]; /* in order given */
    size_t nkafka;
    struct consumer_kv kafka_view[CONFIG_MAX_KAFKA_PROPS]; /* the same, for the library */
};

/* Fills cfg from defaults, envp (NULL-terminated "NAME=value" strings) and
 * argv. CONFIG_OK: ready to run. CONFIG_EXIT: --help or --version was
 * printed to stdout; exit 0. CONFIG_ERROR: err holds what was wrong; exit 2.
 * cfg owns every string in it; free with consume_config_free() in every
 * case. */
enum config_result consume_config_load(struct consume_config *cfg, int argc, char **argv,
                                       char **envp, char *err, size_t errlen);

void consume_config_free(struct consume_config *cfg);

/* Registers the DSN password and secret librdkafka properties with the
 * logger (the rules both programs share, options_register_secrets). */
void consume_config_register_secrets(const struct consume_config *cfg);

/* Fills the library's options from cfg; the strings stay owned by cfg,
 * which must outlive the consumer. handler fields are left to the caller. */
void consume_config_to_options(const struct consume_config *cfg, struct consumer_options *o);

#endif
