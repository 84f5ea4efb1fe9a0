/*
 * fuzz_pgoutput.c — libFuzzer target for the pgoutput parser and decoder
 * (pgoutput.h, decoder_pgoutput.c).
 *
 * An input is a sequence of frames, each a 2-byte big-endian length and
 * that many bytes (a short tail is one last frame), so that a Relation can
 * precede the Insert that needs it. Each frame is copied into a buffer of
 * exactly its size (ASan flags any read past the end) and fed to a parser
 * and to a decoder that live for the whole input; every record the decoder
 * maps is mapped to an event, and every insert asked for its shape
 * (decoder_shaped, default and custom map) and its table name
 * (decoder_table_name). Invariants that abort: a refusal without a
 * message or without a byte offset, spans outside the frame or the
 * parser, an Insert whose value count differs from its relation's, an
 * event without a type, an insert the shape test refuses that maps to an
 * event or one it accepts that misses a column, a table name that is not
 * the record's.
 *
 * Seed corpus: tests/fuzz/corpus/pgoutput/ (captured frames in this
 * format, tests/fixtures/pgoutput/).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/decode/outbox_event.h"
#include "outbox_relay/decode/pgoutput.h"

static bool in(const char *p, size_t n, const char *base, size_t size)
{
    return p >= base && n <= size && (size_t) (p - base) <= size - n;
}

static void touch(const char *p, size_t n)
{
    volatile char sink = 0;
    for (size_t k = 0; k < n; k++)
        sink ^= p[k];
    (void) sink;
}

static void check_msg(const struct pgo_parser *p, const struct pgo_msg *m, const char *f,
                      size_t n)
{
    const struct pgo_str *s[4] = {&m->prefix, &m->content, &m->name, &m->nspname};
    for (int i = 0; i < 4; i++)
        if (s[i]->ptr != NULL && !in(s[i]->ptr, s[i]->len, f, n))
            abort();
    if (m->type == 'I' || m->type == 'R') {
        if (m->rel == NULL || m->rel != pgo_relation(p, m->oid))
            abort();
        touch(m->rel->nspname, m->rel->nspname_len);
        touch(m->rel->relname, m->rel->relname_len);
        for (size_t i = 0; i < m->rel->ncolumns; i++)
            touch(m->rel->columns[i].name, m->rel->columns[i].name_len);
    }
    if (m->type == 'I') {
        if (m->nvalues != m->rel->ncolumns)
            abort();
        for (size_t i = 0; i < m->nvalues; i++)
            if (m->values[i].ptr != NULL && !in(m->values[i].ptr, m->values[i].len, f, n))
                abort();
    }
}

static void check_event(const struct outbox_event *ev)
{
    if (memchr(ev->event_id, '\0', sizeof ev->event_id) == NULL || ev->type == NULL ||
        ev->type_len == 0)
        abort();
    touch(ev->type, ev->type_len);
    if (ev->aggregate_id)
        touch(ev->aggregate_id, ev->aggregate_id_len);
    if (ev->payload)
        touch(ev->payload, ev->payload_len);
    if (ev->created_at)
        touch(ev->created_at, ev->created_at_len);
}

/* decoder_table_name of an insert: pgoutput's names are the record's. */
static void check_table_name(struct decoder *d, const struct decoder_record *rec)
{
    char name[256];
    int n = decoder_table_name(d, rec, name, sizeof name);
    bool fits = rec->table != NULL && rec->table_len > 0 && rec->table_len < sizeof name &&
                memchr(rec->table, '\0', rec->table_len) == NULL;
    if (fits != (n >= 0) ||
        (n >= 0 && ((size_t) n != rec->table_len || memcmp(name, rec->table, (size_t) n) != 0 ||
                    name[n] != '\0')))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct outbox_columns_map custom = {.id = "k", .aggregate_id = "a", .type = "t",
                                                     .payload = "p"};
    struct pgo_parser p = {0};
    struct decoder *d = decoder_pgoutput_new();
    size_t pos = 0;

    if (d == NULL)
        return 0;
    while (pos < size) {
        size_t n;
        if (size - pos >= 2) {
            n = (size_t) data[pos] << 8 | data[pos + 1];
            pos += 2;
            if (n > size - pos)
                n = size - pos;
        } else {
            n = size - pos;
        }
        char *f = malloc(n ? n : 1);
        memcpy(f, data + pos, n);
        pos += n;

        struct pgo_msg m;
        char err[PGO_ERRLEN];
        err[0] = '\0';
        if (pgo_parse(&p, n ? f : NULL, n, &m, err, sizeof err) == 0)
            check_msg(&p, &m, f, n);
        else if (strstr(err, " at byte ") == NULL)
            abort();

        struct decoder_record rec;
        struct outbox_event ev;
        char derr[DECODER_ERRLEN];
        derr[0] = '\0';
        if (decoder_decode(d, n ? f : NULL, n, 0x1000, &rec, derr, sizeof derr) == 0) {
            bool shaped = false;
            if (rec.kind == DECODER_INSERT) {
                d->columns = &custom;
                (void) decoder_shaped(d, &rec);
                d->columns = NULL;
                shaped = decoder_shaped(d, &rec);
                check_table_name(d, &rec);
            }
            if (rec.kind == DECODER_INSERT || rec.kind == DECODER_MESSAGE) {
                derr[0] = '\0';
                int rc = decoder_event(d, &rec, &ev, derr, sizeof derr);
                if (rc == 0)
                    check_event(&ev);
                else if (derr[0] == '\0')
                    abort();
                /* the default map needs exactly the five columns the
                 * shape test looks for */
                if (rec.kind == DECODER_INSERT &&
                    (shaped ? strstr(derr, "missing column") != NULL : rc == 0))
                    abort();
            }
        } else if (derr[0] == '\0') {
            abort();
        }
        free(f);
    }
    pgo_parser_free(&p);
    decoder_free(d);
    return 0;
}
