/*
 * publication.h — the pgoutput publication of the outbox table, on the
 * replication connection the stream owns (struct slot, slot.h).
 *
 * pgoutput sends only what a publication names. The relayer needs one that
 * covers the outbox table under its own name (a partitioned outbox: with
 * publish_via_partition_root, so rows arrive under the root, decided by the
 * catalog as of each change) and publishes inserts; the columns the relayer
 * reads must not be left out by a column list. What it publishes besides
 * (other tables, updates, deletes) is skipped, a row filter is warned about.
 *
 * A missing publication is created, when the role may (the table's owner
 * with CREATE on the database):
 *   CREATE PUBLICATION "<name>" FOR TABLE "<schema>"."<table>"
 *       WITH (publish = 'insert', publish_via_partition_root = true)
 * before the slot, so the slot's first change comes after it: pgoutput
 * looks publications up in the catalog as of each change and cannot decode
 * one written before the publication existed. For the same reason an
 * existing slot whose publication is missing is refused, never repaired.
 *
 * Every function returns an enum stream_rc and says why in the slot's err,
 * with the SQL that fixes it.
 */
#ifndef OUTBOX_RELAY_PUBLICATION_H
#define OUTBOX_RELAY_PUBLICATION_H

#include <stdbool.h>
#include <stddef.h>

struct slot; /* slot.h */

/* What a publication publishes of the outbox, as publication_build_query()'s
 * row says. Strings are borrowed (a PGresult's). */
struct publication_state {
    bool exists;
    bool pubinsert;
    bool viaroot;          /* publish_via_partition_root */
    bool covers;           /* the outbox under its own name */
    const char *attnames;  /* its column list, comma-separated; NULL: none */
    const char *rowfilter; /* NULL: none */
};

/* The query whose single row (none: no such publication) is pubinsert,
 * pubviaroot, covers, attnames, rowfilter, for a server of server_version
 * (column lists and row filters from 15 on). The three names are SQL
 * literals, already escaped (PQescapeLiteral). Pure. Returns the length, or
 * -1 when cap is too small. */
int publication_build_query(int server_version, const char *lit_name, const char *lit_schema,
                            const char *lit_table, char *buf, size_t cap);

/* Fills *st from that query's result row (row < 0: there was none). */
struct pg_result;
void publication_read_state(const struct pg_result *res, int row, struct publication_state *st);

/* Why the publication name cannot serve the outbox schema.table (partitioned:
 * a partitioned table), with the statement that fixes it, into buf; NULL
 * when it can (a row filter is allowed: see publication_ensure). Pure. */
const char *publication_problem(const struct publication_state *st, const char *name,
                                const char *schema, const char *table, bool partitioned,
                                char *buf, size_t cap);

/* Writes the CREATE PUBLICATION statement for name and the outbox table
 * into buf (names quoted as identifiers). Pure. Returns the length, or -1
 * when cap is too small. */
int publication_build_create(const char *name, const char *schema, const char *table,
                             char *buf, size_t cap);

/* Checks the publication name for the slot s administers (its table), and
 * creates it when it does not exist and slot_exists is false. partitioned:
 * the outbox is a partitioned table. */
int publication_ensure(struct slot *s, const char *name, bool partitioned, bool slot_exists);

#endif
