/*
 * w2j.c — wal2json (format-version 2) lines to records (w2j_parse), and
 * records to outbox events (w2j_event_decode).
 *
 * Every change the relayer streams passes through w2j_parse(), so it is a
 * purpose-built scanner rather than a general JSON library: it knows the
 * handful of keys wal2json v2 writes, keeps every string as a span of the
 * caller's line (zero copy, escapes left in place), validates escapes while
 * it scans so that unescaping later cannot fail on parsed input, and skips
 * anything it does not know (other include-* options add keys). The JSON
 * tokens themselves are jscan's (jscan.h). It never allocates, never
 * touches bytes outside [line, line+len) and resets only the scalar fields
 * of the record (the columns array and the text buffer are 26 KiB). What it
 * does write is the text of an insert's escaped column values and of a
 * message's content, unescaped into the record while they are scanned
 * (jscan_string_text): the payload (jsonb text, full of \" escapes) is the
 * bulk of every event, and walking it a second time to unescape it was 29%
 * of the decoder's instructions.
 *
 * w2j_event_decode(), records to events, is in w2j_event.c.
 */
#include "outbox_relay/decode/w2j.h"

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define W2J_LIKELY(x) __builtin_expect(!!(x), 1)
#define W2J_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define W2J_LIKELY(x) (x)
#define W2J_UNLIKELY(x) (x)
#endif

static inline bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* Unescapes a short string (a key, an action, an id) into buf, NUL-
 * terminated; false when it does not fit. */
static bool small_string(const struct w2j_value *v, char *buf, size_t cap, size_t *n)
{
    if (w2j_unescape(v, buf, cap - 1, n) < 0)
        return false;
    buf[*n] = '\0';
    return true;
}

/* ------------------------------------------------------------- w2j_parse */

enum rec_key {
    K_UNKNOWN = -1,
    K_ACTION,
    K_XID,
    K_LSN,
    K_NEXTLSN,
    K_TIMESTAMP,
    K_SCHEMA,
    K_TABLE,
    K_COLUMNS,
    K_TRANSACTIONAL,
    K_PREFIX,
    K_CONTENT,
};

static inline bool is_action(char c)
{
    switch (c) {
    case 'B': case 'C': case 'I': case 'U': case 'D': case 'T': case 'M':
        return true;
    default:
        return false;
    }
}

static const char *const rec_key_names[] = {
    "action", "xid", "lsn", "nextlsn", "timestamp", "schema",
    "table", "columns", "transactional", "prefix", "content",
};

static enum rec_key classify_key(const char *k, size_t n)
{
    switch (n) {
    case 3:
        if (memcmp(k, "lsn", 3) == 0)
            return K_LSN;
        if (memcmp(k, "xid", 3) == 0)
            return K_XID;
        break;
    case 5:
        if (memcmp(k, "table", 5) == 0)
            return K_TABLE;
        break;
    case 6:
        if (memcmp(k, "action", 6) == 0)
            return K_ACTION;
        if (memcmp(k, "schema", 6) == 0)
            return K_SCHEMA;
        if (memcmp(k, "prefix", 6) == 0)
            return K_PREFIX;
        break;
    case 7:
        if (memcmp(k, "columns", 7) == 0)
            return K_COLUMNS;
        if (memcmp(k, "nextlsn", 7) == 0)
            return K_NEXTLSN;
        if (memcmp(k, "content", 7) == 0)
            return K_CONTENT;
        break;
    case 9:
        if (memcmp(k, "timestamp", 9) == 0)
            return K_TIMESTAMP;
        break;
    case 13:
        if (memcmp(k, "transactional", 13) == 0)
            return K_TRANSACTIONAL;
        break;
    }
    return K_UNKNOWN;
}

static enum rec_key classify_value_key(const struct w2j_value *key)
{
    char buf[16];
    size_t n;

    if (W2J_LIKELY(!key->escaped))
        return classify_key(key->ptr, key->len);
    if (!small_string(key, buf, sizeof buf, &n))
        return K_UNKNOWN;
    return classify_key(buf, n);
}

/* The "columns" array at pos (depth 2); its objects are at depth 3:
 *
 *   [{"name":"id","value":1},{"name":"t","type":"text","value":"x"},...]
 *
 * "name" must be a string; "value" may be any JSON value; other keys
 * ("type", "typeoid", "optional", "position", "default") are skipped.
 * With text, string values are unescaped into the record as they are
 * scanned (each column's text; a value without escapes is its own text and
 * leaves the buffer to the next). Every string column gets it, not only
 * those the map will pick (the map is w2j_event_decode()'s): the other
 * columns of an outbox are few and their values seldom escaped. */
static int parse_columns(struct jscan *sc, struct w2j_record *rec, bool text)
{
    struct w2j_value tmp;

    if (jscan_peek(sc) != '[')
        return jscan_fail(sc, sc->pos, "\"columns\" must be an array");
    sc->pos++;
    rec->ncolumns = 0;
    jscan_ws(sc);
    if (jscan_peek(sc) == ']') {
        sc->pos++;
        return 0;
    }
    for (;;) {
        if (rec->ncolumns == W2J_MAX_COLUMNS)
            return jscan_fail(sc, sc->pos, "more than %d columns", W2J_MAX_COLUMNS);
        struct w2j_column *col = &rec->columns[rec->ncolumns];
        size_t col_at = sc->pos;
        bool have_name = false, have_value = false;

        if (jscan_peek(sc) != '{')
            return jscan_fail(sc, sc->pos, "%s: expected a column object",
                              sc->pos >= sc->len ? "truncated" : "bad column");
        sc->pos++;
        col->value.type = W2J_ABSENT;
        col->value.escaped = false;
        col->value.ptr = NULL;
        col->value.len = 0;
        col->text.src = NULL;
        jscan_ws(sc);
        if (jscan_peek(sc) != '}') {
            for (;;) {
                struct w2j_value key;
                size_t key_at = sc->pos;
                const char *k;
                size_t kn;
                char buf[8];

                /* wal2json writes these two keys exactly so: skip the scan. */
                if (sc->len - sc->pos >= 8 && memcmp(sc->s + sc->pos, "\"name\":", 7) == 0) {
                    k = "name";
                    kn = 4;
                    sc->pos += 7;
                } else if (sc->len - sc->pos >= 9 &&
                           memcmp(sc->s + sc->pos, "\"value\":", 8) == 0) {
                    k = "value";
                    kn = 5;
                    sc->pos += 8;
                } else {
                    if (jscan_peek(sc) != '"')
                        return jscan_fail(sc, sc->pos, "%s: expected a key",
                                          sc->pos >= sc->len ? "truncated" : "bad column");
                    if (jscan_string(sc, &key) < 0)
                        return -1;
                    jscan_ws(sc);
                    if (jscan_expect(sc, ':', "':'") < 0)
                        return -1;
                    k = key.ptr;
                    kn = key.len;
                    if (W2J_UNLIKELY(key.escaped)) {
                        if (small_string(&key, buf, sizeof buf, &kn))
                            k = buf;
                        else
                            kn = 0;
                    }
                }
                jscan_ws(sc);
                if (sc->pos >= sc->len)
                    return jscan_fail(sc, sc->pos, "truncated: expected a value");
                if (kn == 4 && memcmp(k, "name", 4) == 0) {
                    if (have_name)
                        return jscan_fail(sc, key_at, "duplicate key \"name\" in column");
                    if (jscan_peek(sc) != '"')
                        return jscan_fail(sc, sc->pos, "column \"name\" must be a string");
                    if (jscan_string(sc, &col->name) < 0)
                        return -1;
                    have_name = true;
                } else if (kn == 5 && memcmp(k, "value", 5) == 0) {
                    if (have_value)
                        return jscan_fail(sc, key_at, "duplicate key \"value\" in column");
                    if (jscan_peek(sc) == '"' && text) {
                        struct w2j_text *t = &col->text;
                        t->off = rec->text_used;
                        if (jscan_string_text(sc, &col->value, rec->text_buf + t->off,
                                              W2J_TEXT_CAP - t->off, &t->len, &t->raw) < 0)
                            return -1;
                        if (col->value.escaped) { /* else the value is its own text */
                            t->src = col->value.ptr;
                            rec->text_used += t->len;
                        }
                    } else if (jscan_peek(sc) == '"' ? jscan_string(sc, &col->value) < 0
                                                     : jscan_value(sc, 3, &col->value) < 0) {
                        return -1;
                    }
                    have_value = true;
                } else if (jscan_value(sc, 3, &tmp) < 0) {
                    return -1;
                }
                jscan_ws(sc);
                if (jscan_peek(sc) == ',') {
                    sc->pos++;
                    jscan_ws(sc);
                    continue;
                }
                if (jscan_peek(sc) == '}')
                    break;
                return jscan_fail(sc, sc->pos, "%s: expected ',' or '}'",
                                  sc->pos >= sc->len ? "truncated" : "bad column");
            }
        }
        sc->pos++; /* '}' */
        if (!have_name)
            return jscan_fail(sc, col_at, "column without \"name\"");
        rec->ncolumns++;
        jscan_ws(sc);
        if (jscan_peek(sc) == ',') {
            sc->pos++;
            jscan_ws(sc);
            continue;
        }
        if (jscan_peek(sc) == ']') {
            sc->pos++;
            return 0;
        }
        return jscan_fail(sc, sc->pos, "%s: expected ',' or ']'",
                          sc->pos >= sc->len ? "truncated" : "bad columns");
    }
}

static int parse_lsn_value(struct jscan *sc, const char *key, lsn_t *out)
{
    struct w2j_value v = {W2J_ABSENT, false, NULL, 0};
    size_t at = sc->pos;
    char buf[24];
    size_t n;

    if (jscan_peek(sc) != '"')
        return jscan_fail(sc, at, "\"%s\" must be a string", key);
    if (jscan_string(sc, &v) < 0)
        return -1;
    if (W2J_LIKELY(!v.escaped)) {
        if (lsn_parse(v.ptr, v.len, out) < 0)
            return jscan_fail(sc, at, "bad LSN in \"%s\"", key);
        return 0;
    }
    if (!small_string(&v, buf, sizeof buf, &n) || lsn_parse(buf, n, out) < 0)
        return jscan_fail(sc, at, "bad LSN in \"%s\"", key);
    return 0;
}

static int parse_xid(struct jscan *sc, int64_t *out)
{
    struct w2j_value v;
    size_t at = sc->pos;
    int64_t x = 0;

    if (jscan_peek(sc) == 'n')
        return jscan_literal(sc, "null", 4, W2J_NULL, &v); /* xid stays -1 */
    if (!is_digit(jscan_peek(sc)))
        return jscan_fail(sc, at, "\"xid\" must be a non-negative integer");
    if (jscan_number(sc, &v) < 0)
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        if (!is_digit((unsigned char) v.ptr[i]) || x > (INT64_MAX - 9) / 10)
            return jscan_fail(sc, at, "\"xid\" must be a non-negative integer");
        x = x * 10 + (v.ptr[i] - '0');
    }
    *out = x;
    return 0;
}

/* A string or null for key (timestamp, schema, table, prefix, content). */
static inline int parse_string_or_null(struct jscan *sc, const char *key, struct w2j_value *out)
{
    if (jscan_peek(sc) == '"')
        return jscan_string(sc, out);
    if (jscan_peek(sc) == 'n')
        return jscan_literal(sc, "null", 4, W2J_NULL, out);
    return jscan_fail(sc, sc->pos, "\"%s\" must be a string", key);
}

static inline void value_reset(struct w2j_value *v)
{
    v->type = W2J_ABSENT;
    v->escaped = false;
    v->ptr = NULL;
    v->len = 0;
}

/*
 * Wire format: one JSON object per line, keys in any order.
 *
 *   {"action":"B","timestamp":"2026-11-30 14:44:44.03313+00",
 *    "lsn":"0/1939940","nextlsn":"0/1939970"}                       (C alike)
 *   {"action":"I","timestamp":"…","lsn":"0/1939578","schema":"public",
 *    "table":"events_outbox","columns":[{"name":"id","value":1},…]}  (U alike,
 *                                             U/D add "identity":[…])
 *   {"action":"T","timestamp":"…","lsn":"…","schema":"…","table":"…"}
 *   {"action":"M","timestamp":"…"|null,"lsn":"0/193F288",
 *    "transactional":true,"prefix":"outbox","content":"{\"type\":…}"}
 *
 * With include-xids / include-origin / include-types / include-pk … the
 * server adds "xid":731 (null for non-transactional messages), "origin",
 * "pk":[…] and per column "type", "typeoid", "optional", "position",
 * "default": skipped, as is any other key. Types are checked for the keys
 * we keep: action a one-letter string of BCIUDTM, xid integer or null,
 * lsn/nextlsn "HI/LO" strings, timestamp string or null, transactional a
 * boolean, the rest strings. A known key twice is an error.
 */
int w2j_parse(const char *line, size_t len, struct w2j_record *rec, char *errbuf,
              size_t errlen)
{
    struct jscan sc = {line, len, 0, errbuf, errlen};
    unsigned seen = 0;

    rec->action = 0;
    rec->xid = -1;
    rec->lsn = 0;
    rec->nextlsn = 0;
    value_reset(&rec->timestamp);
    value_reset(&rec->schema);
    value_reset(&rec->table);
    rec->ncolumns = 0;
    rec->transactional = false;
    value_reset(&rec->prefix);
    value_reset(&rec->content);
    rec->content_text.src = NULL;
    rec->text_used = 0;
    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';
    if (line == NULL)
        sc.len = 0;

    jscan_ws(&sc);
    if (jscan_peek(&sc) != '{')
        return jscan_fail(&sc, sc.pos, "%s: expected '{'",
                          sc.pos >= sc.len ? "truncated" : "not an object");
    sc.pos++;
    jscan_ws(&sc);
    if (jscan_peek(&sc) == '}') {
        sc.pos++;
    } else {
        for (;;) {
            struct w2j_value key, v;
            size_t key_at = sc.pos;
            int rc;

            if (jscan_peek(&sc) != '"')
                return jscan_fail(&sc, sc.pos, "%s: expected a key",
                                  sc.pos >= sc.len ? "truncated" : "bad record");
            if (jscan_string(&sc, &key) < 0)
                return -1;
            jscan_ws(&sc);
            if (jscan_expect(&sc, ':', "':'") < 0)
                return -1;
            jscan_ws(&sc);
            if (sc.pos >= sc.len)
                return jscan_fail(&sc, sc.pos, "truncated: expected a value");

            enum rec_key k = classify_value_key(&key);
            if (k != K_UNKNOWN) {
                if (seen & (1u << k))
                    return jscan_fail(&sc, key_at, "duplicate key \"%s\"", rec_key_names[k]);
                seen |= 1u << k;
            }
            switch (k) {
            case K_ACTION: {
                size_t at = sc.pos;
                char buf[4];
                size_t n;
                if (jscan_peek(&sc) != '"')
                    return jscan_fail(&sc, at, "\"action\" must be a string");
                if (jscan_string(&sc, &v) < 0)
                    return -1;
                if (!small_string(&v, buf, sizeof buf, &n) || n != 1 || !is_action(buf[0]))
                    return jscan_fail(&sc, at, "unknown action \"%.*s\"",
                                      (int) (v.len > 16 ? 16 : v.len), v.ptr);
                rec->action = buf[0];
                rc = 0;
                break;
            }
            case K_XID:
                rc = parse_xid(&sc, &rec->xid);
                break;
            case K_LSN:
                rc = parse_lsn_value(&sc, "lsn", &rec->lsn);
                break;
            case K_NEXTLSN:
                rc = parse_lsn_value(&sc, "nextlsn", &rec->nextlsn);
                break;
            case K_TIMESTAMP:
                rc = parse_string_or_null(&sc, "timestamp", &rec->timestamp);
                break;
            case K_SCHEMA:
                rc = parse_string_or_null(&sc, "schema", &rec->schema);
                break;
            case K_TABLE:
                rc = parse_string_or_null(&sc, "table", &rec->table);
                break;
            case K_PREFIX:
                rc = parse_string_or_null(&sc, "prefix", &rec->prefix);
                break;
            case K_CONTENT:
                if (rec->action == 'M' && jscan_peek(&sc) == '"') {
                    /* The envelope, which is all unescaped before it is
                     * parsed: its text in passing too. */
                    struct w2j_text *t = &rec->content_text;
                    t->off = rec->text_used;
                    rc = jscan_string_text(&sc, &rec->content, rec->text_buf + t->off,
                                           W2J_TEXT_CAP - t->off, &t->len, &t->raw);
                    if (rc == 0 && rec->content.escaped) {
                        t->src = rec->content.ptr;
                        rec->text_used += t->len;
                    }
                } else {
                    rc = parse_string_or_null(&sc, "content", &rec->content);
                }
                break;
            case K_COLUMNS:
                /* Only inserts become events: the columns of other changes
                 * (updates of the outbox, say) are not worth the writes. */
                rc = parse_columns(&sc, rec, rec->action == 'I');
                break;
            case K_TRANSACTIONAL:
                if (jscan_peek(&sc) == 't') {
                    rc = jscan_literal(&sc, "true", 4, W2J_BOOL, &v);
                    rec->transactional = true;
                } else if (jscan_peek(&sc) == 'f') {
                    rc = jscan_literal(&sc, "false", 5, W2J_BOOL, &v);
                } else {
                    rc = jscan_fail(&sc, sc.pos, "\"transactional\" must be a boolean");
                }
                break;
            default:
                rc = jscan_value(&sc, 1, &v);
                break;
            }
            if (rc < 0)
                return -1;
            jscan_ws(&sc);
            if (jscan_peek(&sc) == ',') {
                sc.pos++;
                jscan_ws(&sc);
                continue;
            }
            if (jscan_peek(&sc) == '}') {
                sc.pos++;
                break;
            }
            return jscan_fail(&sc, sc.pos, "%s: expected ',' or '}'",
                              sc.pos >= sc.len ? "truncated" : "bad record");
        }
    }
    jscan_ws(&sc);
    if (sc.pos != sc.len)
        return jscan_fail(&sc, sc.pos, "trailing garbage after the record");
    if (rec->action == 0)
        return jscan_fail(&sc, 0, "missing \"action\"");
    return 0;
}

/* ---------------------------------------------- unescape and timestamps */

int w2j_unescape(const struct w2j_value *v, char *dst, size_t dstcap, size_t *outlen)
{
    if (!v->escaped) {
        if (v->len > dstcap)
            return -1;
        if (v->len > 0)
            memcpy(dst, v->ptr, v->len);
        *outlen = v->len;
        return 0;
    }
    return jscan_unescape(v->ptr, v->len, dst, dstcap, outlen);
}

int w2j_timestamp_us(const struct w2j_value *v, int64_t *unix_us)
{
    if (v->type != W2J_STRING || v->escaped || v->ptr == NULL)
        return -1;
    return outbox_timestamp_us(v->ptr, v->len, unix_us);
}
