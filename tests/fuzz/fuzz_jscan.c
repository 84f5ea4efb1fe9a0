/*
 * fuzz_jscan.c — libFuzzer target for the JSON scanning primitive
 * (jscan.h) on its own.
 *
 * Each input (copied to an exact-size buffer for ASan) is:
 *   1. a JSON string from byte 0 when it starts with '"': jscan_string and
 *      jscan_string_text (capacity from the input's length, so that every
 *      capacity is tried) must agree on success, span and error; on success
 *      the text in passing must be what jscan_unescape makes of the same
 *      raw prefix, the rest must unescape too, and nothing is written past
 *      the capacity;
 *   2. the inside of a string for jscan_unescape (any bytes: it must fail
 *      cleanly or produce no more bytes than it read);
 *   3. any JSON value (jscan_value): its span inside the input;
 *   4. jscan_find_stop against a byte loop, from every start.
 * Invariants abort; libFuzzer reports them as crashes.
 *
 * Seed corpus: tests/fuzz/corpus/jscan/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/jscan.h"

#define GUARD 32

static int is_stop(unsigned char c)
{
    return c == '"' || c == '\\' || c < 0x20;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size ? size : 1), err1[128], err2[128];
    if (s == NULL)
        return 0;
    if (size > 0)
        memcpy(s, data, size);

    /* 1. a string */
    if (size > 0 && s[0] == '"') {
        struct jscan a = {s, size, 0, err1, sizeof err1}, b = {s, size, 0, err2, sizeof err2};
        struct jscan_value va, vb;
        size_t cap = size > 1 ? (unsigned char) s[size - 1] % (size + 8) : 0;
        char *dst = malloc(cap + GUARD), *full = malloc(size + 1), *rest = malloc(size + 1);
        size_t tlen, traw, n, m;
        memset(dst, 0x5A, cap + GUARD);
        err1[0] = err2[0] = '\0';
        int ra = jscan_string(&a, &va);
        int rb = jscan_string_text(&b, &vb, dst, cap, &tlen, &traw);
        if (ra != rb || strcmp(err1, err2) != 0)
            abort();
        for (size_t k = cap; k < cap + GUARD; k++)
            if ((unsigned char) dst[k] != 0x5A)
                abort();
        if (ra == 0) {
            if (a.pos != b.pos || va.ptr != vb.ptr || va.len != vb.len ||
                va.escaped != vb.escaped || va.ptr != s + 1 || a.pos != va.len + 2 ||
                s[a.pos - 1] != '"')
                abort();
            if (tlen > cap || traw > va.len)
                abort();
            if (jscan_unescape(va.ptr, traw, full, size, &n) != 0 || n != tlen ||
                memcmp(full, dst, n) != 0)
                abort();
            if (jscan_unescape(va.ptr + traw, va.len - traw, rest, size, &m) != 0 ||
                n + m > va.len)
                abort();
            if (jscan_unescape(va.ptr, va.len, full, va.len, &n) != 0 || n > va.len)
                abort();
            if (!va.escaped && (n != va.len || memcmp(full, va.ptr, n) != 0))
                abort();
        } else if (err1[0] == '\0' || strstr(err1, " at byte ") == NULL) {
            abort();
        }
        free(dst);
        free(full);
        free(rest);
    }

    /* 2. the inside of a string */
    {
        char *out = malloc(size + 1);
        size_t n;
        if (jscan_unescape(s, size, out, size, &n) == 0 && n > size)
            abort();
        free(out);
    }

    /* 3. a value */
    {
        struct jscan sc = {s, size, 0, err1, sizeof err1};
        struct jscan_value v;
        err1[0] = '\0';
        if (jscan_value(&sc, 1, &v) == 0) {
            if (sc.pos > size || v.ptr < s || v.len > size || (size_t) (v.ptr - s) > size - v.len)
                abort();
        } else if (err1[0] == '\0') {
            abort();
        }
    }

    /* 4. the block scan */
    for (size_t from = 0; from <= size && from < 64; from++) {
        size_t want = from;
        while (want < size && !is_stop((unsigned char) s[want]))
            want++;
        if (jscan_find_stop(s, size, from) != want)
            abort();
    }

    free(s);
    return 0;
}
