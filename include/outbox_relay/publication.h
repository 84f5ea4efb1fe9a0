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

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct slot; /* slot.h */

/* What an existing publication means for the relayer, from the row
 * publication_build_lookup's query returns (see the rules above). */
enum publication_verdict {
    PUBLICATION_OK = 0,
    PUBLICATION_NO_INSERT,       /* publish does not include insert */
    PUBLICATION_NOT_VIA_ROOT,    /* partitioned outbox without publish_via_partition_root */
    PUBLICATION_NOT_COVERED,     /* the outbox table is not in it */
    PUBLICATION_COLUMN_LEFT_OUT, /* a column list leaves out a column the relayer reads */
    PUBLICATION_ROW_FILTER,      /* usable, but a row filter drops rows (a warning) */
};

/* The verdict, first rule broken first. attnames: the column list as
 * comma-separated names (NULL or "": none); rowfilter NULL or "": none.
 * *column gets the column left out (PUBLICATION_COLUMN_LEFT_OUT), else
 * NULL. Pure; publication_ensure and `outbox-relay check` both judge by it. */
enum publication_verdict publication_judge(bool pubinsert, bool viaroot, bool covers,
                                           bool partitioned, const char *attnames,
                                           const char *rowfilter, const char **column);

/* Writes the query that reads publication name's row for schema.table
 * (columns: pubinsert, pubviaroot, covers, attnames, rowfilter; no row: no
 * such publication) into buf, literals escaped for conn (simple protocol,
 * so it also runs on a walsender). Returns the length, or -1 when cap is
 * too small. */
int publication_build_lookup(PGconn *conn, const char *name, const char *schema,
                             const char *table, char *buf, size_t cap);

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
