/*
 * kafka_conf.c — configuration both librdkafka clients share (see
 * kafka_conf.h).
 */
#include "outbox_relay/kafka/kafka_conf.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* Called from librdkafka's threads: log_msg is thread-safe. librdkafka
 * warns at every start that enable.gapless.guarantee is experimental; the
 * producer sets it on purpose (sink.c), so that warning is dropped, and
 * so are its stop at a gap and a lost sequence, which the sink logs with
 * what it does. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    enum log_level l = level <= 3 ? LOG_LEVEL_ERROR
                     : level <= 4 ? LOG_LEVEL_WARN
                     : level <= 6 ? LOG_LEVEL_INFO
                                  : LOG_LEVEL_DEBUG;
    if (strcmp(fac, "CONFWARN") == 0 && strstr(buf, "enable.gapless.guarantee is experimental"))
        return;
    /* The gapless guarantee's stop and a lost producer sequence are not
     * fatal to us: the sink says what it does about them, with this text
     * (sink.c, on_error, renewable_fatal). */
    if (strcmp(fac, "FATAL") == 0 &&
        (strstr(buf, "unable to satisfy gap-less guarantee") ||
         strstr(buf, "due to sequence desynchronization") ||
         strstr(buf, "with rewound sequence number") || strstr(buf, "due to unknown producer id")))
        return;
    if (log_enabled(l))
        log_msg(l, "kafka %s: %s", fac, buf);
}

int kafka_conf_route_log(rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    rd_kafka_conf_set_log_cb(conf, on_log);
    return kafka_conf_set(conf, "log_level", log_enabled(LOG_LEVEL_DEBUG) ? "7" : "6", err,
                          errlen);
}

bool kafka_conf_scram_refused(const char *mechanisms, int version)
{
    return mechanisms != NULL && strncasecmp(mechanisms, "SCRAM-", 6) == 0 &&
           version < KAFKA_SCRAM_FIXED_VERSION;
}

const char *kafka_conf_auth_advice(const char *mechanisms, const char *username, int version,
                                   char *buf, size_t cap)
{
    const char *mech = mechanisms != NULL && *mechanisms ? mechanisms : "GSSAPI";
    int n = snprintf(buf, cap,
                     "Kafka refused the SASL credentials (sasl.mechanisms=%s, sasl.username=%s): "
                     "check sasl.username and sasl.password (-X, or kafka.sasl.* in the "
                     "config file) and the user on the brokers; nothing is delivered or "
                     "confirmed meanwhile",
                     mech, username != NULL && *username ? username : "(unset)");
    if (n >= 0 && (size_t) n < cap && kafka_conf_scram_refused(mechanisms, version))
        snprintf(buf + n, cap - (size_t) n,
                 ". If they are right: this librdkafka (%d.%d.%d) is older than 2.6.1, and "
                 "brokers of Kafka 3.9 and later refuse its SCRAM proof as invalid "
                 "credentials (librdkafka issue 4895); use -X sasl.mechanisms=PLAIN over "
                 "SASL_SSL, or build outbox-relay with librdkafka 2.6.1 or later",
                 (version >> 24) & 0xff, (version >> 16) & 0xff, (version >> 8) & 0xff);
    return buf;
}

/* One property of a configuration, "" when unset or unreadable. */
static void conf_value(const rd_kafka_conf_t *conf, const char *name, char *dst, size_t cap)
{
    size_t size = cap;
    if (rd_kafka_conf_get(conf, name, dst, &size) != RD_KAFKA_CONF_OK)
        dst[0] = '\0';
}

const char *kafka_conf_auth_advice_of(rd_kafka_t *rk, char *buf, size_t cap)
{
    char mech[64], user[128];
    conf_value(rd_kafka_conf(rk), "sasl.mechanisms", mech, sizeof mech);
    conf_value(rd_kafka_conf(rk), "sasl.username", user, sizeof user);
    return kafka_conf_auth_advice(mech, user, rd_kafka_version(), buf, cap);
}

void kafka_conf_warn_scram(const rd_kafka_conf_t *conf, const char *who)
{
    char mech[64], proto[32];
    conf_value(conf, "sasl.mechanisms", mech, sizeof mech);
    conf_value(conf, "security.protocol", proto, sizeof proto);
    if (strncasecmp(proto, "sasl", 4) == 0 && kafka_conf_scram_refused(mech, rd_kafka_version()))
        log_warn("%s uses sasl.mechanisms=%s with librdkafka %s: brokers of Kafka 3.9 and "
                 "later refuse the SCRAM proof of a librdkafka older than 2.6.1 as invalid "
                 "credentials (librdkafka issue 4895); use -X sasl.mechanisms=PLAIN over "
                 "SASL_SSL, or build with librdkafka 2.6.1 or later",
                 who, mech, rd_kafka_version_str());
}

void kafka_conf_print_library(void)
{
    printf("librdkafka %s\n", rd_kafka_version_str());
}
