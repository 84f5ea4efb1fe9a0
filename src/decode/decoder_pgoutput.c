/*
 * decoder_pgoutput.c — the pgoutput (protocol version 1) decoder behind
 * decoder.h, built on pgo_parse (pgoutput.h) and the plugin-neutral event
 * functions of outbox_event.h.
 *
 * State across frames: the relation cache (an Insert names its relation by
 * OID only) and the open transaction's xid and commit time (a Commit and an
 * Insert carry no xid). Positions: an Insert's LSN is the frame's wal_start
 * (the change's own position); a Message carries its LSN, the one
 * pg_logical_emit_message() returned; a Commit carries the end of its
 * commit record. Relation and Type frames arrive with wal_start 0/0.
 *
 * Rows: pgoutput sends every value as PostgreSQL's text output, so the
 * payload is the jsonb exactly as PostgreSQL prints it and created_at the
 * timestamptz in the walsender's TimeZone, with nothing to unescape. With
 * publish_via_partition_root a partitioned outbox's rows arrive under the
 * root's name and OID (the server sends the leaf's Relation too, which the
 * cache keeps and nothing uses): the decoder names rows under the root
 * (decoder_names_root), so no catalog lookup is ever asked for.
 */
#include "outbox_relay/decode/decoder.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/decode/pgoutput.h"

struct decoder_pgo {
    struct decoder base; /* first: a struct decoder * is a struct decoder_pgo * */
    struct pgo_parser parser;
    struct pgo_msg msg;     /* the last frame's */
    struct outbox_scratch scratch;
    struct outbox_scratch described; /* decoder_describe()'s text */
    bool in_tx;
    /* The mapped columns' indexes in the relation of the last insert,
     * resolved once per relation (a Relation frame invalidates them): an
     * insert costs no name lookup. -1: missing, -2: not mapped. */
    bool idx_valid;
    uint32_t idx_oid;
    const struct outbox_columns_map *idx_map;
    int idx_n; /* columns resolved: the map may gain extra ones (layout.h) */
    int idx[5 + OUTBOX_MAX_EXTRA];
    uint32_t xid;           /* of the open transaction */
    int64_t commit_pg_us;   /* its commit time, PostgreSQL's epoch */
};

/* PostgreSQL's epoch to Unix microseconds; 0 (unknown) when it overflows. */
static int64_t unix_us(int64_t pg_us)
{
    if (pg_us > INT64_MAX - PGO_UNIX_EPOCH_US)
        return 0;
    return pg_us + PGO_UNIX_EPOCH_US;
}

static int pgo_decode(struct decoder *d, const char *data, size_t len, lsn_t wal_start,
                      struct decoder_record *out, char *err, size_t errlen)
{
    struct decoder_pgo *g = (struct decoder_pgo *) d;
    struct pgo_msg *m = &g->msg;
    char e[PGO_ERRLEN];

    out->kind = DECODER_NONE;
    out->wal_start = wal_start;
    out->data = data;
    out->data_len = len;
    if (pgo_parse(&g->parser, data, len, m, e, sizeof e) < 0) {
        snprintf(err, errlen, "cannot parse pgoutput message at " LSN_FMT ": %s",
                 LSN_ARGS(wal_start), e);
        return -1;
    }
    switch (m->type) {
    case 'B':
        g->in_tx = true;
        g->xid = m->xid;
        g->commit_pg_us = m->timestamp;
        out->kind = DECODER_BEGIN;
        out->xid = m->xid;
        out->lsn = m->lsn;
        out->timestamp_us = unix_us(m->timestamp);
        break;
    case 'C':
        out->kind = DECODER_COMMIT;
        out->xid = g->in_tx ? (int64_t) g->xid : -1;
        out->lsn = m->lsn;
        out->end_lsn = m->end_lsn;
        g->in_tx = false;
        break;
    case 'I':
        out->kind = DECODER_INSERT;
        out->xid = g->in_tx ? (int64_t) g->xid : -1;
        out->lsn = wal_start;
        out->schema = m->rel->nspname;
        out->schema_len = m->rel->nspname_len;
        out->table = m->rel->relname;
        out->table_len = m->rel->relname_len;
        break;
    case 'M':
        out->kind = DECODER_MESSAGE;
        out->lsn = m->lsn;
        out->transactional = m->transactional;
        out->timestamp_us = 0; /* pgoutput sends no time with a message */
        out->prefix = m->prefix.ptr;
        out->prefix_len = m->prefix.len;
        break;
    case 'R':
        g->idx_valid = false; /* the cache's entries may have moved */
        break;
    default:
        break; /* relation, type, origin: state; update, delete, truncate: not events */
    }
    return 0;
}

enum { C_ID, C_AGG, C_TYPE, C_PAYLOAD, C_CREATED, C_EXTRA };

#define OID_BYTEA 17
#define OID_INT8 20
#define OID_INT2 21
#define OID_INT4 23
#define OID_TEXT 25
#define OID_BPCHAR 1042
#define OID_VARCHAR 1043
#define OID_NUMERIC 1700
#define OID_UUID 2950

/* The name of mapped column c. */
static const char *col_name(const struct outbox_columns_map *map, int c)
{
    const char *names[C_EXTRA] = {map->id, map->aggregate_id, map->type, map->payload,
                                  map->created_at};
    return c < C_EXTRA ? names[c] : map->extra[c - C_EXTRA].column;
}

static int ncols(const struct outbox_columns_map *map)
{
    return C_EXTRA + (int) (map->nextra < OUTBOX_MAX_EXTRA ? map->nextra : OUTBOX_MAX_EXTRA);
}

/* Resolves the mapped columns' indexes in rel (once per relation). */
static void resolve(struct decoder_pgo *g, const struct pgo_relation *rel,
                    const struct outbox_columns_map *map)
{
    for (int c = 0; c < ncols(map); c++) {
        const char *name = col_name(map, c);
        g->idx[c] = name == NULL ? -2 : pgo_column_index(rel, name);
    }
    g->idx_oid = rel->oid;
    g->idx_map = map;
    g->idx_n = ncols(map);
    g->idx_valid = true;
}

/* The text of mapped column c of the inserted row: 0 with ptr NULL for SQL
 * NULL or an unmapped column, -1 with err when the column is missing or
 * unchanged TOAST. */
static int column(const struct decoder_pgo *g, const struct outbox_columns_map *map, int c,
                  const char **ptr, size_t *len, uint32_t *type_oid, lsn_t lsn, char *err,
                  size_t errlen)
{
    const struct pgo_msg *m = &g->msg;
    int i = g->idx[c];
    *ptr = NULL;
    *len = 0;
    if (i == -2)
        return 0;
    if (i < 0 || (size_t) i >= m->nvalues)
        return outbox_event_fail(err, errlen, lsn, "missing column \"%s\"", col_name(map, c));
    const struct pgo_value *v = &m->values[i];
    if (v->kind == 'u') /* never for an INSERT: a TOASTed value arrives whole */
        return outbox_event_fail(err, errlen, lsn, "column \"%s\" is an unchanged TOAST value",
                                 col_name(map, c));
    *ptr = v->kind == 't' ? v->ptr : NULL;
    *len = v->kind == 't' ? v->len : 0;
    if (type_oid != NULL)
        *type_oid = m->rel->columns[i].type_oid;
    return 0;
}

static int row_event(struct decoder_pgo *g, struct outbox_event *ev, char *err, size_t errlen)
{
    const struct outbox_columns_map *map =
        g->base.columns != NULL ? g->base.columns : &OUTBOX_DEFAULT_COLUMNS;
    const struct pgo_msg *m = &g->msg;
    const char *id = NULL, *type = NULL;
    size_t id_len = 0, type_len = 0;
    uint32_t id_oid = 0, pay_oid = 0;
    lsn_t lsn = ev->lsn;

    if (!g->idx_valid || g->idx_oid != m->rel->oid || g->idx_map != map ||
        g->idx_n != ncols(map))
        resolve(g, m->rel, map);
    if (column(g, map, C_ID, &id, &id_len, &id_oid, lsn, err, errlen) < 0 ||
        column(g, map, C_AGG, &ev->aggregate_id, &ev->aggregate_id_len, NULL, lsn, err,
               errlen) < 0 ||
        column(g, map, C_TYPE, &type, &type_len, NULL, lsn, err, errlen) < 0 ||
        column(g, map, C_PAYLOAD, &ev->payload, &ev->payload_len, &pay_oid, lsn, err,
               errlen) < 0 ||
        column(g, map, C_CREATED, &ev->created_at, &ev->created_at_len, NULL, lsn, err,
               errlen) < 0)
        return -1;
    for (int c = C_EXTRA; c < ncols(map); c++)
        if (column(g, map, c, &ev->extra[c - C_EXTRA].ptr, &ev->extra[c - C_EXTRA].len, NULL,
                   lsn, err, errlen) < 0)
            return -1;
    if (id == NULL)
        return outbox_event_fail(err, errlen, lsn, "column \"%s\" is NULL", map->id);
    /* int2, int4, int8 and numeric print a sign (wal2json's numbers may
     * have one too); uuid and text ids are taken as text; any other type's
     * text must be digits without a sign */
    bool sign_ok = id_oid == OID_INT8 || id_oid == OID_INT2 || id_oid == OID_INT4 ||
                   id_oid == OID_NUMERIC;
    bool text_id = !sign_ok && (map->id_kind == OUTBOX_ID_TEXT || id_oid == OID_UUID ||
                                id_oid == OID_TEXT || id_oid == OID_VARCHAR ||
                                id_oid == OID_BPCHAR);
    if (text_id ? outbox_event_set_text_id(ev, id, id_len) < 0
                : outbox_event_set_id(ev, id, id_len, sign_ok) < 0)
        return outbox_event_fail(err, errlen, lsn, "column \"%s\" is not %s: %.*s", map->id,
                                 text_id ? "an id of 1 to 63 bytes without control characters"
                                         : "an integer",
                                 (int) (id_len > 32 ? 32 : id_len), id);
    if (type == NULL)
        return outbox_event_fail(err, errlen, lsn, "column \"%s\" is NULL", map->type);
    if (type_len == 0)
        return outbox_event_fail(err, errlen, lsn, "column \"%s\" is empty", map->type);
    ev->type = type;
    ev->type_len = type_len;
    if (ev->payload != NULL && (pay_oid == OID_BYTEA || map->payload_bytea)) {
        /* "\x..." to the bytes, at most half as long, into the scratch */
        if (outbox_scratch_reserve(&g->scratch, ev->payload_len / 2 + 1) < 0)
            return outbox_event_fail(err, errlen, lsn, "out of memory");
        long n = outbox_bytea_decode(ev->payload, ev->payload_len, g->scratch.buf);
        if (n < 0)
            return outbox_event_fail(err, errlen, lsn, "column \"%s\" (bytea) is not in hex "
                                     "format: the server must run with bytea_output = hex",
                                     map->payload);
        g->scratch.len = (size_t) n;
        ev->payload = g->scratch.buf;
        ev->payload_len = (size_t) n;
    }
    return 0;
}

/* A logical message: its content is the envelope, as the producer wrote it.
 * created_at: the transaction's commit time (as wal2json gives it) in UTC. */
static int message_event(struct decoder_pgo *g, struct outbox_event *ev, char *err,
                         size_t errlen)
{
    const struct pgo_msg *m = &g->msg;
    char ts[40];
    size_t ts_len = 0;

    if (m->content.len > SIZE_MAX - sizeof ts ||
        outbox_scratch_reserve(&g->scratch, m->content.len + sizeof ts) < 0)
        return outbox_event_fail(err, errlen, ev->lsn, "out of memory");
    if (outbox_event_from_envelope(m->content.ptr, m->content.len, &g->scratch, ev, err,
                                   errlen) < 0)
        return -1;
    if (m->transactional && g->in_tx)
        ts_len = outbox_time_format(unix_us(g->commit_pg_us), false, ts);
    if (ts_len > 0) {
        char *at = g->scratch.buf + g->scratch.len;
        memcpy(at, ts, ts_len);
        g->scratch.len += ts_len;
        ev->created_at = at;
        ev->created_at_len = ts_len;
    }
    outbox_event_set_message_id(ev);
    return 0;
}

static int pgo_event(struct decoder *d, const struct decoder_record *rec,
                     struct outbox_event *ev, char *err, size_t errlen)
{
    struct decoder_pgo *g = (struct decoder_pgo *) d;
    char type = g->msg.type; /* rec is the record of the same frame */

    outbox_event_reset(ev, rec->lsn);
    g->scratch.len = 0;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (type == 'I')
        return row_event(g, ev, err, errlen);
    if (type == 'M')
        return message_event(g, ev, err, errlen);
    return outbox_event_fail(err, errlen, rec->lsn, "a pgoutput '%c' message is not an event",
                             type >= 0x20 && type < 0x7f ? type : '?');
}

/* The relation of the last insert has every needed column (by name, as
 * the Relation frame sent it). */
static bool pgo_shaped(struct decoder *d, const struct decoder_record *rec)
{
    const struct decoder_pgo *g = (const struct decoder_pgo *) d;
    const char *need[OUTBOX_NEEDED_COLUMNS];
    (void) rec; /* the record of the last frame, which g->msg holds */
    if (g->msg.type != 'I')
        return false;
    outbox_columns_needed(d->columns, need);
    for (size_t k = 0; k < OUTBOX_NEEDED_COLUMNS; k++)
        if (need[k] != NULL && pgo_column_index(g->msg.rel, need[k]) < 0)
            return false;
    return true;
}

static int pgo_start_options(const struct decoder_slot *slot, char *buf, size_t cap)
{
    const char *pub = slot->publication && *slot->publication ? slot->publication
                                                              : "outbox_relay";
    const char *msgs = slot->message_prefix && *slot->message_prefix
                           ? ", \"messages\" 'true'" : "";
    if (cap == 0 || strchr(pub, '\'') != NULL)
        return -1;
    int n = snprintf(buf, cap, "\"proto_version\" '1', \"publication_names\" '%s'%s", pub, msgs);
    if (n < 0 || (size_t) n >= cap)
        return -1;
    return n;
}

/* A text writer that only counts while buf is NULL (the first of two
 * passes: the size, then the bytes). */
struct text {
    char *buf;
    size_t len;
};

static void put(struct text *t, const char *s, size_t n)
{
    if (t->buf != NULL)
        memcpy(t->buf + t->len, s, n);
    t->len += n;
}

static void put_str(struct text *t, const char *s)
{
    put(t, s, strlen(s));
}

/* s as a JSON string: quotes, backslashes and control bytes escaped, the
 * rest (PostgreSQL's text, UTF-8 in a UTF-8 database) as is. */
static void put_json(struct text *t, const char *s, size_t n)
{
    put(t, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char) c;
            put(t, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(t, esc, 6);
        } else {
            put(t, (const char *) &s[i], 1);
        }
    }
    put(t, "\"", 1);
}

static void describe_frame(const struct pgo_msg *m, struct text *t)
{
    char num[32];
    if (m->type == 'M') {
        put_str(t, "{\"action\":\"M\",\"transactional\":");
        put_str(t, m->transactional ? "true" : "false");
        put_str(t, ",\"prefix\":");
        put_json(t, m->prefix.ptr, m->prefix.len);
        put_str(t, ",\"content\":");
        put_json(t, m->content.ptr, m->content.len);
        put_str(t, "}");
        return;
    }
    put_str(t, "{\"action\":\"I\",\"schema\":");
    put_json(t, m->rel->nspname, m->rel->nspname_len);
    put_str(t, ",\"table\":");
    put_json(t, m->rel->relname, m->rel->relname_len);
    put_str(t, ",\"columns\":[");
    for (size_t i = 0; i < m->nvalues && i < m->rel->ncolumns; i++) {
        const struct pgo_column *c = &m->rel->columns[i];
        const struct pgo_value *v = &m->values[i];
        put_str(t, i ? ",{\"name\":" : "{\"name\":");
        put_json(t, c->name, c->name_len);
        snprintf(num, sizeof num, ",\"typeoid\":%" PRIu32 ",\"value\":", c->type_oid);
        put_str(t, num);
        if (v->kind == 't')
            put_json(t, v->ptr, v->len);
        else
            put_str(t, v->kind == 'u' ? "null,\"unchanged_toast\":true" : "null");
        put_str(t, "}");
    }
    put_str(t, "]}");
}

static int pgo_describe(struct decoder *d, const struct decoder_record *rec, const char **out,
                        size_t *len)
{
    struct decoder_pgo *g = (struct decoder_pgo *) d;
    (void) rec; /* the record of the last frame, which g->msg holds */
    if (g->msg.type != 'I' && g->msg.type != 'M')
        return 0;
    struct text t = {NULL, 0};
    describe_frame(&g->msg, &t);
    if (outbox_scratch_reserve(&g->described, t.len) < 0)
        return -1;
    t = (struct text){g->described.buf, 0};
    describe_frame(&g->msg, &t);
    *out = t.buf;
    *len = t.len;
    return 0;
}

static void pgo_free(struct decoder *d)
{
    struct decoder_pgo *g = (struct decoder_pgo *) d;
    pgo_parser_free(&g->parser);
    outbox_scratch_free(&g->scratch);
    outbox_scratch_free(&g->described);
    free(g);
}

static const struct decoder_ops PGO_OPS = {
    .plugin = "pgoutput",
    .package = "none: pgoutput is built into PostgreSQL (10 and later)",
    .publication = true,
    .names_root = true,
    .start_options = pgo_start_options,
    .decode = pgo_decode,
    .event = pgo_event,
    .shaped = pgo_shaped,
    .describe = pgo_describe,
    .free = pgo_free,
};

struct decoder *decoder_pgoutput_new(void)
{
    struct decoder_pgo *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->base.ops = &PGO_OPS;
    return &g->base;
}
