/*
 * consume_msg.c — what the consumer's two ways of applying a batch share
 * (consume_batch.c message by message, consume_pipe.c pipelined; see
 * consume_internal.h): a Kafka message as NUL-terminated strings with its
 * event id (consume_view_make, the rules of consumer.h), and the verdict
 * on a failure of one of our own statements (consume_own_failed). Both
 * apply paths call down into this file; it calls only consume_pg.c.
 */
#include "consume_internal.h"

#include <inttypes.h>
#include <string.h>

#include "outbox_relay/base/log.h"

/* The failure of one of our own statements: a lost connection or a
 * transient conflict is retried; anything else (processed_events missing,
 * no privilege) cannot be fixed by retrying. */
enum apply_rc consume_own_failed(struct consumer *c, const char *what,
                                 const struct consumer_failure *why)
{
    switch (consume_classify(c, why)) {
    case FAIL_CONN:
        log_warn("PostgreSQL connection lost during %s: %s", what, why->message);
        return APPLY_CONN;
    case FAIL_TRANSIENT:
        log_warn("%s: %s (SQLSTATE %s); the batch is retried", what, why->message,
                 why->sqlstate);
        return APPLY_RETRY;
    default:
        consume_set_error(c, "%s failed: %s (SQLSTATE %s)%s", what, why->message, why->sqlstate,
                  strcmp(why->sqlstate, "42P01") == 0
                      ? "; load sql/002_processed_events.sql and sql/006_failed_events.sql"
                      : "");
        return APPLY_FATAL;
    }
}

/* ---- messages ---------------------------------------------------------- */

static char *dup_span(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        if (n > 0)
            memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* True when p[0..n) is valid UTF-8 without control characters: what an
 * event id must be to be stored as text (else the message gets the
 * kafka-<topic>-<p>-<o> id instead of poisoning the batch). */
static bool id_text_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char b = p[i];
        size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3
                   : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || i + len > n || (len == 1 && (b < 0x20 || b == 0x7f)) ||
            (len == 2 && b < 0xC2) || (len == 4 && b > 0xF4))
            return false;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        if ((len == 3 && b == 0xE0 && p[i + 1] < 0xA0) ||   /* overlong */
            (len == 3 && b == 0xED && p[i + 1] >= 0xA0) ||  /* surrogates */
            (len == 4 && b == 0xF0 && p[i + 1] < 0x90) ||   /* overlong */
            (len == 4 && b == 0xF4 && p[i + 1] >= 0x90))    /* > U+10FFFF */
            return false;
        i += len;
    }
    return true;
}

void consume_view_free(struct msg_view *v)
{
    free(v->key);
    free(v->type);
    free(v->payload);
    v->key = v->type = v->payload = NULL;
}

/* The last value of header name, or when there is none of alt. */
static bool header_last(rd_kafka_headers_t *hdrs, const char *name, const char *alt,
                        const void **val, size_t *size)
{
    return hdrs != NULL &&
           (rd_kafka_header_get_last(hdrs, name, val, size) == RD_KAFKA_RESP_ERR_NO_ERROR ||
            rd_kafka_header_get_last(hdrs, alt, val, size) == RD_KAFKA_RESP_ERR_NO_ERROR);
}

int consume_view_make(struct msg_view *v, const rd_kafka_message_t *km)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val;
    size_t size;
    memset(v, 0, sizeof *v);
    const char *topic = rd_kafka_topic_name(km->rkt);

    rd_kafka_message_headers(km, &hdrs);
    /* Our headers, or the CloudEvents Kafka binding's (--envelope cloudevents) */
    if (header_last(hdrs, "event_id", "ce_id", &val, &size) &&
        val != NULL && size > 0 && size < sizeof v->event_id && id_text_ok(val, size)) {
        memcpy(v->event_id, val, size);
        v->event_id[size] = '\0';
    } else {
        snprintf(v->event_id, sizeof v->event_id, "kafka-%s-%" PRId32 "-%" PRId64, topic,
                 km->partition, km->offset);
    }
    if (header_last(hdrs, "event_type", "ce_type", &val, &size) && val != NULL) {
        if ((v->type = dup_span(val, size)) == NULL)
            goto oom;
    }
    if (km->key != NULL && (v->key = dup_span(km->key, km->key_len)) == NULL)
        goto oom;
    if (km->payload != NULL && (v->payload = dup_span(km->payload, km->len)) == NULL)
        goto oom;

    v->m.event_id = v->event_id;
    v->m.aggregate_id = v->key;
    v->m.type = v->type;
    v->m.payload = v->payload;
    v->m.payload_len = v->payload ? km->len : 0;
    v->m.topic = topic;
    v->m.partition = km->partition;
    v->m.offset = km->offset;
    return 0;
oom:
    consume_view_free(v);
    return -1;
}
