/*
 * test_w2j.c — w2j_parse(): the wal2json decoder against lines captured from
 * a real PostgreSQL 15 + wal2json 2.5 (tests/fixtures/wal2json, see
 * capture.sh), and against hand-written malformed input. (Split from
 * test_decoder.c with the decoder, issue 12: unescaping in passing is in
 * test_w2j_text.c, events in test_w2j_event.c.)
 */
#include "w2j_test.h"

static void test_golden(const char *jsonl, const char *expected)
{
    struct lines l;
    struct expect *exp;
    char *keep;
    size_t nexp = load_expected(expected, &exp, &keep);
    struct outbox_scratch scratch = {0};
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
                int drc = w2j_event_decode(&rec, &OUTBOX_DEFAULT_COLUMNS, &scratch, &ev, err,
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
    outbox_scratch_free(&scratch);
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
    test_malformed();
    test_golden("outbox.jsonl", "outbox.expected");
    test_golden("outbox_types_xids.jsonl", "outbox_types_xids.expected");
    test_golden("large.jsonl", "large.expected");
    test_sets_agree();
    test_truncation();
    free(last_copy);
    CHECK_DONE();
}
