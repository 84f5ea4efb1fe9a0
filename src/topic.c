/*
 * topic.c — event type → Kafka topic (see topic.h).
 */
#include "outbox_relay/topic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "outbox_relay/options.h"

int topic_check_template(const char *tmpl, char *err, size_t errlen)
{
    if (*tmpl == '\0') {
        snprintf(err, errlen, "topic template is empty");
        return -1;
    }
    for (const char *p = tmpl; *p != '\0'; p++) {
        if (*p == '{') {
            if (strncmp(p, "{type}", 6) == 0) {
                p += 5;
                continue;
            }
            if (strncmp(p, "{prefix}", 8) == 0) {
                p += 7;
                continue;
            }
            snprintf(err, errlen, "topic template \"%s\": only {type} and {prefix} may stand "
                     "in braces", tmpl);
            return -1;
        }
        if (!options_topic_char_ok(*p)) {
            unsigned char c = (unsigned char) *p;
            char what[16];
            if (c > 0x20 && c < 0x7f)
                snprintf(what, sizeof what, "'%c'", c);
            else
                snprintf(what, sizeof what, "byte 0x%02X", c);
            snprintf(err, errlen, "topic template: %s is not allowed in Kafka topic names "
                     "(use letters, digits, '.', '_' and '-')", what);
            return -1;
        }
    }
    return 0;
}

int topic_name(const char *tmpl, const char *type, size_t type_len, char *out, size_t cap)
{
    size_t n = 0, prefix_len = type_len;
    const char *dot = memchr(type, '.', type_len);
    if (dot != NULL)
        prefix_len = (size_t) (dot - type);

    for (const char *p = tmpl; *p != '\0'; p++) {
        const char *src = p;
        size_t len = 1;
        if (*p == '{' && strncmp(p, "{type}", 6) == 0) {
            src = type, len = type_len, p += 5;
        } else if (*p == '{' && strncmp(p, "{prefix}", 8) == 0) {
            src = type, len = prefix_len, p += 7;
        }
        if (n + len >= cap) {
            out[n] = '\0';
            return -1;
        }
        memcpy(out + n, src, len);
        n += len;
    }
    out[n] = '\0';
    if (n == 0 || n > 249 || (n == 1 && out[0] == '.') || (n == 2 && strcmp(out, "..") == 0))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!options_topic_char_ok(out[i]))
            return -1;
    return (int) n;
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
