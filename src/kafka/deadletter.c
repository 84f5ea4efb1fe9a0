/*
 * deadletter.c — the dead-letter queue and record, and their sending (see
 * deadletter.h). Everything but deadletter_produce is memory only.
 */
#include "outbox_relay/kafka/deadletter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/kafka/sink.h"

void deadletter_job_free(struct deadletter_job *j)
{
    if (j == NULL)
        return;
    free(j->event_id);
    free(j->type);
    free(j->topic);
    free(j->error);
    free(j->key);
    free(j->value);
    free(j);
}

static char *dup_bytes(const char *p, size_t n)
{
    char *c = malloc(n + 1);
    if (c != NULL) {
        if (n)
            memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

int deadletter_queue_push(struct deadletter_queue *q, uint64_t token, lsn_t lsn,
                          const struct sink_report *rep)
{
    struct deadletter_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return -1;
    j->token = token;
    j->lsn = lsn;
    j->event_id = strdup(rep->event_id);
    j->type = strdup(rep->event_type);
    j->topic = strdup(rep->topic);
    j->error = strdup(rep->errstr);
    j->key = rep->key ? dup_bytes(rep->key, rep->key_len) : NULL;
    j->key_len = rep->key ? rep->key_len : 0;
    j->value = rep->value ? dup_bytes(rep->value, rep->value_len) : NULL;
    j->value_len = rep->value ? rep->value_len : 0;
    if (!j->event_id || !j->type || !j->topic || !j->error || (rep->key && !j->key) ||
        (rep->value && !j->value)) {
        deadletter_job_free(j);
        return -1;
    }
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    return 0;
}

struct deadletter_job *deadletter_queue_pop(struct deadletter_queue *q)
{
    struct deadletter_job *j = q->head;
    if (j == NULL)
        return NULL;
    q->head = j->next;
    if (q->head == NULL)
        q->tail = NULL;
    j->next = NULL;
    return j;
}

bool deadletter_queue_empty(const struct deadletter_queue *q)
{
    return q->head == NULL;
}

void deadletter_queue_clear(struct deadletter_queue *q)
{
    struct deadletter_job *j;
    while ((j = deadletter_queue_pop(q)) != NULL)
        deadletter_job_free(j);
}

void deadletter_build(struct deadletter_msg *m, lsn_t lsn, const char *event_id,
                      const char *type, const char *topic, const char *key, size_t key_len,
                      const char *value, size_t value_len, const char *error,
                      size_t max_message_bytes)
{
    snprintf(m->lsn, sizeof m->lsn, LSN_FMT, LSN_ARGS(lsn));
    snprintf(m->aggregate, sizeof m->aggregate, "%.*s", (int) key_len, key ? key : "");
    const char *h[2 * DEADLETTER_NHEADERS] = {
        "event_id", event_id, "event_type",     type,  "aggregate_id", m->aggregate,
        "lsn",      m->lsn,   "original_topic", topic, "error",        error};
    memcpy(m->headers, h, sizeof h);
    m->key = key;
    m->key_len = key_len;
    m->value = value;
    m->value_len = value_len;
    if (value_len + key_len + 1024 > max_message_bytes) {
        m->value = NULL; /* the payload does not fit: headers only */
        m->value_len = 0;
    }
}

int deadletter_produce(struct sink *sk, const char *topic, const struct deadletter_msg *m,
                       uint64_t token)
{
    return sink_produce_raw(sk, topic, m->key, m->key_len, m->value, m->value_len, m->headers,
                            DEADLETTER_NHEADERS, token);
}
