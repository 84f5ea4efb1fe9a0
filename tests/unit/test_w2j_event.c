/*
 * test_w2j_event.c — w2j_event_decode(): wal2json records to outbox events (inserts
 * of the outbox table, logical messages), and the scratch buffer. (Split
 * from test_decoder.c, issue 12.)
 */
#include "w2j_test.h"

/* ------------------------------------------------------ event decoding */

static void test_decode(void)
{
    struct outbox_scratch scratch = {0};
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
    static const struct outbox_columns_map map = {.id = "event_id", .aggregate_id = "key",
                                               .type = "kind", .payload = "body"};
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
        CHECK_EQ_INT(w2j_event_decode(&rec, &OUTBOX_DEFAULT_COLUMNS, &scratch, &ev, err, sizeof err),
                     -1);
        CHECK(err_has("missing column \"id\""));
    }
    outbox_scratch_free(&scratch);
    CHECK(scratch.buf == NULL && scratch.cap == 0);
}

static void test_decode_message(void)
{
    struct outbox_scratch scratch = {0};
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
    outbox_scratch_free(&scratch);
}

/* Scratch growth: pointers handed out for one event stay valid, whatever
 * order the strings are unescaped in and however small the buffer was. */
static void test_scratch_growth(void)
{
    struct outbox_scratch scratch = {0};
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
    outbox_scratch_free(&scratch);
}

/* Other layouts: Debezium's uuid id, a bytea payload (wal2json prints it
 * as bare hex), extra columns for headers and topics, text ids. */
static void test_layouts(void)
{
    struct outbox_scratch scratch = {0};
    struct outbox_event ev;
    struct outbox_columns_map dbz = {.id = "id", .aggregate_id = "aggregateid", .type = "type",
                                  .payload = "payload", .id_kind = OUTBOX_ID_TEXT};
    CHECK_EQ_INT(outbox_columns_add_extra(&dbz, "aggregatetype", NULL), 0);
    CHECK_EQ_INT(outbox_columns_add_extra(&dbz, "traceparent", "traceparent"), 1);
    CHECK_EQ_INT(outbox_columns_add_extra(&dbz, "aggregateid", "x-agg"), 2);
    const char *line =
        INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":\"0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b\"},"
        "{\"name\":\"aggregatetype\",\"value\":\"order\"},"
        "{\"name\":\"aggregateid\",\"value\":\"o-\\u00e91\"},"
        "{\"name\":\"type\",\"value\":\"OrderCreated\"},"
        "{\"name\":\"traceparent\",\"value\":null},"
        "{\"name\":\"payload\",\"value\":\"{\\\"a\\\": 1}\"}]}";
    CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, &dbz, &scratch, &ev, err, sizeof err), 0);
    CHECK(strcmp(ev.event_id, "0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b") == 0);
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "o-\xc3\xa9" "1");
    CHECK_SPAN(ev.payload, ev.payload_len, "{\"a\": 1}");
    CHECK(ev.created_at == NULL);
    CHECK_SPAN(ev.extra[0].ptr, ev.extra[0].len, "order");
    CHECK(ev.extra[1].ptr == NULL); /* NULL traceparent */
    /* an extra column may also be a mapped one */
    CHECK_SPAN(ev.extra[2].ptr, ev.extra[2].len, "o-\xc3\xa9" "1");
    /* the same uuid id under the integer rule: refused, as before */
    dbz.id_kind = OUTBOX_ID_INTEGER;
    CHECK_EQ_INT(w2j_event_decode(&rec, &dbz, &scratch, &ev, err, sizeof err), -1);
    CHECK(err_has("column \"id\" is not an integer"));
    dbz.id_kind = OUTBOX_ID_TEXT;

    /* bytea: bare hex to the raw bytes, NUL and 0xff included */
    dbz.payload_bytea = true;
    line = INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":\"u1\"},"
                       "{\"name\":\"aggregatetype\",\"value\":\"blob\"},"
                       "{\"name\":\"aggregateid\",\"value\":\"k\"},"
                       "{\"name\":\"type\",\"value\":\"T\"},"
                       "{\"name\":\"traceparent\",\"value\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"},"
                       "{\"name\":\"payload\",\"value\":\"00ff41Fe\"}]}";
    CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, &dbz, &scratch, &ev, err, sizeof err), 0);
    CHECK_EQ_INT(ev.payload_len, 4);
    CHECK(ev.payload != NULL && memcmp(ev.payload, "\x00\xff\x41\xfe", 4) == 0);
    CHECK_SPAN(ev.extra[1].ptr, ev.extra[1].len,
               "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    /* empty bytea: zero bytes, not NULL */
    line = INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":\"u2\"},"
                       "{\"name\":\"aggregatetype\",\"value\":\"b\"},"
                       "{\"name\":\"aggregateid\",\"value\":null},"
                       "{\"name\":\"type\",\"value\":\"T\"},"
                       "{\"name\":\"traceparent\",\"value\":null},"
                       "{\"name\":\"payload\",\"value\":\"\"}]}";
    CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, &dbz, &scratch, &ev, err, sizeof err), 0);
    CHECK(ev.payload != NULL && ev.payload_len == 0);
    CHECK(ev.aggregate_id == NULL);
    /* not hex: an error naming the column */
    line = INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":\"u3\"},"
                       "{\"name\":\"aggregatetype\",\"value\":\"b\"},"
                       "{\"name\":\"aggregateid\",\"value\":null},"
                       "{\"name\":\"type\",\"value\":\"T\"},"
                       "{\"name\":\"traceparent\",\"value\":null},"
                       "{\"name\":\"payload\",\"value\":\"0g\"}]}";
    CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, &dbz, &scratch, &ev, err, sizeof err), -1);
    CHECK(err_has("column \"payload\" (bytea) is not hex digits"));
    /* a missing extra column is named */
    CHECK_EQ_INT(outbox_columns_add_extra(&dbz, "tenant", "x-tenant"), 3);
    CHECK_EQ_INT(w2j_event_decode(&rec, &dbz, &scratch, &ev, err, sizeof err), -1);
    CHECK(err_has("missing column \"tenant\""));

    /* text ids: up to 63 bytes, no control characters */
    struct outbox_columns_map txt = OUTBOX_DEFAULT_COLUMNS;
    txt.id_kind = OUTBOX_ID_TEXT;
    static const struct {
        const char *id;
        int rc;
    } ids[] = {{"\"evt_1\"", 0}, {"\"a\\tb\"", -1}, {"\"\"", -1},
               {"\"123456789012345678901234567890123456789012345678901234567890123\"", 0},
               {"\"1234567890123456789012345678901234567890123456789012345678901234\"", -1},
               {"42", 0}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char buf[512];
        snprintf(buf, sizeof buf,
                 INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":%s},"
                 "{\"name\":\"aggregate_id\",\"value\":null},{\"name\":\"type\",\"value\":\"t\"},"
                 "{\"name\":\"payload\",\"value\":null},{\"name\":\"created_at\",\"value\":null}]}",
                 ids[i].id);
        CHECK_EQ_INT(w2j_parse(buf, strlen(buf), &rec, err, sizeof err), 0);
        int rc = w2j_event_decode(&rec, &txt, &scratch, &ev, err, sizeof err);
        CHECK_EQ_INT(rc, ids[i].rc);
        if (rc != ids[i].rc)
            fprintf(stderr, "  ^ id %s: %s\n", ids[i].id, err);
    }
    outbox_scratch_free(&scratch);
}

/* Keys, headers and types as PostgreSQL's text output, whatever JSON type
 * wal2json gave them (what pgoutput sends: docs/producing.md, "Column
 * types"); one column in several roles. These three inputs were refused
 * before ("is a number, not a string", "is an object or array"). */
static void test_column_text(void)
{
    struct outbox_scratch scratch = {0};
    struct outbox_event ev;
    static const struct {
        const char *agg, *type, *want_agg, *want_type;
    } ok[] = {
        {"5", "\"x\"", "5", "x"},
        {"\"a\"", "7", "a", "7"},
        {"\"a\"", "[\"x\"]", "a", "[\"x\"]"},
        {"-9223372036854775808", "\"x\"", "-9223372036854775808", "x"},
        {"100000000000000000000.50", "\"x\"", "100000000000000000000.50", "x"},
        {"true", "\"x\"", "t", "x"},
        {"false", "true", "f", "t"},
        {"\"NaN\"", "\"x\"", "NaN", "x"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char line[512];
        snprintf(line, sizeof line,
                 INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":1},"
                             "{\"name\":\"aggregate_id\",\"value\":%s},"
                             "{\"name\":\"type\",\"value\":%s},"
                             "{\"name\":\"payload\",\"value\":\"{}\"},"
                             "{\"name\":\"created_at\",\"value\":null}]}",
                 ok[i].agg, ok[i].type);
        CHECK_EQ_INT(parse_decode(line, &scratch, &ev), 0);
        CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, ok[i].want_agg);
        CHECK_SPAN(ev.type, ev.type_len, ok[i].want_type);
    }

    /* headers: a boolean is "t"/"f", a number its literal, NULL none */
    struct outbox_columns_map m = {.id = "id", .aggregate_id = "customer", .type = "kind",
                                .payload = "body", .created_at = "ts"};
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "flag", "flag"), 0);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "amount", "amount"), 1);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "ref", "ref"), 2);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "customer", "customer"), 3);
    CHECK_EQ_INT(outbox_columns_add_extra(&m, "ts", "ts"), 4);
    const char *line =
        INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":3},"
        "{\"name\":\"customer\",\"value\":100},{\"name\":\"kind\",\"value\":\"k\\\"q\"},"
        "{\"name\":\"flag\",\"value\":false},{\"name\":\"amount\",\"value\":12.50},"
        "{\"name\":\"ref\",\"value\":null},{\"name\":\"body\",\"value\":\"{}\"},"
        "{\"name\":\"ts\",\"value\":\"2026-03-01 10:00:00.5+00\"}]}";
    CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, &m, &scratch, &ev, err, sizeof err), 0);
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "100");
    CHECK_SPAN(ev.extra[0].ptr, ev.extra[0].len, "f");
    CHECK_SPAN(ev.extra[1].ptr, ev.extra[1].len, "12.50");
    CHECK(ev.extra[2].ptr == NULL);
    CHECK_SPAN(ev.extra[3].ptr, ev.extra[3].len, "100");
    CHECK_SPAN(ev.extra[4].ptr, ev.extra[4].len, "2026-03-01 10:00:00.5+00");
    CHECK_SPAN(ev.created_at, ev.created_at_len, "2026-03-01 10:00:00.5+00");

    /* one column in two roles: the key is the id, or the (escaped) type */
    static const char *const keys[] = {"id", "kind"};
    static const char *const want[] = {"3", "k\"q"};
    for (size_t i = 0; i < 2; i++) {
        struct outbox_columns_map two = m;
        two.aggregate_id = keys[i];
        CHECK_EQ_INT(w2j_event_decode(&rec, &two, &scratch, &ev, err, sizeof err), 0);
        CHECK(strcmp(ev.event_id, "3") == 0);
        CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, want[i]);
        CHECK_SPAN(ev.type, ev.type_len, "k\"q");
        CHECK_SPAN(ev.extra[3].ptr, ev.extra[3].len, "100");
    }

    /* refused for its NULL type: the id and the key are still there for
     * the dead letter */
    line = INSERT_HEAD "\"columns\":[{\"name\":\"id\",\"value\":9},"
           "{\"name\":\"customer\",\"value\":\"c-\\u00e9\"},{\"name\":\"kind\",\"value\":null},"
           "{\"name\":\"flag\",\"value\":null},{\"name\":\"amount\",\"value\":null},"
           "{\"name\":\"ref\",\"value\":null},{\"name\":\"body\",\"value\":\"{}\"},"
           "{\"name\":\"ts\",\"value\":null}]}";
    CHECK_EQ_INT(w2j_parse(line, strlen(line), &rec, err, sizeof err), 0);
    CHECK_EQ_INT(w2j_event_decode(&rec, &m, &scratch, &ev, err, sizeof err), -1);
    CHECK(err_has("column \"kind\" is NULL"));
    CHECK(strcmp(ev.event_id, "9") == 0);
    CHECK_SPAN(ev.aggregate_id, ev.aggregate_id_len, "c-\xc3\xa9");
    outbox_scratch_free(&scratch);
}

int main(void)
{
    test_column_text();
    test_layouts();
    test_decode();
    test_decode_message();
    test_scratch_growth();
    free(last_copy);
    CHECK_DONE();
}
