/*
 * kafka_conf.h — what our two librdkafka clients, the relayer's producer
 * (sink.c) and outbox-consume's consumer (consumer.c), set up the same way
 * on their configuration before rd_kafka_new() takes it over.
 */
#ifndef OUTBOX_RELAY_KAFKA_CONF_H
#define OUTBOX_RELAY_KAFKA_CONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

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

#endif
