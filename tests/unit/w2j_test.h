/*
 * w2j_test.h — what the wal2json decoder's unit tests share (test_w2j.c,
 * test_w2j_text.c, test_w2j_event.c, test_outbox_event.c): reading the
 * captured fixtures (tests/fixtures/wal2json, see capture.sh), parsing
 * exact copies of lines, the golden .expected files.
 *
 * Every line handed to w2j_parse() is first copied into a buffer of exactly
 * its length, so that a sanitizer build catches any read past the end.
 */
#ifndef OUTBOX_RELAY_W2J_TEST_H
#define OUTBOX_RELAY_W2J_TEST_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/decode/w2j.h"
#include "outbox_relay/base/lsn.h"

#ifndef FIXTURES_DIR
#define FIXTURES_DIR "tests/fixtures"
#endif

/* Not every test file uses every helper. */
#define TEST_SHARED __attribute__((unused))

/* ------------------------------------------------------------- helpers */

static inline char *read_file(const char *path, size_t *len)
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

static inline bool lines_load(struct lines *l, const char *name)
{
    char path[512];
    size_t size = 0, cap = 0; /* read_file() sets size when it returns a buffer */

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

static inline void lines_free(struct lines *l)
{
    free(l->buf);
    free(l->ptr);
    free(l->len);
}

/* An exactly-sized heap copy: reading one byte past it is an ASan error. */
static inline char *exact_copy(const char *p, size_t n)
{
    char *c = malloc(n > 0 ? n : 1);
    if (n > 0)
        memcpy(c, p, n);
    return c;
}

static TEST_SHARED struct w2j_record rec; /* 26 KiB: keep it off the stack */
static TEST_SHARED struct w2j_record rec2;
static TEST_SHARED char err[W2J_ERRLEN];

/* Parses an exact copy of s; rec points into it until the next call. */
static TEST_SHARED char *last_copy;

static inline int parse_str(const char *s)
{
    size_t n = strlen(s);
    free(last_copy);
    last_copy = exact_copy(s, n);
    return w2j_parse(last_copy, n, &rec, err, sizeof err);
}

/* Parses s (kept alive by the caller) and decodes it. */
static inline int parse_decode(const char *s, struct outbox_scratch *scratch,
                               struct outbox_event *ev)
{
    if (w2j_parse(s, strlen(s), &rec, err, sizeof err) < 0)
        return -2;
    return w2j_event_decode(&rec, &OUTBOX_DEFAULT_COLUMNS, scratch, ev, err, sizeof err);
}

static inline bool err_has(const char *what)
{
    if (strstr(err, what) != NULL)
        return true;
    fprintf(stderr, "  error \"%s\" does not mention \"%s\"\n", err, what);
    return false;
}

static inline struct w2j_value str_value(const char *s)
{
    struct w2j_value v = {W2J_STRING, strchr(s, '\\') != NULL, s, strlen(s)};
    return v;
}

/* MD5 (RFC 1321), to compare payloads too large to keep in .expected. */
static inline void md5_hex(const unsigned char *msg, size_t len, char out[33])
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
static inline size_t unhex(char *s)
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

static inline size_t load_expected(const char *name, struct expect **out, char **keep)
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

static inline bool span_eq(const char *p, size_t n, const char *q, size_t m)
{
    return n == m && (n == 0 || memcmp(p, q, n) == 0);
}

static inline const struct w2j_value *column(const struct w2j_record *r, const char *name)
{
    for (size_t i = 0; i < r->ncolumns; i++)
        if (span_eq(r->columns[i].name.ptr, r->columns[i].name.len, name, strlen(name)))
            return &r->columns[i].value;
    return NULL;
}

static inline void check_event(const struct expect *x, const struct w2j_record *r, int rc,
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

/* Every cut of line (every step bytes) must fail with a position. */
static inline void truncate_all(const char *line, size_t len, size_t step)
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

/* Lines around the values a test writes: an insert of the outbox table,
 * a message with the given content. */
#define INSERT_HEAD "{\"action\":\"I\",\"lsn\":\"1/A0\",\"schema\":\"public\",\"table\":\"events_outbox\","
#define MSG(content) "{\"action\":\"M\",\"timestamp\":\"2026-11-30 14:38:02+00\",\"lsn\":\"2/FF\",\"transactional\":true,\"prefix\":\"outbox\",\"content\":\"" content "\"}"

#endif
