/*
 * w2j.c — wal2json (format-version 2) lines to records, records to
 * outbox events.
 *
 * Every change the relayer streams passes through w2j_parse(), so it is a
 * purpose-built scanner rather than a general JSON library: it knows the
 * handful of keys wal2json v2 writes, keeps every string as a span of the
 * caller's line (zero copy, escapes left in place), validates escapes while
 * it scans so that unescaping later cannot fail on parsed input, and skips
 * anything it does not know (other include-* options add keys). It never
 * allocates, never touches bytes outside [line, line+len) and resets only
 * the scalar fields of the record (the columns array and the text buffer
 * are 26 KiB). What it does write is the text of an insert's escaped column
 * values and of a message's content, unescaped into the record while they
 * are scanned: the payload (jsonb text, full of \" escapes) is the bulk of
 * every event, and walking it a second time to unescape it was 29% of the
 * decoder's instructions.
 *
 * w2j_event_decode() turns an 'I' record of the outbox table, or an 'M'
 * record carrying an envelope, into a struct outbox_event; strings that
 * need unescaping go to a caller-owned scratch buffer, sized once per event
 * before anything is written so that no pointer handed out can dangle.
 */
#include "outbox_relay/w2j.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W2J_MAX_DEPTH 64

#if defined(__GNUC__)
#define W2J_COLD __attribute__((cold, noinline))
#define W2J_INLINE inline __attribute__((always_inline))
#define W2J_LIKELY(x) __builtin_expect(!!(x), 1)
#define W2J_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define W2J_COLD
#define W2J_INLINE inline
#define W2J_LIKELY(x) (x)
#define W2J_UNLIKELY(x) (x)
#endif

const struct w2j_columns_map W2J_DEFAULT_COLUMNS = {"id", "aggregate_id", "type", "payload",
                                                    "created_at"};

/* ------------------------------------------------------------------ scanner */

/* One pass over a buffer. pos only moves forward and is always <= len. */
struct scan {
    const char *s;
    size_t len;
    size_t pos;
    char *err;
    size_t errlen;
};

/* Bytes that end the fast path inside a string: the closing quote, a
 * backslash, and the control characters JSON forbids unescaped. */
static const unsigned char str_stop[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x00 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x10 */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20 '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x30 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x40 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50 '\\' */
};

W2J_COLD static int scan_fail(struct scan *sc, size_t at, const char *fmt, ...)
{
    if (sc->err != NULL && sc->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(sc->err, sc->errlen, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t) n < sc->errlen)
            snprintf(sc->err + n, sc->errlen - (size_t) n, " at byte %zu", at);
    }
    return -1;
}

static inline void skip_ws(struct scan *sc)
{
    /* wal2json writes no whitespace: one compare in the common case. */
    while (sc->pos < sc->len && (unsigned char) sc->s[sc->pos] <= ' ') {
        char c = sc->s[sc->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        sc->pos++;
    }
}

/* The byte at pos, or -1 at the end: callers compare without bounds checks. */
static inline int peek(const struct scan *sc)
{
    return sc->pos < sc->len ? (unsigned char) sc->s[sc->pos] : -1;
}

static inline int expect_char(struct scan *sc, char c, const char *what)
{
    if (W2J_UNLIKELY(peek(sc) != (unsigned char) c)) {
        if (sc->pos >= sc->len)
            return scan_fail(sc, sc->pos, "truncated: expected %s", what);
        return scan_fail(sc, sc->pos, "expected %s", what);
    }
    sc->pos++;
    return 0;
}

static inline int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Four hex digits at s (at least 4 bytes readable), or -1. */
static inline long hex4(const char *s)
{
    int a = hexval((unsigned char) s[0]), b = hexval((unsigned char) s[1]);
    int c = hexval((unsigned char) s[2]), d = hexval((unsigned char) s[3]);
    if ((a | b | c | d) < 0)
        return -1;
    return (long) ((a << 12) | (b << 8) | (c << 4) | d);
}

/* Validates the escape whose backslash is at i; returns the index after it,
 * or 0 (never a valid answer: i >= 1 always) after reporting the error.
 *
 *   \" \\ \/ \b \f \n \r \t      one byte each
 *   \uXXXX                       a BMP code point other than a surrogate
 *   \uD8xx-\uDBxx \uDCxx-\uDFxx  a surrogate pair: one code point >= 0x10000
 */
static size_t check_escape(struct scan *sc, size_t i)
{
    const char *s = sc->s;
    size_t len = sc->len;
    long cp, lo;

    if (i + 1 >= len) {
        scan_fail(sc, i, "truncated: escape at the end");
        return 0;
    }
    switch (s[i + 1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return i + 2;
    case 'u':
        break;
    default:
        scan_fail(sc, i, "invalid escape '\\%c'",
                  (s[i + 1] >= 0x20 && s[i + 1] < 0x7f) ? s[i + 1] : '?');
        return 0;
    }
    if (len - i < 6) {
        scan_fail(sc, i, "truncated: \\u escape");
        return 0;
    }
    cp = hex4(s + i + 2);
    if (cp < 0) {
        scan_fail(sc, i, "invalid \\u escape (not 4 hex digits)");
        return 0;
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        scan_fail(sc, i, "lone low surrogate \\u%04lX", cp);
        return 0;
    }
    if (cp < 0xD800 || cp > 0xDBFF)
        return i + 6;
    if (len - i < 12 || s[i + 6] != '\\' || s[i + 7] != 'u') {
        scan_fail(sc, i, "lone high surrogate \\u%04lX", cp);
        return 0;
    }
    lo = hex4(s + i + 8);
    if (lo < 0xDC00 || lo > 0xDFFF) {
        scan_fail(sc, i, "high surrogate \\u%04lX not followed by a low one", cp);
        return 0;
    }
    return i + 12;
}

/* The one-byte escapes: the byte each stands for, 0 for anything else. */
static const char esc_char[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b',
    ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

/* Block scanning (GCC/Clang, little-endian; -DW2J_NO_SWAR turns it off to
 * test the portable byte loops). A block yields a mask of the bytes that
 * stop a string ('"', '\\', < 0x20) or, for unescaping, of backslashes:
 * with SSE2 16 bytes and one bit per byte, otherwise an 8-byte word with
 * the high bit of each flagged byte (SWAR). The word masks are exact per
 * byte (adding 0x7F or 0x60 to a 7-bit value never carries into the next
 * byte), so every flagged byte of a block can be visited without reloading.
 * Measured on a typical insert line (~770 bytes, 58 escapes in the
 * payload), SSE2 blocks take about a quarter less time than 8-byte words. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define LOW7S 0x7F7F7F7F7F7F7F7FULL

#if !defined(W2J_NO_SWAR) && defined(__GNUC__) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define W2J_SWAR 1
static inline uint64_t load8(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* High bit of each byte set where w has byte value c. */
static inline uint64_t eq_mask(uint64_t w, unsigned char c)
{
    uint64_t x = w ^ (ONES * c);
    return ~(((x & LOW7S) + LOW7S) | x) & HIGHS;
}

/* Index of the first flagged byte of a non-zero mask. */
static inline size_t first_byte(uint64_t m)
{
    return (size_t) __builtin_ctzll(m) >> 3;
}

/* String scanning: SSE2 where the compiler targets it (every x86-64). */
#if defined(__SSE2__)
#include <emmintrin.h>
#define SCAN_BLOCK 16
#define SCAN_BIT 1
static inline uint64_t scan_mask(const char *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *) (const void *) p);
    __m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    __m128i c = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v); /* v <= 0x1F */
    return (uint64_t) (unsigned) _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), c));
}

static inline size_t scan_first(uint64_t m)
{
    return (size_t) __builtin_ctzll(m);
}
#else
#define SCAN_BLOCK 8
#define SCAN_BIT 8
/* High bit set in each byte that is '"', '\\' or < 0x20. */
static inline uint64_t scan_mask(const char *p)
{
    uint64_t w = load8(p);
    uint64_t ctl = ~(((w & LOW7S) + ONES * 0x60) | w) & HIGHS;
    return eq_mask(w, '"') | eq_mask(w, '\\') | ctl;
}

static inline size_t scan_first(uint64_t m)
{
    return first_byte(m);
}
#endif
#else
#define W2J_SWAR 0
#endif

/* The rest of a string whose opening quote is at start, from i (never
 * inside an escape; escaped tells whether one came before). Fills *out with
 * the span between the quotes (escapes left in place) and moves past the
 * closing quote. */
static W2J_INLINE int scan_string_from(struct scan *sc, size_t start, size_t i, bool escaped,
                                       struct w2j_value *out)
{
    const char *s = sc->s;
    size_t len = sc->len, p;

    for (;;) {
#if W2J_SWAR
        if (W2J_LIKELY(len - i >= SCAN_BLOCK)) {
            uint64_t m = scan_mask(s + i);
            if (m == 0) {
                i += SCAN_BLOCK;
                continue;
            }
            /* Visit the flagged bytes of this word: the closing quote ends
             * the string; a one-byte escape clears its own bit and that of
             * the byte it escapes, and goes on in the same word. The mask
             * update depends on the mask alone (not on tzcnt or on a loaded
             * byte), which keeps escape-dense payloads fast. */
            for (;;) {
                size_t k = scan_first(m);
                p = i + k;
                if (s[p] != '\\')
                    goto stop;
                escaped = true;
                if (W2J_UNLIKELY(k == SCAN_BLOCK - 1)) { /* escaped byte in the next block */
                    i = p;
                    goto escape;
                }
                unsigned char e = (unsigned char) s[p + 1];
                if (W2J_UNLIKELY(esc_char[e] == 0)) {
                    i = p;
                    goto escape;
                }
                uint64_t low = m & (~m + 1);
                m &= ~(low | low << SCAN_BIT); /* the backslash and the byte it escapes */
                if (m == 0) {
                    i += SCAN_BLOCK;
                    break;
                }
            }
            continue;
        }
#endif
        while (i < len && !str_stop[(unsigned char) s[i]])
            i++;
        if (W2J_UNLIKELY(i >= len))
            return scan_fail(sc, start, "truncated: unterminated string");
        p = i;
        if (s[p] == '\\') {
            escaped = true;
#if W2J_SWAR
        escape:
#endif
            if (i + 1 < len && esc_char[(unsigned char) s[i + 1]] != 0) {
                i += 2;
            } else {
                i = check_escape(sc, i);
                if (i == 0)
                    return -1;
            }
            continue;
        }
#if W2J_SWAR
    stop:
#endif
        if (s[p] == '"')
            break;
        return scan_fail(sc, p, "control character 0x%02X in string", (unsigned char) s[p]);
    }
    out->type = W2J_STRING;
    out->escaped = escaped;
    out->ptr = s + start + 1;
    out->len = p - start - 1;
    sc->pos = p + 1;
    return 0;
}

/* A string starting at the quote at pos; see scan_string_from(). */
static W2J_INLINE int scan_string(struct scan *sc, struct w2j_value *out)
{
    return scan_string_from(sc, sc->pos, sc->pos + 1, false, out);
}

/* Writes code point cp as UTF-8 at dst (room for k bytes checked by the
 * caller); returns the number of bytes. */
static size_t utf8_put(char *dst, unsigned long cp)
{
    if (cp < 0x80) {
        dst[0] = (char) cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char) (0xC0 | (cp >> 6));
        dst[1] = (char) (0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char) (0xE0 | (cp >> 12));
        dst[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char) (0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char) (0xF0 | (cp >> 18));
    dst[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char) (0x80 | (cp & 0x3F));
    return 4;
}

/* The code point of the \u escape at e, which check_escape() accepted:
 * \uXXXX, or a surrogate pair \uD8xx-\uDBxx \uDCxx-\uDFxx. */
static unsigned long u_escape_cp(const char *e)
{
    long cp = hex4(e + 2);
    if (cp >= 0xD800 && cp <= 0xDBFF)
        cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(e + 8) - 0xDC00);
    return (unsigned long) cp;
}

/*
 * scan_string() that also writes the string's unescaped text to dst (room
 * for cap bytes), for a value that will be needed unescaped: the string is
 * walked once instead of scanned here and unescaped again later. Validation,
 * errors and *out are exactly those of scan_string().
 *
 * *tlen bytes of text stand for the first *traw bytes of the escaped span:
 * all of it, or, when dst fills up, a prefix that ends where an escape or a
 * plain byte begins (the rest is then only scanned, and whoever needs the
 * text unescapes that rest). dst is written past *tlen (whole blocks are
 * stored before their escapes are resolved), never past cap.
 *
 * Blocks as in scan_string_from(): each is stored whole at its place in dst;
 * an escape writes its byte and stores a block's worth again one byte
 * further back, reloaded from the line past the escape (a fixed-size copy:
 * SSE2 has no variable byte shift). That reads and writes up to two blocks
 * past the block's start and its text's start, so the last bytes of a line
 * and of dst take the byte loop. o is where the text of s[i] goes; inside a
 * block it steps back one byte per escape so that the text of s[i + k] goes
 * to dst[o + k] for every k after the last escape (unsigned: it may wrap
 * below 0 there, o + k never does; so add o + k, never o, to dst).
 */
static W2J_INLINE int scan_string_text(struct scan *sc, struct w2j_value *out, char *dst,
                                        size_t cap, size_t *tlen, size_t *traw)
{
    const char *s = sc->s;
    size_t len = sc->len, start = sc->pos, i = start + 1, o = 0, p;

    for (;;) {
#if W2J_SWAR
        if (W2J_LIKELY(len - i >= 2 * SCAN_BLOCK && cap - o >= 2 * SCAN_BLOCK)) {
            uint64_t m = scan_mask(s + i);
            memcpy(dst + o, s + i, SCAN_BLOCK);
            if (m == 0) {
                i += SCAN_BLOCK;
                o += SCAN_BLOCK;
                continue;
            }
            /* Visit the flagged bytes as scan_string_from() does. Where the
             * next block starts must not depend on them (nor on tzcnt): then
             * its load and mask overlap this block's escapes. */
            for (;;) {
                size_t k = scan_first(m);
                char c;
                if (s[i + k] != '\\') {
                    o += k;
                    p = i + k;
                    goto stop;
                }
                if (W2J_UNLIKELY(k == SCAN_BLOCK - 1) ||
                    W2J_UNLIKELY((c = esc_char[(unsigned char) s[i + k + 1]]) == 0)) {
                    o += k; /* escaped byte in the next block, or \u, or invalid */
                    i += k;
                    goto escape;
                }
                dst[o + k] = c;
                o--;
                memcpy(dst + (o + k + 2), s + i + k + 2, SCAN_BLOCK);
                uint64_t low = m & (~m + 1);
                m &= ~(low | low << SCAN_BIT); /* the backslash and the byte it escapes */
                if (m == 0)
                    break;
            }
            i += SCAN_BLOCK;
            o += SCAN_BLOCK;
            continue;
        }
#endif
        while (i < len && !str_stop[(unsigned char) s[i]]) {
            if (W2J_UNLIKELY(o == cap))
                goto full;
            dst[o++] = s[i++];
        }
        if (W2J_UNLIKELY(i >= len))
            return scan_fail(sc, start, "truncated: unterminated string");
        p = i;
        if (s[p] == '\\') {
#if W2J_SWAR
        escape:
#endif
            if (W2J_UNLIKELY(cap - o < 4)) /* the most an escape unescapes to */
                goto full;
            if (i + 1 < len && esc_char[(unsigned char) s[i + 1]] != 0) {
                dst[o++] = esc_char[(unsigned char) s[i + 1]];
                i += 2;
            } else {
                size_t next = check_escape(sc, i);
                if (next == 0)
                    return -1;
                o += utf8_put(dst + o, u_escape_cp(s + i));
                i = next;
            }
            continue;
        }
#if W2J_SWAR
    stop:
#endif
        if (s[p] == '"')
            break;
        return scan_fail(sc, p, "control character 0x%02X in string", (unsigned char) s[p]);
    }
    /* Each escape is longer than its text: the string has one exactly when
     * its text is shorter. */
    *tlen = o;
    *traw = p - start - 1;
    out->type = W2J_STRING;
    out->escaped = o < p - start - 1;
    out->ptr = s + start + 1;
    out->len = p - start - 1;
    sc->pos = p + 1;
    return 0;

full:
    *tlen = o;
    *traw = i - start - 1;
    return scan_string_from(sc, start, i, o < i - start - 1, out);
}

static inline bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(struct scan *sc, struct w2j_value *out)
{
    size_t start = sc->pos;

    if (peek(sc) == '-')
        sc->pos++;
    if (peek(sc) == '0') {
        sc->pos++;
    } else if (is_digit(peek(sc))) {
        while (is_digit(peek(sc)))
            sc->pos++;
    } else {
        return scan_fail(sc, sc->pos, "%s in number",
                         sc->pos >= sc->len ? "truncated" : "expected a digit");
    }
    if (peek(sc) == '.') {
        sc->pos++;
        if (!is_digit(peek(sc)))
            return scan_fail(sc, sc->pos, "expected a digit after '.'");
        while (is_digit(peek(sc)))
            sc->pos++;
    }
    if (peek(sc) == 'e' || peek(sc) == 'E') {
        sc->pos++;
        if (peek(sc) == '+' || peek(sc) == '-')
            sc->pos++;
        if (!is_digit(peek(sc)))
            return scan_fail(sc, sc->pos, "expected a digit in exponent");
        while (is_digit(peek(sc)))
            sc->pos++;
    }
    out->type = W2J_NUMBER;
    out->escaped = false;
    out->ptr = sc->s + start;
    out->len = sc->pos - start;
    return 0;
}

static int scan_literal(struct scan *sc, const char *word, size_t n, enum w2j_vtype type,
                        struct w2j_value *out)
{
    if (sc->len - sc->pos < n || memcmp(sc->s + sc->pos, word, n) != 0) {
        if (sc->len - sc->pos < n && memcmp(sc->s + sc->pos, word, sc->len - sc->pos) == 0)
            return scan_fail(sc, sc->pos, "truncated literal");
        return scan_fail(sc, sc->pos, "invalid literal");
    }
    out->type = type;
    out->escaped = false;
    out->ptr = sc->s + sc->pos;
    out->len = n;
    sc->pos += n;
    return 0;
}

static int scan_value(struct scan *sc, int depth, struct w2j_value *out);

/* An object or array at pos, one level below depth; *out spans it raw. */
static int scan_container(struct scan *sc, int depth, struct w2j_value *out)
{
    size_t start = sc->pos;
    char open = sc->s[start], close = open == '{' ? '}' : ']';
    struct w2j_value tmp;

    if (depth + 1 > W2J_MAX_DEPTH)
        return scan_fail(sc, start, "nesting deeper than %d", W2J_MAX_DEPTH);
    sc->pos++;
    skip_ws(sc);
    if (peek(sc) == close) {
        sc->pos++;
    } else {
        for (;;) {
            if (open == '{') {
                if (peek(sc) != '"')
                    return scan_fail(sc, sc->pos, "%s: expected a key",
                                     sc->pos >= sc->len ? "truncated" : "bad object");
                if (scan_string(sc, &tmp) < 0)
                    return -1;
                skip_ws(sc);
                if (expect_char(sc, ':', "':'") < 0)
                    return -1;
                skip_ws(sc);
            }
            if (scan_value(sc, depth + 1, &tmp) < 0)
                return -1;
            skip_ws(sc);
            if (peek(sc) == ',') {
                sc->pos++;
                skip_ws(sc);
                continue;
            }
            if (peek(sc) == close) {
                sc->pos++;
                break;
            }
            return scan_fail(sc, sc->pos, "%s: expected ',' or '%c'",
                             sc->pos >= sc->len ? "truncated" : "bad container", close);
        }
    }
    out->type = W2J_OTHER;
    out->escaped = false;
    out->ptr = sc->s + start;
    out->len = sc->pos - start;
    return 0;
}

/* Any JSON value at pos, inside a container at the given depth. */
static int scan_value(struct scan *sc, int depth, struct w2j_value *out)
{
    switch (peek(sc)) {
    case '"':
        return scan_string(sc, out);
    case '{':
    case '[':
        return scan_container(sc, depth, out);
    case 't':
        return scan_literal(sc, "true", 4, W2J_BOOL, out);
    case 'f':
        return scan_literal(sc, "false", 5, W2J_BOOL, out);
    case 'n':
        return scan_literal(sc, "null", 4, W2J_NULL, out);
    case -1:
        return scan_fail(sc, sc->pos, "truncated: expected a value");
    default:
        if (peek(sc) == '-' || is_digit(peek(sc)))
            return scan_number(sc, out);
        return scan_fail(sc, sc->pos, "unexpected character '%c'",
                         (peek(sc) >= 0x20 && peek(sc) < 0x7f) ? peek(sc) : '?');
    }
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
static int parse_columns(struct scan *sc, struct w2j_record *rec, bool text)
{
    struct w2j_value tmp;

    if (peek(sc) != '[')
        return scan_fail(sc, sc->pos, "\"columns\" must be an array");
    sc->pos++;
    rec->ncolumns = 0;
    skip_ws(sc);
    if (peek(sc) == ']') {
        sc->pos++;
        return 0;
    }
    for (;;) {
        if (rec->ncolumns == W2J_MAX_COLUMNS)
            return scan_fail(sc, sc->pos, "more than %d columns", W2J_MAX_COLUMNS);
        struct w2j_column *col = &rec->columns[rec->ncolumns];
        size_t col_at = sc->pos;
        bool have_name = false, have_value = false;

        if (peek(sc) != '{')
            return scan_fail(sc, sc->pos, "%s: expected a column object",
                             sc->pos >= sc->len ? "truncated" : "bad column");
        sc->pos++;
        col->value.type = W2J_ABSENT;
        col->value.escaped = false;
        col->value.ptr = NULL;
        col->value.len = 0;
        col->text.src = NULL;
        skip_ws(sc);
        if (peek(sc) != '}') {
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
                    if (peek(sc) != '"')
                        return scan_fail(sc, sc->pos, "%s: expected a key",
                                         sc->pos >= sc->len ? "truncated" : "bad column");
                    if (scan_string(sc, &key) < 0)
                        return -1;
                    skip_ws(sc);
                    if (expect_char(sc, ':', "':'") < 0)
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
                skip_ws(sc);
                if (sc->pos >= sc->len)
                    return scan_fail(sc, sc->pos, "truncated: expected a value");
                if (kn == 4 && memcmp(k, "name", 4) == 0) {
                    if (have_name)
                        return scan_fail(sc, key_at, "duplicate key \"name\" in column");
                    if (peek(sc) != '"')
                        return scan_fail(sc, sc->pos, "column \"name\" must be a string");
                    if (scan_string(sc, &col->name) < 0)
                        return -1;
                    have_name = true;
                } else if (kn == 5 && memcmp(k, "value", 5) == 0) {
                    if (have_value)
                        return scan_fail(sc, key_at, "duplicate key \"value\" in column");
                    if (peek(sc) == '"' && text) {
                        struct w2j_text *t = &col->text;
                        t->off = rec->text_used;
                        if (scan_string_text(sc, &col->value, rec->text_buf + t->off,
                                             W2J_TEXT_CAP - t->off, &t->len, &t->raw) < 0)
                            return -1;
                        if (col->value.escaped) { /* else the value is its own text */
                            t->src = col->value.ptr;
                            rec->text_used += t->len;
                        }
                    } else if (peek(sc) == '"' ? scan_string(sc, &col->value) < 0
                                               : scan_value(sc, 3, &col->value) < 0) {
                        return -1;
                    }
                    have_value = true;
                } else if (scan_value(sc, 3, &tmp) < 0) {
                    return -1;
                }
                skip_ws(sc);
                if (peek(sc) == ',') {
                    sc->pos++;
                    skip_ws(sc);
                    continue;
                }
                if (peek(sc) == '}')
                    break;
                return scan_fail(sc, sc->pos, "%s: expected ',' or '}'",
                                 sc->pos >= sc->len ? "truncated" : "bad column");
            }
        }
        sc->pos++; /* '}' */
        if (!have_name)
            return scan_fail(sc, col_at, "column without \"name\"");
        rec->ncolumns++;
        skip_ws(sc);
        if (peek(sc) == ',') {
            sc->pos++;
            skip_ws(sc);
            continue;
        }
        if (peek(sc) == ']') {
            sc->pos++;
            return 0;
        }
        return scan_fail(sc, sc->pos, "%s: expected ',' or ']'",
                         sc->pos >= sc->len ? "truncated" : "bad columns");
    }
}

static int parse_lsn_value(struct scan *sc, const char *key, lsn_t *out)
{
    struct w2j_value v = {W2J_ABSENT, false, NULL, 0};
    size_t at = sc->pos;
    char buf[24];
    size_t n;

    if (peek(sc) != '"')
        return scan_fail(sc, at, "\"%s\" must be a string", key);
    if (scan_string(sc, &v) < 0)
        return -1;
    if (W2J_LIKELY(!v.escaped)) {
        if (lsn_parse(v.ptr, v.len, out) < 0)
            return scan_fail(sc, at, "bad LSN in \"%s\"", key);
        return 0;
    }
    if (!small_string(&v, buf, sizeof buf, &n) || lsn_parse(buf, n, out) < 0)
        return scan_fail(sc, at, "bad LSN in \"%s\"", key);
    return 0;
}

static int parse_xid(struct scan *sc, int64_t *out)
{
    struct w2j_value v;
    size_t at = sc->pos;
    int64_t x = 0;

    if (peek(sc) == 'n')
        return scan_literal(sc, "null", 4, W2J_NULL, &v); /* xid stays -1 */
    if (!is_digit(peek(sc)))
        return scan_fail(sc, at, "\"xid\" must be a non-negative integer");
    if (scan_number(sc, &v) < 0)
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        if (!is_digit((unsigned char) v.ptr[i]) || x > (INT64_MAX - 9) / 10)
            return scan_fail(sc, at, "\"xid\" must be a non-negative integer");
        x = x * 10 + (v.ptr[i] - '0');
    }
    *out = x;
    return 0;
}

/* A string or null for key (timestamp, schema, table, prefix, content). */
static inline int parse_string_or_null(struct scan *sc, const char *key, struct w2j_value *out)
{
    if (peek(sc) == '"')
        return scan_string(sc, out);
    if (peek(sc) == 'n')
        return scan_literal(sc, "null", 4, W2J_NULL, out);
    return scan_fail(sc, sc->pos, "\"%s\" must be a string", key);
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
    struct scan sc = {line, len, 0, errbuf, errlen};
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

    skip_ws(&sc);
    if (peek(&sc) != '{')
        return scan_fail(&sc, sc.pos, "%s: expected '{'",
                         sc.pos >= sc.len ? "truncated" : "not an object");
    sc.pos++;
    skip_ws(&sc);
    if (peek(&sc) == '}') {
        sc.pos++;
    } else {
        for (;;) {
            struct w2j_value key, v;
            size_t key_at = sc.pos;
            int rc;

            if (peek(&sc) != '"')
                return scan_fail(&sc, sc.pos, "%s: expected a key",
                                 sc.pos >= sc.len ? "truncated" : "bad record");
            if (scan_string(&sc, &key) < 0)
                return -1;
            skip_ws(&sc);
            if (expect_char(&sc, ':', "':'") < 0)
                return -1;
            skip_ws(&sc);
            if (sc.pos >= sc.len)
                return scan_fail(&sc, sc.pos, "truncated: expected a value");

            enum rec_key k = classify_value_key(&key);
            if (k != K_UNKNOWN) {
                if (seen & (1u << k))
                    return scan_fail(&sc, key_at, "duplicate key \"%s\"", rec_key_names[k]);
                seen |= 1u << k;
            }
            switch (k) {
            case K_ACTION: {
                size_t at = sc.pos;
                char buf[4];
                size_t n;
                if (peek(&sc) != '"')
                    return scan_fail(&sc, at, "\"action\" must be a string");
                if (scan_string(&sc, &v) < 0)
                    return -1;
                if (!small_string(&v, buf, sizeof buf, &n) || n != 1 || !is_action(buf[0]))
                    return scan_fail(&sc, at, "unknown action \"%.*s\"",
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
                if (rec->action == 'M' && peek(&sc) == '"') {
                    /* The envelope, which is all unescaped before it is
                     * parsed: its text in passing too. */
                    struct w2j_text *t = &rec->content_text;
                    t->off = rec->text_used;
                    rc = scan_string_text(&sc, &rec->content, rec->text_buf + t->off,
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
                if (peek(&sc) == 't') {
                    rc = scan_literal(&sc, "true", 4, W2J_BOOL, &v);
                    rec->transactional = true;
                } else if (peek(&sc) == 'f') {
                    rc = scan_literal(&sc, "false", 5, W2J_BOOL, &v);
                } else {
                    rc = scan_fail(&sc, sc.pos, "\"transactional\" must be a boolean");
                }
                break;
            default:
                rc = scan_value(&sc, 1, &v);
                break;
            }
            if (rc < 0)
                return -1;
            skip_ws(&sc);
            if (peek(&sc) == ',') {
                sc.pos++;
                skip_ws(&sc);
                continue;
            }
            if (peek(&sc) == '}') {
                sc.pos++;
                break;
            }
            return scan_fail(&sc, sc.pos, "%s: expected ',' or '}'",
                             sc.pos >= sc.len ? "truncated" : "bad record");
        }
    }
    skip_ws(&sc);
    if (sc.pos != sc.len)
        return scan_fail(&sc, sc.pos, "trailing garbage after the record");
    if (rec->action == 0)
        return scan_fail(&sc, 0, "missing \"action\"");
    return 0;
}

/* ----------------------------------------------------------- w2j_unescape */

static size_t utf8_len(unsigned long cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

int w2j_unescape(const struct w2j_value *v, char *dst, size_t dstcap, size_t *outlen)
{
    const char *s = v->ptr;
    size_t n = v->len, i = 0, o = 0;

    if (!v->escaped) {
        if (n > dstcap)
            return -1;
        if (n > 0)
            memcpy(dst, s, n);
        *outlen = n;
        return 0;
    }
    while (i < n) {
#if W2J_SWAR && defined(__SSE2__)
        /* 16 bytes at a time, as the scanner does; the tail of the block
         * after an escape is copied by reloading from the source (SSE2 has
         * no variable byte shift). Needs 32 bytes of input and of room. */
        if (n - i >= 32 && dstcap - o >= 32) {
            __m128i blk = _mm_loadu_si128((const __m128i *) (const void *) (s + i));
            uint64_t m = (unsigned) _mm_movemask_epi8(_mm_cmpeq_epi8(blk, _mm_set1_epi8('\\')));
            size_t from = 0, k;
            char c;
            _mm_storeu_si128((__m128i *) (void *) (dst + o), blk);
            if (m == 0) {
                i += 16;
                o += 16;
                continue;
            }
            for (;;) {
                k = (size_t) __builtin_ctzll(m);
                o += k - from;
                if (k == 15 || (c = esc_char[(unsigned char) s[i + k + 1]]) == 0)
                    break; /* escape at i + k: the byte path */
                dst[o++] = c;
                from = k + 2;
                if (from == 16) {
                    k = 16;
                    break;
                }
                _mm_storeu_si128((__m128i *) (void *) (dst + o),
                                 _mm_loadu_si128((const __m128i *) (const void *) (s + i + from)));
                uint64_t low = m & (~m + 1);
                m &= ~(low | low << 1);
                if (m == 0) {
                    o += 16 - from;
                    k = 16;
                    break;
                }
            }
            i += k;
            if (k == 16)
                continue;
            goto escape;
        }
#endif
#if W2J_SWAR
        /* A word at a time: runs are copied with 8-byte stores (the bytes a
         * store writes past a run are overwritten by what follows, hence
         * the 16 bytes of room), one-byte escapes are resolved from the
         * word itself, and only \u escapes and words ending in a backslash
         * leave for the byte path below. */
        if (n - i >= 8 && dstcap - o >= 16) {
            uint64_t w = load8(s + i), m = eq_mask(w, '\\');
            size_t from = 0, k;
            char c;
            memcpy(dst + o, &w, 8);
            if (m == 0) {
                i += 8;
                o += 8;
                continue;
            }
            for (;;) {
                k = first_byte(m);
                o += k - from;
                if (k == 7 || (c = esc_char[(unsigned char) (w >> (8 * k + 8))]) == 0)
                    break; /* escape at i + k: the byte path */
                dst[o++] = c;
                from = k + 2;
                if (from == 8) {
                    k = 8;
                    break;
                }
                uint64_t rest = w >> (8 * from);
                memcpy(dst + o, &rest, 8);
                uint64_t low = m & (~m + 1);
                m &= ~(low | low << 8); /* this backslash and the escaped byte */
                if (m == 0) {
                    o += 8 - from;
                    k = 8;
                    break;
                }
            }
            i += k;
            if (k == 8)
                continue;
        } else
#endif
        {
            while (i < n && s[i] != '\\') {
                if (o == dstcap)
                    return -1;
                dst[o++] = s[i++];
            }
            if (i == n)
                break;
        }
        /* s[i] is a backslash. */
#if W2J_SWAR && defined(__SSE2__)
    escape:
#endif
        if (n - i < 2)
            return -1;
        char c = esc_char[(unsigned char) s[i + 1]];
        if (c != 0) {
            if (o == dstcap)
                return -1;
            dst[o++] = c;
            i += 2;
            continue;
        }
        if (s[i + 1] != 'u' || n - i < 6)
            return -1;
        long cp = hex4(s + i + 2);
        size_t used = 6;
        if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
            return -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (n - i < 12 || s[i + 6] != '\\' || s[i + 7] != 'u')
                return -1;
            long lo = hex4(s + i + 8);
            if (lo < 0xDC00 || lo > 0xDFFF)
                return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            used = 12;
        }
        if (utf8_len((unsigned long) cp) > dstcap - o)
            return -1;
        o += utf8_put(dst + o, (unsigned long) cp);
        i += used;
    }
    *outlen = o;
    return 0;
}

/* ------------------------------------------------------- w2j_timestamp_us */

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (what
 * PostgreSQL uses for every date, BC included); y is astronomical (1 BC is
 * year 0). Counts in 400-year eras of 146097 days, years starting in March
 * so that the leap day falls at the end. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Reads exactly n digits at p[*i]; -1 when any is not a digit. */
static long digits(const char *p, size_t len, size_t *i, size_t n)
{
    long x = 0;
    if (len - *i < n)
        return -1;
    for (size_t k = 0; k < n; k++) {
        if (!is_digit((unsigned char) p[*i + k]))
            return -1;
        x = x * 10 + (p[*i + k] - '0');
    }
    *i += n;
    return x;
}

/*
 * PostgreSQL's timestamptz output with DateStyle ISO, as wal2json sends it:
 *
 *   YYYY-MM-DD HH:MM:SS[.F{1,6}]±HH[:MM[:SS]][ BC]
 *
 * The year has four digits or more (12345-06-07 …); the offset has seconds
 * for historic local mean times ("+05:53:28"); "infinity" is refused.
 */
int w2j_timestamp_us(const struct w2j_value *v, int64_t *unix_us)
{
    const char *p = v->ptr;
    size_t n = v->len, i = 0, ydigits = 0;
    int64_t year = 0;

    if (v->type != W2J_STRING || v->escaped || p == NULL)
        return -1;
    while (i < n && is_digit((unsigned char) p[i])) {
        if (++ydigits > 6)
            return -1;
        year = year * 10 + (p[i++] - '0');
    }
    if (ydigits < 4 || year == 0 || i >= n || p[i++] != '-')
        return -1;
    long mon = digits(p, n, &i, 2);
    if (mon < 1 || mon > 12 || i >= n || p[i++] != '-')
        return -1;
    long day = digits(p, n, &i, 2);
    if (day < 1 || i >= n || (p[i] != ' ' && p[i] != 'T'))
        return -1;
    i++;
    long hh = digits(p, n, &i, 2);
    if (hh < 0 || hh > 23 || i >= n || p[i++] != ':')
        return -1;
    long mi = digits(p, n, &i, 2);
    if (mi < 0 || mi > 59 || i >= n || p[i++] != ':')
        return -1;
    long ss = digits(p, n, &i, 2);
    if (ss < 0 || ss > 59)
        return -1;
    long frac = 0;
    if (i < n && p[i] == '.') {
        size_t fd = 0;
        i++;
        while (i < n && is_digit((unsigned char) p[i])) {
            if (++fd > 6)
                return -1;
            frac = frac * 10 + (p[i++] - '0');
        }
        if (fd == 0)
            return -1;
        for (; fd < 6; fd++)
            frac *= 10;
    }
    if (i >= n || (p[i] != '+' && p[i] != '-'))
        return -1;
    int sign = p[i++] == '-' ? -1 : 1;
    long oh = digits(p, n, &i, 2), om = 0, os = 0;
    if (oh < 0 || oh > 15)
        return -1;
    if (i < n && p[i] == ':') {
        i++;
        om = digits(p, n, &i, 2);
        if (om < 0 || om > 59)
            return -1;
        if (i < n && p[i] == ':') {
            i++;
            os = digits(p, n, &i, 2);
            if (os < 0 || os > 59)
                return -1;
        }
    }
    if (n - i == 3 && memcmp(p + i, " BC", 3) == 0) {
        year = 1 - year;
        i += 3;
    }
    if (i != n)
        return -1;

    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day > mdays[mon - 1] + (mon == 2 && leap))
        return -1;

    int64_t secs = days_from_civil(year, (int) mon, (int) day) * 86400 + hh * 3600 + mi * 60 + ss;
    secs -= sign * (oh * 3600 + om * 60 + os);
    /* Years up to 294276 are valid in PostgreSQL; the last ones do not fit
     * in int64 microseconds since 1970. */
    if (secs > INT64_MAX / 1000000 - 1 || secs < INT64_MIN / 1000000 + 1)
        return -1;
    *unix_us = secs * 1000000 + frac;
    return 0;
}

/* ------------------------------------------------------- w2j_event_decode */

W2J_COLD static int event_fail(char *errbuf, size_t errlen, lsn_t lsn, const char *fmt, ...)
{
    if (errbuf != NULL && errlen > 0) {
        int n = snprintf(errbuf, errlen, "event at LSN " LSN_FMT ": ", LSN_ARGS(lsn));
        if (n >= 0 && (size_t) n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(errbuf + n, errlen - (size_t) n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* Makes room for need bytes of unescaped text in s (s->len = 0 then). */
static int scratch_reserve(struct w2j_scratch *s, size_t need)
{
    s->len = 0;
    if (need <= s->cap)
        return 0;
    size_t cap = s->cap > 256 ? s->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(s->buf, cap);
    if (p == NULL)
        return -1;
    s->buf = p;
    s->cap = cap;
    return 0;
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
                     const struct w2j_text *t, struct w2j_scratch *s, const char **ptr,
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

static int take_string(const struct w2j_value *v, struct w2j_scratch *s, const char **ptr,
                       size_t *len)
{
    return take_text(v, NULL, NULL, s, ptr, len);
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

/* event_id from the id column: an integer number, or a string of digits. */
static int set_event_id(const struct w2j_value *v, struct outbox_event *ev)
{
    char buf[24];
    const char *p = v->ptr;
    size_t n = v->len, i = 0;

    if (v->type == W2J_STRING) {
        if (!small_string(v, buf, sizeof buf, &n))
            return -1;
        p = buf;
    } else if (v->type != W2J_NUMBER) {
        return -1;
    } else if (n > 0 && p[0] == '-') {
        i = 1;
    }
    if (n == i || n - i > 19)
        return -1;
    for (size_t k = i; k < n; k++)
        if (!is_digit((unsigned char) p[k]))
            return -1;
    memcpy(ev->event_id, p, n);
    ev->event_id[n] = '\0';
    return 0;
}

static const char *const vtype_names[] = {"absent", "null", "a boolean", "a number",
                                          "a string", "an object or array"};

static int decode_insert(const struct w2j_record *rec, const struct w2j_columns_map *map,
                         struct w2j_scratch *scratch, struct outbox_event *ev, char *errbuf,
                         size_t errlen)
{
    const char *names[5] = {map->id, map->aggregate_id, map->type, map->payload,
                            map->created_at};
    size_t lens[5];
    const struct w2j_value *vals[5] = {NULL, NULL, NULL, NULL, NULL};
    const struct w2j_text *texts[5] = {NULL, NULL, NULL, NULL, NULL};
    enum { C_ID, C_AGG, C_TYPE, C_PAYLOAD, C_CREATED };

    if (map->id == NULL || map->type == NULL)
        return event_fail(errbuf, errlen, rec->lsn, "columns map without id or type");
    for (int c = 0; c < 5; c++)
        lens[c] = names[c] != NULL ? strlen(names[c]) : SIZE_MAX;
    for (size_t i = 0; i < rec->ncolumns; i++) {
        const struct w2j_value *name = &rec->columns[i].name;
        for (int c = 0; c < 5; c++) {
            if (name->escaped ? names[c] != NULL && value_equals(name, names[c])
                              : name->len == lens[c] && memcmp(name->ptr, names[c], lens[c]) == 0) {
                if (vals[c] != NULL)
                    return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" appears twice",
                                      names[c]);
                vals[c] = &rec->columns[i].value;
                texts[c] = &rec->columns[i].text;
                break;
            }
        }
    }
    for (int c = 0; c < 5; c++) {
        if (names[c] != NULL && (vals[c] == NULL || vals[c]->type == W2J_ABSENT))
            return event_fail(errbuf, errlen, rec->lsn, "missing column \"%s\"", names[c]);
    }

    const struct w2j_value *id = vals[C_ID], *type = vals[C_TYPE];
    const struct w2j_value *agg = vals[C_AGG], *pay = vals[C_PAYLOAD], *cat = vals[C_CREATED];
    if (id->type == W2J_NULL)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is NULL", names[C_ID]);
    if (set_event_id(id, ev) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is not an integer: %.*s",
                          names[C_ID], (int) (id->len > 32 ? 32 : id->len), id->ptr);
    if (type->type == W2J_NULL)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is NULL", names[C_TYPE]);
    if (type->type != W2J_STRING)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is %s, not a string",
                          names[C_TYPE], vtype_names[type->type]);
    if (type->len == 0)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is empty", names[C_TYPE]);
    if (agg != NULL && agg->type != W2J_NULL && agg->type != W2J_STRING)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is %s, not a string",
                          names[C_AGG], vtype_names[agg->type]);
    if (cat != NULL && cat->type != W2J_NULL && cat->type != W2J_STRING)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\" is %s, not a string",
                          names[C_CREATED], vtype_names[cat->type]);

    /* Everything that will be unescaped, reserved at once: take_string()
     * below must not realloc under pointers it already handed out. */
    if (scratch_reserve(scratch, scratch_need(agg) + scratch_need(type) + scratch_need(pay) +
                                     scratch_need(cat)) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "out of memory");
    if (take_text(type, rec, texts[C_TYPE], scratch, &ev->type, &ev->type_len) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape", names[C_TYPE]);
    if (agg != NULL && agg->type == W2J_STRING &&
        take_text(agg, rec, texts[C_AGG], scratch, &ev->aggregate_id, &ev->aggregate_id_len) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape", names[C_AGG]);
    if (cat != NULL && cat->type == W2J_STRING &&
        take_text(cat, rec, texts[C_CREATED], scratch, &ev->created_at,
                  &ev->created_at_len) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                          names[C_CREATED]);
    if (pay != NULL && pay->type == W2J_STRING) {
        if (take_text(pay, rec, texts[C_PAYLOAD], scratch, &ev->payload, &ev->payload_len) < 0)
            return event_fail(errbuf, errlen, rec->lsn, "column \"%s\": bad escape",
                              names[C_PAYLOAD]);
    } else if (pay != NULL && pay->type != W2J_NULL) {
        ev->payload = pay->ptr; /* a number, boolean, object or array as is */
        ev->payload_len = pay->len;
    }
    return 0;
}

/*
 * The envelope inside an 'M' record's content, once unescaped:
 *
 *   {"aggregate_id": "..." | null, "type": "...", "payload": <any JSON>}
 *
 * Keys in any order, others skipped, whitespace allowed; payload is kept as
 * the raw text of its value (a string keeps its quotes and escapes).
 */
static int decode_message(const struct w2j_record *rec, struct w2j_scratch *scratch,
                          struct outbox_event *ev, char *errbuf, size_t errlen)
{
    const struct w2j_value *content = &rec->content;
    struct w2j_value agg, type, pay, ts = rec->timestamp;
    char serr[W2J_ERRLEN];
    const char *env;
    size_t elen;

    if (content->type != W2J_STRING)
        return event_fail(errbuf, errlen, rec->lsn, "message without \"content\"");
    if (content->len > (SIZE_MAX - ts.len) / 2)
        return event_fail(errbuf, errlen, rec->lsn, "out of memory");
    /* The envelope (its text from the record; left in the line if it has no
     * escape, which no valid one lacks), then its escaped strings: all of
     * them are substrings of the envelope, no longer than the raw content. */
    if (scratch_reserve(scratch, 2 * content->len + scratch_need(&ts)) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "out of memory");
    if (take_text(content, rec, &rec->content_text, scratch, &env, &elen) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "message content: bad escape");

    struct scan sc = {env, elen, 0, serr, sizeof serr};
    unsigned seen = 0;
    value_reset(&agg);
    value_reset(&type);
    value_reset(&pay);
    skip_ws(&sc);
    if (peek(&sc) != '{') {
        scan_fail(&sc, sc.pos, "not a JSON object");
        goto bad;
    }
    sc.pos++;
    skip_ws(&sc);
    if (peek(&sc) == '}') {
        sc.pos++;
    } else {
        for (;;) {
            struct w2j_value key, tmp, *dst = &tmp;
            size_t key_at = sc.pos;
            unsigned bit = 0;
            if (peek(&sc) != '"') {
                scan_fail(&sc, sc.pos, "expected a key");
                goto bad;
            }
            if (scan_string(&sc, &key) < 0)
                goto bad;
            skip_ws(&sc);
            if (expect_char(&sc, ':', "':'") < 0)
                goto bad;
            skip_ws(&sc);
            if (value_equals(&key, "aggregate_id")) {
                dst = &agg;
                bit = 1;
            } else if (value_equals(&key, "type")) {
                dst = &type;
                bit = 2;
            } else if (value_equals(&key, "payload")) {
                dst = &pay;
                bit = 4;
            }
            if (seen & bit) {
                scan_fail(&sc, key_at, "duplicate key \"%.*s\"", (int) key.len, key.ptr);
                goto bad;
            }
            seen |= bit;
            if (scan_value(&sc, 1, dst) < 0)
                goto bad;
            skip_ws(&sc);
            if (peek(&sc) == ',') {
                sc.pos++;
                skip_ws(&sc);
                continue;
            }
            if (peek(&sc) == '}') {
                sc.pos++;
                break;
            }
            scan_fail(&sc, sc.pos, "expected ',' or '}'");
            goto bad;
        }
    }
    skip_ws(&sc);
    if (sc.pos != sc.len) {
        scan_fail(&sc, sc.pos, "trailing garbage");
        goto bad;
    }

    if (type.type != W2J_STRING)
        return event_fail(errbuf, errlen, rec->lsn, "envelope \"type\" is %s, not a string",
                          vtype_names[type.type]);
    if (type.len == 0)
        return event_fail(errbuf, errlen, rec->lsn, "envelope \"type\" is empty");
    if (agg.type != W2J_STRING && agg.type != W2J_NULL && agg.type != W2J_ABSENT)
        return event_fail(errbuf, errlen, rec->lsn,
                          "envelope \"aggregate_id\" is %s, not a string",
                          vtype_names[agg.type]);
    /* Cannot fail: the scanner validated every escape of the envelope. */
    take_string(&type, scratch, &ev->type, &ev->type_len);
    if (agg.type == W2J_STRING)
        take_string(&agg, scratch, &ev->aggregate_id, &ev->aggregate_id_len);
    if (pay.type == W2J_STRING) {
        ev->payload = pay.ptr - 1; /* raw: keep the quotes */
        ev->payload_len = pay.len + 2;
    } else if (pay.type != W2J_ABSENT) {
        ev->payload = pay.ptr;
        ev->payload_len = pay.len;
    }
    if (ts.type == W2J_STRING &&
        take_string(&ts, scratch, &ev->created_at, &ev->created_at_len) < 0)
        return event_fail(errbuf, errlen, rec->lsn, "\"timestamp\": bad escape");
    snprintf(ev->event_id, sizeof ev->event_id, "m-%016" PRIX64, (uint64_t) rec->lsn);
    return 0;

bad:
    return event_fail(errbuf, errlen, rec->lsn, "bad envelope: %s", serr);
}

int w2j_event_decode(const struct w2j_record *rec, const struct w2j_columns_map *map,
                     struct w2j_scratch *scratch, struct outbox_event *ev, char *errbuf,
                     size_t errlen)
{
    ev->event_id[0] = '\0';
    ev->aggregate_id = NULL;
    ev->aggregate_id_len = 0;
    ev->type = NULL;
    ev->type_len = 0;
    ev->payload = NULL;
    ev->payload_len = 0;
    ev->created_at = NULL;
    ev->created_at_len = 0;
    ev->lsn = rec->lsn;
    scratch->len = 0;
    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';

    if (rec->action == 'I')
        return decode_insert(rec, map != NULL ? map : &W2J_DEFAULT_COLUMNS, scratch, ev, errbuf,
                             errlen);
    if (rec->action == 'M')
        return decode_message(rec, scratch, ev, errbuf, errlen);
    return event_fail(errbuf, errlen, rec->lsn, "a record with action '%c' is not an event",
                      rec->action >= 0x20 && rec->action < 0x7f ? rec->action : '?');
}

void w2j_scratch_free(struct w2j_scratch *s)
{
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
    s->cap = 0;
}
