/*
 * test_decoder_w2j.c — the wal2json decoder's answers for a partitioned
 * outbox (decoder.h): decoder_shaped, step 0 of the membership rule (an
 * insert with every needed column, with the default layout and a mapped
 * one; a business table's row; a column name that is escaped or only
 * extra), decoder_table_name (a plain name, an escaped one that
 * decoder_record.table leaves NULL, one that cannot fit), and that
 * wal2json names rows after the leaf partition (decoder_names_root false).
 * Records and options are test_dispatch.c's test_w2j_decoder.
 */
#include "outbox_relay/decode/decoder.h"

#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/outbox_event.h"

#include "check.h"

/* Decodes line (copied to an exact-size buffer, kept in *buf until the
 * next call) at 0x100; returns the record. */
static struct decoder_record decode(struct decoder *d, const char *line, char **buf)
{
    struct decoder_record rec;
    char err[DECODER_ERRLEN];
    size_t n = strlen(line);
    free(*buf);
    *buf = malloc(n);
    memcpy(*buf, line, n);
    CHECK_EQ_INT(decoder_decode(d, *buf, n, 0x100, &rec, err, sizeof err), 0);
    return rec;
}

static const char P1[] =
    "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"p1\",\"columns\":["
    "{\"name\":\"id\",\"value\":1},{\"name\":\"aggregate_id\",\"value\":\"a\"},"
    "{\"name\":\"type\",\"value\":\"t.x\"},{\"name\":\"payload\",\"value\":\"{}\"},"
    "{\"name\":\"created_at\",\"value\":\"2026-01-01 00:00:00+00\"},"
    "{\"name\":\"dispatched_at\",\"value\":null}]}";

static const char ORDERS[] =
    "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"orders\",\"columns\":["
    "{\"name\":\"id\",\"value\":1},{\"name\":\"type\",\"value\":\"x\"},"
    "{\"name\":\"created_at\",\"value\":\"2026-01-01 00:00:00+00\"}]}";

/* Debezium's columns: no created_at, aggregateid for the key. */
static const char DBZ[] =
    "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"p2\",\"columns\":["
    "{\"name\":\"id\",\"value\":\"u-1\"},{\"name\":\"aggregatetype\",\"value\":\"order\"},"
    "{\"name\":\"aggregateid\",\"value\":\"o-1\"},{\"name\":\"type\",\"value\":\"Created\"},"
    "{\"name\":\"payload\",\"value\":\"{}\"}]}";

static void test_shaped_default(void)
{
    struct decoder *d = decoder_w2j_new();
    char *buf = NULL;
    CHECK(!decoder_names_root(d));
    struct decoder_record rec = decode(d, P1, &buf);
    CHECK(decoder_shaped(d, &rec)); /* d->columns NULL: the default layout */
    rec = decode(d, ORDERS, &buf);
    CHECK(!decoder_shaped(d, &rec)); /* a business table of the schema */
    rec = decode(d, DBZ, &buf);
    CHECK(!decoder_shaped(d, &rec)); /* aggregateid is not aggregate_id */
    /* a needed column whose name is escaped compares as nothing */
    rec = decode(d,
                 "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"p1\",\"columns\":["
                 "{\"name\":\"id\",\"value\":1},{\"name\":\"aggregate_id\",\"value\":\"a\"},"
                 "{\"name\":\"typ\\u0065\",\"value\":\"t.x\"},{\"name\":\"payload\","
                 "\"value\":\"{}\"},{\"name\":\"created_at\",\"value\":null}]}",
                 &buf);
    CHECK(!decoder_shaped(d, &rec));
    /* not an insert */
    rec = decode(d, "{\"action\":\"C\"}", &buf);
    CHECK(!decoder_shaped(d, &rec));
    free(buf);
    decoder_free(d);
}

static void test_shaped_mapped(void)
{
    struct outbox_columns_map map = {.id = "id", .aggregate_id = "aggregateid", .type = "type",
                                     .payload = "payload", .id_kind = OUTBOX_ID_TEXT};
    struct decoder *d = decoder_w2j_new();
    char *buf = NULL;
    d->columns = &map;
    struct decoder_record rec = decode(d, DBZ, &buf);
    CHECK(decoder_shaped(d, &rec)); /* created_at unmapped: not needed */
    rec = decode(d, P1, &buf);
    CHECK(!decoder_shaped(d, &rec)); /* no aggregateid */
    rec = decode(d, ORDERS, &buf);
    CHECK(!decoder_shaped(d, &rec));
    /* extra columns are mapped but not needed for the shape */
    CHECK_EQ_INT(outbox_columns_add_extra(&map, "tenant", "x-tenant"), 0);
    rec = decode(d, DBZ, &buf);
    CHECK(decoder_shaped(d, &rec));
    free(buf);
    decoder_free(d);
}

static void test_table_name(void)
{
    struct decoder *d = decoder_w2j_new();
    char *buf = NULL;
    char name[64];
    struct decoder_record rec = decode(d, P1, &buf);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, sizeof name), 2);
    CHECK(strcmp(name, "p1") == 0);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, 2), -1); /* no room for the NUL */
    /* escaped: NULL in the record (matches no configured name), the real
     * name for a lookup */
    rec = decode(d, "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"p\\\"1\",\"columns\":[]}",
                 &buf);
    CHECK(rec.table == NULL);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, sizeof name), 3);
    CHECK(strcmp(name, "p\"1") == 0);
    /* a NUL in the name, and no name at all, are not names */
    rec = decode(d, "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"p\\u00001\","
                    "\"columns\":[]}", &buf);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, sizeof name), -1);
    rec = decode(d, "{\"action\":\"I\",\"schema\":\"public\",\"columns\":[]}", &buf);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, sizeof name), -1);
    rec = decode(d, "{\"action\":\"C\"}", &buf);
    CHECK_EQ_INT(decoder_table_name(d, &rec, name, sizeof name), -1);
    free(buf);
    decoder_free(d);
}

int main(void)
{
    test_shaped_default();
    test_shaped_mapped();
    test_table_name();
    CHECK_DONE();
}
