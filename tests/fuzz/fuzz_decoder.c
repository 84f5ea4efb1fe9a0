/*
 * fuzz_decoder.c — libFuzzer target for the wal2json decoder.
 *
 * Each input is used three ways:
 *   1. as a wal2json line: w2j_parse, then w2j_event_decode (default and a
 *      custom column map), w2j_unescape and w2j_timestamp_us on every value
 *      the parse produced;
 *   2. as the content of an 'M' record, i.e. an envelope fed straight to the
 *      envelope parser (reaching it through step 1 needs a valid escaped
 *      string around it first), through w2j_event_decode and through
 *      outbox_event_from_envelope (outbox_event.h);
 *   3. as a timestamp string (w2j_timestamp_us and outbox_timestamp_us
 *      must agree) and as an LSN;
 *   4. as a line through the decoder interface (decoder.h): an insert's
 *      shape test (decoder_shaped, default and custom map) and its table
 *      name (decoder_table_name).
 * The JSON string scanner under all of it (jscan.h) has its own target,
 * fuzz_jscan.c.
 * The input is copied into a buffer of exactly its size so that ASan flags
 * any read past the end. Invariants that would hide bugs if merely
 * "handled" abort: spans outside the line or scratch, an escape that the
 * parser accepted but w2j_unescape refuses, an event without a type, a
 * text that w2j_parse unescaped in passing (struct w2j_text) and that
 * differs from what w2j_unescape makes of the same bytes, an insert the
 * shape test refuses (with no escaped column name) that still maps to an
 * event, a table name that differs from the record's plain one.
 *
 * Seed corpus: tests/fuzz/corpus/decoder/ (real lines from the golden
 * fixtures). libFuzzer writes new inputs into the first directory it is
 * given, so put a scratch one first:
 *   mkdir -p /tmp/fuzz-decoder
 *   ./fuzz_decoder -max_total_time=60 /tmp/fuzz-decoder tests/fuzz/corpus/decoder
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/decode/w2j.h"
#include "outbox_relay/base/lsn.h"

static struct w2j_record rec;
static struct outbox_scratch scratch;

static void check_span(const char *p, size_t n, const char *base, size_t size)
{
    if (p == NULL) {
        if (n != 0)
            abort();
        return;
    }
    if (p < base || n > size || (size_t) (p - base) > size - n)
        abort();
}

static bool in(const char *p, size_t n, const char *base, size_t size)
{
    return p >= base && n <= size && (size_t) (p - base) <= size - n;
}

/* A parsed value: inside the line, and unescapable when it is a string. */
static void check_value(const struct w2j_value *v, const char *line, size_t size)
{
    if (v->type == W2J_ABSENT)
        return;
    check_span(v->ptr, v->len, line, size);
    if (v->type == W2J_STRING) {
        char *out = malloc(v->len ? v->len : 1);
        size_t n;
        int64_t us;
        if (w2j_unescape(v, out, v->len, &n) < 0 || n > v->len)
            abort(); /* w2j_parse validated every escape */
        free(out);
        (void) w2j_timestamp_us(v, &us);
    }
}

/* The text w2j_parse left in the record for v, if any: the unescaping of a
 * prefix of v that ends between escapes, inside the record's buffer. */
static void check_text(const struct w2j_text *t, const struct w2j_value *v)
{
    if (t->src == NULL)
        return;
    if (t->src != v->ptr || v->type != W2J_STRING || !v->escaped || t->raw > v->len ||
        t->len > t->raw || t->off > W2J_TEXT_CAP || t->len > W2J_TEXT_CAP - t->off ||
        t->off + t->len > rec.text_used)
        abort();
    struct w2j_value prefix = {W2J_STRING, true, v->ptr, t->raw};
    char *out = malloc(t->raw ? t->raw : 1);
    size_t n;
    if (w2j_unescape(&prefix, out, t->raw, &n) < 0 || n != t->len ||
        memcmp(out, rec.text_buf + t->off, n) != 0)
        abort();
    free(out);
}

static void check_event(const struct outbox_event *ev, const char *line, size_t size)
{
    if (memchr(ev->event_id, '\0', sizeof ev->event_id) == NULL)
        abort();
    if (ev->type == NULL || ev->type_len == 0)
        abort();
    const char *spans[4] = {ev->aggregate_id, ev->type, ev->payload, ev->created_at};
    size_t lens[4] = {ev->aggregate_id_len, ev->type_len, ev->payload_len, ev->created_at_len};
    for (int i = 0; i < 4; i++) {
        if (spans[i] == NULL)
            continue;
        if (!in(spans[i], lens[i], line, size) &&
            !in(spans[i], lens[i], scratch.buf, scratch.len))
            abort();
        /* touch every byte so that ASan sees a dangling pointer */
        volatile char sink = 0;
        for (size_t k = 0; k < lens[i]; k++)
            sink ^= spans[i][k];
        (void) sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct outbox_columns_map custom = {.id = "k", .aggregate_id = "a", .type = "t",
                                                  .payload = "p"};
    char *line = malloc(size ? size : 1);
    char err[W2J_ERRLEN];
    struct outbox_event ev;

    if (size > 0)
        memcpy(line, data, size);

    /* 1. a line */
    if (w2j_parse(line, size, &rec, err, sizeof err) == 0) {
        if (rec.ncolumns > W2J_MAX_COLUMNS || rec.action == 0)
            abort();
        check_value(&rec.timestamp, line, size);
        check_value(&rec.schema, line, size);
        check_value(&rec.table, line, size);
        check_value(&rec.prefix, line, size);
        check_value(&rec.content, line, size);
        for (size_t i = 0; i < rec.ncolumns; i++) {
            if (rec.columns[i].name.type != W2J_STRING)
                abort();
            check_value(&rec.columns[i].name, line, size);
            check_value(&rec.columns[i].value, line, size);
            check_text(&rec.columns[i].text, &rec.columns[i].value);
        }
        check_text(&rec.content_text, &rec.content);
        if (w2j_event_decode(&rec, &OUTBOX_DEFAULT_COLUMNS, &scratch, &ev, err, sizeof err) == 0)
            check_event(&ev, line, size);
        else if (err[0] == '\0')
            abort();
        if (w2j_event_decode(&rec, &custom, &scratch, &ev, err, sizeof err) == 0)
            check_event(&ev, line, size);
    } else if (err[0] == '\0') {
        abort(); /* every failure says why */
    }

    /* 2. an envelope, as the content of a message record */
    rec.action = 'M';
    rec.lsn = 0x12345678;
    rec.timestamp.type = W2J_ABSENT;
    rec.content.type = W2J_STRING;
    rec.content.escaped = false;
    rec.content.ptr = line;
    rec.content.len = size;
    if (w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err) == 0)
        check_event(&ev, line, size);
    rec.content.escaped = true; /* and as an escaped string: may be refused */
    if (w2j_event_decode(&rec, NULL, &scratch, &ev, err, sizeof err) == 0)
        check_event(&ev, line, size);

    /* and straight to the plugin-neutral envelope parser (outbox_event.h),
     * with the room its contract asks for */
    outbox_event_reset(&ev, 0x12345678);
    err[0] = '\0';
    if (outbox_scratch_reserve(&scratch, size) == 0) {
        if (outbox_event_from_envelope(line, size, &scratch, &ev, err, sizeof err) == 0)
            check_event(&ev, line, size);
        else if (err[0] == '\0')
            abort();
    }

    /* 3. a timestamp (both entry points agree), an LSN */
    struct w2j_value v = {W2J_STRING, false, line, size};
    int64_t us, us2;
    lsn_t lsn;
    int rts = w2j_timestamp_us(&v, &us);
    if (rts != outbox_timestamp_us(line, size, &us2) || (rts == 0 && us != us2))
        abort();
    (void) lsn_parse(line, size, &lsn);

    /* 4. through the decoder interface */
    static struct decoder *d;
    if (d == NULL && (d = decoder_w2j_new()) == NULL)
        abort();
    struct decoder_record drec;
    char derr[DECODER_ERRLEN];
    if (decoder_decode(d, line, size, 0x1000, &drec, derr, sizeof derr) == 0 &&
        drec.kind == DECODER_INSERT) {
        /* the same line parsed the same way in step 1: its column names */
        bool escaped_name = false;
        for (size_t i = 0; i < rec.ncolumns; i++)
            escaped_name |= rec.columns[i].name.escaped;
        d->columns = NULL;
        bool shaped = decoder_shaped(d, &drec);
        /* a row the shape test refuses is no event (the event mapping
         * matches escaped names unescaped; the shape test does not) */
        if (!shaped && !escaped_name &&
            decoder_event(d, &drec, &ev, err, sizeof err) == 0)
            abort();
        d->columns = &custom;
        (void) decoder_shaped(d, &drec);
        char name[256];
        int n = decoder_table_name(d, &drec, name, sizeof name);
        if (n >= 0 && (strlen(name) != (size_t) n || n == 0))
            abort();
        if (drec.table != NULL && drec.table_len > 0 && drec.table_len < sizeof name &&
            memchr(drec.table, '\0', drec.table_len) == NULL &&
            (n != (int) drec.table_len || memcmp(name, drec.table, drec.table_len) != 0))
            abort(); /* a plain name is itself */
    }

    free(line);
    return 0;
}
