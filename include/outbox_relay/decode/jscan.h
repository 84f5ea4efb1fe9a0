/*
 * jscan.h — the JSON scanning primitive: a cursor over a buffer that scans
 * one JSON token at a time (strings, numbers, literals, whole containers)
 * into spans of the buffer, and the one JSON string unescaper. Pure: no
 * I/O, no allocation, no global state.
 *
 * Every JSON string the relayer reads goes through here: the keys and
 * values of wal2json lines (w2j.c), the column values and message content
 * unescaped while they are scanned, w2j_unescape(), and the outbox message
 * envelope (outbox_event.c). So the hot part is written once, with one
 * block scan (16 bytes at a time with SSE2, 8 with SWAR words elsewhere,
 * a byte loop for the tails and for -DJSCAN_NO_SWAR builds) and one
 * escape decoder:
 *
 *   \" \\ \/ \b \f \n \r \t      one byte each
 *   \uXXXX                       a BMP code point other than a surrogate,
 *                                written as UTF-8 (1 to 3 bytes)
 *   \uD8xx-\uDBxx \uDCxx-\uDFxx  a surrogate pair: one code point >= 0x10000
 *                                (4 bytes of UTF-8)
 *
 * Anything else after a backslash, a lone surrogate (high without a low
 * one after it, or a low one alone), and an unescaped byte < 0x20 inside a
 * string are errors. Unescaping never grows a string: every escape is at
 * least as long as its UTF-8.
 *
 * Contract of every scanning function below: it never reads outside
 * s[0..len) and never moves pos backwards; on success pos is just past the
 * token; on failure it returns -1 and, when err is set, writes a message
 * naming the problem and its byte offset ("... at byte N"). Spans point
 * into s and are valid while s is.
 */
#ifndef OUTBOX_RELAY_JSCAN_H
#define OUTBOX_RELAY_JSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Containers nest at most this deep (the outermost object is depth 1). */
#define JSCAN_MAX_DEPTH 64

enum jscan_type {
    JSCAN_ABSENT = 0, /* no value (a key not present) */
    JSCAN_NULL,
    JSCAN_BOOL,
    JSCAN_NUMBER,
    JSCAN_STRING,
    JSCAN_OTHER /* object or array (kept raw) */
};

/* A JSON token inside the buffer. For JSCAN_STRING, ptr/len span the raw
 * bytes between the quotes (still escaped) and escaped is true when they
 * contain a backslash; for the others ptr/len span the raw token. */
struct jscan_value {
    enum jscan_type type;
    bool escaped;
    const char *ptr;
    size_t len;
};

/* A cursor: s[0..len) is scanned from pos; err/errlen (may be NULL/0)
 * receive the message of the first error. */
struct jscan {
    const char *s;
    size_t len;
    size_t pos;
    char *err;
    size_t errlen;
};

#if defined(__GNUC__)
#define JSCAN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define JSCAN_PRINTF(f, a)
#endif

/* Writes fmt (and " at byte <at>") into sc->err; returns -1. */
int jscan_fail(struct jscan *sc, size_t at, const char *fmt, ...) JSCAN_PRINTF(3, 4);

/* The byte at pos, or -1 at the end. */
static inline int jscan_peek(const struct jscan *sc)
{
    return sc->pos < sc->len ? (unsigned char) sc->s[sc->pos] : -1;
}

/* Skips JSON whitespace (space, \t, \n, \r). */
static inline void jscan_ws(struct jscan *sc)
{
    /* wal2json writes no whitespace: one compare in the common case. */
    while (sc->pos < sc->len && (unsigned char) sc->s[sc->pos] <= ' ') {
        char c = sc->s[sc->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        sc->pos++;
    }
}

/* Consumes the byte c, or fails with "expected <what>" ("truncated: ..."
 * at the end). */
static inline int jscan_expect(struct jscan *sc, char c, const char *what)
{
    if (jscan_peek(sc) != (unsigned char) c) {
        if (sc->pos >= sc->len)
            return jscan_fail(sc, sc->pos, "truncated: expected %s", what);
        return jscan_fail(sc, sc->pos, "expected %s", what);
    }
    sc->pos++;
    return 0;
}

/*
 * The block scan (GCC/Clang, little-endian; -DJSCAN_NO_SWAR turns it off to
 * test the portable byte loops): jscan_block_mask(p) flags the bytes of
 * p[0..JSCAN_BLOCK) that stop a string ('"', '\\', < 0x20), and
 * jscan_block_first(m) is the index of the first flagged byte of a non-zero
 * mask. With SSE2 a block is 16 bytes, one mask bit per byte; otherwise an
 * 8-byte word with the high bit of each flagged byte (SWAR). The word masks
 * are exact per byte (adding 0x7F or 0x60 to a 7-bit value never carries
 * into the next byte), so every flagged byte of a block can be visited
 * without reloading: the lowest set bit is m & -m, JSCAN_BLOCK_BIT bits
 * apart per byte. Measured on a typical insert line (~770 bytes, 58
 * escapes in the payload), SSE2 blocks take about a quarter less time than
 * 8-byte words. Inline here so that the short strings of a wal2json line
 * (keys, names, LSNs) are scanned without a call (jscan_string()).
 */
#if !defined(JSCAN_NO_SWAR) && defined(__GNUC__) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define JSCAN_BLOCKS 1
#if defined(__SSE2__)
#include <emmintrin.h>
#define JSCAN_BLOCK 16
#define JSCAN_BLOCK_BIT 1
static inline uint64_t jscan_block_mask(const char *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *) (const void *) p);
    __m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    __m128i c = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v); /* v <= 0x1F */
    return (uint64_t) (unsigned) _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), c));
}

static inline size_t jscan_block_first(uint64_t m)
{
    return (size_t) __builtin_ctzll(m);
}
#else
#include <string.h>
#define JSCAN_BLOCK 8
#define JSCAN_BLOCK_BIT 8
#define JSCAN_ONES_ 0x0101010101010101ULL
#define JSCAN_HIGHS_ 0x8080808080808080ULL
#define JSCAN_LOW7S_ 0x7F7F7F7F7F7F7F7FULL
/* High bit of each byte set where w has byte value c. */
static inline uint64_t jscan_eq_mask_(uint64_t w, unsigned char c)
{
    uint64_t x = w ^ (JSCAN_ONES_ * c);
    return ~(((x & JSCAN_LOW7S_) + JSCAN_LOW7S_) | x) & JSCAN_HIGHS_;
}

static inline uint64_t jscan_block_mask(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t ctl = ~(((w & JSCAN_LOW7S_) + JSCAN_ONES_ * 0x60) | w) & JSCAN_HIGHS_;
    return jscan_eq_mask_(w, '"') | jscan_eq_mask_(w, '\\') | ctl;
}

static inline size_t jscan_block_first(uint64_t m)
{
    return (size_t) __builtin_ctzll(m) >> 3;
}
#endif
#else
#define JSCAN_BLOCKS 0
#endif

/* The index of the first byte in s[i..len) that is '"', '\\' or < 0x20,
 * or len when there is none: the block scan, then bytes. */
size_t jscan_find_stop(const char *s, size_t len, size_t i);

/* jscan_string() for the string whose opening quote is at start, from i
 * (after the quote, never inside an escape, no escape before it). */
int jscan_string_from(struct jscan *sc, size_t start, size_t i, struct jscan_value *out);

/* The string whose opening quote is at pos (pos < len, s[pos] == '"'):
 * validates every escape and refuses control bytes, fills *out (type
 * JSCAN_STRING, the span between the quotes) and moves past the closing
 * quote. Inline for its common case, a string without escapes whose quote
 * is found by whole blocks; the rest is jscan_string_from(). */
static inline int jscan_string(struct jscan *sc, struct jscan_value *out)
{
    size_t start = sc->pos, i = start + 1;
#if JSCAN_BLOCKS
    while (sc->len - i >= JSCAN_BLOCK) {
        uint64_t m = jscan_block_mask(sc->s + i);
        if (m != 0) {
            size_t p = i + jscan_block_first(m);
            if (sc->s[p] != '"')
                break;
            out->type = JSCAN_STRING;
            out->escaped = false;
            out->ptr = sc->s + start + 1;
            out->len = p - start - 1;
            sc->pos = p + 1;
            return 0;
        }
        i += JSCAN_BLOCK;
    }
#endif
    return jscan_string_from(sc, start, i, out);
}

/*
 * jscan_string() that also writes the string's unescaped text to dst (room
 * for cap bytes) on the way, for a value that will be needed unescaped: the
 * string is walked once instead of scanned and then unescaped. Validation,
 * errors and *out are exactly those of jscan_string().
 *
 * *tlen bytes of text stand for the first *traw bytes of the escaped span:
 * all of it, or, when dst fills up, a prefix that ends where an escape or a
 * plain byte begins (the rest is then only scanned, and whoever needs the
 * text unescapes that rest with jscan_unescape()). dst[*tlen..cap) may be
 * written too (whole blocks are stored before their escapes are resolved);
 * nothing past cap is. out->escaped is true exactly when *tlen < out->len.
 */
int jscan_string_text(struct jscan *sc, struct jscan_value *out, char *dst, size_t cap,
                      size_t *tlen, size_t *traw);

/* Unescapes the n bytes at s (the inside of a JSON string) into dst, room
 * for cap bytes (cap >= n is always enough), and stores the length in
 * *outlen. Bytes that are not part of an escape are copied as they are,
 * even '"' and control bytes. Returns -1, with dst's content unspecified,
 * on an invalid escape (as above) or when the text does not fit in cap. */
int jscan_unescape(const char *s, size_t n, char *dst, size_t cap, size_t *outlen);

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at pos. */
int jscan_number(struct jscan *sc, struct jscan_value *out);

/* The literal word (n bytes: "true", "false", "null") at pos, as type. */
int jscan_literal(struct jscan *sc, const char *word, size_t n, enum jscan_type type,
                  struct jscan_value *out);

/* Any JSON value at pos, inside a container at the given depth (a member
 * of the outermost object is at depth 1); an object or array is validated
 * whole (at most JSCAN_MAX_DEPTH deep) and spanned raw (JSCAN_OTHER). */
int jscan_value(struct jscan *sc, int depth, struct jscan_value *out);

#endif
