/*
 * consume_ids.c — which event ids processed_events can hold, decided
 * without I/O (consume_internal.h).
 *
 * sql/002_processed_events.sql makes event_id text, which holds every id
 * (row ids in decimal, "m-<lsn>", uuids of the Debezium layout,
 * "kafka-<topic>-<partition>-<offset>"). The seed article's table makes it
 * BIGINT, which holds the row ids of the default layout and nothing else.
 * Both are accepted as they are: the consumer reads the column's type at
 * each connection (consume_pg.c), sends the batch's ids as an array of that
 * kind, and refuses, event by event, an id the column cannot hold (as
 * --on-error says). Any other type (uuid, jsonb...) can never hold the ids
 * of every event, so the consumer refuses to start with the ALTER TABLE
 * that makes the column text.
 */
#include "consume_internal.h"

#include <string.h>

/* PostgreSQL's names (pg_type.typname) of the base types we accept. */
static const struct {
    const char *typname;
    enum consume_idkind kind;
    int64_t max;
} ID_TYPES[] = {
    {"text", IDCOL_TEXT, 0},     {"varchar", IDCOL_TEXT, 0},  {"bpchar", IDCOL_TEXT, 0},
    {"int8", IDCOL_INTEGER, INT64_MAX}, {"int4", IDCOL_INTEGER, INT32_MAX},
    {"int2", IDCOL_INTEGER, INT16_MAX},
    /* sent as bigint[]: an id past bigint's range is refused, as for bigint */
    {"numeric", IDCOL_INTEGER, INT64_MAX},
};

void consume_idcol_judge(struct consume_idcol *col, const char *base_typname,
                         const char *type_shown, const char *qtable)
{
    memset(col, 0, sizeof *col);
    col->kind = IDCOL_BAD;
    for (size_t i = 0; i < sizeof ID_TYPES / sizeof ID_TYPES[0]; i++)
        if (strcmp(base_typname, ID_TYPES[i].typname) == 0) {
            col->kind = ID_TYPES[i].kind;
            col->max = ID_TYPES[i].max;
        }
    snprintf(col->type, sizeof col->type, "%s", type_shown);
    snprintf(col->fix, sizeof col->fix,
             "ALTER TABLE %s ALTER COLUMN event_id TYPE text USING event_id::text", qtable);
}

bool consume_id_fits(const struct consume_idcol *col, const char *id)
{
    if (col->kind != IDCOL_INTEGER)
        return true; /* text holds every id (a bad column never gets this far) */
    const char *p = id;
    bool negative = *p == '-';
    if (negative)
        p++;
    if (*p == '\0')
        return false;
    /* Digits only, no sign but '-', no spaces: "007" and "7" would be the
     * same row of an integer column, so leading zeros are refused too. */
    if (p[0] == '0' && p[1] != '\0')
        return false;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned d = (unsigned) (*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    /* col->max for positive ids, one more for negative ones (two's complement) */
    if (negative && v == 0)
        return false; /* "-0" would be the row of "0" */
    return negative ? v <= (uint64_t) col->max + 1 : v <= (uint64_t) col->max;
}

void consume_id_refusal(const struct consume_idcol *col, const char *id,
                        struct consumer_failure *why)
{
    snprintf(why->sqlstate, sizeof why->sqlstate, "22P02"); /* invalid_text_representation */
    snprintf(why->message, sizeof why->message,
             "event id \"%s\" is not an integer in the range of the column, and "
             "processed_events.event_id is %s: the event cannot be recorded as processed. "
             "Make the column text (every id fits, numeric ids are kept): %s", id, col->type,
             col->fix);
}
