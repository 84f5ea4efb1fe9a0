/*
 * topic.h — event type → Kafka topic: the name the topic template gives a
 * type, and a cache of one opaque handle per type (the sink keeps its
 * librdkafka topic handles there, so that an event's topic costs one hash
 * lookup, not a template expansion and a lookup by name: docs/benchmarks.md).
 * Pure: no I/O, no librdkafka.
 */
#ifndef OUTBOX_RELAY_TOPIC_H
#define OUTBOX_RELAY_TOPIC_H

#include <stdbool.h>
#include <stddef.h>

#include "outbox_relay/decode/outbox_event.h"

/* Open addressing, at most half full, so a lookup ends at the entry or at
 * an empty slot within a few probes. Types beyond the cap (a template that
 * makes a topic per aggregate would) are not cached. */
#define TOPIC_SLOTS 512
#define TOPIC_CACHE_MAX (TOPIC_SLOTS / 2)

struct topic_entry {
    char *type;      /* NULL = empty slot; owned by the cache */
    size_t type_len;
    void *handle;    /* the caller's, released by topic_cache_clear */
    int tag;         /* the caller's number for the topic (the sink: its
                        partition gate's); -1 from topic_cache_put on */
};

/* Zero-initialised is empty. */
struct topic_cache {
    size_t n;
    struct topic_entry slots[TOPIC_SLOTS];
};

/* Validates a topic template: literal parts must be legal Kafka topic
 * characters [A-Za-z0-9._-]; in braces stand {type}, {prefix} or the name
 * of a column of the outbox table ({aggregatetype}: a plain identifier of
 * at most 63 bytes; whether the table has it is checked at startup,
 * layout.h). Returns 0, or -1 with a message in err. */
int topic_check_template(const char *tmpl, char *err, size_t errlen);

/* The next column placeholder of a template (neither {type} nor {prefix})
 * from *pos on: copies its name into name (capacity cap), moves *pos past
 * it and returns 1; 0 when there is none left; -1 when cap is too small. */
int topic_next_column(const char **pos, char *name, size_t cap);

/* Whether the template has {type} or {prefix}. */
bool topic_uses_type(const char *tmpl);

/* Expands a topic template for ev into out (capacity cap): {type} is the
 * type, {prefix} its part before the first dot, {column} the value of that
 * extra column of map (struct outbox_columns_map.extra) in ev->extra. Returns
 * the length, or -1 if a column is not mapped or NULL, or the result is
 * empty, longer than 249 bytes or contains characters Kafka does not allow
 * in topic names. On -1 out still says what the template gave, never a
 * name that could be a real topic: a placeholder that gave nothing or did
 * not fit stays as written ("outbox.event.{region}"); otherwise the whole
 * (invalid) expansion. */
int topic_name_event(const char *tmpl, const struct outbox_event *ev,
                     const struct outbox_columns_map *map, char *out, size_t cap);

/* topic_name_event() for a type alone (no column placeholders). */
int topic_name(const char *tmpl, const char *type, size_t type_len, char *out, size_t cap);

/* The entry for type: the cached one, or the empty slot where it belongs
 * (entry->type == NULL). Never NULL. */
struct topic_entry *topic_cache_find(struct topic_cache *c, const char *type, size_t type_len);

/* True when no more types may be cached. */
bool topic_cache_full(const struct topic_cache *c);

/* Caches handle for type in slot (from topic_cache_find, empty). Returns
 * 0, or -1 (full, or out of memory: nothing cached). */
int topic_cache_put(struct topic_cache *c, struct topic_entry *slot, const char *type,
                    size_t type_len, void *handle);

/* Empties the cache, calling release (may be NULL) on every handle. */
void topic_cache_clear(struct topic_cache *c, void (*release)(void *handle));

#endif
