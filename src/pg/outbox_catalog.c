/*
 * outbox_catalog.c — the catalog queries about the outbox (see
 * outbox_catalog.h). Pure.
 */
#include "outbox_relay/pg/outbox_catalog.h"

#include <stdio.h>

int outbox_catalog_logged_sql(const char *table_expr, char *buf, size_t cap)
{
    int n = snprintf(
        buf, cap,
        "WITH RECURSIVE tree(relid) AS (SELECT (%s)::oid UNION ALL "
        "SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid), "
        "nolog AS (SELECT c.relpersistence AS p, quote_ident(n.nspname) || '.' || "
        "quote_ident(c.relname) AS name FROM tree JOIN pg_class c ON c.oid = tree.relid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relpersistence <> 'p') "
        "SELECT (SELECT relkind::text FROM pg_class WHERE oid = (%s)::oid), "
        "(SELECT count(*) FROM nolog), "
        "coalesce((SELECT string_agg(CASE p WHEN 't' THEN 'recreate ' || name || "
        "' as a logged table;' ELSE 'ALTER TABLE ' || name || ' SET LOGGED;' END, ' ' "
        "ORDER BY name) FROM nolog), ''), "
        "coalesce((SELECT string_agg('table ' || name || CASE p WHEN 't' THEN ' is TEMPORARY' "
        "ELSE ' is UNLOGGED' END, '; ' ORDER BY name) FROM nolog), '')",
        table_expr, table_expr);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}
