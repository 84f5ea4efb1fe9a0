/*
 * outbox_event.h — the outbox event the Kafka sink publishes, and the parts
 * of turning a change into one that do not depend on the output plugin.
 * Pure: no I/O; only the scratch buffer allocates.
 *
 * A decoder (wal2json today: w2j_event_decode() in w2j.h; pgoutput next)
 * finds the outbox columns or the logical message in its own format, as
 * text, and hands that text to the functions below, so that every plugin
 * checks ids, parses the message envelope and reads timestamps the same
 * way and reports the same errors ("event at LSN <lsn>: ...").
 */
#ifndef OUTBOX_RELAY_OUTBOX_EVENT_H
#define OUTBOX_RELAY_OUTBOX_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

/* Room for the text of an event id (uuid: 36, text ids: up to 63 bytes). */
#define OUTBOX_EVENT_ID_MAX 64
/* Columns beyond the five an event maps (headers from columns, {column}s of
 * the topic template), at most. */
#define OUTBOX_MAX_EXTRA 8

/* A column's text: NOT NUL-terminated; ptr NULL means SQL NULL. */
struct outbox_field {
    const char *ptr;
    size_t len;
};

/* One outbox event, ready for the Kafka sink. Strings are NOT NUL-terminated
 * and point into the decoded change (the caller's line) or into the scratch
 * buffer used to decode it; they stay valid until the next decode on the
 * same scratch or until the line is freed. A NULL ptr means SQL NULL. */
struct outbox_event {
    char event_id[OUTBOX_EVENT_ID_MAX]; /* NUL-terminated: the row id (decimal,
                                uuid or text), or for a logical message
                                "m-<LSN hex 16 digits>" */
    const char *aggregate_id; size_t aggregate_id_len;
    const char *type;         size_t type_len;
    const char *payload;      size_t payload_len; /* bytea: the raw bytes */
    const char *created_at;   size_t created_at_len;
    lsn_t lsn;               /* the change's LSN */
    bool message;            /* from a logical message (its payload is JSON) */
    /* The map's extra columns (struct outbox_columns_map.extra), same order;
     * all NULL for a logical message. */
    struct outbox_field extra[OUTBOX_MAX_EXTRA];
};

/* Scratch memory for unescaping. Owned by the caller; grows as needed.
 * Zero-initialise it; free with outbox_scratch_free(). */
struct outbox_scratch {
    char *buf;
    size_t len; /* bytes used by the current event */
    size_t cap;
};

void outbox_scratch_free(struct outbox_scratch *s);

/* Makes room for need bytes in s and empties it (s->len = 0): everything
 * an event will put in the scratch is reserved at once, before a pointer
 * into it is handed out, so that none can dangle. Returns -1 when out of
 * memory (s unchanged but emptied). */
int outbox_scratch_reserve(struct outbox_scratch *s, size_t need);

/* How the id column's text becomes an event id. */
enum outbox_id_kind {
    OUTBOX_ID_INTEGER = 0, /* bigint, integer, smallint: 1 to 19 digits */
    OUTBOX_ID_TEXT         /* uuid, text, varchar: 1 to 63 bytes, no control
                              character */
};

/* An extra column: sent as a header, or only used by the topic template. */
struct outbox_extra_column {
    const char *column; /* the column's name */
    const char *header; /* the Kafka header's name; NULL: topic template only */
};

/* Column names of the outbox table (the seed schema's by default) and what
 * their types mean. The names are borrowed (the configuration's). */
struct outbox_columns_map {
    const char *id;           /* "id" */
    const char *aggregate_id; /* "aggregate_id"; NULL: no key column */
    const char *type;         /* "type" */
    const char *payload;      /* "payload" */
    const char *created_at;   /* "created_at"; NULL: no timestamp column */
    /* Set from the catalog at startup (layout_check(), layout.h); the
     * defaults are the seed schema's (bigint id, jsonb payload). */
    enum outbox_id_kind id_kind;
    bool payload_bytea;       /* payload is bytea: its "\x..." text is
                                 decoded to the raw bytes */
    bool payload_text;        /* payload is text or varchar (not JSON) */
    size_t nextra;
    struct outbox_extra_column extra[OUTBOX_MAX_EXTRA];
};

extern const struct outbox_columns_map OUTBOX_DEFAULT_COLUMNS;

/* The columns every event of the outbox is read from: id, aggregate_id,
 * type, payload, created_at. */
#define OUTBOX_NEEDED_COLUMNS 5

/* Their names as map (NULL: OUTBOX_DEFAULT_COLUMNS) has them, in that
 * order, into names; an unmapped one (aggregate_id, created_at) is NULL.
 * The strings are map's. What a decoder's shape test (decoder_shaped)
 * looks for. */
void outbox_columns_needed(const struct outbox_columns_map *map,
                           const char *names[OUTBOX_NEEDED_COLUMNS]);

/* The index of column name among map's extra columns, or -1. */
int outbox_columns_extra_index(const struct outbox_columns_map *map, const char *name);

/* Adds column (and header, NULL for none) to map's extra columns; a column
 * already there keeps its entry and gets header when it had none. Returns
 * its index, or -1 when OUTBOX_MAX_EXTRA are taken. */
int outbox_columns_add_extra(struct outbox_columns_map *map, const char *column,
                             const char *header);

/* Empties ev (every string NULL, event_id "") for a change at lsn. */
void outbox_event_reset(struct outbox_event *ev, lsn_t lsn);

/* Writes "event at LSN <lsn>: " and fmt into errbuf (may be NULL);
 * returns -1. */
int outbox_event_fail(char *errbuf, size_t errlen, lsn_t lsn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Sets ev->event_id from the text of the id column: 1 to 19 decimal
 * digits, after a '-' when sign_ok (a JSON number may be negative, a text
 * id may not). Returns -1, ev->event_id unchanged, for anything else. */
int outbox_event_set_id(struct outbox_event *ev, const char *text, size_t len, bool sign_ok);

/* Sets ev->event_id from the text of a uuid or text id column: 1 to
 * OUTBOX_EVENT_ID_MAX - 1 bytes without control characters (it goes into
 * logs and headers). Returns -1, ev->event_id unchanged, for anything else. */
int outbox_event_set_text_id(struct outbox_event *ev, const char *text, size_t len);

/* Decodes PostgreSQL's hex output of a bytea ("\x" then two hex digits a
 * byte, either case: what pgoutput and a text-mode query send) into out,
 * which has room for (len - 2) / 2 bytes; out may be text itself (the
 * decoding runs forward and never overtakes its input). Returns the number
 * of bytes, or -1 when text is not in that format (bytea_output = escape,
 * an odd count, a non-hex digit). */
long outbox_bytea_decode(const char *text, size_t len, char *out);

/* The same without the "\x": how wal2json prints a bytea ("00ff41"). */
long outbox_hex_decode(const char *text, size_t len, char *out);

/* Sets ev->event_id of a logical message: "m-" and ev->lsn as 16 upper-case
 * hex digits, like LSN_FMT ("m-00000000016B3A28"). The LSN is the one
 * pg_logical_emit_message() returned, so producers can compute it. */
void outbox_event_set_message_id(struct outbox_event *ev);

/*
 * Parses the envelope of a logical message, the content text (already
 * unescaped from the plugin's encoding, if it has one):
 *
 *   {"aggregate_id": "..." | null, "type": "...", "payload": <any JSON>}
 *
 * and sets ev->type, ev->aggregate_id and ev->payload. Keys in any order,
 * unknown keys skipped, whitespace allowed. "type" must be a non-empty
 * string; "aggregate_id" a string, null or absent (NULL); "payload" is
 * kept as the raw JSON text of its value (a string keeps its quotes and
 * escapes; null gives the text "null"; absent gives NULL). A key twice,
 * trailing garbage or nesting deeper than 64 is an error. Strings without
 * escapes point into content; escaped ones are unescaped into scratch past
 * scratch->len, for which the caller has reserved len bytes beforehand
 * (outbox_scratch_reserve(): content may itself live in the scratch, so
 * this function never grows it). Returns 0, or -1 with "event at LSN
 * <ev->lsn>: ..." in errbuf.
 */
int outbox_event_from_envelope(const char *content, size_t len, struct outbox_scratch *scratch,
                               struct outbox_event *ev, char *errbuf, size_t errlen);

/*
 * PostgreSQL's timestamptz output with DateStyle ISO, as the plugins send
 * it, to microseconds since the Unix epoch:
 *
 *   YYYY-MM-DD HH:MM:SS[.F{1,6}]±HH[:MM[:SS]][ BC]
 *
 * The year has four to six digits; 'T' is accepted as the separator; the
 * offset has seconds for historic local mean times ("+05:53:28").
 * Returns 0, or -1 for anything else, including "infinity" and instants
 * that do not fit in int64 microseconds.
 */
int outbox_timestamp_us(const char *text, size_t len, int64_t *unix_us);

/* Room for outbox_time_format()'s text. */
#define OUTBOX_TIME_MAX 40

/* Microseconds since the Unix epoch as UTC text into buf (OUTBOX_TIME_MAX
 * bytes), trailing zeros of the fraction dropped: as PostgreSQL prints a
 * timestamptz in UTC with DateStyle ISO ("2026-03-01 10:00:00.123+00"), or
 * with rfc3339 as RFC 3339 wants it ("2026-03-01T10:00:00.123Z"). Returns
 * the length, or 0 outside the years 1 to 9999. */
size_t outbox_time_format(int64_t unix_usec, bool rfc3339, char *buf);

#endif
