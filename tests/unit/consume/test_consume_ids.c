/*
 * test_consume_ids.c — which processed_events.event_id types the consumer
 * accepts and which ids each can hold (consume_ids.c): text holds every
 * id; an integer column (the seed article's bigint) only decimal ids in
 * its range; any other type is refused with the ALTER TABLE that fixes it.
 * No PostgreSQL.
 */
#include <string.h>

#include "../../../src/consume/consume_internal.h"
#include "check.h"

#define T "public.processed_events"

static void test_judge(void)
{
    struct consume_idcol col;
    const char *text_like[] = {"text", "varchar", "bpchar"};
    for (size_t i = 0; i < 3; i++) {
        consume_idcol_judge(&col, text_like[i], text_like[i], T);
        CHECK_EQ_INT(col.kind, IDCOL_TEXT);
    }
    const char *ints[] = {"int8", "int4", "int2", "numeric"};
    const int64_t max[] = {INT64_MAX, INT32_MAX, INT16_MAX, INT64_MAX};
    for (size_t i = 0; i < 4; i++) {
        consume_idcol_judge(&col, ints[i], ints[i], T);
        CHECK_EQ_INT(col.kind, IDCOL_INTEGER);
        CHECK(col.max == max[i]);
    }
    const char *bad[] = {"uuid", "jsonb", "bytea", "timestamptz", "float8", ""};
    for (size_t i = 0; i < 6; i++) {
        consume_idcol_judge(&col, bad[i], "whatever", T);
        CHECK_EQ_INT(col.kind, IDCOL_BAD);
    }
    consume_idcol_judge(&col, "uuid", "uuid", "\"My Schema\".processed_events");
    CHECK(strcmp(col.fix, "ALTER TABLE \"My Schema\".processed_events ALTER COLUMN event_id "
                 "TYPE text USING event_id::text") == 0);
    CHECK(strcmp(col.type, "uuid") == 0);
}

static void test_fits(void)
{
    struct consume_idcol col;
    consume_idcol_judge(&col, "text", "text", T);
    const char *any[] = {"1", "m-0/16B3F28", "kafka-order-0-5", "6f1c2b9e-0000-4000-8000-1",
                         "", "-", "007"};
    for (size_t i = 0; i < 7; i++)
        CHECK(consume_id_fits(&col, any[i]));

    consume_idcol_judge(&col, "int8", "bigint", T);
    CHECK(consume_id_fits(&col, "0"));
    CHECK(consume_id_fits(&col, "22"));
    CHECK(consume_id_fits(&col, "-5"));
    CHECK(consume_id_fits(&col, "9223372036854775807"));
    CHECK(consume_id_fits(&col, "-9223372036854775808"));
    CHECK(!consume_id_fits(&col, "9223372036854775808"));
    CHECK(!consume_id_fits(&col, "-9223372036854775809"));
    CHECK(!consume_id_fits(&col, "99999999999999999999999"));
    const char *not_int[] = {"", "-", "m-0/16B3F28", "kafka-order-0-5", " 1", "1 ", "+1",
                             "1e3", "0x10", "007", "-0"};
    for (size_t i = 0; i < sizeof not_int / sizeof not_int[0]; i++)
        CHECK(!consume_id_fits(&col, not_int[i]));

    consume_idcol_judge(&col, "int4", "integer", T);
    CHECK(consume_id_fits(&col, "2147483647"));
    CHECK(!consume_id_fits(&col, "2147483648"));
    CHECK(consume_id_fits(&col, "-2147483648"));
    consume_idcol_judge(&col, "int2", "smallint", T);
    CHECK(!consume_id_fits(&col, "32768"));
}

static void test_refusal(void)
{
    struct consume_idcol col;
    struct consumer_failure why;
    consume_idcol_judge(&col, "int8", "bigint", T);
    consume_id_refusal(&col, "m-0/16B3F28", &why);
    CHECK(strcmp(why.sqlstate, "22P02") == 0);
    CHECK(strstr(why.message, "\"m-0/16B3F28\"") != NULL);
    CHECK(strstr(why.message, "processed_events.event_id is bigint") != NULL);
    CHECK(strstr(why.message, "ALTER TABLE " T " ALTER COLUMN event_id TYPE text") != NULL);
}

int main(void)
{
    test_judge();
    test_fits();
    test_refusal();
    CHECK_DONE();
}
