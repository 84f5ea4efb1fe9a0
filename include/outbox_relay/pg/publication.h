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
struct outbox_columns_map; /* outbox_event.h */

/* What an existing publication means for the relayer (the rules above),
 * first rule broken first. */
enum publication_verdict {
    PUBLICATION_OK = 0,
    PUBLICATION_NO_INSERT,       /* publish does not include insert */
    PUBLICATION_NOT_VIA_ROOT,    /* partitioned outbox without publish_via_partition_root */
    PUBLICATION_NOT_COVERED,     /* the outbox table is not in it */
    PUBLICATION_COLUMN_LEFT_OUT, /* a column list leaves out a column the relayer reads */
    PUBLICATION_ROW_FILTER,      /* usable, but a row filter drops rows (a warning) */
};

/* The verdict. columns: the relayer's column mapping (NULL: the default
 * layout's); attnames: the column list as comma-separated names (NULL or
 * "": none); rowfilter NULL or "": none. *column gets the column left out
 * (PUBLICATION_COLUMN_LEFT_OUT), else NULL. Pure; the stream, the
 * maintenance poll and `outbox-relay check` all judge by it. */
enum publication_verdict publication_judge(bool pubinsert, bool viaroot, bool covers,
                                           bool partitioned,
                                           const struct outbox_columns_map *columns,
                                           const char *attnames, const char *rowfilter,
                                           const char **column);

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

/* publication_build_query with the names escaped for conn. */
int publication_build_lookup(PGconn *conn, const char *name, const char *schema,
                             const char *table, char *buf, size_t cap);

/* Fills *st from that query's result row (row < 0: there was none). */
struct pg_result;
void publication_read_state(const struct pg_result *res, int row, struct publication_state *st);

/* Why the publication name cannot serve the outbox schema.table (partitioned:
 * a partitioned table; publication_judge's verdict), with the statement that
 * fixes it, into buf; NULL when it can (a row filter is allowed: see
 * publication_ensure). Pure. */
const char *publication_problem(const struct publication_state *st, const char *name,
                                const char *schema, const char *table, bool partitioned,
                                const struct outbox_columns_map *columns, char *buf, size_t cap);

/* Writes the CREATE PUBLICATION statement for name and the outbox table
 * into buf (names quoted as identifiers). Pure. Returns the length, or -1
 * when cap is too small. */
int publication_build_create(const char *name, const char *schema, const char *table,
                             char *buf, size_t cap);

/* What publication_inspect() found. */
enum publication_health {
    PUBLICATION_UNKNOWN = -1, /* a query failed: why says which and why */
    PUBLICATION_BROKEN = 0,   /* why says what is wrong and the fix */
    PUBLICATION_SERVES = 1,   /* *row_filter says whether a row filter drops rows */
    PUBLICATION_NOT_MADE = 2  /* missing, and so is slot: the relayer creates it
                                 with the slot (a first start) */
};

/* Judges publication name for the outbox schema.table and slot on an
 * ordinary connection (the maintenance poll, `status`), each query bounded
 * by timeout seconds, as the stream judges it at connect
 * (publication_problem with columns). Returns an enum publication_health,
 * with the reason in why; PUBLICATION_SERVES with *row_filter true puts the
 * filter itself in why (pg_publication_tables.rowfilter, e.g.
 * "(type <> 'x'::text)"). */
int publication_inspect(PGconn *conn, const char *name, const char *schema, const char *table,
                        const char *slot, const struct outbox_columns_map *columns,
                        double timeout, bool *row_filter, char *why, size_t cap);

/* How the row filter seen by a poll differs from the one seen by the poll
 * before. */
enum publication_filter_change {
    PUBLICATION_FILTER_SAME = 0, /* nothing to say */
    PUBLICATION_FILTER_ADDED,    /* a filter where there was none */
    PUBLICATION_FILTER_CHANGED,  /* another filter */
    PUBLICATION_FILTER_REMOVED,  /* none where there was one */
};

/* The change from prev (the filter the last poll saw; NULL or "": none)
 * to cur (NULL or "": none). known false (no poll yet): SAME, since the
 * stream said what it found when it connected (publication_ensure). A
 * filter is the owner's choice, so the maintenance poll says so once per
 * change (a warning for ADDED/CHANGED, a line for REMOVED) rather than
 * holding anything off. Pure. */
enum publication_filter_change publication_filter_change(bool known, const char *prev,
                                                         const char *cur);

/* Checks the publication name for the slot s administers (its table), and
 * creates it when it does not exist and slot_exists is false. partitioned:
 * the outbox is a partitioned table. */
int publication_ensure(struct slot *s, const char *name, bool partitioned, bool slot_exists);

#endif
