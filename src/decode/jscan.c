/*
 * jscan.c — the JSON scanning primitive (see jscan.h).
 *
 * One loop, str_walk(), does all the string work. It is instantiated three
 * times by constant arguments the compiler folds away:
 *
 *   WALK_SCAN  a string in a line: validate escapes, find the closing quote;
 *   WALK_TEXT  the same, writing the unescaped text on the way (into a
 *              bounded buffer; when it fills up the rest is only scanned);
 *   WALK_SPAN  the inside of a string (no closing quote: it ends at len),
 *              unescaped into a buffer that must hold all of it.
 *
 * The payload of an outbox insert (jsonb text, full of \" escapes) is the
 * bulk of every event, so the loop goes a block at a time and resolves the
 * one-byte escapes of a block without leaving it.
 */
#include "outbox_relay/decode/jscan.h"

#include "outbox_relay/base/hex.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define JSCAN_COLD __attribute__((cold, noinline))
#define JSCAN_INLINE inline __attribute__((always_inline))
#define JSCAN_LIKELY(x) __builtin_expect(!!(x), 1)
#define JSCAN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define JSCAN_COLD
#define JSCAN_INLINE inline
#define JSCAN_LIKELY(x) (x)
#define JSCAN_UNLIKELY(x) (x)
#endif

JSCAN_COLD int jscan_fail(struct jscan *sc, size_t at, const char *fmt, ...)
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

/* ------------------------------------------------------------ escapes */

/* Bytes that stop the fast path inside a string: the closing quote, a
 * backslash, and the control characters JSON forbids unescaped. */
static const unsigned char str_stop[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x00 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x10 */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20 '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x30 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x40 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50 '\\' */
};

/* The one-byte escapes: the byte each stands for, 0 for anything else. */
static const char esc_char[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b',
    ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

/* Four hex digits at s (at least 4 bytes readable), or -1. */
static inline long hex4(const char *s)
{
    int a = hex_digit((unsigned char) s[0]), b = hex_digit((unsigned char) s[1]);
    int c = hex_digit((unsigned char) s[2]), d = hex_digit((unsigned char) s[3]);
    if ((a | b | c | d) < 0)
        return -1;
    return (long) ((a << 12) | (b << 8) | (c << 4) | d);
}

/* Validates the escape whose backslash is at s[i]; returns the index after
 * it, or 0 (never a valid answer) after reporting the error, and stores
 * the code point it stands for in *cp. */
static size_t decode_escape(struct jscan *sc, size_t i, unsigned long *cp)
{
    const char *s = sc->s;
    size_t len = sc->len;
    long hi, lo;

    if (i + 1 >= len) {
        jscan_fail(sc, i, "truncated: escape at the end");
        return 0;
    }
    if (esc_char[(unsigned char) s[i + 1]] != 0) {
        *cp = (unsigned char) esc_char[(unsigned char) s[i + 1]];
        return i + 2;
    }
    if (s[i + 1] != 'u') {
        jscan_fail(sc, i, "invalid escape '\\%c'",
                   (s[i + 1] >= 0x20 && s[i + 1] < 0x7f) ? s[i + 1] : '?');
        return 0;
    }
    if (len - i < 6) {
        jscan_fail(sc, i, "truncated: \\u escape");
        return 0;
    }
    hi = hex4(s + i + 2);
    if (hi < 0) {
        jscan_fail(sc, i, "invalid \\u escape (not 4 hex digits)");
        return 0;
    }
    if (hi >= 0xDC00 && hi <= 0xDFFF) {
        jscan_fail(sc, i, "lone low surrogate \\u%04lX", hi);
        return 0;
    }
    if (hi < 0xD800 || hi > 0xDBFF) {
        *cp = (unsigned long) hi;
        return i + 6;
    }
    if (len - i < 12 || s[i + 6] != '\\' || s[i + 7] != 'u') {
        jscan_fail(sc, i, "lone high surrogate \\u%04lX", hi);
        return 0;
    }
    lo = hex4(s + i + 8);
    if (lo < 0xDC00 || lo > 0xDFFF) {
        jscan_fail(sc, i, "high surrogate \\u%04lX not followed by a low one", hi);
        return 0;
    }
    *cp = 0x10000 + ((unsigned long) (hi - 0xD800) << 10) + (unsigned long) (lo - 0xDC00);
    return i + 12;
}

static inline size_t utf8_len(unsigned long cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/* Writes code point cp as UTF-8 at dst (room checked by the caller);
 * returns the number of bytes. */
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

/* --------------------------------------------------------- block scan */

/* The block scan is jscan.h's (jscan_block_mask); short names here. */
#define BLOCK JSCAN_BLOCK
#define BLOCK_BIT JSCAN_BLOCK_BIT
#define block_mask jscan_block_mask
#define block_first jscan_block_first

size_t jscan_find_stop(const char *s, size_t len, size_t i)
{
#if JSCAN_BLOCKS
    while (len - i >= BLOCK) {
        uint64_t m = block_mask(s + i);
        if (m != 0)
            return i + block_first(m);
        i += BLOCK;
    }
#endif
    while (i < len && !str_stop[(unsigned char) s[i]])
        i++;
    return i;
}

/* ------------------------------------------------------------ strings */

enum walk { WALK_SCAN, WALK_TEXT, WALK_SPAN };

static int scan_rest(struct jscan *sc, size_t start, size_t i, bool escaped,
                     struct jscan_value *out);

/*
 * The one string loop. In sc->s[0..len): for SCAN and TEXT the string's
 * opening quote is at start and the walk begins at i (never inside an
 * escape; escaped tells whether one came before); for SPAN start is unused
 * and the text ends at len. TEXT and SPAN write the text to dst (cap
 * bytes); SCAN ignores dst. On success SCAN/TEXT fill *out and move pos
 * past the closing quote; TEXT stores *tlen and *traw (jscan_string_text()),
 * SPAN stores the text's length in *tlen. SPAN fails without a message.
 *
 * Writing blocks: each is stored whole at its place in dst; an escape
 * writes its byte and stores a block's worth again one byte further back,
 * reloaded from the input past the escape (a fixed-size copy: SSE2 has no
 * variable byte shift). That reads and writes up to two blocks past the
 * block's start and its text's start, so the last bytes of the input and
 * of dst take the byte loop. o is where the text of s[i] goes; inside a
 * block it steps back one byte per escape so that the text of s[i + k] goes
 * to dst[o + k] for every k after the last escape (unsigned: it may wrap
 * below 0 there, o + k never does; so add o + k, never o, to dst).
 */
static JSCAN_INLINE int str_walk(struct jscan *sc, const enum walk mode, size_t start, size_t i,
                                 bool escaped, char *dst, size_t cap, size_t *tlen,
                                 size_t *traw, struct jscan_value *out)
{
    const char *s = sc->s;
    size_t len = sc->len, o = 0, p;
    const bool write = mode != WALK_SCAN;

    for (;;) {
#if JSCAN_BLOCKS
        if (!write && JSCAN_LIKELY(len - i >= BLOCK)) {
            uint64_t m = block_mask(s + i);
            if (m == 0) {
                i += BLOCK;
                continue;
            }
            /* Visit the flagged bytes of this block: the closing quote ends
             * the string; a one-byte escape clears its own bit and that of
             * the byte it escapes, and goes on in the same block. The mask
             * update depends on the mask alone (not on tzcnt or on a loaded
             * byte), which keeps escape-dense payloads fast. */
            for (;;) {
                size_t k = block_first(m);
                p = i + k;
                if (s[p] != '\\')
                    goto stop;
                escaped = true;
                if (JSCAN_UNLIKELY(k == BLOCK - 1) || /* escaped byte in the next block */
                    JSCAN_UNLIKELY(esc_char[(unsigned char) s[p + 1]] == 0)) {
                    i = p;
                    goto escape;
                }
                uint64_t low = m & (~m + 1);
                m &= ~(low | low << BLOCK_BIT); /* the backslash and the byte it escapes */
                if (m == 0)
                    break;
            }
            i += BLOCK;
            continue;
        }
        if (write && JSCAN_LIKELY(len - i >= 2 * BLOCK && cap - o >= 2 * BLOCK)) {
            uint64_t m = block_mask(s + i);
            memcpy(dst + o, s + i, BLOCK);
            if (m == 0) {
                i += BLOCK;
                o += BLOCK;
                continue;
            }
            /* As above. Where the next block starts must not depend on the
             * flagged bytes (nor on tzcnt): then its load and mask overlap
             * this block's escapes. */
            for (;;) {
                size_t k = block_first(m);
                char c;
                if (s[i + k] != '\\') {
                    if (mode == WALK_SPAN) { /* a quote or control byte: text */
                        m &= m - 1;
                        if (m == 0)
                            break;
                        continue;
                    }
                    o += k;
                    p = i + k;
                    goto stop;
                }
                if (JSCAN_UNLIKELY(k == BLOCK - 1) ||
                    JSCAN_UNLIKELY((c = esc_char[(unsigned char) s[i + k + 1]]) == 0)) {
                    o += k; /* escaped byte in the next block, or \u, or invalid */
                    i += k;
                    goto escape;
                }
                dst[o + k] = c;
                o--;
                memcpy(dst + (o + k + 2), s + i + k + 2, BLOCK);
                uint64_t low = m & (~m + 1);
                m &= ~(low | low << BLOCK_BIT); /* the backslash and the byte it escapes */
                if (m == 0)
                    break;
            }
            i += BLOCK;
            o += BLOCK;
            continue;
        }
#endif
        if (!write) {
            while (i < len && !str_stop[(unsigned char) s[i]])
                i++;
        } else {
            while (i < len && !str_stop[(unsigned char) s[i]]) {
                if (JSCAN_UNLIKELY(o == cap))
                    goto full;
                dst[o++] = s[i++];
            }
        }
        if (JSCAN_UNLIKELY(i >= len)) {
            if (mode == WALK_SPAN)
                goto done;
            return jscan_fail(sc, start, "truncated: unterminated string");
        }
        p = i;
        if (s[p] == '\\') {
            escaped = true;
#if JSCAN_BLOCKS
        escape:
#endif
            if (mode == WALK_TEXT && JSCAN_UNLIKELY(cap - o < 4)) /* the most an escape makes */
                goto full;
            char c = i + 1 < len ? esc_char[(unsigned char) s[i + 1]] : 0;
            if (c != 0) {
                if (mode == WALK_SPAN && o == cap)
                    goto full;
                if (write)
                    dst[o++] = c;
                i += 2;
            } else {
                unsigned long cp;
                size_t next = decode_escape(sc, i, &cp);
                if (next == 0)
                    return -1;
                if (mode == WALK_SPAN && utf8_len(cp) > cap - o)
                    goto full;
                if (write)
                    o += utf8_put(dst + o, cp);
                i = next;
            }
            continue;
        }
        if (mode == WALK_SPAN) { /* a quote or control byte: text as well */
            if (o == cap)
                goto full;
            dst[o++] = s[i++];
            continue;
        }
#if JSCAN_BLOCKS
    stop:
#endif
        if (s[p] == '"')
            break;
        return jscan_fail(sc, p, "control character 0x%02X in string", (unsigned char) s[p]);
    }
    if (mode == WALK_TEXT) {
        /* Each escape is longer than its text: the string has one exactly
         * when its text is shorter. */
        *tlen = o;
        *traw = p - start - 1;
        escaped = o < p - start - 1;
    }
    out->type = JSCAN_STRING;
    out->escaped = escaped;
    out->ptr = s + start + 1;
    out->len = p - start - 1;
    sc->pos = p + 1;
    return 0;

done: /* SPAN only */
    *tlen = o;
    return 0;

full:
    if (mode == WALK_SPAN)
        return -1;
    *tlen = o;
    *traw = i - start - 1;
    return scan_rest(sc, start, i, o < i - start - 1, out);
}

/* The rest of a string whose text no longer fits (WALK_TEXT's fallback). */
static int scan_rest(struct jscan *sc, size_t start, size_t i, bool escaped,
                     struct jscan_value *out)
{
    return str_walk(sc, WALK_SCAN, start, i, escaped, NULL, 0, NULL, NULL, out);
}

int jscan_string_from(struct jscan *sc, size_t start, size_t i, struct jscan_value *out)
{
    return str_walk(sc, WALK_SCAN, start, i, false, NULL, 0, NULL, NULL, out);
}

int jscan_string_text(struct jscan *sc, struct jscan_value *out, char *dst, size_t cap,
                      size_t *tlen, size_t *traw)
{
    return str_walk(sc, WALK_TEXT, sc->pos, sc->pos + 1, false, dst, cap, tlen, traw, out);
}

int jscan_unescape(const char *s, size_t n, char *dst, size_t cap, size_t *outlen)
{
    struct jscan sc = {s, n, 0, NULL, 0};
    return str_walk(&sc, WALK_SPAN, 0, 0, false, dst, cap, outlen, NULL, NULL);
}

/* ------------------------------------------------------ other tokens */

static inline bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

int jscan_number(struct jscan *sc, struct jscan_value *out)
{
    size_t start = sc->pos;

    if (jscan_peek(sc) == '-')
        sc->pos++;
    if (jscan_peek(sc) == '0') {
        sc->pos++;
    } else if (is_digit(jscan_peek(sc))) {
        while (is_digit(jscan_peek(sc)))
            sc->pos++;
    } else {
        return jscan_fail(sc, sc->pos, "%s in number",
                          sc->pos >= sc->len ? "truncated" : "expected a digit");
    }
    if (jscan_peek(sc) == '.') {
        sc->pos++;
        if (!is_digit(jscan_peek(sc)))
            return jscan_fail(sc, sc->pos, "expected a digit after '.'");
        while (is_digit(jscan_peek(sc)))
            sc->pos++;
    }
    if (jscan_peek(sc) == 'e' || jscan_peek(sc) == 'E') {
        sc->pos++;
        if (jscan_peek(sc) == '+' || jscan_peek(sc) == '-')
            sc->pos++;
        if (!is_digit(jscan_peek(sc)))
            return jscan_fail(sc, sc->pos, "expected a digit in exponent");
        while (is_digit(jscan_peek(sc)))
            sc->pos++;
    }
    out->type = JSCAN_NUMBER;
    out->escaped = false;
    out->ptr = sc->s + start;
    out->len = sc->pos - start;
    return 0;
}

int jscan_literal(struct jscan *sc, const char *word, size_t n, enum jscan_type type,
                  struct jscan_value *out)
{
    if (sc->len - sc->pos < n || memcmp(sc->s + sc->pos, word, n) != 0) {
        if (sc->len - sc->pos < n && memcmp(sc->s + sc->pos, word, sc->len - sc->pos) == 0)
            return jscan_fail(sc, sc->pos, "truncated literal");
        return jscan_fail(sc, sc->pos, "invalid literal");
    }
    out->type = type;
    out->escaped = false;
    out->ptr = sc->s + sc->pos;
    out->len = n;
    sc->pos += n;
    return 0;
}

/* An object or array at pos, one level below depth; *out spans it raw. */
static int scan_container(struct jscan *sc, int depth, struct jscan_value *out)
{
    size_t start = sc->pos;
    char open = sc->s[start], close = open == '{' ? '}' : ']';
    struct jscan_value tmp;

    if (depth + 1 > JSCAN_MAX_DEPTH)
        return jscan_fail(sc, start, "nesting deeper than %d", JSCAN_MAX_DEPTH);
    sc->pos++;
    jscan_ws(sc);
    if (jscan_peek(sc) == close) {
        sc->pos++;
    } else {
        for (;;) {
            if (open == '{') {
                if (jscan_peek(sc) != '"')
                    return jscan_fail(sc, sc->pos, "%s: expected a key",
                                      sc->pos >= sc->len ? "truncated" : "bad object");
                if (jscan_string(sc, &tmp) < 0)
                    return -1;
                jscan_ws(sc);
                if (jscan_expect(sc, ':', "':'") < 0)
                    return -1;
                jscan_ws(sc);
            }
            if (jscan_value(sc, depth + 1, &tmp) < 0)
                return -1;
            jscan_ws(sc);
            if (jscan_peek(sc) == ',') {
                sc->pos++;
                jscan_ws(sc);
                continue;
            }
            if (jscan_peek(sc) == close) {
                sc->pos++;
                break;
            }
            return jscan_fail(sc, sc->pos, "%s: expected ',' or '%c'",
                              sc->pos >= sc->len ? "truncated" : "bad container", close);
        }
    }
    out->type = JSCAN_OTHER;
    out->escaped = false;
    out->ptr = sc->s + start;
    out->len = sc->pos - start;
    return 0;
}

int jscan_value(struct jscan *sc, int depth, struct jscan_value *out)
{
    int c = jscan_peek(sc);

    switch (c) {
    case '"':
        return jscan_string(sc, out);
    case '{':
    case '[':
        return scan_container(sc, depth, out);
    case 't':
        return jscan_literal(sc, "true", 4, JSCAN_BOOL, out);
    case 'f':
        return jscan_literal(sc, "false", 5, JSCAN_BOOL, out);
    case 'n':
        return jscan_literal(sc, "null", 4, JSCAN_NULL, out);
    case -1:
        return jscan_fail(sc, sc->pos, "truncated: expected a value");
    default:
        if (c == '-' || is_digit(c))
            return jscan_number(sc, out);
        return jscan_fail(sc, sc->pos, "unexpected character '%c'",
                          (c >= 0x20 && c < 0x7f) ? c : '?');
    }
}
