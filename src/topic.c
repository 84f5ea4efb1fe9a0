/*
 * topic.c — event type → Kafka topic (see topic.h).
 */
#include "outbox_relay/topic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/config.h"

int topic_name(const char *tmpl, const char *type, size_t type_len, char *out, size_t cap)
{
    /* The template's syntax is the configuration's (checked at start). */
    return config_expand_topic(tmpl, type, type_len, out, cap);
}

static uint64_t type_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char) s[i]) * 1099511628211ULL;
    return h;
}

struct topic_entry *topic_cache_find(struct topic_cache *c, const char *type, size_t type_len)
{
    size_t i = (size_t) type_hash(type, type_len) & (TOPIC_SLOTS - 1);
    for (;;) {
        struct topic_entry *t = &c->slots[i];
        if (t->type == NULL || (t->type_len == type_len && memcmp(t->type, type, type_len) == 0))
            return t;
        i = (i + 1) & (TOPIC_SLOTS - 1);
    }
}

bool topic_cache_full(const struct topic_cache *c)
{
    return c->n >= TOPIC_CACHE_MAX;
}

int topic_cache_put(struct topic_cache *c, struct topic_entry *slot, const char *type,
                    size_t type_len, void *handle)
{
    if (topic_cache_full(c) || slot->type != NULL)
        return -1;
    char *copy = malloc(type_len + 1);
    if (copy == NULL)
        return -1;
    memcpy(copy, type, type_len);
    copy[type_len] = '\0';
    slot->type = copy;
    slot->type_len = type_len;
    slot->handle = handle;
    c->n++;
    return 0;
}

void topic_cache_clear(struct topic_cache *c, void (*release)(void *handle))
{
    for (size_t i = 0; i < TOPIC_SLOTS; i++)
        if (c->slots[i].type != NULL) {
            if (release)
                release(c->slots[i].handle);
            free(c->slots[i].type);
            c->slots[i].type = NULL;
        }
    c->n = 0;
}
