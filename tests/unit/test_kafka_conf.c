/*
 * test_kafka_conf.c — the advice for a refused SASL login: it names the
 * mechanism and user (never a password), and for SCRAM from a librdkafka
 * older than 2.6.1 the incompatibility with Kafka 3.9 and later, whatever
 * the case of the mechanism's name.
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/kafka/kafka_conf.h"

#define V(a, b, c) (((a) << 24) | ((b) << 16) | ((c) << 8) | 0xff)

int main(void)
{
    CHECK(kafka_conf_scram_refused("SCRAM-SHA-512", V(2, 0, 2)));
    CHECK(kafka_conf_scram_refused("scram-sha-256", V(2, 6, 0)));
    CHECK(!kafka_conf_scram_refused("SCRAM-SHA-512", V(2, 6, 1)));
    CHECK(!kafka_conf_scram_refused("SCRAM-SHA-512", V(2, 12, 1)));
    CHECK(!kafka_conf_scram_refused("PLAIN", V(2, 0, 2)));
    CHECK(!kafka_conf_scram_refused("GSSAPI", V(2, 0, 2)));
    CHECK(!kafka_conf_scram_refused(NULL, V(2, 0, 2)));
    CHECK_EQ_INT(KAFKA_SCRAM_FIXED_VERSION, V(2, 6, 1));

    char buf[768];
    const char *a = kafka_conf_auth_advice("SCRAM-SHA-512", "relay", V(2, 0, 2), buf, sizeof buf);
    CHECK(a == buf);
    CHECK(strstr(a, "sasl.mechanisms=SCRAM-SHA-512, sasl.username=relay") != NULL);
    CHECK(strstr(a, "check sasl.username and sasl.password") != NULL);
    CHECK(strstr(a, "(2.0.2) is older than 2.6.1") != NULL);
    CHECK(strstr(a, "sasl.mechanisms=PLAIN over SASL_SSL") != NULL);

    a = kafka_conf_auth_advice("PLAIN", "relay", V(2, 0, 2), buf, sizeof buf);
    CHECK(strstr(a, "sasl.mechanisms=PLAIN, sasl.username=relay") != NULL);
    CHECK(strstr(a, "2.6.1") == NULL);
    a = kafka_conf_auth_advice("SCRAM-SHA-256", "", V(2, 8, 0), buf, sizeof buf);
    CHECK(strstr(a, "sasl.username=(unset)") != NULL);
    CHECK(strstr(a, "2.6.1") == NULL);
    a = kafka_conf_auth_advice(NULL, NULL, V(2, 0, 2), buf, sizeof buf);
    CHECK(strstr(a, "sasl.mechanisms=GSSAPI") != NULL);

    /* A small buffer is cut, never overrun, and stays a string. */
    char small[16];
    memset(small, 'x', sizeof small);
    a = kafka_conf_auth_advice("SCRAM-SHA-512", "relay", V(2, 0, 2), small, sizeof small);
    CHECK_EQ_INT((int) strlen(a), (int) sizeof small - 1);
    CHECK_DONE();
}
