/*
 * decoder_w2j.c — the wal2json (format-version 2) decoder behind decoder.h,
 * built on w2j_parse/w2j_event_decode/w2j_timestamp_us (w2j.h).
 *
 * The START_REPLICATION options leave include-lsn out: the frame's header
 * carries the position. For a change or a message it is that record's LSN;
 * for a commit, the end of the commit record (PostgreSQL sets the write
 * location of a commit to the transaction's end_lsn), which is what
 * wal2json's "nextlsn" would say. A line that has them (another option set)
 * keeps its own.
 */
#include "outbox_relay/decode/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/decode/w2j.h"

struct decoder_w2j {
    struct decoder base; /* first: a struct decoder * is a struct decoder_w2j * */
    struct w2j_record rec;
    struct outbox_scratch scratch;
};

/* A name compared as is: a plain JSON string (escaped ones match nothing,
 * as no configured name needs an escape). */
static void plain(const struct w2j_value *v, const char **ptr, size_t *len)
{
    bool ok = v->type == W2J_STRING && !v->escaped;
    *ptr = ok ? v->ptr : NULL;
    *len = ok ? v->len : 0;
}

static int64_t timestamp_or_0(const struct w2j_value *v)
{
    int64_t us;
    return w2j_timestamp_us(v, &us) < 0 ? 0 : us;
}

static int w2j_decode(struct decoder *d, const char *data, size_t len, lsn_t wal_start,
                      struct decoder_record *out, char *err, size_t errlen)
{
    struct decoder_w2j *w = (struct decoder_w2j *) d;
    struct w2j_record *rec = &w->rec;
    char e[W2J_ERRLEN];
    /* Only the fields of the record's kind are set (decoder.h): this runs
     * for every frame. */
    out->kind = DECODER_NONE;
    out->wal_start = wal_start;
    out->data = data;
    out->data_len = len;
    if (w2j_parse(data, len, rec, e, sizeof e) < 0) {
        snprintf(err, errlen, "cannot parse wal2json output: %s (line starts %.*s)", e,
                 (int) (len < 80 ? len : 80), len ? data : "");
        return -1;
    }
    if (rec->lsn == 0)
        rec->lsn = wal_start;
    if (rec->action == 'C' && rec->nextlsn == 0)
        rec->nextlsn = wal_start;
    out->lsn = rec->lsn;
    out->xid = rec->xid;
    switch (rec->action) {
    case 'B':
        out->kind = DECODER_BEGIN;
        out->timestamp_us = timestamp_or_0(&rec->timestamp);
        break;
    case 'C':
        out->kind = DECODER_COMMIT;
        out->end_lsn = rec->nextlsn;
        break;
    case 'I':
        out->kind = DECODER_INSERT;
        plain(&rec->schema, &out->schema, &out->schema_len);
        plain(&rec->table, &out->table, &out->table_len);
        break;
    case 'M':
        out->kind = DECODER_MESSAGE;
        out->transactional = rec->transactional;
        /* Only a non-transactional message's own time is used (dispatch.h). */
        out->timestamp_us = rec->transactional ? 0 : timestamp_or_0(&rec->timestamp);
        plain(&rec->prefix, &out->prefix, &out->prefix_len);
        break;
    default:
        break; /* updates, deletes, truncates: not events */
    }
    return 0;
}

static int w2j_event(struct decoder *d, const struct decoder_record *rec,
                     struct outbox_event *ev, char *err, size_t errlen)
{
    struct decoder_w2j *w = (struct decoder_w2j *) d;
    (void) rec; /* the same line as w->rec */
    return w2j_event_decode(&w->rec, d->columns, &w->scratch, ev, err, errlen);
}

/* A column name equal to s as is (an escaped one is not). */
static bool name_is(const struct w2j_value *v, const char *s)
{
    size_t n = strlen(s);
    return v->type == W2J_STRING && !v->escaped && v->len == n && memcmp(v->ptr, s, n) == 0;
}

static bool w2j_shaped(struct decoder *d, const struct decoder_record *rec)
{
    const struct w2j_record *r = &((struct decoder_w2j *) d)->rec;
    (void) rec; /* the same line as w->rec */
    const char *need[OUTBOX_NEEDED_COLUMNS];
    unsigned found = 0;
    outbox_columns_needed(d->columns, need);
    for (size_t i = 0; i < r->ncolumns; i++)
        for (size_t k = 0; k < OUTBOX_NEEDED_COLUMNS; k++)
            if (need[k] != NULL && name_is(&r->columns[i].name, need[k]))
                found |= 1u << k;
    for (size_t k = 0; k < OUTBOX_NEEDED_COLUMNS; k++)
        if (need[k] != NULL && !(found & (1u << k)))
            return false;
    return true;
}

/* The insert's table name, unescaped (decoder_record.table is NULL for an
 * escaped one, so that it matches no configured name; a partition's
 * catalog lookup needs it as it is). */
static int w2j_table_name(struct decoder *d, const struct decoder_record *rec, char *buf,
                          size_t cap)
{
    const struct w2j_value *t = &((struct decoder_w2j *) d)->rec.table;
    size_t n;
    (void) rec;
    if (cap == 0 || t->type != W2J_STRING || w2j_unescape(t, buf, cap - 1, &n) < 0 ||
        n == 0 || memchr(buf, '\0', n) != NULL)
        return -1;
    buf[n] = '\0';
    return (int) n;
}

/* Appends `"name" 'value'` to buf. */
static int append_opt(char *buf, size_t cap, size_t *n, const char *name, const char *value)
{
    int w = snprintf(buf + *n, cap - *n, "%s\"%s\" '%s'", *n == 0 ? "" : ", ", name, value);
    if (w < 0 || (size_t) w >= cap - *n)
        return -1;
    *n += (size_t) w;
    return 0;
}

/* The options of START_REPLICATION (stream.c asks for them). A
 * partitioned outbox asks for every table of its schema (wal2json names
 * the leaf partition) and the xid of every transaction, so that the relayer
 * can tell which catalog changes it has seen commit (pg/partition.h). */
static int w2j_start_options(const struct decoder_slot *slot, char *buf, size_t cap)
{
    char tables[300];
    size_t n = 0;
    if (cap == 0)
        return -1;
    buf[0] = '\0';
    if (slot->partitioned)
        snprintf(tables, sizeof tables, "%s.*", slot->table_schema);
    else
        snprintf(tables, sizeof tables, "%s.%s", slot->table_schema, slot->table_name);
    if (append_opt(buf, cap, &n, "format-version", "2") < 0 ||
        append_opt(buf, cap, &n, "include-timestamp", "1") < 0 ||
        append_opt(buf, cap, &n, "include-types", "0") < 0 ||
        append_opt(buf, cap, &n, "add-tables", tables) < 0 ||
        append_opt(buf, cap, &n, "actions", "insert") < 0)
        return -1;
    if (slot->partitioned && append_opt(buf, cap, &n, "include-xids", "1") < 0)
        return -1;
    if (slot->message_prefix && *slot->message_prefix &&
        append_opt(buf, cap, &n, "add-msg-prefixes", slot->message_prefix) < 0)
        return -1;
    return (int) n;
}

static void w2j_free(struct decoder *d)
{
    struct decoder_w2j *w = (struct decoder_w2j *) d;
    outbox_scratch_free(&w->scratch);
    free(w);
}

static const struct decoder_ops W2J_OPS = {
    .plugin = "wal2json",
    .package = "postgresql-<version>-wal2json",
    .start_options = w2j_start_options,
    .decode = w2j_decode,
    .event = w2j_event,
    .shaped = w2j_shaped,
    .table_name = w2j_table_name,
    .free = w2j_free,
};

struct decoder *decoder_w2j_new(void)
{
    struct decoder_w2j *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->base.ops = &W2J_OPS;
    return &w->base;
}
