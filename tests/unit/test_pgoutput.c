/*
 * test_pgoutput.c — the pgoutput parser (pgoutput.h) on frames captured
 * from PostgreSQL 15 (tests/fixtures/pgoutput/, capture.sh): every message
 * type, values, NULLs, the relation cache and its replacement after ALTER
 * TABLE, partitions reported under the root; every truncation of every
 * captured frame refused with an offset; malformed frames refused.
 */
#include "check.h"
#include "pgo_test.h"

#include "outbox_relay/decode/pgoutput.h"

static size_t count_type(const struct pgo_frames *fr, char type)
{
    size_t n = 0;
    for (size_t i = 0; i < fr->n; i++)
        n += fr->f[i].len > 0 && fr->f[i].data[0] == type;
    return n;
}

/* Parses every frame in order; all must parse. */
static void parse_all(struct pgo_parser *p, const struct pgo_frames *fr)
{
    struct pgo_msg m;
    char err[PGO_ERRLEN];
    for (size_t i = 0; i < fr->n; i++) {
        int rc = pgo_parse(p, fr->f[i].data, fr->f[i].len, &m, err, sizeof err);
        if (rc != 0)
            fprintf(stderr, "frame %zu: %s\n", i, err);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(m.type, fr->f[i].data[0]);
    }
}

static void test_outbox(void)
{
    struct pgo_frames fr = pgo_load("outbox.frames");
    struct pgo_parser p = {0};
    struct pgo_msg m;
    char err[PGO_ERRLEN];

    CHECK(fr.n > 30);
    /* publish = 'insert': the UPDATE and DELETE of the outbox are not sent */
    CHECK_EQ_INT(count_type(&fr, 'U'), 0);
    CHECK_EQ_INT(count_type(&fr, 'D'), 0);
    CHECK_EQ_INT(count_type(&fr, 'M'), 4);
    CHECK_EQ_INT(count_type(&fr, 'B'), count_type(&fr, 'C'));
    /* the outbox, the nullable outbox, the outbox again after ALTER TABLE */
    CHECK_EQ_INT(count_type(&fr, 'R'), 3);

    /* Begin */
    CHECK_EQ_INT(pgo_parse(&p, fr.f[0].data, fr.f[0].len, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.type, 'B');
    CHECK(m.lsn > fr.f[0].wal_start); /* the final LSN: the commit record's */
    CHECK(m.xid > 0);
    /* commit time in PostgreSQL's epoch: the capture ran after 2026 */
    CHECK(m.timestamp + PGO_UNIX_EPOCH_US > INT64_C(1767225600000000));
    uint32_t xid = m.xid;

    /* Relation: wal_start 0/0, the outbox's columns */
    CHECK_EQ_INT(fr.f[1].wal_start, 0);
    CHECK_EQ_INT(pgo_parse(&p, fr.f[1].data, fr.f[1].len, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.type, 'R');
    const struct pgo_relation *rel = m.rel;
    uint32_t oid = m.oid;
    CHECK(rel != NULL && rel == pgo_relation(&p, oid));
    CHECK_SPAN(rel->nspname, rel->nspname_len, "public");
    CHECK_SPAN(rel->relname, rel->relname_len, "events_outbox");
    CHECK_EQ_INT(rel->replident, 'd');
    CHECK_EQ_INT(rel->ncolumns, 6);
    static const char *const names[] = {"id", "aggregate_id", "type", "payload", "created_at",
                                        "dispatched_at"};
    static const uint32_t types[] = {20, 2950, 25, 3802, 1184, 1184};
    for (int i = 0; i < 6 && i < rel->ncolumns; i++) {
        CHECK_SPAN(rel->columns[i].name, rel->columns[i].name_len, names[i]);
        CHECK_EQ_INT(rel->columns[i].type_oid, types[i]);
        CHECK_EQ_INT(rel->columns[i].typmod, -1);
        CHECK_EQ_INT(rel->columns[i].flags, i == 0); /* the primary key */
        CHECK_EQ_INT(pgo_column_index(rel, names[i]), i);
    }
    CHECK_EQ_INT(pgo_column_index(rel, "nope"), -1);

    /* Insert: text values, created_at defaulted, dispatched_at NULL */
    CHECK_EQ_INT(pgo_parse(&p, fr.f[2].data, fr.f[2].len, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.type, 'I');
    CHECK_EQ_INT(m.oid, oid);
    CHECK(m.rel == rel);
    CHECK_EQ_INT(m.nvalues, 6);
    CHECK_EQ_INT(m.values[0].kind, 't');
    CHECK_SPAN(m.values[0].ptr, m.values[0].len, "1");
    CHECK_SPAN(m.values[1].ptr, m.values[1].len, "8d3f9a4c-1b2e-4f5a-9c7d-0e1f2a3b4c5d");
    CHECK_SPAN(m.values[2].ptr, m.values[2].len, "order.created");
    CHECK(m.values[3].len > 100 && m.values[3].ptr[0] == '{');
    CHECK(m.values[4].kind == 't' && m.values[4].len >= 22);
    CHECK(m.values[4].len >= 3 && memcmp(m.values[4].ptr + m.values[4].len - 3, "+00", 3) == 0);
    CHECK_EQ_INT(m.values[5].kind, 'n');
    CHECK(m.values[5].ptr == NULL);

    /* Commit */
    CHECK_EQ_INT(pgo_parse(&p, fr.f[3].data, fr.f[3].len, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.type, 'C');
    CHECK_EQ_INT(m.flags, 0);
    CHECK(m.end_lsn > m.lsn);
    CHECK_EQ_INT(m.end_lsn, fr.f[3].wal_start); /* the frame is at the end of the commit */
    (void) xid;

    /* The rest, in order; the relation resent after ALTER TABLE replaces
     * the entry of the same OID. */
    size_t nrels_before = 0, resent = 0;
    bool saw_large = false, saw_nulls = false, saw_after = false;
    for (size_t i = 4; i < fr.n; i++) {
        if (fr.f[i].data[0] == 'R')
            nrels_before = p.nrels;
        CHECK_EQ_INT(pgo_parse(&p, fr.f[i].data, fr.f[i].len, &m, err, sizeof err), 0);
        if (m.type == 'R' && m.oid == oid) {
            resent++;
            CHECK_EQ_INT(p.nrels, nrels_before); /* replaced, not added */
            CHECK_EQ_INT(m.rel->ncolumns, 7);
            CHECK_EQ_INT(pgo_column_index(m.rel, "trace_id"), 6);
        }
        if (m.type == 'I' && m.nvalues >= 5) {
            if (m.values[3].len > 8192) {
                saw_large = true; /* TOASTed, whole: never 'u' in an insert */
                CHECK_EQ_INT(m.values[3].kind, 't');
                CHECK(m.values[3].len > 190000);
            }
            if (m.values[2].kind == 't' && m.values[2].len == 21 &&
                memcmp(m.values[2].ptr, "nulls.agg_and_created", 21) == 0) {
                saw_nulls = true;
                CHECK_SPAN(m.rel->relname, m.rel->relname_len, "events_outbox_nullable");
                CHECK_EQ_INT(m.values[1].kind, 'n');
                CHECK_EQ_INT(m.values[4].kind, 'n');
            }
            if (m.oid == oid && m.nvalues == 7) {
                saw_after = true;
                CHECK_SPAN(m.values[6].ptr, m.values[6].len, "trace-1");
            }
        }
        if (m.type == 'M') {
            CHECK_EQ_INT(m.lsn, fr.f[i].wal_start);
            CHECK(m.flags == 0 || m.flags == 1);
        }
    }
    CHECK_EQ_INT(resent, 1);
    CHECK(saw_large);
    CHECK(saw_nulls);
    CHECK(saw_after);
    CHECK_EQ_INT(p.nrels, 2);
    pgo_parser_free(&p);
    CHECK(p.rels == NULL && p.nrels == 0);
    pgo_frames_free(&fr);
}

/* Messages: prefix, content, LSN, flags, as the server recorded them. */
static void test_messages(void)
{
    struct pgo_frames fr = pgo_load("outbox.frames");
    struct pgo_parser p = {0};
    struct pgo_msg m;
    char err[PGO_ERRLEN], path[512], line[4096];
    snprintf(path, sizeof path, "%s/pgoutput/outbox.messages", FIXTURES_DIR);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t k = 0;
    for (size_t i = 0; f != NULL && i < fr.n; i++) {
        CHECK_EQ_INT(pgo_parse(&p, fr.f[i].data, fr.f[i].len, &m, err, sizeof err), 0);
        if (m.type != 'M')
            continue;
        CHECK(fgets(line, sizeof line, f) != NULL);
        char lsn_text[32], prefix[64], hex[4000];
        CHECK_EQ_INT(sscanf(line, "%31s %63s %3999s", lsn_text, prefix, hex), 3);
        lsn_t lsn;
        CHECK_EQ_INT(lsn_parse(lsn_text, strlen(lsn_text), &lsn), 0);
        CHECK_EQ_INT(m.lsn, lsn); /* what pg_logical_emit_message() returned */
        CHECK_SPAN(m.prefix.ptr, m.prefix.len, prefix);
        size_t n;
        char *content = pgo_unhex(hex, strlen(hex), &n);
        CHECK(content != NULL && n == m.content.len && memcmp(content, m.content.ptr, n) == 0);
        free(content);
        /* the third is pg_logical_emit_message(false, ...) */
        CHECK_EQ_INT(m.transactional, k != 2);
        k++;
    }
    CHECK_EQ_INT(k, 4);
    if (f != NULL)
        fclose(f);
    pgo_parser_free(&p);
    pgo_frames_free(&fr);
}

/* Type, Origin, Update (with and without the old key), Delete, Truncate. */
static void test_other(void)
{
    struct pgo_frames fr = pgo_load("other.frames");
    struct pgo_parser p = {0};
    struct pgo_msg m;
    char err[PGO_ERRLEN];
    size_t seen[128] = {0};
    for (size_t i = 0; i < fr.n; i++) {
        CHECK_EQ_INT(pgo_parse(&p, fr.f[i].data, fr.f[i].len, &m, err, sizeof err), 0);
        seen[(unsigned char) m.type & 127]++;
        if (m.type == 'Y') {
            CHECK_SPAN(m.nspname.ptr, m.nspname.len, "public");
            CHECK_SPAN(m.name.ptr, m.name.len, "mood");
            CHECK(m.oid >= 16384);
        }
        if (m.type == 'O') {
            CHECK_SPAN(m.name.ptr, m.name.len, "fixture_origin");
            CHECK_EQ_INT(m.lsn, 0xABCDEF);
        }
        if (m.type == 'T') {
            CHECK_EQ_INT(m.nrelations, 1);
            CHECK(pgo_relation(&p, m.oid) != NULL);
        }
    }
    CHECK(seen['Y'] >= 1);
    CHECK_EQ_INT(seen['O'], 1);
    CHECK_EQ_INT(seen['U'], 2);
    CHECK_EQ_INT(seen['D'], 1);
    CHECK_EQ_INT(seen['T'], 1);
    CHECK_EQ_INT(p.nrels, 3);
    pgo_parser_free(&p);
    pgo_frames_free(&fr);
}

/* A partitioned outbox, published via the root: the root's Relation and
 * the leaf's, then the Insert under the root's OID. */
static void test_partitioned(void)
{
    struct pgo_frames fr = pgo_load("partitioned.frames");
    struct pgo_parser p = {0};
    struct pgo_msg m;
    char err[PGO_ERRLEN];
    size_t inserts = 0, leaves = 0;
    for (size_t i = 0; i < fr.n; i++) {
        CHECK_EQ_INT(pgo_parse(&p, fr.f[i].data, fr.f[i].len, &m, err, sizeof err), 0);
        if (m.type == 'R' && m.rel->relname_len > 14)
            leaves++; /* events_outbox_YYYY_MM */
        if (m.type == 'I') {
            inserts++;
            CHECK_SPAN(m.rel->relname, m.rel->relname_len, "events_outbox");
        }
    }
    CHECK_EQ_INT(inserts, 2);
    CHECK_EQ_INT(leaves, 2);
    CHECK_EQ_INT(p.nrels, 3); /* the root and two leaves */
    pgo_parser_free(&p);
    pgo_frames_free(&fr);
}

/* Every truncation of every frame (for frames over 8 kB: the first and last
 * 4 kB of prefixes and every 251st between), in an allocation of exactly
 * the prefix's size, is refused with an offset; the whole frame then
 * parses (so that later frames find their relation). */
static void truncations(const char *name)
{
    struct pgo_frames fr = pgo_load(name);
    struct pgo_parser p = {0};
    struct pgo_msg m;
    char err[PGO_ERRLEN];
    size_t refused = 0, tried = 0;
    for (size_t i = 0; i < fr.n; i++) {
        const struct pgo_frame *f = &fr.f[i];
        for (size_t k = 0; k < f->len; k++) {
            if (f->len > 8192 && k > 4096 && k < f->len - 4096 && k % 251 != 0)
                continue;
            char *cut = malloc(k ? k : 1);
            memcpy(cut, f->data, k);
            err[0] = '\0';
            int rc = pgo_parse(&p, k ? cut : NULL, k, &m, err, sizeof err);
            tried++;
            refused += rc == -1 && strstr(err, " at byte ") != NULL;
            free(cut);
        }
        CHECK_EQ_INT(pgo_parse(&p, f->data, f->len, &m, err, sizeof err), 0);
    }
    CHECK_EQ_INT(refused, tried);
    CHECK(tried > 800);
    pgo_parser_free(&p);
    pgo_frames_free(&fr);
}

static void test_truncations(void)
{
    truncations("outbox.frames");
    truncations("other.frames");
    truncations("partitioned.frames");
}

/* A copy of frame i of fr with one byte changed at off (or appended). */
static int parse_mutated(struct pgo_parser *p, const struct pgo_frame *f, size_t off, int byte,
                         bool append, char *err)
{
    struct pgo_msg m;
    size_t len = f->len + (append ? 1 : 0);
    char *buf = malloc(len);
    memcpy(buf, f->data, f->len);
    if (append)
        buf[f->len] = (char) byte;
    else
        buf[off] = (char) byte;
    int rc = pgo_parse(p, buf, len, &m, err, PGO_ERRLEN);
    free(buf);
    return rc;
}

static void test_malformed(void)
{
    struct pgo_frames fr = pgo_load("outbox.frames");
    struct pgo_parser p = {0};
    struct pgo_msg m;
    char err[PGO_ERRLEN];
    const struct pgo_frame *begin = &fr.f[0], *rel = &fr.f[1], *ins = &fr.f[2];

    /* an Insert before its Relation */
    CHECK_EQ_INT(pgo_parse(&p, ins->data, ins->len, &m, err, sizeof err), -1);
    CHECK(strstr(err, "no Relation message") != NULL);
    CHECK_EQ_INT(pgo_parse(&p, rel->data, rel->len, &m, err, sizeof err), 0);
    /* unknown type, trailing bytes */
    CHECK_EQ_INT(parse_mutated(&p, begin, 0, 'Z', false, err), -1);
    CHECK(strstr(err, "unknown message type 0x5a at byte 0") != NULL);
    CHECK_EQ_INT(parse_mutated(&p, begin, 0, 0, true, err), -1);
    CHECK(strstr(err, "1 trailing bytes after a 'B' message at byte 21") != NULL);
    CHECK_EQ_INT(parse_mutated(&p, ins, 0, 0, true, err), -1);
    /* the tuple tag, the first column's kind: binary, unknown */
    CHECK_EQ_INT(parse_mutated(&p, ins, 5, 'K', false, err), -1);
    CHECK(strstr(err, "not 'N' at byte 5") != NULL);
    CHECK_EQ_INT(parse_mutated(&p, ins, 8, 'b', false, err), -1);
    CHECK(strstr(err, "binary value of column 0") != NULL);
    CHECK_EQ_INT(parse_mutated(&p, ins, 8, 'x', false, err), -1);
    CHECK(strstr(err, "unknown tuple column kind 0x78 at byte 8") != NULL);
    /* a column count that disagrees with the relation (7 instead of 6,
     * with NULLs for the rest: the tuple ends early) */
    CHECK_EQ_INT(parse_mutated(&p, ins, 7, 7, false, err), -1);
    /* a text length past the end */
    CHECK_EQ_INT(parse_mutated(&p, ins, 9, 0x7f, false, err), -1);
    CHECK(strstr(err, "truncated text value") != NULL);
    /* an unterminated relation name: the NUL after "public" made 'x' */
    CHECK_EQ_INT(parse_mutated(&p, rel, 11, 'x', false, err), 0 - 1);
    /* still the same cache: the failed Relation changed nothing */
    CHECK_EQ_INT(p.nrels, 1);
    CHECK_EQ_INT(pgo_parse(&p, ins->data, ins->len, &m, err, sizeof err), 0);
    /* empty frame */
    CHECK_EQ_INT(pgo_parse(&p, NULL, 0, &m, err, sizeof err), -1);
    CHECK(strstr(err, "truncated message type") != NULL);
    pgo_parser_free(&p);
    pgo_frames_free(&fr);
}

int main(void)
{
    test_outbox();
    test_messages();
    test_other();
    test_partitioned();
    test_truncations();
    test_malformed();
    struct pgo_frames fr = pgo_load("outbox.frames");
    struct pgo_parser p = {0};
    parse_all(&p, &fr);
    pgo_parser_free(&p);
    pgo_frames_free(&fr);
    CHECK_DONE();
}
