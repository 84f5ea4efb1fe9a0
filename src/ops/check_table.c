/*
 * check_table.c — the preflight's checks of the outbox table (see
 * check.h): it exists, has the columns the relayer reads with types it can
 * relay, writes WAL (it and every partition), has the index the reaper
 * scans; the role may read and delete its rows and write the bookkeeping
 * tables of sql/003_relay_role.sql; the pgoutput publication covers it
 * (judged by publication_judge, the relayer's own rules); and what is in
 * it: the types that name the topics and the largest payload, both read
 * from a bounded number of the newest rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"
#include "outbox_relay/ops/maint.h"
#include "outbox_relay/pg/outbox_catalog.h"
#include "outbox_relay/pg/layout.h"
#include "outbox_relay/pg/publication.h"
#include "outbox_relay/kafka/topic.h"

#define MSGLEN 1024

static bool is_true(const PGresult *res, int row, int col)
{
    return !PQgetisnull(res, row, col) && strcmp(PQgetvalue(res, row, col), "t") == 0;
}

void check_table(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    const struct relay_config *cfg = c->cfg;
    char msg[MSGLEN];
    char *qs = PQescapeIdentifier(c->conn, cfg->table_schema, strlen(cfg->table_schema));
    char *qn = PQescapeIdentifier(c->conn, cfg->table_name, strlen(cfg->table_name));
    snprintf(c->qtable, sizeof c->qtable, "%s.%s", qs ? qs : "?", qn ? qn : "?");
    PQfreemem(qs);
    PQfreemem(qn);
    const char *p[] = {c->qtable};
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT c.oid::text, c.relkind::text FROM pg_class c "
                                "WHERE c.oid = to_regclass($1)", 1, p, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "table", CHECK_FAIL, NULL, "cannot look up %s.%s: %s",
                          cfg->table_schema, cfg->table_name, msg);
        return;
    }
    if (PQntuples(res) == 0) {
        check_report_addf(c->report, "table", CHECK_FAIL,
                          "create it (psql -f sql/001_outbox.sql) or name yours with --table",
                          "the outbox table %s.%s does not exist in this database",
                          cfg->table_schema, cfg->table_name);
        PQclear(res);
        return;
    }
    c->table_exists = true;
    snprintf(c->table_oid, sizeof c->table_oid, "%s", PQgetvalue(res, 0, 0));
    const char *kind = PQgetvalue(res, 0, 1);
    c->partitioned = strcmp(kind, "p") == 0;
    if (strcmp(kind, "r") != 0 && !c->partitioned)
        check_report_addf(c->report, "table", CHECK_FAIL,
                          "name a table with --table (a view or foreign table writes no WAL "
                          "of its own)", "%s.%s is not a table (relkind %s)", cfg->table_schema,
                          cfg->table_name, kind);
    else
        check_report_addf(c->report, "table", CHECK_PASS, NULL, "%s.%s exists%s",
                          cfg->table_schema, cfg->table_name,
                          c->partitioned ? " (partitioned)" : "");
    PQclear(res);
}

void check_columns(struct check_ctx *c)
{
    if (!c->table_exists)
        return;
    char msg[MSGLEN];
    const char *p[] = {c->table_oid};
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT attname::text, format_type(atttypid, atttypmod), "
                                "format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid "
                                "= $1::oid AND attnum > 0 AND NOT attisdropped", 1, p, msg,
                                sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "columns", CHECK_FAIL, NULL, "cannot read the columns: %s",
                          msg);
        return;
    }
    /* First the relayer's own startup rule for the configured mapping
     * (layout.h): what it would refuse, check refuses. */
    struct layout_column cols[256];
    size_t ncols = 0;
    for (int i = 0; i < PQntuples(res) && ncols < sizeof cols / sizeof cols[0]; i++)
        cols[ncols++] = (struct layout_column){PQgetvalue(res, i, 0), PQgetvalue(res, i, 2)};
    struct outbox_columns_map map = c->cfg->columns;
    char lerr[1024];
    int fits = layout_apply(&map, cols, ncols, c->qtable, lerr, sizeof lerr);
    const struct outbox_columns_map *d = &OUTBOX_DEFAULT_COLUMNS, *m = &c->cfg->columns;
    bool default_names = m->id && m->aggregate_id && m->type && m->payload && m->created_at &&
                         strcmp(m->id, d->id) == 0 && strcmp(m->aggregate_id, d->aggregate_id) ==
                         0 && strcmp(m->type, d->type) == 0 && strcmp(m->payload, d->payload) ==
                         0 && strcmp(m->created_at, d->created_at) == 0;
    /* The default names get the detailed verdict below (with the ALTER
     * TABLE that fixes each column); a mapping, the relayer's own rule. */
    if (fits < 0 && !default_names) {
        check_report_add(c->report, "columns", CHECK_FAIL, lerr,
                         "map the columns with --layout / --column-* (see --help), or change "
                         "the table");
        PQclear(res);
        return;
    }
    /* The other checks (the payload's size, the topics, the timestamp's
     * index) read the columns the relayer reads: the mapped ones, never a
     * column that merely has a default name. */
    for (int col = 0; col < CHECK_NCOLUMNS; col++) {
        const char *mapped = check_mapped_column(m, (enum check_column) col);
        for (size_t i = 0; mapped != NULL && i < ncols; i++)
            if (strcmp(cols[i].name, mapped) == 0) {
                c->has_column[col] = true;
                if (col == CHECK_COL_PAYLOAD)
                    snprintf(c->payload_type, sizeof c->payload_type, "%s", cols[i].type);
            }
    }
    if (!default_names) {
        check_report_addf(c->report, "columns", CHECK_PASS, NULL, "the mapped columns exist "
                          "with types the relayer relays (id %s, key %s, type %s, payload %s, "
                          "timestamp %s)", m->id, m->aggregate_id ? m->aggregate_id : "(none)",
                          m->type, m->payload, m->created_at ? m->created_at : "(none)");
        PQclear(res);
        return;
    }
    enum check_status worst = CHECK_PASS;
    char detail[2048] = "", fix[1024] = "", why[300];
    size_t dn = 0, fn = 0;
    for (int col = 0; col < CHECK_NCOLUMNS; col++) {
        const char *name = check_column_name((enum check_column) col);
        const char *type = NULL;
        for (int i = 0; i < PQntuples(res) && type == NULL; i++)
            if (strcmp(PQgetvalue(res, i, 0), name) == 0)
                type = PQgetvalue(res, i, 1);
        enum check_status st;
        if (type == NULL) {
            st = CHECK_FAIL;
            snprintf(why, sizeof why, "\"%s\" is missing", name);
            if (fn < sizeof fix)
                fn += (size_t) snprintf(fix + fn, sizeof fix - fn,
                                        "%sALTER TABLE %s ADD COLUMN \"%s\" %s;", fn ? " " : "",
                                        c->qtable, name,
                                        check_column_type((enum check_column) col));
        } else {
            st = check_classify_column((enum check_column) col, type, c->plugin, why,
                                       sizeof why);
            /* an aggregate id need not be a uuid: text holds any */
            const char *to = col == CHECK_COL_AGGREGATE_ID || col == CHECK_COL_TYPE
                                 ? "text"
                                 : check_column_type((enum check_column) col);
            if (st != CHECK_PASS && fn < sizeof fix)
                fn += (size_t) snprintf(fix + fn, sizeof fix - fn,
                                        "%sALTER TABLE %s ALTER COLUMN \"%s\" TYPE %s "
                                        "USING \"%s\"::%s;", fn ? " " : "", c->qtable, name,
                                        to, name, to);
        }
        if (st > worst)
            worst = st;
        if (dn < sizeof detail)
            dn += (size_t) snprintf(detail + dn, sizeof detail - dn, "%s%s", dn ? "; " : "",
                                    why);
    }
    PQclear(res);
    check_report_add(c->report, "columns", worst, detail, worst == CHECK_PASS ? NULL : fix);
}

void check_logged(struct check_ctx *c)
{
    if (!c->table_exists)
        return;
    char msg[MSGLEN];
    const char *p[] = {c->qtable};
    char sql[1500];
    outbox_catalog_logged_sql("to_regclass($1)", sql, sizeof sql);
    PGresult *res = check_query(c, PGRES_TUPLES_OK, sql, 1, p, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "logged", CHECK_FAIL, NULL,
                          "cannot check that the outbox writes WAL: %s", msg);
        return;
    }
    long n = atol(PQgetvalue(res, 0, OUTBOX_LOGGED_COUNT));
    if (n == 0)
        check_report_addf(c->report, "logged", CHECK_PASS, NULL,
                          "the outbox%s writes WAL (no UNLOGGED or temporary table)",
                          c->partitioned ? " and every partition" : "");
    else
        check_report_addf(c->report, "logged", CHECK_FAIL, PQgetvalue(res, 0, OUTBOX_LOGGED_FIX),
                          "%ld table(s) of the outbox are UNLOGGED or temporary: they write no "
                          "WAL, so their rows are never relayed (and the reaper would delete "
                          "them as delivered); republish rows written meanwhile", n);
    PQclear(res);
}

/* The reaper deletes the oldest rows first (created_at < now() - retention
 * ORDER BY created_at, reaper_rows.c); the backfill reads pending rows by id. */
void check_indexes(struct check_ctx *c)
{
    if (!c->table_exists || !c->has_column[CHECK_COL_CREATED_AT])
        return;
    char msg[MSGLEN], fix[600] = "";
    const struct outbox_columns_map *m = &c->cfg->columns;
    const char *p[] = {c->table_oid, m->created_at, m->id};
    PGresult *res = check_query(
        c, PGRES_TUPLES_OK,
        "SELECT coalesce(bool_or(a.attname = $2), false), "
        "coalesce(bool_or(a.attname = $3), false) FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
        "WHERE i.indrelid = $1::oid AND i.indpred IS NULL", 3, p, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "indexes", CHECK_FAIL, NULL, "cannot read the indexes: %s",
                          msg);
        return;
    }
    c->created_at_index = is_true(res, 0, 0);
    bool by_id = is_true(res, 0, 1);
    PQclear(res);
    const char *conc = c->partitioned ? "" : "CONCURRENTLY ";
    /* the default names as sql/001 writes them, a mapped one quoted */
    bool plain_ts = strcmp(m->created_at, OUTBOX_DEFAULT_COLUMNS.created_at) == 0;
    bool plain_id = strcmp(m->id, OUTBOX_DEFAULT_COLUMNS.id) == 0;
    char *qts = plain_ts ? NULL : PQescapeIdentifier(c->conn, m->created_at,
                                                     strlen(m->created_at));
    char *qid = plain_id ? NULL : PQescapeIdentifier(c->conn, m->id, strlen(m->id));
    if (!c->created_at_index)
        snprintf(fix, sizeof fix, "CREATE INDEX %sON %s (%s);", conc, c->qtable,
                 plain_ts ? m->created_at : qts ? qts : "?");
    if (!by_id && c->has_column[CHECK_COL_ID])
        snprintf(fix + strlen(fix), sizeof fix - strlen(fix), "%sCREATE INDEX %sON %s (%s);",
                 *fix ? " " : "", conc, c->qtable, plain_id ? m->id : qid ? qid : "?");
    PQfreemem(qts);
    PQfreemem(qid);
    if (*fix == '\0')
        check_report_add(c->report, "indexes", CHECK_PASS,
                         "indexes on created_at (the reaper) and id (the backfill)", NULL);
    else
        check_report_addf(c->report, "indexes", CHECK_WARN, fix, "%s%s%s%s%s%s",
                          c->created_at_index ? "" : "no index leads with ",
                          c->created_at_index ? "" : m->created_at,
                          c->created_at_index ? "" : ": every reaper batch scans the whole "
                                                     "table. ",
                          by_id ? "" : "No index leads with ", by_id ? "" : m->id,
                          by_id ? "" : ": --backfill pending and check scan the whole table.");
}

void check_privileges(struct check_ctx *c)
{
    if (!c->table_exists)
        return;
    char msg[MSGLEN];
    const char *p[] = {c->qtable};
    PGresult *res = check_query(c, PGRES_TUPLES_OK,
                                "SELECT has_table_privilege($1, 'SELECT'), "
                                "has_table_privilege($1, 'DELETE')", 1, p, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "privileges", CHECK_FAIL, NULL,
                          "cannot read the role's privileges: %s", msg);
        return;
    }
    bool sel = is_true(res, 0, 0), del = is_true(res, 0, 1);
    PQclear(res);
    bool reaper_on = strcmp(c->cfg->retention, "0") != 0;
    char fix[800];
    snprintf(fix, sizeof fix, "GRANT %s%s%s ON %s TO \"%s\"; (as the table's owner)",
             sel ? "" : "SELECT", !sel && !del ? ", " : "", del ? "" : "DELETE", c->qtable,
             c->role);
    if (sel && (del || !reaper_on))
        check_report_addf(c->report, "privileges", CHECK_PASS, NULL,
                          "role %s may SELECT%s the outbox", c->role,
                          del ? " and DELETE" : " (no DELETE: fine, --retention 0)");
    else
        check_report_addf(c->report, "privileges", CHECK_FAIL, fix,
                          "role %s may not %s%s%s the outbox: %s", c->role,
                          sel ? "" : "SELECT", !sel && !del ? " or " : "", del ? "" : "DELETE",
                          !sel ? "the reaper, status and --backfill read it"
                               : "the reaper deletes delivered rows (or run with --retention 0)");
}

/* sql/003_relay_role.sql's tables, with the privileges slot.c, backfill.c
 * and reaper_marks.c use on them. */
void check_bookkeeping(struct check_ctx *c)
{
    if (c->conn == NULL)
        return;
    static const struct {
        const char *table, *privs, *without;
    } books[] = {
        {"public.outbox_relay_slots", "SELECT, INSERT, UPDATE",
         "a dropped slot would be recreated silently and --backfill cannot run"},
        {"public.outbox_relay_reaper_marks", "SELECT, INSERT, DELETE",
         "the reaper keeps every row while the slot lags behind the head"},
    };
    char detail[1200] = "", fix[800] = "", msg[MSGLEN];
    size_t dn = 0, fn = 0;
    bool slots_ok = true, all_ok = true;
    for (size_t i = 0; i < sizeof books / sizeof books[0]; i++) {
        const char *p[] = {books[i].table, books[i].privs};
        PGresult *res = check_query(
            c, PGRES_TUPLES_OK,
            "SELECT to_regclass($1) IS NOT NULL, CASE WHEN to_regclass($1) IS NULL THEN false "
            "ELSE (SELECT bool_and(has_table_privilege(to_regclass($1), trim(x))) FROM "
            "unnest(string_to_array($2, ',')) x) END", 2, p, msg, sizeof msg);
        bool exists = res && is_true(res, 0, 0), ok = res && is_true(res, 0, 1);
        PQclear(res);
        if (i == 0 && exists) { /* the backfill columns: a table from before them */
            const char *q[] = {books[i].table};
            res = check_query(c, PGRES_TUPLES_OK,
                              "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) "
                              "AND attname = 'backfill_state' AND NOT attisdropped", 1, q, msg,
                              sizeof msg);
            if (res == NULL || PQntuples(res) == 0)
                ok = false, exists = false;
            PQclear(res);
        }
        if (exists && ok)
            continue;
        all_ok = false;
        if (i == 0)
            slots_ok = false;
        if (dn < sizeof detail)
            dn += (size_t) snprintf(detail + dn, sizeof detail - dn, "%s%s %s: %s", dn ? "; " : "",
                                    books[i].table,
                                    !exists ? "is missing (or lacks the columns of this version)"
                                            : "is not writable by this role",
                                    books[i].without);
        if (fn < sizeof fix)
            fn += (size_t) snprintf(fix + fn, sizeof fix - fn, "%s%s", fn ? " " : "",
                                    !exists ? "psql -f sql/003_relay_role.sql (as the owner; "
                                              "it is idempotent);"
                                            : "");
        if (exists && fn < sizeof fix)
            fn += (size_t) snprintf(fix + fn, sizeof fix - fn, "GRANT %s ON %s TO \"%s\";",
                                    books[i].privs, books[i].table, c->role);
    }
    if (all_ok)
        check_report_add(c->report, "bookkeeping", CHECK_PASS,
                         "public.outbox_relay_slots and public.outbox_relay_reaper_marks exist "
                         "and are writable", NULL);
    else
        check_report_add(c->report, "bookkeeping",
                         !slots_ok && c->cfg->backfill_pending ? CHECK_FAIL : CHECK_WARN,
                         detail, fix);
}

/* pgoutput only: the relayer's own rules (publication_judge). */
void check_publication(struct check_ctx *c)
{
    if (c->plugin != PLUGIN_PGOUTPUT || !c->table_exists)
        return;
    const struct relay_config *cfg = c->cfg;
    const char *name = cfg->publication;
    char sql[1024], msg[MSGLEN], create[512], fix[1400];
    publication_build_create(name, cfg->table_schema, cfg->table_name, create, sizeof create);
    if (publication_build_lookup(c->conn, name, cfg->table_schema, cfg->table_name, sql,
                                 sizeof sql) < 0)
        return;
    PGresult *res = check_query(c, PGRES_TUPLES_OK, sql, 0, NULL, msg, sizeof msg);
    if (res == NULL) {
        check_report_addf(c->report, "publication", CHECK_FAIL, NULL,
                          "cannot read publication %s: %s", name, msg);
        return;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        const char *p[] = {c->table_oid};
        res = check_query(c, PGRES_TUPLES_OK,
                          "SELECT pg_has_role(relowner, 'USAGE') AND "
                          "has_database_privilege(current_database(), 'CREATE') "
                          "FROM pg_class WHERE oid = $1::oid", 1, p, msg, sizeof msg);
        bool may = res && PQntuples(res) == 1 && is_true(res, 0, 0);
        PQclear(res);
        if (c->slot_exists) {
            snprintf(fix, sizeof fix, "%s; then drop the slot and start with --recreate-slot "
                     "--backfill pending", create);
            check_report_addf(c->report, "publication", CHECK_FAIL, fix,
                              "slot %s exists but publication %s does not: pgoutput cannot "
                              "decode changes written before a publication existed",
                              cfg->slot, name);
        } else if (may) {
            check_report_addf(c->report, "publication", CHECK_PASS, NULL,
                              "publication %s does not exist yet: the relayer creates it (role "
                              "%s owns %s)", name, c->role, c->qtable);
        } else {
            snprintf(fix, sizeof fix, "have the owner of %s run: %s; (sql/008_publication.sql)",
                     c->qtable, create);
            check_report_addf(c->report, "publication", CHECK_FAIL, fix,
                              "publication %s does not exist and role %s may not create it",
                              name, c->role);
        }
        return;
    }
    const char *column;
    enum publication_verdict v = publication_judge(
        is_true(res, 0, 0), is_true(res, 0, 1), is_true(res, 0, 2), c->partitioned,
        &c->cfg->columns, PQgetisnull(res, 0, 3) ? NULL : PQgetvalue(res, 0, 3),
        PQgetisnull(res, 0, 4) ? NULL : PQgetvalue(res, 0, 4), &column);
    const char *t = c->qtable;
    switch (v) {
    case PUBLICATION_OK:
        check_report_addf(c->report, "publication", CHECK_PASS, NULL,
                          "publication %s publishes the inserts into %s", name, t);
        break;
    case PUBLICATION_NO_INSERT:
        snprintf(fix, sizeof fix, "ALTER PUBLICATION \"%s\" SET (publish = 'insert');", name);
        check_report_addf(c->report, "publication", CHECK_FAIL, fix,
                          "publication %s does not publish inserts: no outbox row would reach "
                          "the relayer", name);
        break;
    case PUBLICATION_NOT_VIA_ROOT:
        snprintf(fix, sizeof fix, "ALTER PUBLICATION \"%s\" SET (publish_via_partition_root = "
                 "true);", name);
        check_report_addf(c->report, "publication", CHECK_FAIL, fix,
                          "publication %s publishes the partitions of %s under their own "
                          "names: the relayer needs them under the root", name, t);
        break;
    case PUBLICATION_NOT_COVERED:
        snprintf(fix, sizeof fix, "ALTER PUBLICATION \"%s\" ADD TABLE %s; (as its owner), or "
                 "name another with --publication", name, t);
        check_report_addf(c->report, "publication", CHECK_FAIL, fix,
                          "publication %s does not publish the outbox table %s", name, t);
        break;
    case PUBLICATION_COLUMN_LEFT_OUT:
        snprintf(fix, sizeof fix, "ALTER PUBLICATION \"%s\" SET TABLE %s; (without a column "
                 "list)", name, t);
        check_report_addf(c->report, "publication", CHECK_FAIL, fix,
                          "publication %s has a column list for %s that leaves out \"%s\", "
                          "which every event needs", name, t, column);
        break;
    case PUBLICATION_ROW_FILTER:
        snprintf(fix, sizeof fix, "ALTER PUBLICATION \"%s\" SET TABLE %s; (without a row "
                 "filter) unless skipping those rows is intended", name, t);
        check_report_addf(c->report, "publication", CHECK_WARN, fix,
                          "publication %s has a row filter on %s (WHERE %s): rows it filters "
                          "out never reach Kafka", name, t, PQgetvalue(res, 0, 4));
        break;
    }
    PQclear(res);
}

/* The topics the outbox's current types go to (the newest
 * CHECK_TYPE_SAMPLE rows), and the largest payload among the newest
 * CHECK_PAYLOAD_SAMPLE rows: with the created_at index both read only that
 * many rows, whatever the table's size; without it, that many rows in
 * heap order. Either way statement_timeout-free but bounded by
 * CHECK_QUERY_TIMEOUT. */
void check_contents(struct check_ctx *c)
{
    if (!c->table_exists || !c->has_column[CHECK_COL_TYPE])
        return;
    char sql[1024], msg[MSGLEN], order[200] = "", size[300];
    /* The columns the relayer reads (--layout, --column-*), quoted. */
    const struct outbox_columns_map *m = &c->cfg->columns;
    char *qtype = PQescapeIdentifier(c->conn, m->type, strlen(m->type));
    char *qpay = PQescapeIdentifier(c->conn, m->payload, strlen(m->payload));
    char *qts = c->created_at_index && m->created_at != NULL
                    ? PQescapeIdentifier(c->conn, m->created_at, strlen(m->created_at))
                    : NULL;
    if (qtype == NULL || qpay == NULL ||
        check_payload_size_sql(qpay, c->payload_type, size, sizeof size) < 0) {
        snprintf(c->payload_scope, sizeof c->payload_scope, "not measured: column names");
        goto done;
    }
    if (qts != NULL)
        snprintf(order, sizeof order, " ORDER BY %s DESC", qts);
    snprintf(sql, sizeof sql, "SELECT DISTINCT t::text FROM (SELECT %s AS t FROM %s%s LIMIT "
             CHECK_TYPE_SAMPLE ") s WHERE t IS NOT NULL LIMIT %d", qtype, c->qtable, order,
             CHECK_MAX_TOPICS * 4);
    PGresult *res = check_query(c, PGRES_TUPLES_OK, sql, 0, NULL, msg, sizeof msg);
    if (res != NULL) {
        c->topics_known = true;
        for (int i = 0; i < PQntuples(res) && c->ntopics < CHECK_MAX_TOPICS; i++) {
            char name[256];
            const char *type = PQgetvalue(res, i, 0);
            if (topic_name(c->cfg->topic, type, strlen(type), name, sizeof name) < 0)
                continue; /* the relayer refuses that event; not a topic to look for */
            bool seen = false;
            for (size_t j = 0; j < c->ntopics && !seen; j++)
                seen = strcmp(c->topics[j], name) == 0;
            if (!seen && (c->topics[c->ntopics] = strdup(name)) != NULL)
                c->ntopics++;
        }
        PQclear(res);
    }
    if (!c->has_column[CHECK_COL_PAYLOAD])
        goto done;
    /* The size the relayer sends: bytea's bytes, the text of the rest. */
    snprintf(sql, sizeof sql, "SELECT max(%s), count(*) FROM (SELECT %s FROM %s%s LIMIT "
             CHECK_PAYLOAD_SAMPLE ") s", size, qpay, c->qtable, order);
    res = check_query(c, PGRES_TUPLES_OK, sql, 0, NULL, msg, sizeof msg);
    if (res != NULL) {
        c->max_payload = PQgetisnull(res, 0, 0) ? 0 : atoll(PQgetvalue(res, 0, 0));
        long long rows = c->payload_rows = atoll(PQgetvalue(res, 0, 1));
        snprintf(c->payload_scope, sizeof c->payload_scope, "%s %lld row%s", 
                 rows >= atoll(CHECK_PAYLOAD_SAMPLE)
                     ? (c->created_at_index ? "the newest" : "a first")
                     : "all",
                 rows, rows == 1 ? "" : "s");
        PQclear(res);
    } else {
        snprintf(c->payload_scope, sizeof c->payload_scope, "not measured: %.120s", msg);
    }
done:
    PQfreemem(qtype);
    PQfreemem(qpay);
    PQfreemem(qts);
}
