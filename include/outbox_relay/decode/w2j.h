/*
 * w2j.h — wal2json (format-version 2) line decoder. Pure: no I/O, no
 * allocation in w2j_parse.
 *
 * wal2json v2 sends one JSON object per change. With include-lsn,
 * include-timestamp, include-types=0 and include-xids=0 the server produces
 * lines like these (captured from PostgreSQL 15 + wal2json 2.5); the relayer
 * leaves include-lsn out (the XLogData header carries the positions, see
 * decoder_w2j.c), so its lines have no "lsn"/"nextlsn" and the record's lsn and
 * nextlsn stay 0 for the caller to fill:
 *
 *   {"action":"B","timestamp":"2026-11-30 14:38:02.796452+00","lsn":"0/152AAA8","nextlsn":"0/152AAD8"}
 *   {"action":"I","timestamp":"…","lsn":"0/152A8D8","schema":"public","table":"events_outbox",
 *    "columns":[{"name":"id","value":1},{"name":"payload","value":"{\"a\": 1}"},…]}
 *   {"action":"M","timestamp":"…","lsn":"0/152AAA8","transactional":true,"prefix":"outbox","content":"{\"x\":1}"}
 *   {"action":"C","timestamp":"…","lsn":"0/152AAA8","nextlsn":"0/152AAD8"}
 *
 * B and C carry "lsn" = start of the commit record and "nextlsn" = its end;
 * the end is what a consumer confirms once the transaction is done. Keys may
 * come in any order and unknown keys are skipped (other option sets add
 * "xid", "pk", "identity", "type" in columns, …). Values of non-numeric,
 * non-boolean columns (text, uuid, jsonb, timestamptz) arrive as JSON
 * strings, escaped; jsonb payloads must be unescaped to get PostgreSQL's text.
 *
 * Two layers, on top of the JSON scanner jscan.h:
 *   w2j_parse()        (w2j.c) scans one line into a struct w2j_record
 *                      whose strings point into the caller's line (zero
 *                      copy), unescaping column values and content in
 *                      passing;
 *   w2j_event_decode() (w2j_event.c) maps an "I" record of the outbox table
 *                      (or an "M" record) to a struct outbox_event
 *                      (outbox_event.h, plugin-neutral), unescaping into a
 *                      scratch buffer owned by a struct outbox_scratch.
 */
#ifndef OUTBOX_RELAY_W2J_H
#define OUTBOX_RELAY_W2J_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/decode/jscan.h"
#include "outbox_relay/base/lsn.h"
#include "outbox_relay/decode/outbox_event.h"

#define W2J_MAX_COLUMNS 128
#define W2J_ERRLEN 256

/* A JSON value inside a line: jscan's token (jscan.h), under the names the
 * callers of this decoder have always used. For W2J_STRING, ptr/len span
 * the raw bytes between the quotes (still escaped); escaped is true when
 * they contain a backslash. For other types ptr/len span the raw token. */
#define w2j_vtype jscan_type
#define w2j_value jscan_value
#define W2J_ABSENT JSCAN_ABSENT /* key not present in the line */
#define W2J_NULL JSCAN_NULL
#define W2J_BOOL JSCAN_BOOL
#define W2J_NUMBER JSCAN_NUMBER
#define W2J_STRING JSCAN_STRING
#define W2J_OTHER JSCAN_OTHER /* object or array (kept raw) */

/* The unescaped text of an escaped string value, which w2j_parse() writes
 * into the record while it scans the value, so that w2j_event_decode() does
 * not walk the value a second time to unescape it. len bytes at
 * text_buf + off stand for the first raw bytes of the escaped value: all of
 * it, or a prefix when the record's buffer filled up (the rest is unescaped
 * on demand). src is the value's ptr when the text belongs to it, NULL when
 * there is none; a caller that rewrites the value makes the text unused. */
struct w2j_text {
    const char *src;
    size_t off;
    size_t len;
    size_t raw;
};

struct w2j_column {
    struct w2j_value name;
    struct w2j_value value;
    struct w2j_text text; /* of value: only for the columns of an 'I' record */
};

/* Room in a record for the texts: a typical outbox payload fits whole; a
 * larger one is unescaped in passing up to here and the rest later. */
#define W2J_TEXT_CAP 16384

struct w2j_record {
    char action;               /* 'B','C','I','U','D','T','M' */
    int64_t xid;               /* -1 when absent */
    lsn_t lsn;                 /* "lsn", 0 when absent */
    lsn_t nextlsn;             /* "nextlsn", 0 when absent */
    struct w2j_value timestamp; /* raw string, W2J_ABSENT when absent */
    struct w2j_value schema;   /* I/U/D/T */
    struct w2j_value table;    /* I/U/D/T */
    size_t ncolumns;           /* I and U: the "columns" array */
    struct w2j_column columns[W2J_MAX_COLUMNS];
    bool transactional;        /* M */
    struct w2j_value prefix;   /* M */
    struct w2j_value content;  /* M */
    struct w2j_text content_text; /* of content */
    size_t text_used;          /* bytes of text_buf that texts use */
    char text_buf[W2J_TEXT_CAP];
};

/* Scans one wal2json v2 line of len bytes (not NUL-terminated). On success
 * returns 0 and fills *rec (pointers into line; valid while line is). The
 * escaped string values in the columns of an 'I' record, and the content of
 * an 'M' record, are also unescaped into the record on the way (struct
 * w2j_text), when "action" comes first as wal2json writes it.
 * Returns -1 on malformed input (truncated, bad escape, trailing garbage,
 * missing or unknown "action", more than W2J_MAX_COLUMNS columns, nesting
 * deeper than 64) with a message naming what and at which byte offset in
 * errbuf. Never reads outside line[0..len). */
int w2j_parse(const char *line, size_t len, struct w2j_record *rec, char *errbuf,
              size_t errlen);

/* Unescapes a W2J_STRING value into dst (capacity dstcap >= v->len is always
 * enough: unescaping never grows). Handles \" \\ \/ \b \f \n \r \t \uXXXX
 * including surrogate pairs (to UTF-8). Stores the length in *outlen.
 * Returns -1 on an invalid escape or lone surrogate, or when dstcap is too
 * small. A value that is not escaped is copied as is. */
int w2j_unescape(const struct w2j_value *v, char *dst, size_t dstcap, size_t *outlen);

/* Parses a wal2json timestamp string ("2026-11-30 14:38:02.796452+00",
 * fraction optional, offset +HH, +HH:MM or -HH...) into microseconds since
 * the Unix epoch. Returns 0, or -1 if the text is not such a timestamp. */
int w2j_timestamp_us(const struct w2j_value *v, int64_t *unix_us);

/* struct outbox_event, struct outbox_scratch, struct outbox_columns_map and
 * OUTBOX_DEFAULT_COLUMNS are in outbox_event.h (plugin-neutral). */

/* Maps an 'I' record of the outbox table to an event.
 * - id must be a JSON number (integer) or a string of digits; it becomes
 *   event_id.
 * - type must be a non-empty string (the event cannot be routed otherwise);
 * - aggregate_id, payload, created_at: strings or null (payload may also be
 *   a number/bool/object raw token, taken as is).
 * For an 'M' record the content must be an envelope JSON object
 * {"aggregate_id": "...", "type": "...", "payload": <any JSON>} (payload
 * taken as its raw JSON text, e.g. an object), event_id is "m-" followed by
 * the record's lsn as 16 hex digits, created_at is the record's timestamp.
 * Returns 0, or -1 with a message in errbuf naming the missing/bad column
 * and the record's LSN. */
int w2j_event_decode(const struct w2j_record *rec, const struct outbox_columns_map *map,
                     struct outbox_scratch *scratch, struct outbox_event *ev,
                     char *errbuf, size_t errlen);

/* Details of w2j_event_decode() the contract above leaves open:
 * - map NULL means OUTBOX_DEFAULT_COLUMNS. In a map, id and type are required;
 *   a NULL aggregate_id, payload or created_at means "no such column" and
 *   the event field is NULL. A mapped column missing from the record, or
 *   present twice, is an error.
 * - event_id of a message uses upper-case hex, like LSN_FMT:
 *   "m-00000000016B3A28". wal2json's "lsn" of a message is the LSN that
 *   pg_logical_emit_message() returned, so producers can compute it.
 * - Envelope: "aggregate_id" absent or null gives NULL; "payload" absent
 *   gives NULL, "payload": null gives the text "null"; a string payload
 *   keeps its quotes and escapes (it is raw JSON text); unknown keys are
 *   skipped; a key twice, trailing garbage or nesting deeper than 64 is an
 *   error. The prefix is not checked: filtering on it is the caller's job.
 * - A string that wal2json sent without escapes is handed out as a span of
 *   the line (zero copy); only escaped ones use the scratch. An empty
 *   string is a non-NULL pointer with length 0, never SQL NULL.
 * - w2j_timestamp_us() also accepts offsets with seconds ("+05:53:28", as
 *   PostgreSQL prints historic local mean time), years of 5 or 6 digits,
 *   " BC", and 'T' as the separator; it refuses "infinity" and instants
 *   that do not fit in int64 microseconds. */

#endif
