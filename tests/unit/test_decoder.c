/*
 * test_decoder.c — the wal2json decoder against lines captured from a real
 * PostgreSQL 15 + wal2json 2.5 (tests/fixtures/wal2json, see capture.sh),
 * and against hand-written malformed input.
 *
 * Every line handed to w2j_parse() is first copied into a buffer of exactly
 * its length, so that a sanitizer build catches any read past the end.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/w2j.h"
#include "outbox_relay/lsn.h"

#ifndef FIXTURES_DIR
#define FIXTURES_DIR "tests/fixtures"
#endif

/* ------------------------------------------------------------- helpers */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (f == NULL) {
        fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t) n + 1);
        if (buf != NULL && fread(buf, 1, (size_t) n, f) != (size_t) n) {
            free(buf);
            buf = NULL;
        }
        if (buf != NULL) {
            buf[n] = '\0';
            *len = (size_t) n;
        }
    }
    fclose(f);
    return buf;
}

/* The lines of a file (without their '\n'), as (ptr, len) pairs into buf. */
struct lines {
    char *buf;
    size_t n;
    const char **ptr;
    size_t *len;
};

static bool lines_load(struct lines *l, const char *name)
{
    char path[512];
    size_t size, cap = 0;

    memset(l, 0, sizeof *l);
    snprintf(path, sizeof path, "%s/wal2json/%s", FIXTURES_DIR, name);
    l->buf = read_file(path, &size);
    if (l->buf == NULL)
        return false;
    for (size_t i = 0; i < size;) {
        char *nl = memchr(l->buf + i, '\n', size - i);
        size_t end = nl != NULL ? (size_t) (nl - l->buf) : size;
        if (l->n == cap) {
            cap = cap ? cap * 2 : 64;
            l->ptr = realloc(l->ptr, cap * sizeof *l->ptr);
            l->len = realloc(l->len, cap * sizeof *l->len);
        }
        l->ptr[l->n] = l->buf + i;
        l->len[l->n] = end - i;
        l->n++;
        i = end + 1;
    }
    return true;
}

static void lines_free(struct lines *l)
{
    free(l->buf);
    free(l->ptr);
    free(l->len);
}

/* An exactly-sized heap copy: reading one byte past it is an ASan error. */
static char *exact_copy(const char *p, size_t n)
{
    char *c = malloc(n > 0 ? n : 1);
    if (n > 0)
        memcpy(c, p, n);
    return c;
}

static struct w2j_record rec; /* 26 KiB: keep it off the stack */
static struct w2j_record rec2;
static char err[W2J_ERRLEN];

/* Parses an exact copy of s; rec points into it until the next call. */
static char *last_copy;

static int parse_str(const char *s)
{
    size_t n = strlen(s);
    free(last_copy);
    last_copy = exact_copy(s, n);
    return w2j_parse(last_copy, n, &rec, err, sizeof err);
}

/* Parses s (kept alive by the caller) and decodes it. */
static int parse_decode(const char *s, struct w2j_scratch *scratch, struct outbox_event *ev)
{
    if (w2j_parse(s, strlen(s), &rec, err, sizeof err) < 0)
        return -2;
    return w2j_event_decode(&rec, &W2J_DEFAULT_COLUMNS, scratch, ev, err, sizeof err);
}

static bool err_has(const char *what)
{
    if (strstr(err, what) != NULL)
        return true;
    fprintf(stderr, "  error \"%s\" does not mention \"%s\"\n", err, what);
    return false;
}

static struct w2j_value str_value(const char *s)
{
    struct w2j_value v = {W2J_STRING, strchr(s, '\\') != NULL, s, strlen(s)};
    return v;
}

/* MD5 (RFC 1321), to compare payloads too large to keep in .expected. */
static void md5_hex(const unsigned char *msg, size_t len, char out[33])
{
    static const unsigned r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                   5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                   4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                   6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};
    static const uint32_t k[64] = {
        0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
        0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
        0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
        0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
        0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
        0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
        0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
        0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
        0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
        0xeb86d391};
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t total = ((len + 8) / 64 + 1) * 64;
    unsigned char *m = calloc(total, 1);

    memcpy(m, msg, len);
    m[len] = 0x80;
    for (int i = 0; i < 8; i++)
        m[total - 8 + i] = (unsigned char) ((uint64_t) len * 8 >> (8 * i));
    for (size_t off = 0; off < total; off += 64) {
        uint32_t w[16], a = h[0], b = h[1], c = h[2], d = h[3];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t) m[off + 4 * i] | (uint32_t) m[off + 4 * i + 1] << 8 |
                   (uint32_t) m[off + 4 * i + 2] << 16 | (uint32_t) m[off + 4 * i + 3] << 24;
        for (unsigned i = 0; i < 64; i++) {
            uint32_t f;
            unsigned g;
            if (i < 16) {
                f = (b & c) | (~b & d);
                g = i;
            } else if (i < 32) {
                f = (d & b) | (~d & c);
                g = (5 * i + 1) % 16;
            } else if (i < 48) {
                f = b ^ c ^ d;
                g = (3 * i + 5) % 16;
            } else {
                f = c ^ (b | ~d);
                g = (7 * i) % 16;
            }
            f += a + k[i] + w[g];
            a = d;
            d = c;
            c = b;
            b += (f << r[i]) | (f >> (32 - r[i]));
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
    }
    free(m);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned) (h[i / 4] >> (8 * (i % 4))) & 0xff);
}

/* Decodes hex in place; returns the length. */
static size_t unhex(char *s)
{
    size_t n = strlen(s) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        s[i] = (char) v;
    }
    return n;
}

/* ------------------------------------------------- golden fixtures */

/* One line of a .expected file (see capture.sh for the format). */
struct expect {
    char *key, *status, *agg, *type, *created_at, *created_us, *payload_len, *md5, *payload;
    size_t agg_len, type_len, payload_hex_len;
    int seen;
};

static size_t load_expected(const char *name, struct expect **out, char **keep)
{
    struct lines l;
    struct expect *e;

    *keep = NULL;
    if (!lines_load(&l, name)) {
        CHECK(!"expected file missing");
        *out = NULL;
        return 0;
    }
    e = calloc(l.n + 1, sizeof *e);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (l.len[i] == 0)
            continue;
        char *line = (char *) l.ptr[i];
        line[l.len[i]] = '\0';
        char *f[9];
        int nf = 0;
        for (char *p = line; nf < 9; nf++) {
            f[nf] = p;
            char *tab = strchr(p, '\t');
            if (tab == NULL) {
                nf++;
                break;
            }
            *tab = '\0';
            p = tab + 1;
        }
        CHECK_EQ_INT(nf, 9);
        if (nf != 9)
            continue;
        struct expect *x = &e[n++];
        x->key = f[0];
        x->status = f[1];
        x->agg = f[2];
        x->type = f[3];
        x->created_at = f[4];
        x->created_us = f[5];
        x->payload_len = f[6];
        x->md5 = f[7];
        x->payload = f[8];
        if (strcmp(x->agg, "\\N") != 0)
            x->agg_len = unhex(x->agg);
        if (strcmp(x->type, "\\N") != 0)
            x->type_len = unhex(x->type);
        if (strcmp(x->payload, "\\N") != 0 && strcmp(x->payload, "-") != 0)
            x->payload_hex_len = unhex(x->payload);
    }
    *keep = l.buf;
    free(l.ptr);
    free(l.len);
    *out = e;
    return n;
}

static bool span_eq(const char *p, size_t n, const char *q, size_t m)
{
    return n == m && (n == 0 || memcmp(p, q, n) == 0);
}

static const struct w2j_value *column(const struct w2j_record *r, const char *name)
{
    for (size_t i = 0; i < r->ncolumns; i++)
        if (span_eq(r->columns[i].name.ptr, r->columns[i].name.len, name, strlen(name)))
            return &r->columns[i].value;
    return NULL;
}

static void check_event(const struct expect *x, const struct w2j_record *r, int rc,
                        const struct outbox_event *ev, const char *where)
{
    bool ok = strcmp(x->status, "ok") == 0;
    int before = check_failures;

    CHECK_EQ_INT(rc, ok ? 0 : -1);
    if (!ok) {
        CHECK(err[0] != '\0' && strstr(err, "event at LSN ") == err);
        goto done;
    }
    if (rc != 0)
        goto done;
    if (x->key[0] == 'm')
        CHECK(strcmp(ev->event_id, x->key) == 0);
    else
        CHECK(strcmp(ev->event_id, strchr(x->key, ':') + 1) == 0);
    CHECK(ev->lsn == r->lsn);
    if (strcmp(x->agg, "\\N") == 0)
        CHECK(ev->aggregate_id == NULL);
    else
        CHECK(ev->aggregate_id != NULL &&
              span_eq(ev->aggregate_id, ev->aggregate_id_len, x->agg, x->agg_len));
    CHECK(ev->type != NULL && span_eq(ev->type, ev->type_len, x->type, x->type_len));

    if (strcmp(x->payload_len, "\\N") == 0) {
        CHECK(ev->payload == NULL);
    } else {
        char md5[33];
        CHECK(ev->payload != NULL);
        CHECK_EQ_INT(ev->payload_len, strtoull(x->payload_len, NULL, 10));
        if (ev->payload != NULL) {
            md5_hex((const unsigned char *) ev->payload, ev->payload_len, md5);
            CHECK(strcmp(md5, x->md5) == 0);
            if (strcmp(x->payload, "-") != 0)
                CHECK(span_eq(ev->payload, ev->payload_len, x->payload, x->payload_hex_len));
        }
    }

    if (strcmp(x->created_at, "*") == 0) {
        /* a message: the record's own timestamp, NULL when non-transactional */
        if (r->timestamp.type == W2J_STRING)
            CHECK(ev->created_at == r->timestamp.ptr && ev->created_at_len == r->timestamp.len);
        else
            CHECK(ev->created_at == NULL && !r->transactional);
    } else if (strcmp(x->created_at, "\\N") == 0) {
        CHECK(ev->created_at == NULL);
    } else {
        CHECK_SPAN(ev->created_at, ev->created_at_len, x->created_at);
        struct w2j_value v = {W2J_STRING, false, ev->created_at, ev->created_at_len};
        int64_t us = 0;
        if (strcmp(x->created_us, "-") == 0) {
            CHECK_EQ_INT(w2j_timestamp_us(&v, &us), -1);
        } else {
            CHECK_EQ_INT(w2j_timestamp_us(&v, &us), 0);
            CHECK_EQ_INT(us, strtoll(x->created_us, NULL, 10));
        }
    }
done:
    if (check_failures != before)
        fprintf(stderr, "  ^ in %s, event %s (%s)\n", where, x->key, err);
}

/* Every line parses; every outbox event in it decodes to what PostgreSQL
 * said; every expected event is met exactly once. */
static void test_golden(const char *jsonl, const char *expected)
{
    struct lines l;
    struct expect *exp;
    char *keep;
    size_t nexp = load_expected(expected, &exp, &keep);
    struct w2j_scratch scratch = {0};
    size_t events = 0;

    if (!lines_load(&l, jsonl)) {
        CHECK(!"fixture missing");
        return;
    }
    CHECK(l.n > 0 && nexp > 0);
    for (size_t i = 0; i < l.n; i++) {
        char where[600];
        char *line = exact_copy(l.ptr[i], l.len[i]);
        int rc = w2j_parse(line, l.len[i], &rec, err, sizeof err);

        snprintf(where, sizeof where, "%s:%zu", jsonl, i + 1);
        CHECK_EQ_INT(rc, 0);
        if (rc != 0) {
            fprintf(stderr, "  ^ %s: %s\n", where, err);
            free(line);
            continue;
        }
        CHECK(rec.lsn != 0);
        CHECK(rec.timestamp.type == W2J_STRING || rec.timestamp.type == W2J_NULL);
        if (rec.timestamp.type == W2J_STRING) {
            int64_t us;
            CHECK_EQ_INT(w2j_timestamp_us(&rec.timestamp, &us), 0);
            CHECK(us > INT64_C(1700000000000000)); /* the capture ran after 2023 */
        }
        switch (rec.action) {
        case 'B':
        case 'C':
            CHECK(rec.nextlsn > rec.lsn);
            CHECK_EQ_INT(rec.ncolumns, 0);
            break;
        case 'I':
        case 'U':
            CHECK(rec.schema.type == W2J_STRING && rec.table.type == W2J_STRING);
            CHECK(rec.ncolumns > 0);
            break;
        case 'D':
            CHECK(rec.table.type == W2J_STRING);
            CHECK_EQ_INT(rec.ncolumns, 0); /* only "identity", which is skipped */
            break;
        case 'T':
            CHECK(rec.table.type == W2J_STRING);
            break;
        case 'M':
            CHECK(rec.prefix.type == W2J_STRING && rec.content.type == W2J_STRING);
            break;
        default:
            CHECK(!"unexpected action");
        }

        char key[128] = "";
        if (rec.action == 'I' && span_eq(rec.schema.ptr, rec.schema.len, "public", 6) &&
            (span_eq(rec.table.ptr, rec.table.len, "events_outbox", 13) ||
             span_eq(rec.table.ptr, rec.table.len, "events_outbox_nullable", 22))) {
            const struct w2j_value *id = column(&rec, "id");
            CHECK(id != NULL && id->type == W2J_NUMBER);
            if (id != NULL)
                snprintf(key, sizeof key, "public.%.*s:%.*s", (int) rec.table.len,
                         rec.table.ptr, (int) id->len, id->ptr);
        } else if (rec.action == 'M' && span_eq(rec.prefix.ptr, rec.prefix.len, "outbox", 6)) {
            snprintf(key, sizeof key, "m-%016llX", (unsigned long long) rec.lsn);
        } else {
            struct outbox_event ev;
            if (rec.action != 'I' && rec.action != 'M')
                CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), -1);
        }
        if (key[0] != '\0') {
            struct expect *x = NULL;
            struct outbox_event ev;
            for (size_t k = 0; k < nexp; k++)
                if (strcmp(exp[k].key, key) == 0)
                    x = &exp[k];
            CHECK(x != NULL);
            if (x == NULL) {
                fprintf(stderr, "  ^ %s: no expectation for %s\n", where, key);
            } else {
                int drc = w2j_event_decode(&rec, &W2J_DEFAULT_COLUMNS, &scratch, &ev, err,
                                           sizeof err);
                check_event(x, &rec, drc, &ev, where);
                x->seen++;
                events++;
            }
        }
        free(line);
    }
    for (size_t k = 0; k < nexp; k++) {
        CHECK_EQ_INT(exp[k].seen, 1);
        if (exp[k].seen != 1)
            fprintf(stderr, "  ^ %s: %s seen %d times\n", expected, exp[k].key, exp[k].seen);
    }
    CHECK_EQ_INT(events, nexp);
    w2j_scratch_free(&scratch);
    free(exp);
    free(keep);
    lines_free(&l);
}

/* The relayer's option set and the everything-on set describe the same
 * changes: unknown keys ("xid", "origin", "pk", column "type", …) change
 * nothing but xid. Timestamps differ in zone (UTC vs Asia/Kolkata), not in
 * the instant they name. */
static void test_sets_agree(void)
{
    struct lines a, b;

    if (!lines_load(&a, "outbox.jsonl") || !lines_load(&b, "outbox_types_xids.jsonl")) {
        CHECK(!"fixtures missing");
        return;
    }
    CHECK_EQ_INT(a.n, b.n);
    for (size_t i = 0; i < a.n && i < b.n; i++) {
        int before = check_failures;
        CHECK_EQ_INT(w2j_parse(a.ptr[i], a.len[i], &rec, err, sizeof err), 0);
        CHECK_EQ_INT(w2j_parse(b.ptr[i], b.len[i], &rec2, err, sizeof err), 0);
        CHECK_EQ_INT(rec.action, rec2.action);
        CHECK(rec.lsn == rec2.lsn && rec.nextlsn == rec2.nextlsn);
        CHECK_EQ_INT(rec.xid, -1);
        if (rec2.action == 'M' && !rec2.transactional)
            CHECK_EQ_INT(rec2.xid, -1); /* "xid":null */
        else
            CHECK(rec2.xid > 0);
        CHECK_EQ_INT(rec.transactional, rec2.transactional);
        CHECK(span_eq(rec.table.ptr, rec.table.len, rec2.table.ptr, rec2.table.len));
        CHECK(span_eq(rec.content.ptr, rec.content.len, rec2.content.ptr, rec2.content.len));
        CHECK_EQ_INT(rec.ncolumns, rec2.ncolumns);
        for (size_t c = 0; c < rec.ncolumns && c < rec2.ncolumns; c++) {
            const struct w2j_value *x = &rec.columns[c].value, *y = &rec2.columns[c].value;
            int64_t ux, uy;
            CHECK(span_eq(rec.columns[c].name.ptr, rec.columns[c].name.len,
                          rec2.columns[c].name.ptr, rec2.columns[c].name.len));
            CHECK_EQ_INT(x->type, y->type);
            if (w2j_timestamp_us(x, &ux) == 0 && w2j_timestamp_us(y, &uy) == 0)
                CHECK_EQ_INT(ux, uy);
            else
                CHECK(span_eq(x->ptr, x->len, y->ptr, y->len));
        }
        if (rec.timestamp.type == W2J_STRING) {
            int64_t ux = 0, uy = 1;
            CHECK_EQ_INT(w2j_timestamp_us(&rec.timestamp, &ux), 0);
            CHECK_EQ_INT(w2j_timestamp_us(&rec2.timestamp, &uy), 0);
            CHECK_EQ_INT(ux, uy);
        }
        if (check_failures != before)
            fprintf(stderr, "  ^ line %zu\n", i + 1);
    }
    lines_free(&a);
    lines_free(&b);
}

/* Every proper prefix of a real line is rejected cleanly, with a message. */
static void truncate_all(const char *line, size_t len, size_t step)
{
    int bad = 0;

    for (size_t cut = 0; cut < len; cut += step) {
        char *c = exact_copy(line, cut);
        err[0] = '\0';
        int rc = w2j_parse(c, cut, &rec, err, sizeof err);
        if (rc != -1 || strstr(err, " at byte ") == NULL) {
            if (bad++ < 5)
                fprintf(stderr, "  truncated at %zu of %zu: rc %d, \"%s\"\n", cut, len, rc,
                        err);
        }
        free(c);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_truncation(void)
{
    struct lines l;
    const char *want[] = {"\"action\":\"B\"", "\"action\":\"I\"", "\"action\":\"U\"",
                          "\"action\":\"D\"", "\"action\":\"T\"", "\"action\":\"M\""};
    bool done[6] = {false};

    if (!lines_load(&l, "outbox.jsonl")) {
        CHECK(!"fixture missing");
        return;
    }
    /* The first line of each action, every line with an escape, in full. */
    for (size_t i = 0; i < l.n; i++) {
        bool take = memchr(l.ptr[i], '\\', l.len[i]) != NULL && l.len[i] < 4096;
        for (int a = 0; a < 6; a++) {
            if (!done[a] && l.len[i] > 13 && memcmp(l.ptr[i] + 1, want[a], 12) == 0) {
                done[a] = true;
                take = true;
            }
        }
        if (take)
            truncate_all(l.ptr[i], l.len[i], 1);
    }
    for (int a = 0; a < 6; a++)
        CHECK(done[a]);
    lines_free(&l);

    if (!lines_load(&l, "outbox_types_xids.jsonl")) {
        CHECK(!"fixture missing");
        return;
    }
    truncate_all(l.ptr[1], l.len[1], 1);
    lines_free(&l);

    /* The 1 MB line: every 4999th byte, then every byte of its tail (the
     * end of the payload string and the columns after it). */
    if (!lines_load(&l, "large.jsonl")) {
        CHECK(!"fixture missing");
        return;
    }
    for (size_t i = 0; i < l.n; i++) {
        if (l.len[i] > 100000) {
            truncate_all(l.ptr[i], l.len[i] - 256, 4999);
            for (size_t cut = l.len[i] - 256; cut < l.len[i]; cut++) {
                char *c = exact_copy(l.ptr[i], cut);
                CHECK_EQ_INT(w2j_parse(c, cut, &rec, err, sizeof err), -1);
                free(c);
            }
        }
    }
    lines_free(&l);
}

/* ------------------------------------------------ hand-written input */

#define REJECT(line, what)                                                     \
    do {                                                                       \
        CHECK_EQ_INT(parse_str(line), -1);                                     \
        CHECK(err_has(what));                                                  \
        CHECK(err_has(" at byte "));                                           \
    } while (0)

#define ACCEPT(line)                                                           \
    do {                                                                       \
        int rc_ = parse_str(line);                                             \
        CHECK_EQ_INT(rc_, 0);                                                  \
        if (rc_ != 0)                                                          \
            fprintf(stderr, "  ^ %s: %s\n", line, err);                        \
    } while (0)

static void test_malformed(void)
{
    static char buf[65536];
    size_t n;

    /* not an object, empty, truncated */
    REJECT("", "truncated");
    REJECT("   ", "truncated");
    REJECT("[]", "expected '{'");
    REJECT("\"B\"", "expected '{'");
    REJECT("{", "truncated");
    REJECT("{\"action\"", "truncated");
    REJECT("{\"action\":", "truncated");
    REJECT("{\"action\":\"B", "unterminated string");
    REJECT("{\"action\":\"B\"", "truncated");
    REJECT("{\"action\":\"B\",", "truncated");
    REJECT("{\"action\" \"B\"}", "expected ':'");
    REJECT("{action:\"B\"}", "expected a key");
    REJECT("{\"action\":\"B\",}", "expected a key");
    REJECT("{\"action\":\"B\";\"lsn\":\"0/1\"}", "expected ',' or '}'");

    /* action */
    REJECT("{}", "missing \"action\"");
    REJECT("{\"lsn\":\"0/1\"}", "missing \"action\"");
    REJECT("{\"action\":\"X\"}", "unknown action \"X\"");
    REJECT("{\"action\":\"II\"}", "unknown action");
    REJECT("{\"action\":\"\"}", "unknown action");
    REJECT("{\"action\":\"\\u0000\"}", "unknown action");
    REJECT("{\"action\":73}", "\"action\" must be a string");
    REJECT("{\"action\":\"B\",\"action\":\"C\"}", "duplicate key \"action\"");
    ACCEPT("{\"\\u0061ction\":\"\\u0049\"}"); /* escaped key and value */
    CHECK_EQ_INT(rec.action, 'I');

    /* trailing garbage vs. whitespace */
    ACCEPT(" \t{\"action\":\"B\"} \r\n\t ");
    REJECT("{\"action\":\"B\"} x", "trailing garbage");
    REJECT("{\"action\":\"B\"}}", "trailing garbage");
    REJECT("{\"action\":\"B\"}{\"action\":\"C\"}", "trailing garbage after the record at byte 14");
    {
        /* a NUL right after the object: input is length-delimited */
        char nul[] = "{\"action\":\"B\"}\0";
        char *c = exact_copy(nul, sizeof nul - 1);
        CHECK_EQ_INT(w2j_parse(c, sizeof nul - 1, &rec, err, sizeof err), -1);
        CHECK(err_has("trailing garbage after the record at byte 14"));
        /* and the same bytes with len stopping before it parse */
        CHECK_EQ_INT(w2j_parse(c, sizeof nul - 2, &rec, err, sizeof err), 0);
        free(c);
    }

    /* escapes */
    REJECT("{\"action\":\"B\",\"x\":\"a\\qb\"}", "invalid escape '\\q'");
    REJECT("{\"action\":\"B\",\"x\":\"a\\u12G4\"}", "invalid \\u escape");
    REJECT("{\"action\":\"B\",\"x\":\"a\\u12\"}", "invalid \\u escape");
    REJECT("{\"action\":\"B\",\"x\":\"\\u12", "truncated");
    REJECT("{\"action\":\"B\",\"x\":\"\\", "truncated");
    REJECT("{\"action\":\"B\",\"x\":\"\\ud83d\"}", "lone high surrogate \\uD83D");
    REJECT("{\"action\":\"B\",\"x\":\"\\ud83dx\\ude00\"}", "lone high surrogate");
    REJECT("{\"action\":\"B\",\"x\":\"\\ud83d\\u0041\"}", "not followed by a low one");
    REJECT("{\"action\":\"B\",\"x\":\"\\ud83d\\ud83d\"}", "not followed by a low one");
    REJECT("{\"action\":\"B\",\"x\":\"\\ude00\"}", "lone low surrogate \\uDE00");
    REJECT("{\"action\":\"B\",\"x\":\"\\ude00\\ud83d\"}", "lone low surrogate");
    REJECT("{\"action\":\"B\",\"x\":\"a\x01z\"}", "control character 0x01 in string at byte 20");
    REJECT("{\"action\":\"B\",\"x\":\"a\nz\"}", "control character 0x0A");
    REJECT("{\"action\":\"B\",\"x\":\"a\x1f\"}", "control character 0x1F");
    REJECT("{\"action\":\"B\",\"x\\t\":1,\"y\":\"\\a\"}", "invalid escape");
    ACCEPT("{\"action\":\"B\",\"x\":\"\\ud83d\\ude00 \\u00e9 \\\" \\\\ \\/ \\b\\f\\n\\r\\t\x7f\"}");
    ACCEPT("{\"action\":\"B\",\"x\":\"\\uD83D\\uDE00\"}");

    /* numbers and literals in skipped values */
    ACCEPT("{\"action\":\"B\",\"n\":[0,-0,1.5,-2e10,3E+2,4e-2,123456789012345678901234567890]}");
    REJECT("{\"action\":\"B\",\"n\":01}", "expected ',' or '}'");
    REJECT("{\"action\":\"B\",\"n\":1.}", "expected a digit after '.'");
    REJECT("{\"action\":\"B\",\"n\":-}", "expected a digit");
    REJECT("{\"action\":\"B\",\"n\":1e}", "exponent");
    REJECT("{\"action\":\"B\",\"n\":+1}", "unexpected character '+'");
    REJECT("{\"action\":\"B\",\"n\":.5}", "unexpected character '.'");
    REJECT("{\"action\":\"B\",\"n\":tru}", "invalid literal");
    REJECT("{\"action\":\"B\",\"n\":nul", "truncated");
    REJECT("{\"action\":\"B\",\"n\":True}", "unexpected character 'T'");
    REJECT("{\"action\":\"B\",\"n\":[1,]}", "unexpected character ']'");
    REJECT("{\"action\":\"B\",\"n\":{\"a\" 1}}", "expected ':'");
    REJECT("{\"action\":\"B\",\"n\":[1 2]}", "expected ',' or ']'");

    /* types of the keys we keep */
    REJECT("{\"action\":\"B\",\"lsn\":\"0/XYZ\"}", "bad LSN in \"lsn\" at byte 20");
    REJECT("{\"action\":\"B\",\"lsn\":12}", "\"lsn\" must be a string");
    REJECT("{\"action\":\"B\",\"nextlsn\":\"\"}", "bad LSN in \"nextlsn\"");
    REJECT("{\"action\":\"B\",\"xid\":-1}", "\"xid\" must be a non-negative integer");
    REJECT("{\"action\":\"B\",\"xid\":1.5}", "\"xid\" must be");
    REJECT("{\"action\":\"B\",\"xid\":\"7\"}", "\"xid\" must be");
    REJECT("{\"action\":\"B\",\"xid\":99999999999999999999}", "\"xid\" must be");
    REJECT("{\"action\":\"M\",\"transactional\":\"yes\"}", "\"transactional\" must be a boolean");
    REJECT("{\"action\":\"I\",\"table\":7}", "\"table\" must be a string");
    REJECT("{\"action\":\"I\",\"columns\":{}}", "\"columns\" must be an array");
    REJECT("{\"action\":\"I\",\"columns\":[1]}", "expected a column object");
    REJECT("{\"action\":\"I\",\"columns\":[{\"value\":1}]}", "column without \"name\"");
    REJECT("{\"action\":\"I\",\"columns\":[{\"name\":1}]}", "column \"name\" must be a string");
    REJECT("{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"name\":\"b\"}]}", "duplicate key \"name\"");
    REJECT("{\"action\":\"I\",\"columns\":[{\"name\":\"a\"}] , \"columns\":[]}",
           "duplicate key \"columns\"");
    ACCEPT("{\"action\":\"B\",\"xid\":9223372036854775,\"lsn\":\"16/B374D848\","
           "\"nextlsn\":\"16/B374D878\",\"timestamp\":null}");
    CHECK_EQ_INT(rec.xid, INT64_C(9223372036854775));
    CHECK(rec.lsn == ((UINT64_C(0x16) << 32) | 0xB374D848u));
    CHECK(rec.nextlsn == ((UINT64_C(0x16) << 32) | 0xB374D878u));
    CHECK_EQ_INT(rec.timestamp.type, W2J_NULL);

    /* key order, whitespace, unknown keys of every kind, column order */
    ACCEPT("{ \"columns\" : [ { \"value\" : \"v\\\"1\" , \"type\" : {\"nested\":[1,{}]}, "
           "\"name\" : \"a\" } , {\"name\":\"b\",\"value\":{\"x\":[true,false,null]}} ] ,"
           "\"unknown\":[[[]]], \"table\":\"t\", \"schema\":\"s\", \"lsn\":\"0/10\", "
           "\"action\" : \"I\" , \"pk\":[{\"name\":\"a\",\"type\":\"text\"}] }");
    CHECK_EQ_INT(rec.action, 'I');
    CHECK_EQ_INT(rec.ncolumns, 2);
    CHECK_SPAN(rec.columns[0].name.ptr, rec.columns[0].name.len, "a");
    CHECK_EQ_INT(rec.columns[0].value.type, W2J_STRING);
    CHECK(rec.columns[0].value.escaped);
    CHECK_SPAN(rec.columns[0].value.ptr, rec.columns[0].value.len, "v\\\"1");
    CHECK_EQ_INT(rec.columns[1].value.type, W2J_OTHER);
    CHECK_SPAN(rec.columns[1].value.ptr, rec.columns[1].value.len, "{\"x\":[true,false,null]}");
    CHECK_SPAN(rec.schema.ptr, rec.schema.len, "s");
    CHECK_SPAN(rec.table.ptr, rec.table.len, "t");
    CHECK(rec.lsn == 0x10);
    CHECK(rec.nextlsn == 0);
    CHECK_EQ_INT(rec.xid, -1);
    CHECK_EQ_INT(rec.timestamp.type, W2J_ABSENT);

    /* the record is reset between lines (scalars and ncolumns) */
    ACCEPT("{\"action\":\"C\"}");
    CHECK_EQ_INT(rec.ncolumns, 0);
    CHECK_EQ_INT(rec.schema.type, W2J_ABSENT);
    CHECK(rec.lsn == 0);
    ACCEPT("{\"action\":\"M\",\"transactional\":true,\"prefix\":\"p\",\"content\":\"\"}");
    CHECK(rec.transactional);
    CHECK_EQ_INT(rec.content.type, W2J_STRING);
    CHECK_EQ_INT(rec.content.len, 0);
    ACCEPT("{\"action\":\"M\"}");
    CHECK(!rec.transactional);
    CHECK_EQ_INT(rec.content.type, W2J_ABSENT);

    /* column count: 128 fit, 129 do not */
    for (int cols = 128; cols <= 129; cols++) {
        n = (size_t) snprintf(buf, sizeof buf, "{\"action\":\"I\",\"columns\":[");
        for (int i = 0; i < cols; i++)
            n += (size_t) snprintf(buf + n, sizeof buf - n, "%s{\"name\":\"c%d\",\"value\":%d}",
                                   i ? "," : "", i, i);
        snprintf(buf + n, sizeof buf - n, "]}");
        if (cols == 128) {
            ACCEPT(buf);
            CHECK_EQ_INT(rec.ncolumns, 128);
            CHECK_SPAN(rec.columns[127].name.ptr, rec.columns[127].name.len, "c127");
        } else {
            REJECT(buf, "more than 128 columns");
        }
    }

    /* nesting: the record is level 1, so 63 nested arrays are the deepest */
    for (int depth = 63; depth <= 64; depth++) {
        n = (size_t) snprintf(buf, sizeof buf, "{\"action\":\"B\",\"x\":");
        for (int i = 0; i < depth; i++)
            buf[n++] = '[';
        for (int i = 0; i < depth; i++)
            buf[n++] = ']';
        snprintf(buf + n, sizeof buf - n, "}");
        if (depth == 63)
            ACCEPT(buf);
        else
            REJECT(buf, "nesting deeper than 64");
    }
    n = (size_t) snprintf(buf, sizeof buf, "{\"action\":\"B\",\"x\":");
    for (int i = 0; i < 5000; i++)
        n += (size_t) snprintf(buf + n, sizeof buf - n, "{\"a\":");
    REJECT(buf, "nesting deeper than 64 at byte");
}

/* ------------------------------------------------------ event decoding */

#define INSERT_HEAD "{\"action\":\"I\",\"lsn\":\"1/A0\",\"schema\":\"public\",\"table\":\"events_outbox\","

static void test_decode(void)
{
    struct w2j_scratch scratch = {0};
    struct outbox_event ev;

    /* the plain case, with escapes everywhere and columns in odd order */
    CHECK_EQ_INT(parse_decode(INSERT_HEAD "\"columns\":["
                              "{\"name\":\"payload\",\"value\":\"{\\\"a\\\": \\\"\\\\u00e9\\\"}\"},"
                              "{\"name\":\"created_at\",\"value\":\"2026-11-30 14:38:02.796452+00\"},"
                              "{\"name\":\"type\",\"value\":\"t\\u00e9\\ud83d\\ude00\"},"
                              "{\"name\":\"aggregate_id\",\"value\":\"agg\"},"
                              "{\"name\":\"dispatched_at\",\"value\":null},"
                              "{\"name\":\"id\",\"value\":42}]}",
                              &scratch, &ev),
                 0);
    CHECK(strcmp(ev.event_id, "42") == 0);
    CHECK(ev.lsn == ((UINT64_C(1) << 32) | 0xA0));
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "agg");
    CHECK_SPAN(ev.type, ev.type_len, "t\xc3\xa9\xf0\x9f\x98\x80");
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"a\": \"\\u00e9\"}");
    CHECK_SPAN(ev.created_at, ev.created_at_len, "2026-11-30 14:38:02.796452+00");

    /* id as a string of digits; payload as raw tokens; NULLs */
    CHECK_EQ_INT(parse_decode(INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":\"007\"},"
                              "{\"name\":\"aggregate_id\",\"value\":null},"
                              "{\"name\":\"type\",\"value\":\"x\"},"
                              "{\"name\":\"payload\",\"value\":{\"raw\": [1, 2]}},"
                              "{\"name\":\"created_at\",\"value\":null}]}",
                              &scratch, &ev),
                 0);
    CHECK(strcmp(ev.event_id, "007") == 0);
    CHECK(ev.aggregate_id == NULL && ev.created_at == NULL);
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"raw\": [1, 2]}");
    static const char *const raw_payloads[] = {"123.5e-7", "true", "false", "[null]"};
    for (size_t i = 0; i < 4; i++) {
        char line[512];
        snprintf(line, sizeof line,
                 INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":-9223372036854775807},"
                             "{\"name\":\"aggregate_id\",\"value\":\"\"},"
                             "{\"name\":\"type\",\"value\":\"x\"},"
                             "{\"name\":\"payload\",\"value\":%s},"
                             "{\"name\":\"created_at\",\"value\":\"\"}]}",
                 raw_payloads[i]);
        CHECK_EQ_INT(parse_decode(line, &scratch, &ev), 0);
        CHECK_SPAN(ev.payload, ev.payload_len, raw_payloads[i]);
        CHECK(strcmp(ev.event_id, "-9223372036854775807") == 0);
        CHECK(ev.aggregate_id != NULL && ev.aggregate_id_len == 0); /* '' is not NULL */
        CHECK(ev.created_at != NULL && ev.created_at_len == 0);
    }
    CHECK_EQ_INT(parse_decode(INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":1},"
                              "{\"name\":\"aggregate_id\",\"value\":\"a\"},"
                              "{\"name\":\"type\",\"value\":\"x\"},"
                              "{\"name\":\"payload\",\"value\":null},"
                              "{\"name\":\"created_at\",\"value\":null}]}",
                              &scratch, &ev),
                 0);
    CHECK(ev.payload == NULL && ev.payload_len == 0);

    /* what must be refused, and the message naming it */
    static const struct {
        const char *id, *agg, *type, *payload, *created, *what;
    } bad[] = {
        {"\"abc\"", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer: abc"},
        {"\"12a\"", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer"},
        {"\"\"", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer"},
        {"\"-1\"", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer"},
        {"1.5", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer: 1.5"},
        {"1e3", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer"},
        {"true", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer"},
        {"{}", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is not an integer"},
        {"12345678901234567890", "\"a\"", "\"x\"", "\"{}\"", "null", "not an integer"},
        {"null", "\"a\"", "\"x\"", "\"{}\"", "null", "column \"id\" is NULL"},
        {"1", "\"a\"", "null", "\"{}\"", "null", "column \"type\" is NULL"},
        {"1", "\"a\"", "\"\"", "\"{}\"", "null", "column \"type\" is empty"},
        {"1", "\"a\"", "7", "\"{}\"", "null", "column \"type\" is a number, not a string"},
        {"1", "\"a\"", "[\"x\"]", "\"{}\"", "null", "column \"type\" is an object or array"},
        {"1", "5", "\"x\"", "\"{}\"", "null", "column \"aggregate_id\" is a number"},
        {"1", "\"a\"", "\"x\"", "\"{}\"", "true", "column \"created_at\" is a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char line[512];
        snprintf(line, sizeof line,
                 INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":%s},"
                             "{\"name\":\"aggregate_id\",\"value\":%s},"
                             "{\"name\":\"type\",\"value\":%s},"
                             "{\"name\":\"payload\",\"value\":%s},"
                             "{\"name\":\"created_at\",\"value\":%s}]}",
                 bad[i].id, bad[i].agg, bad[i].type, bad[i].payload, bad[i].created);
        CHECK_EQ_INT(parse_decode(line, &scratch, &ev), -1);
        CHECK(err_has(bad[i].what));
        CHECK(err_has("event at LSN 1/A0: "));
    }
    CHECK_EQ_INT(parse_decode(INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":1},"
                              "{\"name\":\"type\",\"value\":\"x\"},"
                              "{\"name\":\"payload\",\"value\":\"{}\"},"
                              "{\"name\":\"created_at\",\"value\":null}]}",
                              &scratch, &ev),
                 -1);
    CHECK(err_has("missing column \"aggregate_id\""));
    CHECK_EQ_INT(parse_decode(INSERT_HEAD "\"columns\":[]}", &scratch, &ev), -1);
    CHECK(err_has("missing column \"id\""));
    CHECK_EQ_INT(parse_decode(INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":1},"
                              "{\"name\":\"id\",\"value\":2}]}",
                              &scratch, &ev),
                 -1);
    CHECK(err_has("column \"id\" appears twice"));
    CHECK_EQ_INT(parse_decode("{\"action\":\"B\",\"lsn\":\"0/5\"}", &scratch, &ev), -1);
    CHECK(err_has("event at LSN 0/5: a record with action 'B' is not an event"));
    CHECK_EQ_INT(parse_decode("{\"action\":\"U\",\"lsn\":\"0/5\",\"columns\":[]}", &scratch, &ev),
                 -1);
    CHECK(err_has("action 'U'"));

    /* another table layout through the map; unmapped optional columns */
    static const struct w2j_columns_map map = {"event_id", "key", "kind", "body", NULL};
    {
        const char *line = INSERT_HEAD "\"columns\":[{\"name\":\"event_id\",\"value\":5},"
                                       "{\"name\":\"k\\u0069nd\",\"value\":\"k\"},"
                                       "{\"name\":\"key\",\"value\":\"K\"},"
                                       "{\"name\":\"body\",\"value\":\"[]\"},"
                                       "{\"name\":\"created_at\",\"value\":true}]}";
        CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
        CHECK_EQ_INT(w2j_event_decode(&rec, &map, &scratch, &ev, err, sizeof err), 0);
        CHECK(strcmp(ev.event_id, "5") == 0);
        CHECK_SPAN(ev.type, ev.type_len, "k");
        CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "K");
        CHECK_SPAN(ev.payload, ev.payload_len, "[]");
        CHECK(ev.created_at == NULL);
        /* the default map finds no "id" in it */
        CHECK_EQ_INT(w2j_event_decode(&rec, &W2J_DEFAULT_COLUMNS, &scratch, &ev, err, sizeof err),
                     -1);
        CHECK(err_has("missing column \"id\""));
    }
    w2j_scratch_free(&scratch);
    CHECK(scratch.buf == NULL && scratch.cap == 0);
}

#define MSG(content) "{\"action\":\"M\",\"timestamp\":\"2026-11-30 14:38:02+00\",\"lsn\":\"2/FF\",\"transactional\":true,\"prefix\":\"outbox\",\"content\":\"" content "\"}"

static void test_decode_message(void)
{
    struct w2j_scratch scratch = {0};
    struct outbox_event ev;

    CHECK_EQ_INT(parse_decode(MSG("{\\\"aggregate_id\\\":\\\"a\\\\u00e9\\\",\\\"type\\\":\\\"x.y\\\","
                                  "\\\"payload\\\":{\\\"k\\\": [1, \\\"\\\\\\\"q\\\"]}}"),
                              &scratch, &ev),
                 0);
    CHECK(strcmp(ev.event_id, "m-00000002000000FF") == 0);
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "a\xc3\xa9");
    CHECK_SPAN(ev.type, ev.type_len, "x.y");
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"k\": [1, \"\\\"q\"]}");
    CHECK_SPAN(ev.created_at, ev.created_at_len, "2026-11-30 14:38:02+00");
    CHECK(ev.lsn == ((UINT64_C(2) << 32) | 0xFF));

    /* payload of every JSON type, raw; whitespace; unknown keys; null agg */
    static const char *const payloads[] = {"\\\"str \\\\\\\"q\\\\\\\"\\\"", "-1.5e3", "true",
                                           "null", "[[[]]]", "{}"};
    static const char *const want[] = {"\"str \\\"q\\\"\"", "-1.5e3", "true", "null", "[[[]]]",
                                       "{}"};
    for (size_t i = 0; i < 6; i++) {
        char line[512];
        snprintf(line, sizeof line,
                 MSG("\\n { \\\"meta\\\" : {\\\"a\\\":[1,{\\\"b\\\":null}]} , \\\"payload\\\" :"
                     " %s ,\\t\\\"aggregate_id\\\":null, \\\"type\\\":\\\"t\\\" } \\r\\n"),
                 payloads[i]);
        CHECK_EQ_INT(parse_decode(line, &scratch, &ev), 0);
        CHECK_SPAN(ev.payload, ev.payload_len, want[i]);
        CHECK(ev.aggregate_id == NULL);
    }
    /* no payload key: NULL; non-transactional: no timestamp */
    {
        const char *line = "{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/1\","
                           "\"transactional\":false,\"prefix\":\"outbox\","
                           "\"content\":\"{\\\"type\\\":\\\"x\\\"}\"}";
        CHECK_EQ_INT(parse_decode(line, &scratch, &ev), 0);
        CHECK(ev.payload == NULL && ev.aggregate_id == NULL && ev.created_at == NULL);
        CHECK(strcmp(ev.event_id, "m-0000000000000001") == 0);
    }

    static const struct {
        const char *line, *what;
    } bad[] = {
        {MSG("not json"), "bad envelope: not a JSON object at byte 0"},
        {MSG(""), "bad envelope: not a JSON object"},
        {MSG("{\\\"type\\\":\\\"x\\\""), "bad envelope: expected ',' or '}' at byte 11"},
        {MSG("{\\\"type\\\":\\\"x\\\"} y"), "bad envelope: trailing garbage at byte 13"},
        {MSG("{\\\"type\\\":\\\"x\\\",\\\"type\\\":\\\"y\\\"}"), "duplicate key \"type\""},
        {MSG("{\\\"aggregate_id\\\":\\\"a\\\"}"), "envelope \"type\" is absent"},
        {MSG("{\\\"type\\\":null}"), "envelope \"type\" is null"},
        {MSG("{\\\"type\\\":\\\"\\\"}"), "envelope \"type\" is empty"},
        {MSG("{\\\"type\\\":1}"), "envelope \"type\" is a number"},
        {MSG("{\\\"type\\\":\\\"x\\\",\\\"aggregate_id\\\":1}"),
         "envelope \"aggregate_id\" is a number"},
        {MSG("{\\\"type\\\":\\\"\\\\ud800\\\"}"), "bad envelope: lone high surrogate"},
        {MSG("[\\\"type\\\"]"), "not a JSON object"},
        {"{\"action\":\"M\",\"lsn\":\"0/9\"}", "event at LSN 0/9: message without \"content\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(parse_decode(bad[i].line, &scratch, &ev), -1);
        CHECK(err_has(bad[i].what));
    }
    /* the envelope has the same depth limit: itself level 1 */
    for (int depth = 63; depth <= 64; depth++) {
        char line[1024];
        size_t n = (size_t) snprintf(line, sizeof line,
                                     "{\"action\":\"M\",\"lsn\":\"0/9\",\"content\":"
                                     "\"{\\\"type\\\":\\\"t\\\",\\\"payload\\\":");
        for (int i = 0; i < depth; i++)
            line[n++] = '[';
        for (int i = 0; i < depth; i++)
            line[n++] = ']';
        snprintf(line + n, sizeof line - n, "}\"}");
        CHECK_EQ_INT(parse_decode(line, &scratch, &ev), depth == 63 ? 0 : -1);
        if (depth == 64)
            CHECK(err_has("bad envelope: nesting deeper than 64"));
    }
    w2j_scratch_free(&scratch);
}

/* Scratch growth: pointers handed out for one event stay valid, whatever
 * order the strings are unescaped in and however small the buffer was. */
static void test_scratch_growth(void)
{
    struct w2j_scratch scratch = {0};
    struct outbox_event ev;
    size_t big = 300000, n = 0;
    char *line = malloc(big * 2 + 1024);

    n += (size_t) sprintf(line, INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":1},"
                                            "{\"name\":\"type\",\"value\":\"ty\\\"pe\"},"
                                            "{\"name\":\"aggregate_id\",\"value\":\"a\\\\g\"},"
                                            "{\"name\":\"created_at\",\"value\":\"\\/\"},"
                                            "{\"name\":\"payload\",\"value\":\"");
    for (size_t i = 0; i < big; i++) {
        line[n++] = '\\';
        line[n++] = i % 2 ? 'n' : 't';
    }
    n += (size_t) sprintf(line + n, "\"}]}");
    char *c = exact_copy(line, n);
    CHECK_EQ_INT(w2j_parse(c, n, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), 0);
    CHECK_SPAN(ev.type, ev.type_len, "ty\"pe");
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "a\\g");
    CHECK_SPAN(ev.created_at, ev.created_at_len, "/");
    CHECK_EQ_INT(ev.payload_len, big);
    CHECK(ev.payload != NULL && ev.payload[0] == '\t' && ev.payload[big - 1] == '\n');
    CHECK_EQ_INT(scratch.len, 5 + 3 + 1 + big);
    CHECK(scratch.cap >= scratch.len);
    free(c);
    free(line);
    w2j_scratch_free(&scratch);
}

/* ------------------------------------------ unescaping while scanning */

/* w2j_parse() unescapes the escaped column values of an insert (and the
 * content of a message) into the record as it scans them; w2j_event_decode()
 * copies that text instead of unescaping a second time. These tests splice
 * payloads into the captured typical insert, so that the line around them
 * is what the server sends, and compare with an unescaper of their own. */

/* The four hex digits after "\\u" at s. */
static unsigned long ref_hex4(const char *s)
{
    char digits[5] = {s[2], s[3], s[4], s[5], '\0'};
    return strtoul(digits, NULL, 16);
}

/* Unescapes valid JSON string text (one-byte escapes, \uXXXX, surrogate
 * pairs) into out, which has room for n bytes; returns the length. Byte by
 * byte and nothing shared with the decoder, to check it against. */
static size_t ref_unescape(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            out[o++] = s[i++];
            continue;
        }
        char c = s[i + 1];
        if (c != 'u') { /* '"', '\\' and '/' stand for themselves */
            out[o++] = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n'
                     : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            i += 2;
            continue;
        }
        unsigned long cp = ref_hex4(s + i);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (ref_hex4(s + i) - 0xDC00);
            i += 6;
        }
        if (cp < 0x80) {
            out[o++] = (char) cp;
        } else if (cp < 0x800) {
            out[o++] = (char) (0xC0 | (cp >> 6));
            out[o++] = (char) (0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (char) (0xE0 | (cp >> 12));
            out[o++] = (char) (0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (char) (0x80 | (cp & 0x3F));
        } else {
            out[o++] = (char) (0xF0 | (cp >> 18));
            out[o++] = (char) (0x80 | ((cp >> 12) & 0x3F));
            out[o++] = (char) (0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (char) (0x80 | (cp & 0x3F));
        }
    }
    return o;
}

static char *typical;
static size_t typical_len, typical_at, typical_end; /* the payload's escaped text */

static bool typical_load(void)
{
    static const char open[] = "{\"name\":\"payload\",\"value\":\"";
    char path[512];

    if (typical != NULL)
        return true;
    snprintf(path, sizeof path, "%s/wal2json/typical_insert.jsonl", FIXTURES_DIR);
    typical = read_file(path, &typical_len);
    if (typical == NULL)
        return false;
    while (typical_len > 0 && typical[typical_len - 1] == '\n')
        typical_len--;
    char *p = strstr(typical, open), *q = p ? strstr(p, "\"},{\"name\":\"created_at\"") : NULL;
    if (q == NULL)
        return false;
    typical_at = (size_t) (p - typical) + sizeof open - 1;
    typical_end = (size_t) (q - typical);
    return true;
}

/* The typical insert with esc as its payload's escaped text; with last, the
 * payload is the line's last column (created_at and dispatched_at dropped),
 * so that its end is the end of the line. An exact-size copy; the payload
 * starts at byte typical_at. */
static char *typical_with(const char *esc, size_t esc_len, bool last, size_t *len)
{
    const char *tail = last ? "\"}]}" : typical + typical_end;
    size_t tail_len = last ? 4 : typical_len - typical_end;
    char *line = malloc(typical_at + esc_len + tail_len);

    memcpy(line, typical, typical_at);
    memcpy(line + typical_at, esc, esc_len);
    memcpy(line + typical_at + esc_len, tail, tail_len);
    *len = typical_at + esc_len + tail_len;
    return line;
}

static const struct w2j_columns_map no_created_at = {"id", "aggregate_id", "type", "payload",
                                                     NULL};

/* The text the record holds for a value agrees with w2j_unescape(). */
static void check_text(const struct w2j_record *r, const struct w2j_value *v,
                       const struct w2j_text *t)
{
    if (v->type != W2J_STRING || !v->escaped) {
        CHECK(t->src == NULL);
        return;
    }
    CHECK(t->src == v->ptr);
    CHECK(t->raw <= v->len && t->len <= t->raw);
    CHECK(t->off <= W2J_TEXT_CAP && t->len <= W2J_TEXT_CAP - t->off);
    if (t->src != v->ptr || t->raw > v->len || t->len > W2J_TEXT_CAP)
        return;
    struct w2j_value prefix = {W2J_STRING, true, v->ptr, t->raw};
    char *want = malloc(t->raw + 1);
    size_t n = 0;
    CHECK_EQ_INT(w2j_unescape(&prefix, want, t->raw, &n), 0);
    CHECK(n == t->len && memcmp(want, r->text_buf + t->off, n) == 0);
    free(want);
}

static void check_column_text(const struct w2j_record *r, const struct w2j_column *col)
{
    check_text(r, &col->value, &col->text);
}

/* Parses and decodes the typical insert with esc as payload, and compares
 * the payload with ref_unescape(esc); returns the parse result. *text (may
 * be NULL) gets the record's text of the payload. */
static int typical_payload_text(const char *esc, size_t esc_len, bool last, const char *what,
                                struct w2j_text *text)
{
    struct w2j_scratch scratch = {0};
    struct outbox_event ev;
    size_t len;
    char *line = typical_with(esc, esc_len, last, &len);
    char *want = malloc(esc_len + 1);
    size_t want_len = ref_unescape(esc, esc_len, want);
    int before = check_failures;

    int rc = w2j_parse(line, len, &rec, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        for (size_t i = 0; i < rec.ncolumns; i++) {
            check_column_text(&rec, &rec.columns[i]);
            if (text != NULL &&
                span_eq(rec.columns[i].name.ptr, rec.columns[i].name.len, "payload", 7))
                *text = rec.columns[i].text;
        }
        CHECK_EQ_INT(w2j_event_decode(&rec, last ? &no_created_at : NULL, &scratch, &ev, err,
                                      sizeof err),
                     0);
        CHECK(ev.payload != NULL);
        CHECK_EQ_INT(ev.payload_len, want_len);
        CHECK(ev.payload != NULL && ev.payload_len == want_len &&
              memcmp(ev.payload, want, want_len) == 0);
        CHECK_SPAN(ev.type, ev.type_len, "order.created");
        CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "8d3f9a4c-1b2e-4f5a-9c7d-0e1f2a3b4c5d");
    }
    if (check_failures != before)
        fprintf(stderr, "  ^ payload %s (%zu bytes%s): %s\n", what, esc_len,
                last ? ", last column" : "", rc ? err : "");
    w2j_scratch_free(&scratch);
    free(want);
    free(line);
    return rc;
}

static int typical_payload(const char *esc, size_t esc_len, bool last, const char *what)
{
    return typical_payload_text(esc, esc_len, last, what, NULL);
}

static void test_text_payloads(void)
{
    static const char *const cases[] = {
        "\\\"a",                                 /* escape first */
        "a\\\"",                                 /* escape last */
        "\\\"",                                  /* nothing else */
        "a\\\"b\\\\c\\/d",                       /* between */
        "\\\"\\\\\\/\\b\\f\\n\\r\\t",            /* each one-byte escape */
        "{\\\"a\\\": \\\"\\\\u00e9\\\"}",         /* escaped backslash before a u */
        "\\u0041\\u00e9\\u20AC\\uFFFF\\u07ff",   /* \u to 1, 2 and 3 bytes */
        "\\ud83d\\ude00\\uD834\\uDD1E\\uDBFF\\uDFFF", /* surrogate pairs */
        "a\\u0000b",                             /* NUL */
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\\"q\\\"", /* raw UTF-8 passes */
        "no escapes at all, long enough for a few blocks of sixteen bytes",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        typical_payload(cases[i], strlen(cases[i]), false, cases[i]);
        typical_payload(cases[i], strlen(cases[i]), true, cases[i]);
    }

    /* the captured payload itself, and with its escapes at every offset of
     * a block: each kind of escape, alone or in a run, after 0..47 bytes */
    typical_payload(typical + typical_at, typical_end - typical_at, false, "as captured");
    static const char *const kinds[] = {"\\\"", "\\\\", "\\n", "\\u00e9", "\\u20ac",
                                        "\\ud83d\\ude00", "\\\"\\\"\\\"", "\\\\\\\"\\u0041"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (size_t pad = 0; pad < 48; pad++) {
            for (size_t after = 0; after < 40; after += 13) {
                char esc[160], what[64];
                size_t n = 0;
                for (size_t j = 0; j < pad; j++)
                    esc[n++] = (char) ('a' + j % 26);
                n += (size_t) sprintf(esc + n, "%s", kinds[k]);
                for (size_t j = 0; j < after; j++)
                    esc[n++] = (char) ('A' + j % 26);
                snprintf(what, sizeof what, "%s after %zu bytes, %zu after", kinds[k], pad, after);
                typical_payload(esc, n, false, what);
                typical_payload(esc, n, true, what);
            }
        }
    }

    /* the empty string: a text of its own, not SQL NULL */
    {
        struct w2j_scratch scratch = {0};
        struct outbox_event ev;
        size_t len;
        char *line = typical_with("", 0, false, &len);
        CHECK_EQ_INT(w2j_parse(line, len, &rec, err, sizeof err), 0);
        CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), 0);
        CHECK(ev.payload != NULL && ev.payload_len == 0);
        free(line);
        w2j_scratch_free(&scratch);
    }
}

/* Invalid escapes in the payload are refused by w2j_parse() as before:
 * the same message, at the byte of the backslash in the line. */
static void test_text_invalid(void)
{
    static const struct {
        const char *esc;
        size_t at; /* of the bad escape in esc */
        const char *what;
    } bad[] = {
        {"\\x", 0, "invalid escape '\\x'"},
        {"abc\\'", 3, "invalid escape '\\''"},
        {"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\a", 14, "invalid escape '\\a'"},
        {"\\u12G4", 0, "invalid \\u escape (not 4 hex digits)"},
        {"0123456789abcdef\\u004", 16, "invalid \\u escape (not 4 hex digits)"},
        {"\\ude00", 0, "lone low surrogate \\uDE00"},
        {"x\\ud83d", 1, "lone high surrogate \\uD83D"},
        {"x\\ud83dx", 1, "lone high surrogate \\uD83D"},
        {"\\ud83d\\u0041", 0, "high surrogate \\uD83D not followed by a low one"},
        {"\\ud83d\\ud83d", 0, "high surrogate \\uD83D not followed by a low one"},
        {"0123456789abcd\\U0041", 14, "invalid escape '\\U'"},
        {"a\x01", 1, "control character 0x01 in string"},
        {"0123456789abcdef0123456789abcdef\x1f", 32, "control character 0x1F in string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int last = 0; last < 2; last++) {
            size_t len;
            char *line = typical_with(bad[i].esc, strlen(bad[i].esc), last, &len);
            char want[160];
            err[0] = '\0';
            int rc = w2j_parse(line, len, &rec, err, sizeof err);
            snprintf(want, sizeof want, "%s at byte %zu", bad[i].what, typical_at + bad[i].at);
            CHECK_EQ_INT(rc, -1);
            if (strcmp(err, want) != 0) {
                CHECK(!"error as before");
                fprintf(stderr, "  ^ \"%s\": got \"%s\", want \"%s\"\n", bad[i].esc, err, want);
            }
            free(line);
        }
    }
    /* cut anywhere inside an escaped payload: refused, never read past */
    {
        static const char esc[] = "\\\"items\\\": \\u00e9\\ud83d\\ude00 \\\\\\\"x\\\"";
        size_t len;
        char *line = typical_with(esc, sizeof esc - 1, false, &len);
        truncate_all(line, typical_at + sizeof esc + 2, 1);
        free(line);
    }
}

/* Payloads around and beyond the record's buffer: the text covers what
 * fits, ends between two escapes, and the decoder unescapes the rest. */
static void test_text_overflow(void)
{
    static const char *const kinds[] = {"\\\"", "\\u20ac", "\\ud83d\\ude00", "x"};
    size_t cap = W2J_TEXT_CAP + 256;
    char *esc = malloc(cap), *text = malloc(cap);

    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t kl = strlen(kinds[k]);
        for (size_t target = W2J_TEXT_CAP - 40; target < W2J_TEXT_CAP + 40; target += 3) {
            /* plain bytes up to about target bytes of text, then the kind
             * of escape repeatedly across the end of the buffer */
            size_t n = 0;
            for (; n < target - 64; n++)
                esc[n] = (char) ('a' + n % 26);
            while (n + kl < target + 100) {
                memcpy(esc + n, kinds[k], kl);
                n += kl;
            }
            char what[64];
            struct w2j_text t = {NULL, 0, 0, 0};
            snprintf(what, sizeof what, "%s across the buffer's end (%zu)", kinds[k], target);
            if (typical_payload_text(esc, n, false, what, &t) != 0 || k == 3)
                continue; /* "x" is no escape: the line is its text */
            /* The text stops short only when fewer than 4 bytes are left:
             * an escape there might need them all. */
            size_t want = ref_unescape(esc, n, text);
            CHECK(t.src != NULL && t.len <= W2J_TEXT_CAP);
            if (want > W2J_TEXT_CAP)
                CHECK(t.raw < n && t.len > W2J_TEXT_CAP - 4);
            else if (want <= W2J_TEXT_CAP - 4)
                CHECK_EQ_INT(t.raw, n);
            else
                CHECK(t.raw == n || t.len > W2J_TEXT_CAP - 4);
        }
    }
    /* far beyond: a megabyte of escapes (the large fixture has one too) */
    char *big = malloc(1 << 20);
    for (size_t i = 0; i < (1 << 20); i += 2)
        memcpy(big + i, i % 6 ? "\\t" : "\\\"", 2);
    typical_payload(big, 1 << 20, false, "1 MiB of escapes");
    typical_payload(big, 1 << 20, true, "1 MiB of escapes");
    free(big);
    free(esc);
    free(text);
}

/* Where the record's text is not used: a value rewritten by the caller, a
 * record copied whole, "action" after "columns", an update's columns. */
static void test_text_cases(void)
{
    struct w2j_scratch scratch = {0};
    struct outbox_event ev;
    size_t len;
    char *line = typical_with("\\\"abc\\\"", 7, false, &len);

    CHECK_EQ_INT(w2j_parse(line, len, &rec, err, sizeof err), 0);
    rec2 = rec; /* a copy: its text is found by offset, not pointer */
    CHECK_EQ_INT(w2j_event_decode(&rec2, NULL, &scratch, &ev, err, sizeof err), 0);
    CHECK_SPAN(ev.payload, ev.payload_len, "\"abc\"");
    for (size_t i = 0; i < rec.ncolumns; i++) {
        if (span_eq(rec.columns[i].name.ptr, rec.columns[i].name.len, "payload", 7)) {
            CHECK(rec.columns[i].text.src == rec.columns[i].value.ptr);
            rec.columns[i].value.ptr = "x\\ty, longer than before";
            rec.columns[i].value.len = strlen(rec.columns[i].value.ptr);
        }
    }
    CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), 0);
    CHECK_SPAN(ev.payload, ev.payload_len, "x\ty, longer than before"); /* no stale text */
    free(line);

    /* "action" after "columns": parsed in one pass, unescaped in two */
    static const char late[] =
        "{\"columns\":[{\"name\":\"id\",\"value\":5},{\"name\":\"type\",\"value\":\"t\"},"
        "{\"name\":\"aggregate_id\",\"value\":\"\\u0061\"},"
        "{\"name\":\"payload\",\"value\":\"{\\\"k\\\": \\\"\\ud83d\\ude00\\\"}\"},"
        "{\"name\":\"created_at\",\"value\":null}],\"lsn\":\"0/5\",\"action\":\"I\"}";
    ACCEPT(late);
    for (size_t i = 0; i < rec.ncolumns; i++)
        CHECK(rec.columns[i].text.src == NULL);
    CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), 0);
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"k\": \"\xf0\x9f\x98\x80\"}");
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "a");

    /* an update is no event: its columns are only scanned */
    ACCEPT("{\"action\":\"U\",\"lsn\":\"0/6\",\"columns\":[{\"name\":\"payload\","
           "\"value\":\"\\\"\"}]}");
    CHECK(rec.ncolumns == 1 && rec.columns[0].text.src == NULL);

    /* escaped values in several columns share the buffer in order */
    ACCEPT(INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":1},"
                       "{\"name\":\"type\",\"value\":\"t\\/1\"},"
                       "{\"name\":\"aggregate_id\",\"value\":\"plain\"},"
                       "{\"name\":\"payload\",\"value\":\"\\\"p\\\"\"},"
                       "{\"name\":\"created_at\",\"value\":\"\\u0032\"}]}");
    CHECK_EQ_INT(rec.text_used, 3 + 3 + 1);
    for (size_t i = 0; i < rec.ncolumns; i++)
        check_column_text(&rec, &rec.columns[i]);
    CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), 0);
    CHECK_SPAN(ev.type, ev.type_len, "t/1");
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "plain");
    CHECK_SPAN(ev.payload, ev.payload_len, "\"p\"");
    CHECK_SPAN(ev.created_at, ev.created_at_len, "2");
    CHECK_EQ_INT(scratch.len, 3 + 3 + 1);

    /* a message's content: unescaped while scanned, escapes at either end */
    CHECK_EQ_INT(parse_decode(MSG("{\\\"type\\\":\\\"\\\\u00e9\\\",\\\"payload\\\":\\\"\\\\\\\"\\\"}"),
                              &scratch, &ev),
                 0);
    CHECK(rec.content_text.src == rec.content.ptr && rec.content_text.raw == rec.content.len);
    CHECK_SPAN(ev.type, ev.type_len, "\xc3\xa9");
    CHECK_SPAN(ev.payload, ev.payload_len, "\"\\\"\"");
    w2j_scratch_free(&scratch);
}

/* Every escaped value of every captured line: the record's text is the
 * value unescaped, whole unless it is larger than the buffer. */
static void test_text_golden(void)
{
    static const char *const files[] = {"outbox.jsonl", "outbox_types_xids.jsonl",
                                        "large.jsonl"};
    size_t texts = 0, partial = 0;

    for (size_t f = 0; f < 3; f++) {
        struct lines l;
        if (!lines_load(&l, files[f])) {
            CHECK(!"fixture missing");
            continue;
        }
        for (size_t i = 0; i < l.n; i++) {
            if (l.len[i] == 0 || w2j_parse(l.ptr[i], l.len[i], &rec, err, sizeof err) != 0)
                continue;
            for (size_t c = 0; c < rec.ncolumns; c++) {
                const struct w2j_column *col = &rec.columns[c];
                if (rec.action != 'I') {
                    CHECK(col->text.src == NULL);
                    continue;
                }
                check_column_text(&rec, col);
                if (col->value.type == W2J_STRING && col->value.escaped) {
                    texts++;
                    if (col->text.raw < col->value.len) { /* the buffer filled up */
                        partial++;
                        CHECK(col->text.len > W2J_TEXT_CAP - 4);
                    }
                }
            }
            if (rec.action == 'M' && rec.content.type == W2J_STRING) {
                check_text(&rec, &rec.content, &rec.content_text);
                CHECK(!rec.content.escaped || rec.content_text.raw == rec.content.len);
            }
        }
        lines_free(&l);
    }
    CHECK(texts > 20);
    CHECK_EQ_INT(partial, 1); /* large.jsonl's megabyte */
}

/* ---------------------------------------------------------- w2j_unescape */

static void test_unescape(void)
{
    static const struct {
        const char *in, *out;
        size_t outlen;
    } ok[] = {
        {"plain", "plain", 5},
        {"", "", 0},
        {"\\\"\\\\\\/\\b\\f\\n\\r\\t", "\"\\/\b\f\n\r\t", 8},
        {"\\u0041\\u00e9\\u20AC", "A\xc3\xa9\xe2\x82\xac", 6},
        {"\\u07FF\\u0800\\uFFFF", "\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf", 8},
        {"\\ud83d\\ude00", "\xf0\x9f\x98\x80", 4},
        {"\\uD834\\uDD1E!", "\xf0\x9d\x84\x9e!", 5},
        {"\\uDBFF\\uDFFF", "\xf4\x8f\xbf\xbf", 4},
        {"a\\u0000b", "a\0b", 3},
        {"x\\\\u0041", "x\\u0041", 7},
    };
    char out[64];
    size_t n;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct w2j_value v = str_value(ok[i].in);
        int rc = w2j_unescape(&v, out, sizeof out, &n);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(n, ok[i].outlen);
        CHECK(rc == 0 && memcmp(out, ok[i].out, ok[i].outlen) == 0);
        /* exactly enough room is enough; one byte less is not */
        CHECK_EQ_INT(w2j_unescape(&v, out, ok[i].outlen, &n), 0);
        if (ok[i].outlen > 0)
            CHECK_EQ_INT(w2j_unescape(&v, out, ok[i].outlen - 1, &n), -1);
    }
    static const char *const bad[] = {"\\",        "a\\",          "\\x",          "\\u",
                                      "\\u12",     "\\u12G4",      "\\ud83d",      "\\ud83dx",
                                      "\\ude00",   "\\ud83d\\u0041", "\\ud83d\\ud83d", "\\ud83d\\ude0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct w2j_value v = str_value(bad[i]);
        v.escaped = true;
        CHECK_EQ_INT(w2j_unescape(&v, out, sizeof out, &n), -1);
    }
    /* not escaped: copied as is, whatever it holds */
    struct w2j_value raw = {W2J_NUMBER, false, "12.5", 4};
    CHECK_EQ_INT(w2j_unescape(&raw, out, 4, &n), 0);
    CHECK(n == 4 && memcmp(out, "12.5", 4) == 0);
    CHECK_EQ_INT(w2j_unescape(&raw, out, 3, &n), -1);
}

/* ------------------------------------------------------ w2j_timestamp_us */

static void test_timestamps(void)
{
    static const struct {
        const char *in;
        int64_t us;
    } ok[] = {
        {"2026-11-30 14:38:02+00", INT64_C(1796049482000000)},
        {"2026-11-30 14:38:02+05:30", INT64_C(1796029682000000)},
        {"2026-11-30 14:38:02-08", INT64_C(1796078282000000)},
        {"2026-11-30 14:38:02-08:00", INT64_C(1796078282000000)},
        {"2026-11-30 14:38:02+00:00:00", INT64_C(1796049482000000)},
        {"2026-11-30 14:38:02.7+00", INT64_C(1796049482700000)},
        {"2026-11-30 14:38:02.79+00", INT64_C(1796049482790000)},
        {"2026-11-30 14:38:02.796+00", INT64_C(1796049482796000)},
        {"2026-11-30 14:38:02.7964+00", INT64_C(1796049482796400)},
        {"2026-11-30 14:38:02.79645+00", INT64_C(1796049482796450)},
        {"2026-11-30 14:38:02.796452+00", INT64_C(1796049482796452)},
        {"2026-11-30 14:38:02.000001+05:30", INT64_C(1796029682000001)},
        {"1970-01-01 00:00:00+00", 0},
        {"1969-12-31 23:59:59+00", INT64_C(-1000000)},
        {"1969-12-31 23:59:59.5+00", INT64_C(-500000)},
        {"2000-01-01 00:00:00+00", INT64_C(946684800000000)},
        {"2024-02-29 00:00:00+00", INT64_C(1709164800000000)},
        {"2000-02-29 12:00:00+00", INT64_C(951825600000000)},
        {"1890-01-01 05:21:10+05:21:10", INT64_C(-2524521600000000)},
        {"1889-12-31 16:00:00-08", INT64_C(-2524521600000000)},
        {"0044-03-15 12:00:00+00 BC", INT64_C(-63517780800000000)},
        {"0001-01-01 00:00:00+00", INT64_C(-62135596800000000)},
        {"0001-12-31 00:00:00+00 BC", INT64_C(-62135683200000000)},
        {"12345-06-07 08:09:10.5+00", INT64_C(327416976550500000)},
        {"2026-11-30T14:38:02+00", INT64_C(1796049482000000)},
        {"2026-11-30 14:38:02+15:59:59", INT64_C(1796049482000000) - INT64_C(57599000000)},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct w2j_value v = str_value(ok[i].in);
        int64_t us = 12345;
        int rc = w2j_timestamp_us(&v, &us);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(us, ok[i].us);
        if (rc != 0 || us != ok[i].us)
            fprintf(stderr, "  ^ %s\n", ok[i].in);
    }
    static const char *const bad[] = {
        "",
        "infinity",
        "-infinity",
        "2026-11-30 14:38:02",           /* no offset */
        "2026-11-30 14:38:02.+00",       /* dot without digits */
        "2026-11-30 14:38:02.1234567+00", /* 7 digits */
        "2026-11-30 14:38:02+0",
        "2026-11-30 14:38:02+5:30",
        "2026-11-30 14:38:02+05:3",
        "2026-11-30 14:38:02+05:30:",
        "2026-11-30 14:38:02+16",
        "2026-11-30 14:38:02+05:60",
        "2026-11-30 14:38:02+00 AD",
        "2026-11-30 14:38:02+00 BC ",
        "2026-11-30 14:38:02+00 ",
        "2026-11-30 14:38:02Z",
        "2026-11-30 24:00:00+00",
        "2026-11-30 14:60:00+00",
        "2026-11-30 14:38:60+00",
        "2026-13-01 00:00:00+00",
        "2026-00-01 00:00:00+00",
        "2026-11-00 00:00:00+00",
        "2026-11-31 00:00:00+00",
        "2026-02-29 00:00:00+00",
        "1900-02-29 00:00:00+00",
        "0000-01-01 00:00:00+00",
        "999-01-01 00:00:00+00",
        "1234567-01-01 00:00:00+00",
        "2026/11/30 14:38:02+00",
        "2026-11-30  14:38:02+00",
        "2026-11-30 14:38+00",
        "2026-1-30 14:38:02+00",
        "294276-12-31 23:59:59+00",      /* valid in PostgreSQL, beyond int64 us */
        "x026-11-30 14:38:02+00",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct w2j_value v = str_value(bad[i]);
        int64_t us;
        int rc = w2j_timestamp_us(&v, &us);
        CHECK_EQ_INT(rc, -1);
        if (rc != -1)
            fprintf(stderr, "  ^ accepted \"%s\"\n", bad[i]);
    }
    /* a prefix of a valid timestamp is never one, and reads stay in bounds */
    const char *full = "2026-11-30 14:38:02.796452+05:30";
    for (size_t cut = 0; cut < strlen(full); cut++) {
        char *c = exact_copy(full, cut);
        struct w2j_value v = {W2J_STRING, false, c, cut};
        int64_t us;
        /* "…+05" is itself valid: offset minutes are optional */
        if (cut != strlen(full) - 3)
            CHECK_EQ_INT(w2j_timestamp_us(&v, &us), -1);
        free(c);
    }
    struct w2j_value num = {W2J_NUMBER, false, "1", 1}, esc = str_value("2026\\u002d11-30 14:38:02+00");
    int64_t us;
    CHECK_EQ_INT(w2j_timestamp_us(&num, &us), -1);
    CHECK_EQ_INT(w2j_timestamp_us(&esc, &us), -1);
}

/* ------------------------------------------------------------- lsn_parse */

static void test_lsn(void)
{
    static const struct {
        const char *in;
        uint64_t lsn;
    } ok[] = {
        {"0/0", 0},
        {"0/1", 1},
        {"16/B374D848", (UINT64_C(0x16) << 32) | 0xB374D848u},
        {"16/b374d848", (UINT64_C(0x16) << 32) | 0xB374D848u},
        {"FFFFFFFF/FFFFFFFF", UINT64_MAX},
        {"00000000/00000001", 1},
        {"1/0", UINT64_C(1) << 32},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        lsn_t l = 12345;
        CHECK_EQ_INT(lsn_parse(ok[i].in, strlen(ok[i].in), &l), 0);
        CHECK(l == ok[i].lsn);
    }
    static const char *const bad[] = {"",   "/",     "0/",         "/0",        "0",
                                      "0//0", "0/0/0", "G/0",       "0/G",       " 0/0",
                                      "0/0 ", "-1/0",  "123456789/0", "0/123456789", "0x1/0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lsn_t l = 7;
        CHECK_EQ_INT(lsn_parse(bad[i], strlen(bad[i]), &l), -1);
        CHECK(l == 7); /* untouched on failure */
    }
    /* exactly len bytes: the rest of the buffer is not looked at */
    lsn_t l = 0;
    CHECK_EQ_INT(lsn_parse("0/12", 3, &l), 0);
    CHECK(l == 1);
    CHECK_EQ_INT(lsn_parse("0/12", 2, &l), -1);
    char *c = exact_copy("AB/CD", 5);
    CHECK_EQ_INT(lsn_parse(c, 5, &l), 0);
    CHECK(l == ((UINT64_C(0xAB) << 32) | 0xCD));
    free(c);
    char s[32];
    snprintf(s, sizeof s, LSN_FMT, LSN_ARGS(UINT64_C(0x16B374D848)));
    CHECK(strcmp(s, "16/B374D848") == 0);
}

static void test_md5(void)
{
    char h[33];
    md5_hex((const unsigned char *) "", 0, h);
    CHECK(strcmp(h, "d41d8cd98f00b204e9800998ecf8427e") == 0);
    md5_hex((const unsigned char *) "The quick brown fox jumps over the lazy dog", 43, h);
    CHECK(strcmp(h, "9e107d9d372bb6826bd81d3542a419d6") == 0);
}

int main(void)
{
    test_md5();
    test_lsn();
    test_unescape();
    test_timestamps();
    test_malformed();
    test_decode();
    test_decode_message();
    test_scratch_growth();
    if (typical_load()) {
        test_text_payloads();
        test_text_invalid();
        test_text_overflow();
    } else {
        CHECK(!"typical_insert.jsonl missing or without a payload");
    }
    test_text_cases();
    test_text_golden();
    test_golden("outbox.jsonl", "outbox.expected");
    test_golden("outbox_types_xids.jsonl", "outbox_types_xids.expected");
    test_golden("large.jsonl", "large.expected");
    test_sets_agree();
    test_truncation();
    free(last_copy);
    free(typical);
    CHECK_DONE();
}
