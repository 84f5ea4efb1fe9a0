/*
 * kafka_conf.c — configuration both librdkafka clients share (see
 * kafka_conf.h).
 */
#include "outbox_relay/kafka/kafka_conf.h"

#include <stdio.h>

#include "outbox_relay/base/log.h"

int kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *err,
                   size_t errlen)
{
    char e[256];
    if (rd_kafka_conf_set(conf, key, value, e, sizeof e) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "librdkafka property %s: %s", key, e); /* never the value */
        return -1;
    }
    return 0;
}

/* Called from librdkafka's threads: log_msg is thread-safe. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    enum log_level l = level <= 3 ? LOG_LEVEL_ERROR
                     : level <= 4 ? LOG_LEVEL_WARN
                     : level <= 6 ? LOG_LEVEL_INFO
                                  : LOG_LEVEL_DEBUG;
    if (log_enabled(l))
        log_msg(l, "kafka %s: %s", fac, buf);
}

int kafka_conf_route_log(rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    rd_kafka_conf_set_log_cb(conf, on_log);
    return kafka_conf_set(conf, "log_level", log_enabled(LOG_LEVEL_DEBUG) ? "7" : "6", err,
                          errlen);
}
