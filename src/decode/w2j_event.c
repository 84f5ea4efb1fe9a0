/*
 * w2j_event.c — wal2json records to outbox events (w2j_event_decode, see
 * w2j.h).
 *
 * Finds the outbox columns of an 'I' record, or the content of an 'M'
 * record, and hands them to the plugin-neutral parts of outbox_event.h
 * (ids, the message envelope); what is wal2json's own stays here: columns
 * as JSON values (a number id, a raw JSON payload), the text w2j_parse()
 * unescaped in passing. Strings that need unescaping go to a caller-owned
 * scratch buffer, sized once per event before anything is written so that
 * no pointer handed out can dangle.
 */
#include "outbox_relay/decode/w2j.h"

#include <stdint.h>
#include <string.h>

/* Unescapes a short string (an id, a column name) into buf, NUL-
 * terminated; false when it does not fit. */
static bool small_string(const struct w2j_value *v, char *buf, size_t cap, size_t *n)
{
    if (w2j_unescape(v, buf, cap - 1, n) < 0)
        return false;
    buf[*n] = '\0';
    return true;
}

/* Bytes of scratch a string value needs: only escaped strings are copied. */
static inline size_t scratch_need(const struct w2j_value *v)
{
    return v != NULL && v->type == W2J_STRING && v->escaped ? v->len : 0;
}

/* Hands out a string value: a span of the line when it has no escapes, else
 * its unescaped text appended to the scratch (already large enough). The
 * text w2j_parse() left in rec for it (t, may be NULL) is copied, and only
 * what it lacks is unescaped; copying keeps every event string in the line
 * or the scratch, whose lifetimes the caller knows. */
static int take_text(const struct w2j_value *v, const struct w2j_record *rec,
                     const struct w2j_text *t, struct outbox_scratch *s, const char **ptr,
                     size_t *len)
{
    if (!v->escaped || v->len == 0) { /* the second: only a caller's record */
        *ptr = v->ptr;
        *len = v->len;
        return 0;
    }
    char *dst = s->buf + s->len; /* not NULL: the scratch has room for v->len */
    size_t room = s->cap - s->len, done = 0, n;
    struct w2j_value rest = *v;
    if (t != NULL && t->src == v->ptr && t->raw <= v->len && t->len <= room) {
        memcpy(dst, rec->text_buf + t->off, t->len);
        done = t->len;
        rest.ptr += t->raw;
        rest.len -= t->raw;
    }
    if (rest.len > 0) {
        if (w2j_unescape(&rest, dst + done, room - done, &n) < 0)
            return -1;
        done += n;
    }
    *ptr = dst;
    *len = done;
    s->len += done;
    return 0;
}

static int take_string(const struct w2j_value *v, struct outbox_scratch *s, const char **ptr,
                       size_t *len)
{
    return take_text(v, NULL, NULL, s, ptr, len);
}

/* A column value as PostgreSQL's text output, the form pgoutput sends and
 * so the one both plugins publish (docs/producing.md, "Column types"): a
 * string's text; a JSON number's literal, which wal2json took from the
 * type's output function (bigint, numeric, real: "12.50", "-7"); a boolean
 * as boolean_out prints it, "t" or "f"; an object or array (json, jsonb)
 * as is. SQL NULL leaves *ptr NULL. */
static int take_value(const struct w2j_value *v, const struct w2j_record *rec,
                      const struct w2j_text *t, struct outbox_scratch *s, const char **ptr,
                      size_t *len)
{
    *ptr = NULL;
    *len = 0;
    switch (v->type) {
    case W2J_STRING:
        return take_text(v, rec, t, s, ptr, len);
    case W2J_BOOL:
        *ptr = v->len == 4 ? "t" : "f"; /* "true" or "false" */
        *len = 1;
        return 0;
    case W2J_NULL:
    case W2J_ABSENT:
        return 0;
    default:
        *ptr = v->ptr;
        *len = v->len;
        return 0;
    }
}

static bool value_equals(const struct w2j_value *v, const char *name)
{
    size_t n = strlen(name);

    if (v->type != W2J_STRING)
        return false;
    if (!v->escaped)
        return v->len == n && memcmp(v->ptr, name, n) == 0;
    char buf[256];
    size_t got;
    if (n >= sizeof buf || !small_string(v, buf, sizeof buf, &got))
        return false;
    return got == n && memcmp(buf, name, n) == 0;
}

/* event_id from the id column: an integer number, or a string of digits;
 * for a uuid or text id, its text. */
static int set_event_id(const struct w2j_value *v, enum outbox_id_kind kind,
                        struct outbox_event *ev)
{
    char buf[OUTBOX_EVENT_ID_MAX];
    size_t n;

    if (v->type == W2J_STRING && kind == OUTBOX_ID_TEXT)
        return small_string(v, buf, sizeof buf, &n) ? outbox_event_set_text_id(ev, buf, n) : -1;
    if (v->type == W2J_STRING)
        return small_string(v, buf, 24, &n) ? outbox_event_set_id(ev, buf, n, false) : -1;
    if (v->type != W2J_NUMBER)
        return -1;
    return outbox_event_set_id(ev, v->ptr, v->len, true);
}

static const char *const vtype_names[] = {"absent", "null", "a boolean", "a number",
                                          "a string", "an object or array"};

enum { C_ID, C_AGG, C_TYPE, C_PAYLOAD, C_CREATED, C_EXTRA, C_MAX = C_EXTRA + OUTBOX_MAX_EXTRA };

/* The bytea payload's hex text (wal2json prints it without
 * "\\x"; already taken: in the line or in the
 * scratch) decoded to its bytes, in place when it is in the scratch, else
 * appended to it (room reserved by the caller). */
static int decode_bytea(struct outbox_scratch *s, const char **ptr, size_t *len)
{
    bool in_scratch = s->buf != NULL && *ptr >= s->buf && *ptr < s->buf + s->cap;
    char *dst = in_scratch ? (char *) *ptr : s->buf + s->len;
    long n = outbox_hex_decode(*ptr, *len, dst); /* wal2json: bare hex */
    if (n < 0)
        return -1;
    if (!in_scratch)
        s->len += (size_t) n;
    *ptr = dst;
    *len = (size_t) n;
    return 0;
}

static int decode_insert(const struct w2j_record *rec, const struct outbox_columns_map *map,
                         struct outbox_scratch *scratch, struct outbox_event *ev, char *errbuf,
                         size_t errlen)
{
    /* Sized for every extra column, filled only for the map's (the hot
     * path is the default map: five names). */
    const char *names[C_MAX];
    size_t lens[C_MAX];
    const struct w2j_value *vals[C_MAX];
    const struct w2j_text *texts[C_MAX];
    int nnames = C_EXTRA + (int) (map->nextra < OUTBOX_MAX_EXTRA ? map->nextra
                                                                  : OUTBOX_MAX_EXTRA);

    if (map->id == NULL || map->type == NULL)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "columns map without id or type");
    names[C_ID] = map->id;
    names[C_AGG] = map->aggregate_id;
    names[C_TYPE] = map->type;
    names[C_PAYLOAD] = map->payload;
    names[C_CREATED] = map->created_at;
    for (int c = C_EXTRA; c < nnames; c++)
        names[c] = map->extra[c - C_EXTRA].column;
    for (int c = 0; c < nnames; c++) {
        lens[c] = names[c] != NULL ? strlen(names[c]) : SIZE_MAX;
        vals[c] = NULL;
        texts[c] = NULL;
    }
    /* One column may fill several roles (--column-key id, a header column
     * that is also the key): every name is matched. */
    for (size_t i = 0; i < rec->ncolumns; i++) {
        const struct w2j_value *name = &rec->columns[i].name;
        for (int c = 0; c < nnames; c++) {
            if (name->escaped ? names[c] != NULL && value_equals(name, names[c])
                              : name->len == lens[c] && memcmp(name->ptr, names[c], lens[c]) == 0) {
                if (vals[c] != NULL)
                    return outbox_event_fail(errbuf, errlen, rec->lsn,
                                             "column \"%s\" appears twice", names[c]);
                vals[c] = &rec->columns[i].value;
                texts[c] = &rec->columns[i].text;
            }
        }
    }
    for (int c = 0; c < nnames; c++) {
        if (names[c] != NULL && (vals[c] == NULL || vals[c]->type == W2J_ABSENT))
            return outbox_event_fail(errbuf, errlen, rec->lsn, "missing column \"%s\"", names[c]);
    }

    const struct w2j_value *id = vals[C_ID], *type = vals[C_TYPE];
    const struct w2j_value *agg = vals[C_AGG], *pay = vals[C_PAYLOAD], *cat = vals[C_CREATED];
    if (id->type == W2J_NULL)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is NULL", names[C_ID]);
    if (set_event_id(id, map->id_kind, ev) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is not %s: %.*s",
                                 names[C_ID],
                                 map->id_kind == OUTBOX_ID_TEXT
                                     ? "an id of 1 to 63 bytes without control characters"
                                     : "an integer",
                                 (int) (id->len > 32 ? 32 : id->len), id->ptr);
    bool bytea = map->payload_bytea && pay != NULL && pay->type != W2J_NULL;
    /* Everything that will be unescaped, reserved at once: take_string()
     * below must not realloc under pointers it already handed out. */
    size_t need = scratch_need(agg) + scratch_need(type) + scratch_need(pay) +
                  scratch_need(cat) + (bytea ? pay->len / 2 + 1 : 0);
    for (int c = C_EXTRA; c < nnames; c++)
        need += scratch_need(vals[c]);
    if (outbox_scratch_reserve(scratch, need) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "out of memory");
    /* The key before what can still be refused: a row's dead letter names
     * its id and key (decoder_event, decoder.h). */
    if (agg != NULL &&
        take_value(agg, rec, texts[C_AGG], scratch, &ev->aggregate_id, &ev->aggregate_id_len) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                                 names[C_AGG]);
    if (type->type == W2J_NULL)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is NULL", names[C_TYPE]);
    if (type->len == 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is empty", names[C_TYPE]);
    if (cat != NULL && cat->type != W2J_NULL && cat->type != W2J_STRING)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is %s, not a string",
                                 names[C_CREATED], vtype_names[cat->type]);
    if (bytea && pay->type != W2J_STRING)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" (bytea) is %s, not "
                                 "a string", names[C_PAYLOAD], vtype_names[pay->type]);
    if (take_value(type, rec, texts[C_TYPE], scratch, &ev->type, &ev->type_len) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                                 names[C_TYPE]);
    if (cat != NULL && cat->type == W2J_STRING &&
        take_text(cat, rec, texts[C_CREATED], scratch, &ev->created_at,
                  &ev->created_at_len) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                                 names[C_CREATED]);
    if (pay != NULL && pay->type == W2J_STRING) {
        if (take_text(pay, rec, texts[C_PAYLOAD], scratch, &ev->payload, &ev->payload_len) < 0)
            return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                                     names[C_PAYLOAD]);
        if (bytea && decode_bytea(scratch, &ev->payload, &ev->payload_len) < 0)
            return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\" (bytea) is not "
                                     "hex digits", names[C_PAYLOAD]);
    } else if (pay != NULL && pay->type != W2J_NULL) {
        ev->payload = pay->ptr; /* a number, boolean, object or array as is */
        ev->payload_len = pay->len;
    }
    for (int c = C_EXTRA; c < nnames; c++) {
        struct outbox_field *f = &ev->extra[c - C_EXTRA];
        if (take_value(vals[c], rec, texts[c], scratch, &f->ptr, &f->len) < 0)
            return outbox_event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                                     names[c]);
    }
    return 0;
}

/* An 'M' record: its content (the envelope, JSON text escaped into a JSON
 * string by wal2json) unescaped, then parsed by outbox_event. */
static int decode_message(const struct w2j_record *rec, struct outbox_scratch *scratch,
                          struct outbox_event *ev, char *errbuf, size_t errlen)
{
    const struct w2j_value *content = &rec->content, *ts = &rec->timestamp;
    const char *env;
    size_t elen;

    if (content->type != W2J_STRING)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "message without \"content\"");
    if (content->len > (SIZE_MAX - ts->len) / 2)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "out of memory");
    /* The envelope (its text from the record; left in the line if it has no
     * escape, which no valid one lacks), then its escaped strings: all of
     * them are substrings of the envelope, no longer than the raw content;
     * then the timestamp. */
    if (outbox_scratch_reserve(scratch, 2 * content->len + scratch_need(ts)) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "out of memory");
    if (take_text(content, rec, &rec->content_text, scratch, &env, &elen) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "message content: bad escape");
    if (outbox_event_from_envelope(env, elen, scratch, ev, errbuf, errlen) < 0)
        return -1;
    if (ts->type == W2J_STRING &&
        take_string(ts, scratch, &ev->created_at, &ev->created_at_len) < 0)
        return outbox_event_fail(errbuf, errlen, rec->lsn, "\"timestamp\": bad escape");
    outbox_event_set_message_id(ev);
    return 0;
}

int w2j_event_decode(const struct w2j_record *rec, const struct outbox_columns_map *map,
                     struct outbox_scratch *scratch, struct outbox_event *ev, char *errbuf,
                     size_t errlen)
{
    outbox_event_reset(ev, rec->lsn);
    scratch->len = 0;
    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';

    if (rec->action == 'I')
        return decode_insert(rec, map != NULL ? map : &OUTBOX_DEFAULT_COLUMNS, scratch, ev, errbuf,
                             errlen);
    if (rec->action == 'M')
        return decode_message(rec, scratch, ev, errbuf, errlen);
    return outbox_event_fail(errbuf, errlen, rec->lsn, "a record with action '%c' is not an event",
                             rec->action >= 0x20 && rec->action < 0x7f ? rec->action : '?');
}

