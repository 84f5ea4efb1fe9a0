/*
 * outbox_catalog.h — the catalog questions about the outbox table that
 * several modules ask (the stream's start, the maintenance poll, the
 * reaper, status and check), written once so that they cannot drift
 * apart. Pure: it builds SQL; each caller runs it on its own connection.
 */
#ifndef OUTBOX_RELAY_OUTBOX_CATALOG_H
#define OUTBOX_RELAY_OUTBOX_CATALOG_H

#include <stddef.h>

/* The outbox's row estimate (pg_class.reltuples summed over the leaves of
 * the partition tree; NULL when never vacuumed or analyzed). $1 is the
 * quoted "schema"."table". Reads catalogs only: takes no lock on the table
 * or its partitions. */
#define OUTBOX_CATALOG_ROWS_SQL                                                   \
    "WITH RECURSIVE tree(relid) AS (SELECT to_regclass($1)::oid UNION ALL "      \
    "SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid) " \
    "SELECT CASE WHEN bool_and(c.reltuples < 0) THEN NULL "                      \
    "ELSE sum(greatest(c.reltuples, 0)) END::bigint "                            \
    "FROM tree JOIN pg_class c ON c.oid = tree.relid WHERE c.relkind <> 'p'"

/* Columns of the row outbox_catalog_logged_sql's query returns. */
enum outbox_logged_col {
    OUTBOX_LOGGED_KIND = 0, /* the table's relkind ('r', 'p'); NULL: no such table */
    OUTBOX_LOGGED_COUNT,    /* tables of it (it, its partitions at any depth) that
                               write no WAL: UNLOGGED or temporary */
    OUTBOX_LOGGED_FIX,      /* what fixes them, one statement each:
                               "ALTER TABLE s.t SET LOGGED;" (a temporary table
                               cannot be: "recreate s.t as a logged table;") */
    OUTBOX_LOGGED_WHAT      /* "table s.t is UNLOGGED; table s.u is TEMPORARY" */
};

/* The one query of whether the outbox writes WAL: a table that does not is
 * never seen by logical decoding, while keepalives move the slot past its
 * rows (and the reaper would delete them as delivered). table_expr is SQL
 * giving the table's oid or regclass: "to_regclass($1)" with the quoted
 * name as a parameter, "$1::oid", or a literal for the simple protocol of a
 * replication connection. Walks pg_inherits (pg_partition_tree() would
 * lock every partition). Writes it into buf (capacity cap); returns the
 * length, or -1 when buf is too small. */
int outbox_catalog_logged_sql(const char *table_expr, char *buf, size_t cap);

#endif
