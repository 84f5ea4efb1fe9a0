/*
 * topic.c — event type → Kafka topic (see topic.h).
 */
#include "outbox_relay/kafka/topic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "outbox_relay/base/options.h"

/* The length of the placeholder name at p (after '{', up to '}'): a plain
 * identifier of at most 63 bytes; 0 when there is none. */
static size_t placeholder_len(const char *p)
{
    size_t n = 0;
    while (p[n] != '\0' && p[n] != '}') {
        char c = p[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (n > 0 && ((c >= '0' && c <= '9') || c == '$'))))
            return 0;
        n++;
    }
    return p[n] == '}' && n <= 63 ? n : 0;
}

static bool is_word(const char *p, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(p, word, n) == 0;
}

int topic_check_template(const char *tmpl, char *err, size_t errlen)
{
    if (*tmpl == '\0') {
        snprintf(err, errlen, "topic template is empty");
        return -1;
    }
    for (const char *p = tmpl; *p != '\0'; p++) {
        if (*p == '{') {
            size_t n = placeholder_len(p + 1);
            if (n > 0) {
                p += n + 1;
                continue;
            }
            snprintf(err, errlen, "topic template \"%s\": only {type} and {prefix}, or a "
                     "column of the outbox table as {column_name}, may stand in braces", tmpl);
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

int topic_next_column(const char **pos, char *name, size_t cap)
{
    for (const char *p = *pos; *p != '\0'; p++) {
        if (*p != '{')
            continue;
        size_t n = placeholder_len(p + 1);
        if (n == 0)
            continue;
        const char *word = p + 1;
        p += n + 1;
        if (is_word(word, n, "type") || is_word(word, n, "prefix"))
            continue;
        if (n >= cap)
            return -1;
        memcpy(name, word, n);
        name[n] = '\0';
        *pos = p + 1;
        return 1;
    }
    return 0;
}

bool topic_uses_type(const char *tmpl)
{
    return strstr(tmpl, "{type}") != NULL || strstr(tmpl, "{prefix}") != NULL;
}

/* Expands tmpl for ev into out (capacity cap, NUL-terminated). A
 * placeholder that gives nothing (a column not mapped or NULL) or whose
 * value does not fit makes it return -1, or with keep_missing is copied as
 * it stands ("{region}") and the expansion goes on. Returns the length. */
static int expand(const char *tmpl, const struct outbox_event *ev,
                  const struct outbox_columns_map *map, bool keep_missing, char *out, size_t cap)
{
    const char *type = ev->type != NULL ? ev->type : "";
    size_t n = 0, type_len = ev->type_len, prefix_len = ev->type_len;
    const char *dot = memchr(type, '.', type_len);
    if (dot != NULL)
        prefix_len = (size_t) (dot - type);
    int rc = 0;

    for (const char *p = tmpl; *p != '\0'; p++) {
        const char *src = p;
        size_t len = 1, k;
        if (*p == '{' && (k = placeholder_len(p + 1)) > 0) {
            if (is_word(p + 1, k, "type")) {
                src = type, len = type_len;
            } else if (is_word(p + 1, k, "prefix")) {
                src = type, len = prefix_len;
            } else {
                char name[64];
                memcpy(name, p + 1, k);
                name[k] = '\0';
                int i = map != NULL ? outbox_columns_extra_index(map, name) : -1;
                src = i >= 0 ? ev->extra[i].ptr : NULL;
                len = i >= 0 ? ev->extra[i].len : 0;
            }
            if (src == NULL || n + len >= cap) { /* not mapped, NULL, or too long */
                rc = -1;
                if (!keep_missing)
                    break;
                src = p, len = k + 2; /* the placeholder as written */
            }
            p += k + 1;
        }
        if (n + len >= cap) {
            rc = -1;
            break;
        }
        memcpy(out + n, src, len);
        n += len;
    }
    out[n] = '\0';
    return rc < 0 ? -1 : (int) n;
}

int topic_name_event(const char *tmpl, const struct outbox_event *ev,
                     const struct outbox_columns_map *map, char *out, size_t cap)
{
    int rc = expand(tmpl, ev, map, false, out, cap);
    size_t n = rc < 0 ? 0 : (size_t) rc;
    bool valid = rc >= 0 && n > 0 && n <= 249 && !(n == 1 && out[0] == '.') &&
                 strcmp(out, "..") != 0;
    for (size_t i = 0; valid && i < n; i++)
        valid = options_topic_char_ok(out[i]);
    if (valid)
        return rc;
    /* For the dead letter's original_topic and the logs: never a prefix
     * that could pass for a real topic ("outbox.event." of a NULL
     * {region}): what could not be filled in stays in braces, which no
     * topic name may hold; a complete expansion shows what is wrong. */
    if (rc < 0)
        (void) expand(tmpl, ev, map, true, out, cap);
    return -1;
}

int topic_name(const char *tmpl, const char *type, size_t type_len, char *out, size_t cap)
{
    struct outbox_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.type_len = type_len;
    return topic_name_event(tmpl, &ev, NULL, out, cap);
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
    slot->tag = -1;
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
