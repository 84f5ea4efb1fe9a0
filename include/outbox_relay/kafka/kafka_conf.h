/*
 * kafka_conf.h — what our two librdkafka clients, the relayer's producer
 * (sink.c) and outbox-consume's consumer (consumer.c), set up the same way
 * on their configuration before rd_kafka_new() takes it over.
 */
#ifndef OUTBOX_RELAY_KAFKA_CONF_H
#define OUTBOX_RELAY_KAFKA_CONF_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>

/* The first librdkafka whose SCRAM proof brokers of Kafka 3.9 and later
 * accept (rd_kafka_version() encoding of 2.6.1): before it, the
 * client-final-message repeats the client's nonce (librdkafka #4895), which
 * those brokers check strictly since CVE-2024-56128, so they refuse correct
 * credentials as invalid. Debian 12 ships 2.0.2. */
#define KAFKA_SCRAM_FIXED_VERSION 0x020601ff

/* Sets one librdkafka property. Returns 0, or -1 with librdkafka's reason
 * in err; the message names the property but never its value, which may be
 * a password. */
int kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *err,
                   size_t errlen);

/* Routes librdkafka's log lines into ours ("kafka FACILITY: message"),
 * mapping its syslog levels: 0-3 error, 4 warn, 5-6 info, 7 debug. Lines
 * below our log level are dropped; the logger scrubs secrets as usual. Also
 * sets log_level (7 when we log debug, else 6), so call it before the
 * user's properties: a -X log_level of theirs wins. Returns 0, or -1 with
 * err. */
int kafka_conf_route_log(rd_kafka_conf_t *conf, char *err, size_t errlen);

/* Pure: whether a client of librdkafka `version` (rd_kafka_version()) with
 * sasl.mechanisms `mechanisms` (NULL: unset) sends the SCRAM proof that
 * Kafka 3.9 and later refuse (KAFKA_SCRAM_FIXED_VERSION). */
bool kafka_conf_scram_refused(const char *mechanisms, int version);

/* Pure: what to tell the operator when the broker refused the client's SASL
 * credentials (RD_KAFKA_RESP_ERR__AUTHENTICATION): the mechanism and user
 * it was configured with (never the password), what to check, and, when
 * kafka_conf_scram_refused(), that correct SCRAM credentials are refused by
 * Kafka 3.9+ with this librdkafka and the ways out. Writes at most cap
 * bytes (NUL-terminated) into buf; returns buf. */
const char *kafka_conf_auth_advice(const char *mechanisms, const char *username, int version,
                                   char *buf, size_t cap);

/* kafka_conf_auth_advice() for a running client, from its configuration. */
const char *kafka_conf_auth_advice_of(rd_kafka_t *rk, char *buf, size_t cap);

/* Logs a warning when conf asks for SCRAM from a librdkafka that Kafka 3.9
 * and later refuse it from (kafka_conf_scram_refused), before the client
 * is made: `who` names it ("the producer", "the consumer"). */
void kafka_conf_warn_scram(const rd_kafka_conf_t *conf, const char *who);

/* Prints "librdkafka <version>" to stdout (--version). */
void kafka_conf_print_library(void);

#endif
