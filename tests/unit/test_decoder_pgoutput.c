/*
 * test_decoder_pgoutput.c — the pgoutput decoder (decoder_pgoutput_new,
 * decoder.h) on frames captured from PostgreSQL 15, against wal2json on
 * the same statements of the same run (tests/fixtures/pgoutput/
 * outbox.w2j.jsonl, capture.sh): the records' positions and commit times,
 * and the outbox events byte for byte (ids, key, type, payload as
 * PostgreSQL prints the jsonb, created_at, m-<LSN> ids of messages,
 * refusals). Plus the START_REPLICATION options and the partitioned outbox
 * reported under the root.
 */
#include "check.h"
#include "pgo_test.h"

#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/decode/outbox_event.h"

struct copy {
    int ok;
    char id[32];
    char *field[4]; /* aggregate_id, type, payload, created_at; NULL: SQL NULL */
    size_t len[4];
    lsn_t lsn;
};

struct tx {
    lsn_t end_lsn;
    int64_t begin_us;
};

struct run {
    struct copy ev[64];
    size_t nev;
    struct tx tx[64];
    size_t ntx;
};

static char *dup_span(const char *p, size_t n)
{
    if (p == NULL)
        return NULL;
    char *d = malloc(n + 1); /* NUL-terminated: test_describe strstr()s it */
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

static bool is(const char *p, size_t n, const char *s)
{
    return p != NULL && n == strlen(s) && memcmp(p, s, n) == 0;
}

/* Feeds one frame; records the events the relayer would relay. */
static void feed(struct decoder *d, struct run *r, const char *data, size_t len, lsn_t at,
                 int64_t *open_begin)
{
    struct decoder_record rec;
    struct outbox_event ev;
    char err[DECODER_ERRLEN];
    memset(&rec, 0, sizeof rec);
    int rc = decoder_decode(d, data, len, at, &rec, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "decode: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    bool relay = false;
    if (rec.kind == DECODER_BEGIN)
        *open_begin = rec.timestamp_us;
    if (rec.kind == DECODER_COMMIT && r->ntx < 64)
        r->tx[r->ntx++] = (struct tx){rec.end_lsn, *open_begin};
    if (rec.kind == DECODER_INSERT)
        relay = is(rec.schema, rec.schema_len, "public") &&
                (is(rec.table, rec.table_len, "events_outbox") ||
                 is(rec.table, rec.table_len, "events_outbox_nullable"));
    if (rec.kind == DECODER_MESSAGE)
        relay = rec.transactional && is(rec.prefix, rec.prefix_len, "outbox");
    if (!relay || r->nev == 64)
        return;
    struct copy *c = &r->ev[r->nev++];
    c->ok = decoder_event(d, &rec, &ev, err, sizeof err) == 0;
    if (!c->ok) {
        CHECK(strncmp(err, "event at LSN ", 13) == 0);
        c->lsn = rec.lsn;
        /* what the dead letter names the row by */
        memcpy(c->id, ev.event_id, sizeof c->id);
        c->field[0] = dup_span(ev.aggregate_id, ev.aggregate_id_len);
        c->len[0] = ev.aggregate_id_len;
        return;
    }
    memcpy(c->id, ev.event_id, sizeof c->id);
    const char *f[4] = {ev.aggregate_id, ev.type, ev.payload, ev.created_at};
    size_t l[4] = {ev.aggregate_id_len, ev.type_len, ev.payload_len, ev.created_at_len};
    for (int i = 0; i < 4; i++) {
        c->field[i] = dup_span(f[i], l[i]);
        c->len[i] = l[i];
    }
    c->lsn = ev.lsn;
}

static void run_free(struct run *r)
{
    for (size_t i = 0; i < r->nev; i++)
        for (int k = 0; k < 4; k++)
            free(r->ev[i].field[k]);
}

static void run_pgoutput(const char *name, struct run *r)
{
    struct pgo_frames fr = pgo_load(name);
    struct decoder *d = decoder_pgoutput_new();
    int64_t open_begin = 0;
    CHECK(d != NULL);
    for (size_t i = 0; i < fr.n; i++)
        feed(d, r, fr.f[i].data, fr.f[i].len, fr.f[i].wal_start, &open_begin);
    decoder_free(d);
    pgo_frames_free(&fr);
}

static void run_w2j(struct run *r)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pgoutput/outbox.w2j.jsonl", FIXTURES_DIR);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    struct decoder *d = decoder_w2j_new();
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int64_t open_begin = 0;
    while ((got = getline(&line, &cap, f)) > 0) {
        if (line[got - 1] == '\n')
            got--;
        char *exact = dup_span(line, (size_t) got);
        feed(d, r, exact, (size_t) got, 0, &open_begin);
        free(exact);
    }
    free(line);
    fclose(f);
    decoder_free(d);
}

static const char *const FIELD[4] = {"aggregate_id", "type", "payload", "created_at"};

/* The events pgoutput gives are wal2json's, byte for byte; so are the
 * commit positions and times of every transaction pgoutput sends. */
static void test_same_as_wal2json(void)
{
    static struct run pg, wj;
    run_pgoutput("outbox.frames", &pg);
    run_w2j(&wj);
    CHECK_EQ_INT(pg.nev, 13); /* 11 rows (one refused: NULL type), 2 messages */
    CHECK_EQ_INT(pg.nev, wj.nev);
    size_t refused = 0, messages = 0;
    for (size_t i = 0; i < pg.nev && i < wj.nev; i++) {
        const struct copy *a = &pg.ev[i], *b = &wj.ev[i];
        CHECK_EQ_INT(a->ok, b->ok);
        CHECK_EQ_INT(a->lsn, b->lsn);
        refused += !a->ok;
        if (!a->ok && !b->ok) { /* the NULL type: both read its id and key */
            CHECK(a->id[0] != '\0' && strcmp(a->id, b->id) == 0);
            CHECK(a->field[0] != NULL && b->field[0] != NULL && a->len[0] == b->len[0] &&
                  memcmp(a->field[0], b->field[0], a->len[0]) == 0);
        }
        if (!a->ok || !b->ok)
            continue;
        CHECK(strcmp(a->id, b->id) == 0);
        messages += a->id[0] == 'm';
        for (int k = 0; k < 4; k++) {
            bool same = (a->field[k] == NULL) == (b->field[k] == NULL) && a->len[k] == b->len[k] &&
                        (a->field[k] == NULL || memcmp(a->field[k], b->field[k], a->len[k]) == 0);
            if (!same)
                fprintf(stderr, "event %s: %s differs: pgoutput \"%.*s\" wal2json \"%.*s\"\n",
                        a->id, FIELD[k], (int) (a->len[k] > 200 ? 200 : a->len[k]),
                        a->field[k] ? a->field[k] : "(null)",
                        (int) (b->len[k] > 200 ? 200 : b->len[k]),
                        b->field[k] ? b->field[k] : "(null)");
            CHECK(same);
        }
    }
    CHECK_EQ_INT(refused, 1);
    CHECK_EQ_INT(messages, 2); /* transactional, prefix "outbox" */
    /* pgoutput skips empty transactions (PostgreSQL 15), wal2json does not:
     * every pgoutput transaction is one of wal2json's, with its time. */
    CHECK(pg.ntx > 5 && pg.ntx < wj.ntx);
    for (size_t i = 0; i < pg.ntx; i++) {
        bool found = false;
        for (size_t k = 0; k < wj.ntx; k++)
            if (wj.tx[k].end_lsn == pg.tx[i].end_lsn) {
                found = true;
                CHECK_EQ_INT(pg.tx[i].begin_us, wj.tx[k].begin_us);
            }
        CHECK(found);
    }
    run_free(&pg);
    run_free(&wj);
}

static void test_partitioned(void)
{
    static struct run r;
    run_pgoutput("partitioned.frames", &r);
    CHECK_EQ_INT(r.nev, 2); /* both rows under the root's name */
    CHECK(r.nev == 2 && r.ev[0].ok && strcmp(r.ev[0].id, "1") == 0 &&
          strcmp(r.ev[1].id, "2") == 0);
    CHECK(r.nev == 2 && is(r.ev[1].field[1], r.ev[1].len[1], "part.next_month"));
    run_free(&r);

    /* rows under the root: no catalog lookup is ever asked for */
    struct decoder *d = decoder_pgoutput_new();
    CHECK(decoder_names_root(d));
    decoder_free(d);
}

/* A dead letter's value: pgoutput's binary frame in wal2json's shape, with
 * no raw control byte; wal2json's line is its own description. */
static void test_describe(void)
{
    struct pgo_frames fr = pgo_load("outbox.frames");
    struct decoder *d = decoder_pgoutput_new();
    char err[DECODER_ERRLEN];
    size_t inserts = 0, messages = 0, null_type = 0;
    for (size_t i = 0; i < fr.n; i++) {
        struct decoder_record rec;
        CHECK_EQ_INT(decoder_decode(d, fr.f[i].data, fr.f[i].len, fr.f[i].wal_start, &rec, err,
                                    sizeof err), 0);
        const char *out;
        size_t len;
        CHECK_EQ_INT(decoder_describe(d, &rec, &out, &len), 0);
        if (rec.kind != DECODER_INSERT && rec.kind != DECODER_MESSAGE) {
            CHECK(out == fr.f[i].data && len == fr.f[i].len);
            continue;
        }
        char *text = dup_span(out, len);
        for (size_t k = 0; k < len; k++)
            CHECK((unsigned char) text[k] >= 0x20);
        CHECK(text[0] == '{' && text[len - 1] == '}');
        if (rec.kind == DECODER_INSERT) {
            CHECK(strstr(text, "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"") == text);
            inserts += strstr(text, "\"table\":\"events_outbox\",\"columns\":[{\"name\":\"id\","
                                    "\"typeoid\":20,\"value\":\"") != NULL;
            null_type += strstr(text, "{\"name\":\"type\",\"typeoid\":25,\"value\":null}") != NULL;
        } else {
            messages++;
            CHECK(strstr(text, "{\"action\":\"M\",\"transactional\":") == text);
            CHECK(strstr(text, ",\"prefix\":\"") != NULL && strstr(text, ",\"content\":\"") != NULL);
        }
        free(text);
    }
    CHECK_EQ_INT(inserts, 9);  /* the fixture's outbox rows with id first */
    CHECK_EQ_INT(messages, 4); /* with the foreign and non-transactional ones */
    CHECK_EQ_INT(null_type, 1);
    decoder_free(d);
    pgo_frames_free(&fr);

    struct decoder *w = decoder_w2j_new();
    const char line[] = "{\"action\":\"B\"}";
    struct decoder_record rec = {.data = line, .data_len = sizeof line - 1};
    const char *out;
    size_t len;
    CHECK_EQ_INT(decoder_describe(w, &rec, &out, &len), 0);
    CHECK(out == line && len == sizeof line - 1);
    decoder_free(w);
}

/* Quotes, backslashes and control bytes in a value are escaped. */
static void test_describe_escapes(void)
{
    /* Relation 16384 public.t (one text column "v"), then an Insert of
     * a"b\<newline><0x01> into it. */
    static const char rel[] = "R\x00\x00\x40\x00" "public\0" "t\0" "d\x00\x01"
                              "\x00" "v\0" "\x00\x00\x00\x19" "\xff\xff\xff\xff";
    static const char ins[] = "I\x00\x00\x40\x00" "N\x00\x01" "t\x00\x00\x00\x05"
                              "a\"b\\\n";
    struct decoder *d = decoder_pgoutput_new();
    struct decoder_record rec;
    char err[DECODER_ERRLEN];
    CHECK_EQ_INT(decoder_decode(d, rel, sizeof rel - 1, 0, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(decoder_decode(d, ins, sizeof ins - 1, 0x100, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(rec.kind, DECODER_INSERT);
    const char *out;
    size_t len;
    CHECK_EQ_INT(decoder_describe(d, &rec, &out, &len), 0);
    static const char want[] = "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\","
                               "\"columns\":[{\"name\":\"v\",\"typeoid\":25,"
                               "\"value\":\"a\\\"b\\\\\\u000a\"}]}";
    CHECK(len == sizeof want - 1 && memcmp(out, want, len) == 0);
    if (len != sizeof want - 1 || memcmp(out, want, len) != 0)
        fprintf(stderr, "got %.*s\n", (int) len, out);
    decoder_free(d);
}

/* A frame under construction. */
struct frame {
    char b[4096];
    size_t n;
};

static void put_u8(struct frame *f, unsigned v)
{
    f->b[f->n++] = (char) v;
}

static void put_u32(struct frame *f, uint32_t v)
{
    for (int i = 3; i >= 0; i--)
        put_u8(f, (v >> (8 * i)) & 0xff);
}

static void put_cstr(struct frame *f, const char *s)
{
    size_t n = strlen(s) + 1;
    memcpy(f->b + f->n, s, n);
    f->n += n;
}

/* Relation oid public.<rel> with columns names[i] of types oids[i]. */
static void relation(struct frame *f, uint32_t oid, const char *rel, const char *const *names,
                     const uint32_t *oids, int n)
{
    f->n = 0;
    put_u8(f, 'R');
    put_u32(f, oid);
    put_cstr(f, "public");
    put_cstr(f, rel);
    put_u8(f, 'd');
    put_u8(f, 0);
    put_u8(f, (unsigned) n);
    for (int i = 0; i < n; i++) {
        put_u8(f, 0);
        put_cstr(f, names[i]);
        put_u32(f, oids[i]);
        put_u32(f, 0xffffffffu);
    }
}

/* Insert into oid of values (NULL: SQL NULL). */
static void insert(struct frame *f, uint32_t oid, const char *const *values, int n)
{
    f->n = 0;
    put_u8(f, 'I');
    put_u32(f, oid);
    put_u8(f, 'N');
    put_u8(f, 0);
    put_u8(f, (unsigned) n);
    for (int i = 0; i < n; i++) {
        if (values[i] == NULL) {
            put_u8(f, 'n');
            continue;
        }
        put_u8(f, 't');
        put_u32(f, (uint32_t) strlen(values[i]));
        memcpy(f->b + f->n, values[i], strlen(values[i]));
        f->n += strlen(values[i]);
    }
}

/* Debezium's table through a column map: uuid id, bytea payload (pgoutput
 * prints "\x..."), extra columns, indexes resolved per relation (a resent
 * Relation with the columns in another order is followed). */
static void test_layouts(void)
{
    static const char *const names[] = {"id", "aggregatetype", "aggregateid", "type",
                                        "payload", "traceparent"};
    static const uint32_t oids[] = {2950, 1043, 1043, 1043, 17, 25};
    static const char *const names2[] = {"payload", "type", "traceparent", "aggregateid",
                                         "aggregatetype", "id"};
    static const uint32_t oids2[] = {17, 1043, 25, 1043, 1043, 2950};
    struct outbox_columns_map map = {.id = "id", .aggregate_id = "aggregateid", .type = "type",
                                  .payload = "payload", .id_kind = OUTBOX_ID_TEXT};
    CHECK_EQ_INT(outbox_columns_add_extra(&map, "aggregatetype", NULL), 0);
    CHECK_EQ_INT(outbox_columns_add_extra(&map, "traceparent", "traceparent"), 1);
    struct decoder *d = decoder_pgoutput_new();
    d->columns = &map;
    struct decoder_record rec;
    struct outbox_event ev;
    char err[DECODER_ERRLEN];
    static struct frame f;

    relation(&f, 16400, "outbox", names, oids, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0, &rec, err, sizeof err), 0);
    for (int round = 0; round < 2; round++) {
        const char *v[] = {"0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b", "order", "o-1", "Created",
                           "\\x00ff41", round ? "00-ab-cd-01" : NULL};
        insert(&f, 16400, v, 6);
        CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x100, &rec, err, sizeof err), 0);
        CHECK_EQ_INT(decoder_event(d, &rec, &ev, err, sizeof err), 0);
        CHECK(strcmp(ev.event_id, "0e4b1f0c-8f5e-4c53-9c1d-6a1d2f3e4a5b") == 0);
        CHECK(is(ev.aggregate_id, ev.aggregate_id_len, "o-1"));
        CHECK(is(ev.type, ev.type_len, "Created"));
        CHECK(ev.payload_len == 3 && memcmp(ev.payload, "\x00\xff\x41", 3) == 0);
        CHECK(is(ev.extra[0].ptr, ev.extra[0].len, "order"));
        CHECK(round ? is(ev.extra[1].ptr, ev.extra[1].len, "00-ab-cd-01")
                    : ev.extra[1].ptr == NULL);
        CHECK(ev.created_at == NULL);
    }
    /* the table was altered: a new Relation, other column order */
    relation(&f, 16400, "outbox", names2, oids2, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0, &rec, err, sizeof err), 0);
    const char *v2[] = {"\\x", "Moved", NULL, "c-2", "customer", "u-2"};
    insert(&f, 16400, v2, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x200, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(decoder_event(d, &rec, &ev, err, sizeof err), 0);
    CHECK(strcmp(ev.event_id, "u-2") == 0);
    CHECK(is(ev.aggregate_id, ev.aggregate_id_len, "c-2"));
    CHECK(is(ev.extra[0].ptr, ev.extra[0].len, "customer"));
    CHECK(ev.payload != NULL && ev.payload_len == 0);
    /* a bytea in escape format is refused, naming the column */
    const char *v3[] = {"\\000", "Moved", NULL, "c-2", "customer", "u-3"};
    insert(&f, 16400, v3, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x300, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(decoder_event(d, &rec, &ev, err, sizeof err), -1);
    CHECK(strstr(err, "column \"payload\" (bytea) is not in hex format") != NULL);
    /* a mapped column the relation lacks */
    CHECK_EQ_INT(outbox_columns_add_extra(&map, "tenant", "x-tenant"), 2);
    insert(&f, 16400, v2, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x400, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(decoder_event(d, &rec, &ev, err, sizeof err), -1);
    CHECK(strstr(err, "missing column \"tenant\"") != NULL);
    decoder_free(d);
}

/* decoder_shaped (step 0 of partition_rule.h) by the relation's column
 * names, with the default layout and a mapped one; decoder_table_name. */
static void test_shaped(void)
{
    static const char *const outbox[] = {"id", "aggregate_id", "type", "payload",
                                         "created_at", "dispatched_at"};
    static const uint32_t outbox_oids[] = {20, 25, 25, 3802, 1184, 1184};
    static const char *const orders[] = {"id", "type", "created_at"};
    static const uint32_t orders_oids[] = {20, 25, 1184};
    static const char *const dbz[] = {"id", "aggregatetype", "aggregateid", "type", "payload"};
    static const uint32_t dbz_oids[] = {2950, 1043, 1043, 1043, 17};
    static const char *const v6[] = {"1", "a", "t.x", "{}", NULL, NULL};
    static const char *const v5[] = {"u-1", "order", "o-1", "Created", "\\x"};
    static const char *const v3[] = {"1", "x", NULL};
    struct decoder *d = decoder_pgoutput_new();
    struct decoder_record rec;
    char err[DECODER_ERRLEN], name[64];
    static struct frame f;

    relation(&f, 16401, "p1", outbox, outbox_oids, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0, &rec, err, sizeof err), 0);
    CHECK(!decoder_shaped(d, &rec)); /* a Relation frame is no insert */
    relation(&f, 16402, "orders", orders, orders_oids, 3);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0, &rec, err, sizeof err), 0);
    relation(&f, 16403, "p2", dbz, dbz_oids, 5);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0, &rec, err, sizeof err), 0);

    /* the default layout (d->columns NULL) */
    insert(&f, 16401, v6, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x100, &rec, err, sizeof err), 0);
    CHECK(decoder_shaped(d, &rec));
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, sizeof name), 2);
    CHECK(strcmp(name, "p1") == 0);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, 2), -1);
    insert(&f, 16402, v3, 3);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x200, &rec, err, sizeof err), 0);
    CHECK(!decoder_shaped(d, &rec)); /* a business table */
    insert(&f, 16403, v5, 5);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x300, &rec, err, sizeof err), 0);
    CHECK(!decoder_shaped(d, &rec)); /* aggregateid is not aggregate_id */

    /* a mapped layout: Debezium's, without created_at */
    struct outbox_columns_map map = {.id = "id", .aggregate_id = "aggregateid", .type = "type",
                                     .payload = "payload", .id_kind = OUTBOX_ID_TEXT};
    d->columns = &map;
    CHECK(decoder_shaped(d, &rec));
    CHECK_EQ_INT(outbox_columns_add_extra(&map, "tenant", "x-tenant"), 0);
    CHECK(decoder_shaped(d, &rec)); /* extra columns are not needed */
    insert(&f, 16401, v6, 6);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x400, &rec, err, sizeof err), 0);
    CHECK(!decoder_shaped(d, &rec)); /* no aggregateid */
    insert(&f, 16402, v3, 3);
    CHECK_EQ_INT(decoder_decode(d, f.b, f.n, 0x500, &rec, err, sizeof err), 0);
    CHECK(!decoder_shaped(d, &rec));
    decoder_free(d);
}

static void test_options(void)
{
    struct decoder *d = decoder_pgoutput_new();
    char buf[256];
    struct decoder_slot slot = {.table_schema = "public", .table_name = "events_outbox",
                                .message_prefix = "outbox"};
    CHECK(strcmp(decoder_plugin(d), "pgoutput") == 0);
    CHECK(strstr(decoder_package(d), "built into PostgreSQL") != NULL);
    int n = decoder_start_options(d, &slot, buf, sizeof buf);
    CHECK_SPAN(buf, (size_t) (n < 0 ? 0 : n),
               "\"proto_version\" '1', \"publication_names\" 'outbox_relay', "
               "\"messages\" 'true'");
    slot.publication = "my_pub";
    slot.message_prefix = "";
    n = decoder_start_options(d, &slot, buf, sizeof buf);
    CHECK_SPAN(buf, (size_t) (n < 0 ? 0 : n),
               "\"proto_version\" '1', \"publication_names\" 'my_pub'");
    CHECK_EQ_INT(decoder_start_options(d, &slot, buf, 20), -1);
    slot.publication = "it's";
    CHECK_EQ_INT(decoder_start_options(d, &slot, buf, sizeof buf), -1);

    /* a frame that is no event, and a malformed one */
    struct decoder_record rec;
    struct outbox_event ev;
    char err[DECODER_ERRLEN];
    static const char commit[26] = {'C'};
    CHECK_EQ_INT(decoder_decode(d, commit, sizeof commit, 0x10, &rec, err, sizeof err), 0);
    CHECK_EQ_INT(rec.kind, DECODER_COMMIT);
    CHECK_EQ_INT(rec.xid, -1); /* no Begin seen */
    CHECK_EQ_INT(decoder_event(d, &rec, &ev, err, sizeof err), -1);
    CHECK(strstr(err, "'C' message is not an event") != NULL);
    CHECK_EQ_INT(decoder_decode(d, commit, 25, 0x10, &rec, err, sizeof err), -1);
    CHECK(strstr(err, "cannot parse pgoutput message at 0/10: truncated commit time") != NULL);
    CHECK_EQ_INT(rec.kind, DECODER_NONE);
    decoder_free(d);
}

int main(void)
{
    test_layouts();
    test_describe();
    test_describe_escapes();
    test_same_as_wal2json();
    test_partitioned();
    test_shaped();
    test_options();
    CHECK_DONE();
}
