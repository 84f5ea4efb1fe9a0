/*
 * test_jscan.c — the JSON scanning primitive (jscan.h) on its own: the
 * block scan, every escape at every position of a block (and across block
 * boundaries), invalid escapes, lone surrogates, control bytes, the text
 * written in passing into buffers of every size, and the other tokens.
 *
 * Inputs are copied into buffers of exactly their size, so that a
 * sanitizer build catches any read past the end; output buffers have guard
 * bytes after their capacity.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/decode/jscan.h"

static char *exact_copy(const char *p, size_t n)
{
    char *c = malloc(n > 0 ? n : 1);
    if (n > 0)
        memcpy(c, p, n);
    return c;
}

/* The escapes and what they stand for. */
static const struct {
    const char *esc, *text;
    size_t text_len;
} escapes[] = {
    {"\\\"", "\"", 1},         {"\\\\", "\\", 1},
    {"\\/", "/", 1},           {"\\b", "\b", 1},
    {"\\f", "\f", 1},          {"\\n", "\n", 1},
    {"\\r", "\r", 1},          {"\\t", "\t", 1},
    {"\\u0041", "A", 1},       {"\\u0000", "\0", 1},
    {"\\u00e9", "\xc3\xa9", 2}, {"\\u07FF", "\xdf\xbf", 2},
    {"\\u0800", "\xe0\xa0\x80", 3}, {"\\u20AC", "\xe2\x82\xac", 3},
    {"\\uFFFF", "\xef\xbf\xbf", 3}, {"\\ud83d\\ude00", "\xf0\x9f\x98\x80", 4},
    {"\\uDBFF\\uDFFF", "\xf4\x8f\xbf\xbf", 4}, {"\\uD800\\uDC00", "\xf0\x90\x80\x80", 4},
};
#define NESC (sizeof escapes / sizeof escapes[0])

/* Invalid escapes: every one must be refused wherever it stands. */
static const struct {
    const char *esc, *what;
} invalid[] = {
    {"\\x", "invalid escape '\\x'"},
    {"\\U0041", "invalid escape '\\U'"},
    {"\\u12G4", "not 4 hex digits"},
    {"\\u-123", "not 4 hex digits"},
    {"\\ude00", "lone low surrogate \\uDE00"},
    {"\\udfff", "lone low surrogate \\uDFFF"},
    {"\\ud83dxxxxxx", "lone high surrogate \\uD83D"},
    {"\\ud83d\\n", "lone high surrogate"},
    {"\\ud83d\\u0041", "not followed by a low one"},
    {"\\ud83d\\ud83d", "not followed by a low one"},
    {"\\ud83d\\uZZZZ", "not followed by a low one"},
};
#define NINVALID (sizeof invalid / sizeof invalid[0])

/* '"' + pre plain bytes + mid + post plain bytes + '"'. The plain bytes
 * vary so that a stuck index would show. */
static size_t build(char *buf, size_t pre, const char *mid, size_t post)
{
    size_t n = 0, m = strlen(mid);
    buf[n++] = '"';
    for (size_t i = 0; i < pre; i++)
        buf[n++] = (char) ('a' + i % 26);
    memcpy(buf + n, mid, m);
    n += m;
    for (size_t i = 0; i < post; i++)
        buf[n++] = (char) ('A' + i % 26);
    buf[n++] = '"';
    return n;
}

/* The text build() stands for, with text (tn bytes) in the middle. */
static size_t build_text(char *buf, size_t pre, const char *text, size_t tn, size_t post)
{
    size_t n = 0;
    for (size_t i = 0; i < pre; i++)
        buf[n++] = (char) ('a' + i % 26);
    memcpy(buf + n, text, tn);
    n += tn;
    for (size_t i = 0; i < post; i++)
        buf[n++] = (char) ('A' + i % 26);
    return n;
}

static bool has(const char *err, const char *what)
{
    if (strstr(err, what) != NULL)
        return true;
    fprintf(stderr, "  error \"%s\" does not mention \"%s\"\n", err, what);
    return false;
}

/* ---------------------------------------------------------- block scan */

static void test_find_stop(void)
{
    char buf[80];

    for (size_t len = 0; len <= 70; len++) {
        memset(buf, 'x', sizeof buf);
        char *c = exact_copy(buf, len);
        CHECK_EQ_INT(jscan_find_stop(c, len, 0), len);
        free(c);
        /* bytes that do not stop a string */
        static const unsigned char plain[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xFF};
        for (size_t p = 0; p < len; p++) {
            buf[p] = (char) plain[p % sizeof plain];
        }
        c = exact_copy(buf, len);
        CHECK_EQ_INT(jscan_find_stop(c, len, 0), len);
        free(c);
    }
    /* each stop byte at each position, found from every start up to it */
    for (int stop = 0; stop <= 0x5C; stop++) {
        if (stop >= 0x20 && stop != '"' && stop != '\\')
            continue;
        for (size_t at = 0; at < 40; at++) {
            size_t len = at + 1 + at % 17;
            memset(buf, 'y', sizeof buf);
            buf[at] = (char) stop;
            char *c = exact_copy(buf, len);
            int bad = 0;
            for (size_t from = 0; from <= at; from++)
                bad += jscan_find_stop(c, len, from) != at;
            CHECK_EQ_INT(bad, 0);
            CHECK_EQ_INT(jscan_find_stop(c, len, at + 1), len);
            free(c);
        }
    }
}

/* ------------------------------------------------------------- strings */

/* One string with mid at every offset pre (0..47: all 16 positions of a
 * block, in three blocks) and lengths around it; scanned, scanned with the
 * text in passing, and its inside unescaped. */
static void test_escapes_everywhere(void)
{
    char line[128], want[128], dst[160];
    int bad_scan = 0, bad_text = 0, bad_unescape = 0;

    for (size_t e = 0; e < NESC; e++) {
        for (size_t pre = 0; pre < 48; pre++) {
            for (size_t post = 0; post < 40; post += 3) {
                size_t n = build(line, pre, escapes[e].esc, post);
                size_t wn = build_text(want, pre, escapes[e].text, escapes[e].text_len, post);
                char *c = exact_copy(line, n);
                struct jscan sc = {c, n, 0, NULL, 0};
                struct jscan_value v;
                size_t tlen, traw, got;

                if (jscan_string(&sc, &v) != 0 || sc.pos != n || v.type != JSCAN_STRING ||
                    !v.escaped || v.ptr != c + 1 || v.len != n - 2)
                    bad_scan++;
                sc.pos = 0;
                memset(dst, 0x55, sizeof dst);
                if (jscan_string_text(&sc, &v, dst, sizeof dst - 8, &tlen, &traw) != 0 ||
                    sc.pos != n || !v.escaped || v.len != n - 2 || tlen != wn ||
                    traw != n - 2 || memcmp(dst, want, wn) != 0)
                    bad_text++;
                memset(dst, 0x55, sizeof dst);
                if (jscan_unescape(c + 1, n - 2, dst, wn, &got) != 0 || got != wn ||
                    memcmp(dst, want, wn) != 0 || dst[wn] != 0x55 ||
                    jscan_unescape(c + 1, n - 2, dst, wn - 1, &got) != -1)
                    bad_unescape++;
                free(c);
            }
        }
    }
    CHECK_EQ_INT(bad_scan, 0);
    CHECK_EQ_INT(bad_text, 0);
    CHECK_EQ_INT(bad_unescape, 0);
}

/* Two escapes next to each other and apart, at block boundaries: the mask
 * of a block is updated escape by escape. */
static void test_escape_pairs(void)
{
    char mid[64], line[160], want[160], dst[200];
    int bad = 0;

    for (size_t a = 0; a < NESC; a++) {
        for (size_t b = 0; b < NESC; b++) {
            for (size_t gap = 0; gap < 3; gap++) {
                size_t m = (size_t) snprintf(mid, sizeof mid, "%s%.*s%s", escapes[a].esc,
                                             (int) gap, "zzz", escapes[b].esc);
                (void) m;
                char text[16];
                size_t tn = 0;
                memcpy(text, escapes[a].text, escapes[a].text_len);
                tn += escapes[a].text_len;
                memcpy(text + tn, "zzz", gap);
                tn += gap;
                memcpy(text + tn, escapes[b].text, escapes[b].text_len);
                tn += escapes[b].text_len;
                for (size_t pre = 10; pre < 36; pre++) {
                    size_t n = build(line, pre, mid, 33);
                    size_t wn = build_text(want, pre, text, tn, 33);
                    char *c = exact_copy(line, n);
                    struct jscan sc = {c, n, 0, NULL, 0};
                    struct jscan_value v;
                    size_t tlen, traw, got;
                    if (jscan_string(&sc, &v) != 0 || sc.pos != n)
                        bad++;
                    sc.pos = 0;
                    if (jscan_string_text(&sc, &v, dst, sizeof dst, &tlen, &traw) != 0 ||
                        tlen != wn || memcmp(dst, want, wn) != 0)
                        bad++;
                    if (jscan_unescape(c + 1, n - 2, dst, n - 2, &got) != 0 || got != wn ||
                        memcmp(dst, want, wn) != 0)
                        bad++;
                    free(c);
                }
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_invalid_everywhere(void)
{
    char line[128], dst[160], err[128];
    int bad = 0;

    for (size_t e = 0; e < NINVALID; e++) {
        for (size_t pre = 0; pre < 48; pre++) {
            for (size_t post = 0; post < 34; post += 11) {
                size_t n = build(line, pre, invalid[e].esc, post);
                char *c = exact_copy(line, n);
                struct jscan sc = {c, n, 0, err, sizeof err};
                struct jscan_value v;
                size_t tlen, traw, got;
                char at[32];
                snprintf(at, sizeof at, " at byte %zu", pre + 1); /* the backslash */

                err[0] = '\0';
                if (jscan_string(&sc, &v) != -1 || !has(err, invalid[e].what) || !has(err, at))
                    bad++;
                sc.pos = 0;
                err[0] = '\0';
                if (jscan_string_text(&sc, &v, dst, sizeof dst, &tlen, &traw) != -1 ||
                    !has(err, invalid[e].what) || !has(err, at))
                    bad++;
                if (jscan_unescape(c + 1, n - 2, dst, sizeof dst, &got) != -1)
                    bad++;
                free(c);
            }
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* escapes cut short by the end of the input */
    static const char *const cut[] = {"\\", "\\u", "\\u1", "\\u12", "\\u123", "\\ud83d",
                                      "\\ud83d\\", "\\ud83d\\u", "\\ud83d\\ude0"};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        for (size_t pre = 0; pre < 40; pre++) {
            size_t n = build(line, pre, cut[i], 0) - 1; /* no closing quote */
            char *c = exact_copy(line, n);
            struct jscan sc = {c, n, 0, err, sizeof err};
            struct jscan_value v;
            size_t got;
            err[0] = '\0';
            CHECK_EQ_INT(jscan_string(&sc, &v), -1);
            CHECK(strstr(err, "truncated") != NULL || strstr(err, "lone high") != NULL);
            CHECK_EQ_INT(jscan_unescape(c + 1, n - 1, dst, sizeof dst, &got), -1);
            free(c);
        }
    }
}

static void test_control_bytes(void)
{
    char line[128], dst[160], err[128];
    int bad = 0;

    for (int ctl = 0; ctl < 0x20; ctl++) {
        for (size_t pre = 0; pre < 48; pre++) {
            char mid[2] = {(char) ctl, 0};
            size_t n = build(line, pre, "", 20);
            memmove(line + pre + 2, line + pre + 1, n - pre - 1);
            line[pre + 1] = mid[0];
            n++;
            char *c = exact_copy(line, n);
            struct jscan sc = {c, n, 0, err, sizeof err};
            struct jscan_value v;
            size_t tlen, traw, got;
            char what[64];
            snprintf(what, sizeof what, "control character 0x%02X in string at byte %zu", ctl,
                     pre + 1);
            err[0] = '\0';
            if (jscan_string(&sc, &v) != -1 || !has(err, what))
                bad++;
            sc.pos = 0;
            err[0] = '\0';
            if (jscan_string_text(&sc, &v, dst, sizeof dst, &tlen, &traw) != -1 || !has(err, what))
                bad++;
            /* unescaping copies it as it is: it is not an escape */
            if (jscan_unescape(c + 1, n - 2, dst, n - 2, &got) != 0 || got != n - 2 ||
                dst[pre] != (char) ctl)
                bad++;
            free(c);
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* a raw quote inside an unescaped span is text too */
    size_t got;
    CHECK_EQ_INT(jscan_unescape("a\"b\\n", 5, dst, 4, &got), 0);
    CHECK(got == 4 && memcmp(dst, "a\"b\n", 4) == 0);
}

static void test_unterminated(void)
{
    char line[128], err[128];

    for (size_t len = 1; len < 60; len++) {
        size_t n = build(line, len - 1, "", 0) - 1;
        char *c = exact_copy(line, n);
        struct jscan sc = {c, n, 0, err, sizeof err};
        struct jscan_value v;
        err[0] = '\0';
        CHECK_EQ_INT(jscan_string(&sc, &v), -1);
        CHECK(has(err, "truncated: unterminated string at byte 0"));
        free(c);
        /* ending in a backslash: the escape is cut */
        line[n - 1] = '\\';
        c = exact_copy(line, n);
        sc = (struct jscan){c, n, 0, err, sizeof err};
        CHECK_EQ_INT(jscan_string(&sc, &v), -1);
        CHECK(has(err, "truncated"));
        free(c);
    }
}

/* The text in passing with every capacity: a prefix of the text that ends
 * between escapes, standing for the raw prefix it says, never a byte past
 * cap; the string itself is still scanned whole. */
static void test_text_capacity(void)
{
    const char *mid = "x\\\"y\\u20ACz\\ud83d\\ude00\\n\\\\w";
    char line[160], want[160], dst[200], raw[160];
    int bad = 0;

    for (size_t pre = 0; pre < 34; pre += 3) {
        size_t n = build(line, pre, mid, 37);
        char *c = exact_copy(line, n);
        size_t wn, got;
        if (jscan_unescape(c + 1, n - 2, want, sizeof want, &wn) != 0)
            bad++;
        for (size_t cap = 0; cap <= wn + 40; cap++) {
            struct jscan sc = {c, n, 0, NULL, 0};
            struct jscan_value v;
            size_t tlen = 999, traw = 999;
            memset(dst, 0x55, sizeof dst);
            if (jscan_string_text(&sc, &v, dst, cap, &tlen, &traw) != 0 || sc.pos != n ||
                v.len != n - 2 || !v.escaped) {
                bad++;
                continue;
            }
            for (size_t k = cap; k < sizeof dst; k++)
                if ((unsigned char) dst[k] != 0x55) {
                    bad++;
                    break;
                }
            if (tlen > cap || traw > n - 2 || memcmp(dst, want, tlen) != 0)
                bad++;
            /* the raw prefix unescapes to the text; the rest to the rest */
            memcpy(raw, c + 1, traw);
            if (jscan_unescape(raw, traw, dst, sizeof dst, &got) != 0 || got != tlen)
                bad++;
            if (jscan_unescape(c + 1 + traw, n - 2 - traw, dst, sizeof dst, &got) != 0 ||
                got != wn - tlen || memcmp(dst, want + tlen, got) != 0)
                bad++;
            if (cap >= wn + 32 && (tlen != wn || traw != n - 2)) /* room enough: all of it */
                bad++;
        }
        free(c);
    }
    CHECK_EQ_INT(bad, 0);

    /* a string without escapes: its text is itself, and not escaped */
    char t[8];
    size_t tlen, traw;
    struct jscan sc = {"\"plain\"", 7, 0, NULL, 0};
    struct jscan_value v;
    CHECK_EQ_INT(jscan_string_text(&sc, &v, t, sizeof t, &tlen, &traw), 0);
    CHECK(!v.escaped && tlen == 5 && traw == 5 && memcmp(t, "plain", 5) == 0);
}

/* ------------------------------------------------------- other tokens */

static int value_of(const char *s, struct jscan_value *v, char *err, size_t errlen)
{
    size_t n = strlen(s);
    char *c = exact_copy(s, n);
    struct jscan sc = {c, n, 0, err, errlen};
    int rc = jscan_value(&sc, 1, v);
    if (rc == 0 && (sc.pos != n || v->ptr < c || v->ptr + v->len > c + n))
        rc = -2;
    /* spans point into c: compare before freeing */
    if (rc == 0 && v->type != JSCAN_STRING && (v->len != n || memcmp(v->ptr, s, n) != 0))
        rc = -3;
    free(c);
    v->ptr = NULL;
    return rc;
}

static void test_values(void)
{
    static const struct {
        const char *in;
        enum jscan_type type;
    } ok[] = {
        {"0", JSCAN_NUMBER},       {"-0", JSCAN_NUMBER},     {"12.5e-3", JSCAN_NUMBER},
        {"1E+9", JSCAN_NUMBER},    {"true", JSCAN_BOOL},     {"false", JSCAN_BOOL},
        {"null", JSCAN_NULL},      {"\"s\"", JSCAN_STRING},  {"[]", JSCAN_OTHER},
        {"{}", JSCAN_OTHER},       {"[1,\"a\",{\"k\":[null]}]", JSCAN_OTHER},
        {"{ \"a\" : 1 , \"b\" : [ ] }", JSCAN_OTHER},
    };
    char err[128];
    struct jscan_value v;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = value_of(ok[i].in, &v, err, sizeof err);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(v.type, ok[i].type);
        if (rc != 0)
            fprintf(stderr, "  ^ %s: %s\n", ok[i].in, err);
    }
    static const struct {
        const char *in, *what;
    } bad[] = {
        {"", "truncated: expected a value"}, {"-", "truncated in number"},
        {"1.", "expected a digit after '.'"}, {"1e", "expected a digit in exponent"},
        {"tru", "truncated literal"},        {"nul!", "invalid literal"},
        {"[1,]", "unexpected character ']'"}, {"{\"a\"}", "expected ':'"},
        {"{1:2}", "bad object: expected a key"}, {"[1 2]", "bad container: expected ',' or ']'"},
        {"[", "truncated"},                  {"x", "unexpected character 'x'"},
        {"{\"a\":\"\\q\"}", "invalid escape"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK_EQ_INT(value_of(bad[i].in, &v, err, sizeof err), -1);
        CHECK(has(err, bad[i].what));
        CHECK(has(err, " at byte "));
    }
    /* nesting: 63 arrays inside depth 1 are 64 levels, 64 are too many */
    for (int arrays = 63; arrays <= 64; arrays++) {
        char deep[160];
        for (int d = 0; d < arrays; d++) {
            deep[d] = '[';
            deep[2 * arrays - 1 - d] = ']';
        }
        deep[2 * arrays] = '\0';
        err[0] = '\0';
        CHECK_EQ_INT(value_of(deep, &v, err, sizeof err), arrays == 63 ? 0 : -1);
        if (arrays == 64)
            CHECK(has(err, "nesting deeper than 64"));
    }
    /* the error buffer may be absent or tiny */
    struct jscan sc = {"x", 1, 0, NULL, 0};
    CHECK_EQ_INT(jscan_value(&sc, 1, &v), -1);
    char tiny[4];
    sc = (struct jscan){"x", 1, 0, tiny, sizeof tiny};
    CHECK_EQ_INT(jscan_value(&sc, 1, &v), -1);
    CHECK(strlen(tiny) == 3);
    /* whitespace and expect */
    sc = (struct jscan){" \t\r\n:", 5, 0, err, sizeof err};
    jscan_ws(&sc);
    CHECK_EQ_INT(sc.pos, 4);
    CHECK_EQ_INT(jscan_expect(&sc, ':', "':'"), 0);
    CHECK_EQ_INT(jscan_peek(&sc), -1);
    CHECK_EQ_INT(jscan_expect(&sc, ',', "','"), -1);
    CHECK(has(err, "truncated: expected ',' at byte 5"));
}

int main(void)
{
    test_find_stop();
    test_escapes_everywhere();
    test_escape_pairs();
    test_invalid_everywhere();
    test_control_bytes();
    test_unterminated();
    test_text_capacity();
    test_values();
    CHECK_DONE();
}
