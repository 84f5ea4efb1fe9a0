/*
 * pgoutput.c — the pgoutput protocol version 1 parser (see pgoutput.h).
 * A reader over the frame whose every read checks the remaining length
 * first, in the manner of wire.c; the relation cache is a growable array
 * searched linearly (a handful of entries: the outbox and its partitions).
 */
#include "outbox_relay/decode/pgoutput.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rd {
    const unsigned char *p;
    size_t len, pos;
    char *err;
    size_t errlen;
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail_at(struct rd *r, size_t at, const char *fmt, ...)
{
    if (r->err != NULL && r->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(r->err, r->errlen, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t) n < r->errlen)
            snprintf(r->err + n, r->errlen - (size_t) n, " at byte %zu of %zu", at, r->len);
    }
    return -1;
}

static int need(struct rd *r, size_t n, const char *what)
{
    if (r->len - r->pos < n)
        return fail_at(r, r->pos, "truncated %s (%zu bytes needed, %zu left)", what, n,
                       r->len - r->pos);
    return 0;
}

static int u8(struct rd *r, uint8_t *v, const char *what)
{
    if (need(r, 1, what) < 0)
        return -1;
    *v = r->p[r->pos++];
    return 0;
}

static int u16(struct rd *r, uint16_t *v, const char *what)
{
    if (need(r, 2, what) < 0)
        return -1;
    *v = (uint16_t) ((r->p[r->pos] << 8) | r->p[r->pos + 1]);
    r->pos += 2;
    return 0;
}

static int u32(struct rd *r, uint32_t *v, const char *what)
{
    if (need(r, 4, what) < 0)
        return -1;
    const unsigned char *q = r->p + r->pos;
    *v = ((uint32_t) q[0] << 24) | ((uint32_t) q[1] << 16) | ((uint32_t) q[2] << 8) | q[3];
    r->pos += 4;
    return 0;
}

static int u64(struct rd *r, uint64_t *v, const char *what)
{
    uint32_t hi = 0, lo = 0;
    if (need(r, 8, what) < 0)
        return -1;
    (void) u32(r, &hi, what);
    (void) u32(r, &lo, what);
    *v = ((uint64_t) hi << 32) | lo;
    return 0;
}

/* A NUL-terminated String of the protocol: the bytes before the NUL. */
static int str(struct rd *r, struct pgo_str *s, const char *what)
{
    const unsigned char *nul = memchr(r->p + r->pos, '\0', r->len - r->pos);
    if (nul == NULL)
        return fail_at(r, r->pos, "unterminated %s", what);
    s->ptr = (const char *) r->p + r->pos;
    s->len = (size_t) (nul - (r->p + r->pos));
    r->pos += s->len + 1;
    return 0;
}

static int end(struct rd *r, char type)
{
    if (r->pos != r->len)
        return fail_at(r, r->pos, "%zu trailing bytes after a '%c' message", r->len - r->pos,
                       type);
    return 0;
}

/* ---------------------------------------------------------------- cache */

static void relation_free(struct pgo_relation *rel)
{
    for (size_t i = 0; rel->columns != NULL && i < rel->ncolumns; i++)
        free(rel->columns[i].name);
    free(rel->columns);
    free(rel->nspname);
    free(rel->relname);
    memset(rel, 0, sizeof *rel);
}

void pgo_parser_free(struct pgo_parser *p)
{
    for (size_t i = 0; i < p->nrels; i++)
        relation_free(&p->rels[i]);
    free(p->rels);
    free(p->values);
    memset(p, 0, sizeof *p);
}

static long find(const struct pgo_parser *p, uint32_t oid)
{
    if (p->last < p->nrels && p->rels[p->last].oid == oid)
        return (long) p->last;
    for (size_t i = 0; i < p->nrels; i++)
        if (p->rels[i].oid == oid)
            return (long) i;
    return -1;
}

const struct pgo_relation *pgo_relation(const struct pgo_parser *p, uint32_t oid)
{
    long i = find(p, oid);
    return i < 0 ? NULL : &p->rels[i];
}

int pgo_column_index(const struct pgo_relation *rel, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < rel->ncolumns; i++)
        if (rel->columns[i].name_len == n && memcmp(rel->columns[i].name, name, n) == 0)
            return i;
    return -1;
}

static char *dup(const struct pgo_str *s)
{
    char *d = malloc(s->len + 1);
    if (d != NULL) {
        memcpy(d, s->ptr, s->len);
        d[s->len] = '\0';
    }
    return d;
}

/* ------------------------------------------------------------- messages */

/* TupleData into p->values (grown to ncols); 'b' is refused. */
static int tuple(struct pgo_parser *p, struct rd *r, size_t *nvalues)
{
    uint16_t n;
    if (u16(r, &n, "tuple column count") < 0)
        return -1;
    if (n > PGO_MAX_COLUMNS)
        return fail_at(r, r->pos - 2, "tuple of %u columns (at most %d)", n, PGO_MAX_COLUMNS);
    if (n > p->values_cap) {
        struct pgo_value *v = realloc(p->values, n * sizeof *v);
        if (v == NULL)
            return fail_at(r, r->pos, "out of memory for %u values", n);
        p->values = v;
        p->values_cap = n;
    }
    for (uint16_t i = 0; i < n; i++) {
        uint8_t kind;
        size_t at = r->pos;
        struct pgo_value *v = &p->values[i];
        if (u8(r, &kind, "tuple column kind") < 0)
            return -1;
        v->kind = (char) kind;
        v->ptr = NULL;
        v->len = 0;
        if (kind == 'n' || kind == 'u')
            continue;
        if (kind == 'b')
            return fail_at(r, at, "binary value of column %u (the relayer asks for text)", i);
        if (kind != 't')
            return fail_at(r, at, "unknown tuple column kind 0x%02x", kind);
        uint32_t len;
        if (u32(r, &len, "text value length") < 0)
            return -1;
        if (need(r, len, "text value") < 0)
            return -1;
        v->ptr = (const char *) r->p + r->pos;
        v->len = len;
        r->pos += len;
    }
    *nvalues = n;
    return 0;
}

static int relation(struct pgo_parser *p, struct rd *r, struct pgo_msg *m)
{
    struct pgo_relation nr = {0};
    struct pgo_str nsp = {0}, name = {0};
    uint16_t ncols;
    int rc = -1;

    if (u32(r, &nr.oid, "relation OID") < 0 || str(r, &nsp, "relation namespace") < 0 ||
        str(r, &name, "relation name") < 0 || u8(r, &nr.replident, "replica identity") < 0 ||
        u16(r, &ncols, "relation column count") < 0)
        return -1;
    if (ncols > PGO_MAX_COLUMNS)
        return fail_at(r, r->pos - 2, "relation of %u columns (at most %d)", ncols,
                       PGO_MAX_COLUMNS);
    nr.columns = calloc(ncols ? ncols : 1, sizeof *nr.columns);
    nr.nspname = dup(&nsp);
    nr.relname = dup(&name);
    if (nr.columns == NULL || nr.nspname == NULL || nr.relname == NULL) {
        fail_at(r, r->pos, "out of memory for relation %u", nr.oid);
        goto done;
    }
    nr.nspname_len = nsp.len;
    nr.relname_len = name.len;
    for (uint16_t i = 0; i < ncols; i++) {
        struct pgo_column *c = &nr.columns[i];
        struct pgo_str cname = {0};
        uint32_t typmod;
        nr.ncolumns = (uint16_t) (i + 1); /* what relation_free frees */
        if (u8(r, &c->flags, "column flags") < 0 || str(r, &cname, "column name") < 0 ||
            u32(r, &c->type_oid, "column type OID") < 0 ||
            u32(r, &typmod, "column type modifier") < 0)
            goto done;
        c->typmod = (int32_t) typmod;
        c->name_len = cname.len;
        if ((c->name = dup(&cname)) == NULL) {
            fail_at(r, r->pos, "out of memory for relation %u", nr.oid);
            goto done;
        }
    }
    nr.ncolumns = ncols;
    if (end(r, 'R') < 0)
        goto done;
    long at = find(p, nr.oid);
    if (at < 0) {
        if (p->nrels == PGO_MAX_RELATIONS) {
            fail_at(r, 1, "relation %u: the cache holds %d relations already", nr.oid,
                    PGO_MAX_RELATIONS);
            goto done;
        }
        if (p->nrels == p->cap) {
            size_t cap = p->cap ? p->cap * 2 : 8;
            struct pgo_relation *rels = realloc(p->rels, cap * sizeof *rels);
            if (rels == NULL) {
                fail_at(r, 1, "out of memory for relation %u", nr.oid);
                goto done;
            }
            p->rels = rels;
            p->cap = cap;
        }
        at = (long) p->nrels++;
    } else {
        relation_free(&p->rels[at]); /* replaced: the server resent it */
    }
    p->rels[at] = nr;
    memset(&nr, 0, sizeof nr);
    p->last = (size_t) at;
    m->oid = p->rels[at].oid;
    m->rel = &p->rels[at];
    rc = 0;
done:
    relation_free(&nr);
    return rc;
}

static int insert(struct pgo_parser *p, struct rd *r, struct pgo_msg *m)
{
    uint8_t tag;
    if (u32(r, &m->oid, "relation OID") < 0 || u8(r, &tag, "new tuple tag") < 0)
        return -1;
    if (tag != 'N')
        return fail_at(r, r->pos - 1, "insert: tuple tag 0x%02x, not 'N'", tag);
    long at = find(p, m->oid);
    if (at < 0)
        return fail_at(r, 1, "insert into relation %u that no Relation message described",
                       m->oid);
    size_t at_tuple = r->pos;
    if (tuple(p, r, &m->nvalues) < 0 || end(r, 'I') < 0)
        return -1;
    if (m->nvalues != p->rels[at].ncolumns)
        return fail_at(r, at_tuple, "insert into %s.%s: %zu values for %u columns",
                       p->rels[at].nspname, p->rels[at].relname, m->nvalues,
                       p->rels[at].ncolumns);
    p->last = (size_t) at;
    m->rel = &p->rels[at];
    m->values = p->values;
    return 0;
}

/* Update and Delete: checked to the end, the tuples dropped. */
static int update_delete(struct pgo_parser *p, struct rd *r, struct pgo_msg *m, char type)
{
    uint8_t tag;
    size_t n;
    if (u32(r, &m->oid, "relation OID") < 0 || u8(r, &tag, "tuple tag") < 0)
        return -1;
    if (tag == 'K' || tag == 'O') {
        if (tuple(p, r, &n) < 0)
            return -1;
        if (type == 'D')
            return end(r, type);
        if (u8(r, &tag, "new tuple tag") < 0)
            return -1;
    }
    if (type == 'D' || tag != 'N')
        return fail_at(r, r->pos - 1, "'%c': unexpected tuple tag 0x%02x", type, tag);
    if (tuple(p, r, &n) < 0)
        return -1;
    return end(r, type);
}

int pgo_parse(struct pgo_parser *p, const char *data, size_t len, struct pgo_msg *m, char *err,
              size_t errlen)
{
    struct rd r = {(const unsigned char *) data, len, 0, err, errlen};
    uint8_t type, flags;
    uint64_t a, b, ts;
    uint32_t xid, nrels;

    memset(m, 0, sizeof *m);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (data == NULL && len > 0)
        return fail_at(&r, 0, "no frame");
    if (u8(&r, &type, "message type") < 0)
        return -1;
    m->type = (char) type;
    switch (type) {
    case 'B':
        if (u64(&r, &a, "begin final LSN") < 0 || u64(&r, &ts, "begin commit time") < 0 ||
            u32(&r, &xid, "begin xid") < 0)
            return -1;
        m->lsn = a;
        m->timestamp = (int64_t) ts;
        m->xid = xid;
        return end(&r, 'B');
    case 'C':
        if (u8(&r, &m->flags, "commit flags") < 0 || u64(&r, &a, "commit LSN") < 0 ||
            u64(&r, &b, "commit end LSN") < 0 || u64(&r, &ts, "commit time") < 0)
            return -1;
        m->lsn = a;
        m->end_lsn = b;
        m->timestamp = (int64_t) ts;
        return end(&r, 'C');
    case 'O':
        if (u64(&r, &a, "origin commit LSN") < 0 || str(&r, &m->name, "origin name") < 0)
            return -1;
        m->lsn = a;
        return end(&r, 'O');
    case 'R':
        return relation(p, &r, m);
    case 'Y':
        if (u32(&r, &m->oid, "type OID") < 0 || str(&r, &m->nspname, "type namespace") < 0 ||
            str(&r, &m->name, "type name") < 0)
            return -1;
        return end(&r, 'Y');
    case 'I':
        return insert(p, &r, m);
    case 'U':
    case 'D':
        return update_delete(p, &r, m, (char) type);
    case 'T':
        if (u32(&r, &nrels, "truncate relation count") < 0 ||
            u8(&r, &flags, "truncate options") < 0)
            return -1;
        m->nrelations = nrels;
        m->flags = flags;
        for (uint32_t i = 0; i < nrels; i++) {
            uint32_t oid;
            if (u32(&r, &oid, "truncated relation OID") < 0)
                return -1;
            if (i == 0)
                m->oid = oid;
        }
        return end(&r, 'T');
    case 'M':
        if (u8(&r, &m->flags, "message flags") < 0 || u64(&r, &a, "message LSN") < 0 ||
            str(&r, &m->prefix, "message prefix") < 0 ||
            u32(&r, &xid, "message content length") < 0 ||
            need(&r, xid, "message content") < 0)
            return -1;
        m->lsn = a;
        m->transactional = (m->flags & 1) != 0;
        m->content.ptr = data + r.pos;
        m->content.len = xid;
        r.pos += xid;
        return end(&r, 'M');
    default:
        return fail_at(&r, 0, "unknown message type 0x%02x", type);
    }
}
