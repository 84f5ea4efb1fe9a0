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
