/*
 * test_w2j_text.c — the text w2j_parse() unescapes in passing (struct w2j_text) and
 * w2j_unescape(). (Split from test_decoder.c, issue 12.)
 */
#include "w2j_test.h"

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

static const struct outbox_columns_map no_created_at = {
    .id = "id", .aggregate_id = "aggregate_id", .type = "type", .payload = "payload"};

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
    struct outbox_scratch scratch = {0};
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
    outbox_scratch_free(&scratch);
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
        struct outbox_scratch scratch = {0};
        struct outbox_event ev;
        size_t len;
        char *line = typical_with("", 0, false, &len);
        CHECK_EQ_INT(w2j_parse(line, len, &rec, err, sizeof err), 0);
        CHECK_EQ_INT(w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err), 0);
        CHECK(ev.payload != NULL && ev.payload_len == 0);
        free(line);
        outbox_scratch_free(&scratch);
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
    struct outbox_scratch scratch = {0};
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
    outbox_scratch_free(&scratch);
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

int main(void)
{
    test_unescape();
    if (typical_load()) {
        test_text_payloads();
        test_text_invalid();
        test_text_overflow();
    } else {
        CHECK(!"typical_insert.jsonl missing or without a payload");
    }
    test_text_cases();
    test_text_golden();
    free(last_copy);
    free(typical);
    CHECK_DONE();
}
