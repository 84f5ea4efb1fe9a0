/*
 * test_outbox_event.c — the plugin-neutral parts of decoding an outbox
 * event (outbox_event.h): PostgreSQL timestamps (through w2j_timestamp_us,
 * as they were tested in test_decoder.c, and directly), ids, the message
 * envelope, the scratch buffer, error context.
 */
#include "w2j_test.h"

#include "outbox_relay/decode/outbox_event.h"

/* ------------------------------------------------------------ timestamps */

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

/* The neutral entry point agrees with the wal2json one on text. */
static void test_timestamp_text(void)
{
    static const char *const texts[] = {
        "2026-11-30 14:38:02.796452+00", "0044-03-15 12:00:00+00 BC", "2026-11-30T14:38:02+00",
        "1890-01-01 05:21:10+05:21:10", "infinity", "2026-02-29 00:00:00+00", "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        struct w2j_value v = str_value(texts[i]);
        int64_t a = 1, b = 2;
        int ra = w2j_timestamp_us(&v, &a), rb = outbox_timestamp_us(texts[i], strlen(texts[i]), &b);
        CHECK_EQ_INT(ra, rb);
        if (ra == 0)
            CHECK_EQ_INT(a, b);
    }
    int64_t us;
    CHECK_EQ_INT(outbox_timestamp_us(NULL, 0, &us), -1);
    CHECK_EQ_INT(outbox_timestamp_us("1970-01-01 00:00:01+00", 22, &us), 0);
    CHECK_EQ_INT(us, 1000000);
}

/* ------------------------------------------------------------------ ids */

static void test_ids(void)
{
    struct outbox_event ev;

    outbox_event_reset(&ev, 0x16B3A28);
    CHECK(ev.event_id[0] == '\0' && ev.type == NULL && ev.payload == NULL &&
          ev.aggregate_id == NULL && ev.created_at == NULL && ev.lsn == 0x16B3A28);
    CHECK_EQ_INT(outbox_event_set_id(&ev, "42", 2, false), 0);
    CHECK(strcmp(ev.event_id, "42") == 0);
    CHECK_EQ_INT(outbox_event_set_id(&ev, "-7", 2, true), 0);
    CHECK(strcmp(ev.event_id, "-7") == 0);
    CHECK_EQ_INT(outbox_event_set_id(&ev, "1234567890123456789", 19, false), 0);
    CHECK(strcmp(ev.event_id, "1234567890123456789") == 0);
    CHECK_EQ_INT(outbox_event_set_id(&ev, "-1234567890123456789", 20, true), 0);
    static const struct {
        const char *text;
        bool sign_ok;
    } bad[] = {{"", false},   {"", true},      {"-", true},  {"-7", false},
               {"12a", true}, {" 1", true},    {"1.5", true}, {"+1", true},
               {"12345678901234567890", true}, {"--1", true}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strcpy(ev.event_id, "kept");
        CHECK_EQ_INT(outbox_event_set_id(&ev, bad[i].text, strlen(bad[i].text), bad[i].sign_ok),
                     -1);
        CHECK(strcmp(ev.event_id, "kept") == 0);
    }
    outbox_event_set_message_id(&ev);
    CHECK(strcmp(ev.event_id, "m-00000000016B3A28") == 0);
    ev.lsn = UINT64_MAX;
    outbox_event_set_message_id(&ev);
    CHECK(strcmp(ev.event_id, "m-FFFFFFFFFFFFFFFF") == 0);

    char e[64];
    CHECK_EQ_INT(outbox_event_fail(e, sizeof e, 0x100000002, "bad %s", "thing"), -1);
    CHECK(strcmp(e, "event at LSN 1/2: bad thing") == 0);
    CHECK_EQ_INT(outbox_event_fail(NULL, 0, 1, "x"), -1);
    char tiny[8];
    outbox_event_fail(tiny, sizeof tiny, 1, "long message");
    CHECK(strlen(tiny) == 7);
}

/* ------------------------------------------------------------- envelope */

/* Decodes env (copied to exactly its size) with a scratch of room bytes. */
static int envelope(const char *env, size_t room, struct outbox_scratch *s, struct outbox_event *ev,
                    char **copy)
{
    size_t n = strlen(env);
    free(*copy);
    *copy = exact_copy(env, n);
    outbox_event_reset(ev, 0x2FF);
    if (outbox_scratch_reserve(s, room) < 0)
        return -2;
    err[0] = '\0';
    return outbox_event_from_envelope(*copy, n, s, ev, err, sizeof err);
}

static void test_envelope(void)
{
    struct outbox_scratch s = {0};
    struct outbox_event ev;
    char *c = NULL;

    const char *plain = "{\"aggregate_id\":\"a-1\",\"type\":\"order.created\","
                        "\"payload\":{\"x\":[1,2]}}";
    CHECK_EQ_INT(envelope(plain, 64, &s, &ev, &c), 0);
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "a-1");
    CHECK_SPAN(ev.type, ev.type_len, "order.created");
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"x\":[1,2]}");
    CHECK(ev.type >= c && ev.type < c + strlen(plain)); /* no escape: a span of the content */
    CHECK_EQ_INT(s.len, 0);

    /* escaped strings go to the scratch; keys may be escaped too */
    CHECK_EQ_INT(envelope(" { \"typ\\u0065\" : \"a\\\"b\" , \"aggregate_id\" : null ,"
                          " \"payload\" : \"s\\n\" } ", 64, &s, &ev, &c), 0);
    CHECK_SPAN(ev.type, ev.type_len, "a\"b");
    CHECK(ev.type == s.buf && s.len == 3);
    CHECK(ev.aggregate_id == NULL);
    CHECK_SPAN(ev.payload, ev.payload_len, "\"s\\n\""); /* raw JSON, quotes kept */

    CHECK_EQ_INT(envelope("{\"type\":\"t\",\"payload\":null}", 16, &s, &ev, &c), 0);
    CHECK_SPAN(ev.payload, ev.payload_len, "null");
    CHECK_EQ_INT(envelope("{\"type\":\"t\",\"other\":[{}]}", 16, &s, &ev, &c), 0);
    CHECK(ev.payload == NULL && ev.aggregate_id == NULL);

    static const struct {
        const char *env, *what;
    } bad[] = {
        {"", "bad envelope: not a JSON object at byte 0"},
        {"[]", "not a JSON object"},
        {"{\"payload\":1}", "envelope \"type\" is absent, not a string"},
        {"{\"type\":1}", "envelope \"type\" is a number, not a string"},
        {"{\"type\":null}", "envelope \"type\" is null, not a string"},
        {"{\"type\":\"\"}", "envelope \"type\" is empty"},
        {"{\"type\":\"t\",\"aggregate_id\":{}}",
         "envelope \"aggregate_id\" is an object or array, not a string"},
        {"{\"type\":\"t\",\"type\":\"u\"}", "duplicate key \"type\""},
        {"{\"type\":\"t\"} x", "trailing garbage"},
        {"{\"type\":\"t\",}", "expected a key"},
        {"{\"type\":\"t\\x\"}", "invalid escape"},
        {"{\"type\" \"t\"}", "expected ':'"},
        {"{\"type\":\"t\"", "expected ',' or '}'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(envelope(bad[i].env, 64, &s, &ev, &c), -1);
        CHECK(err_has("event at LSN 0/2FF: "));
        CHECK(err_has(bad[i].what));
    }
    /* nesting: 64 levels in all are fine, 65 are not */
    for (int arrays = 63; arrays <= 64; arrays++) {
        char deep[200];
        size_t n = (size_t) snprintf(deep, sizeof deep, "{\"type\":\"t\",\"payload\":");
        for (int d = 0; d < arrays; d++)
            deep[n++] = '[';
        for (int d = 0; d < arrays; d++)
            deep[n++] = ']';
        deep[n++] = '}';
        deep[n] = '\0';
        CHECK_EQ_INT(envelope(deep, 16, &s, &ev, &c), arrays == 63 ? 0 : -1);
        if (arrays == 64)
            CHECK(err_has("nesting deeper than 64"));
    }

    /* the caller reserves the room; without it the envelope is refused */
    const char *esc = "{\"type\":\"\\u00e9t\\u00e9\"}";
    CHECK_EQ_INT(envelope(esc, 0, &s, &ev, &c), 0); /* the scratch keeps its capacity */
    CHECK_SPAN(ev.type, ev.type_len, "\xc3\xa9t\xc3\xa9");
    struct outbox_scratch none = {0};
    outbox_event_reset(&ev, 1);
    CHECK_EQ_INT(outbox_event_from_envelope(c, strlen(esc), &none, &ev, err, sizeof err), -1);
    CHECK(err_has("no room"));
    free(c);
    outbox_scratch_free(&s);
}

static void test_scratch(void)
{
    struct outbox_scratch s = {0};

    CHECK_EQ_INT(outbox_scratch_reserve(&s, 0), 0);
    CHECK(s.len == 0);
    CHECK_EQ_INT(outbox_scratch_reserve(&s, 1), 0);
    CHECK(s.buf != NULL && s.cap >= 256);
    s.len = 10;
    CHECK_EQ_INT(outbox_scratch_reserve(&s, 100000), 0);
    CHECK(s.cap >= 100000 && s.len == 0);
    size_t cap = s.cap;
    CHECK_EQ_INT(outbox_scratch_reserve(&s, 5), 0);
    CHECK(s.cap == cap); /* never shrinks */
    /* (out of memory is not tested: a sanitizer build aborts on it) */
    outbox_scratch_free(&s);
    CHECK(s.buf == NULL && s.cap == 0 && s.len == 0);
    outbox_scratch_free(&s); /* twice is harmless */
}

static void test_bytea_and_extras(void)
{
    char out[16];
    CHECK_EQ_INT(outbox_bytea_decode("\\x00ff41", 8, out), 3);
    CHECK(memcmp(out, "\x00\xff\x41", 3) == 0);
    CHECK_EQ_INT(outbox_bytea_decode("\\xAbCd", 6, out), 2);
    CHECK(memcmp(out, "\xab\xcd", 2) == 0);
    CHECK_EQ_INT(outbox_bytea_decode("\\x", 2, out), 0);
    CHECK_EQ_INT(outbox_bytea_decode("\\x0", 3, out), -1);      /* odd */
    CHECK_EQ_INT(outbox_bytea_decode("\\x0g", 4, out), -1);     /* not hex */
    CHECK_EQ_INT(outbox_bytea_decode("\\000abc", 7, out), -1);  /* bytea_output = escape */
    CHECK_EQ_INT(outbox_bytea_decode("00", 2, out), -1);         /* no \x */
    CHECK_EQ_INT(outbox_hex_decode("00ff", 4, out), 2);
    CHECK_EQ_INT(outbox_hex_decode("", 0, out), 0);
    /* in place: the output never overtakes the input */
    char inplace[] = "\\x6869212121";
    CHECK_EQ_INT(outbox_bytea_decode(inplace, strlen(inplace), inplace), 5);
    CHECK(memcmp(inplace, "hi!!!", 5) == 0);

    struct outbox_event ev;
    outbox_event_reset(&ev, 1);
    CHECK_EQ_INT(outbox_event_set_text_id(&ev, "0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b", 36), 0);
    CHECK(strcmp(ev.event_id, "0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b") == 0);
    CHECK_EQ_INT(outbox_event_set_text_id(&ev, "", 0), -1);
    CHECK_EQ_INT(outbox_event_set_text_id(&ev, "a\nb", 3), -1);
    CHECK(strcmp(ev.event_id, "0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b") == 0); /* unchanged */

    struct outbox_columns_map m = OUTBOX_DEFAULT_COLUMNS;
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "tenant", NULL), 0);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "tenant", "x-tenant"), 0); /* gets the header */
    CHECK(strcmp(m.extra[0].header, "x-tenant") == 0);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "tenant", "other"), 0);    /* keeps it */
    CHECK(strcmp(m.extra[0].header, "x-tenant") == 0);
    CHECK_EQ_INT(outbox_columns_extra_index(&m, "tenant"), 0);
    CHECK_EQ_INT(outbox_columns_extra_index(&m, "nope"), -1);
    static const char *const names[] = {"a", "b", "c", "d", "e", "f", "g"};
    for (int i = 0; i < 7; i++)
        CHECK_EQ_INT(outbox_columns_add_extra(&m, names[i], NULL), i + 1);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "h", NULL), -1); /* OUTBOX_MAX_EXTRA */
}

/* outbox_time_format: PostgreSQL's UTC text and RFC 3339 (ce_time). */
static void test_time_format(void)
{
    static const struct {
        int64_t us;
        const char *pg, *rfc;
    } t[] = {
        {INT64_C(1796049482796452), "2026-11-30 14:38:02.796452+00",
         "2026-11-30T14:38:02.796452Z"},
        {INT64_C(1796049482700000), "2026-11-30 14:38:02.7+00", "2026-11-30T14:38:02.7Z"},
        {INT64_C(1796049482000000), "2026-11-30 14:38:02+00", "2026-11-30T14:38:02Z"},
        {0, "1970-01-01 00:00:00+00", "1970-01-01T00:00:00Z"},
        {INT64_C(-500000), "1969-12-31 23:59:59.5+00", "1969-12-31T23:59:59.5Z"},
        {INT64_C(951825600000000), "2000-02-29 12:00:00+00", "2000-02-29T12:00:00Z"},
    };
    char buf[OUTBOX_TIME_MAX];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        CHECK_EQ_INT(outbox_time_format(t[i].us, false, buf), strlen(t[i].pg));
        CHECK(strcmp(buf, t[i].pg) == 0);
        CHECK_EQ_INT(outbox_time_format(t[i].us, true, buf), strlen(t[i].rfc));
        CHECK(strcmp(buf, t[i].rfc) == 0);
        /* and back */
        int64_t us = 1;
        CHECK_EQ_INT(outbox_timestamp_us(t[i].pg, strlen(t[i].pg), &us), 0);
        CHECK_EQ_INT(us, t[i].us);
    }
    /* an offset is folded into UTC */
    int64_t us;
    CHECK_EQ_INT(outbox_timestamp_us("2026-11-30 20:08:02+05:30", 25, &us), 0);
    CHECK_EQ_INT(outbox_time_format(us, true, buf), 20);
    CHECK(strcmp(buf, "2026-11-30T14:38:02Z") == 0);
    /* outside years 1..9999 */
    CHECK_EQ_INT(outbox_time_format(INT64_C(253402300800000000), true, buf), 0);
}

int main(void)
{
    test_time_format();
    test_bytea_and_extras();
    test_timestamps();
    test_timestamp_text();
    test_ids();
    test_envelope();
    test_scratch();
    CHECK_DONE();
}
