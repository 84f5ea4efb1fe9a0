/*
 * partition.c — membership of a partitioned outbox (see partition.h): the
 * catalog lookup of the rule's step 1 and a cache of answers by table name,
 * around the pure decision of core/partition_rule.h. Owns one ordinary
 * connection for the lookups.
 */
#include "outbox_relay/pg/partition.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/pg/pgconn.h"

#define LOOKUP_TIMEOUT 10.0 /* s for the catalog lookup to answer */

#define SEEN_CAPACITY (1u << 20) /* commits remembered: 16 MiB at most */
#define NAME_MAX_LEN 256

/* ---- the map ------------------------------------------------------------ */

struct cached {
    char *name;
    bool member;
    uint64_t tx;  /* transaction counter when asked (for "no" answers) */
    uint64_t gen; /* catalog-only transactions seen when asked (for "yes") */
};

struct partition_map {
    char *dsn, *slot, *schema, *table;
    PGconn *conn;
    struct partition_seen *seen;
    struct cached *cache;
    size_t ncache;
    uint64_t tx;        /* transactions begun */
    uint64_t gen;       /* transactions that showed no row of the schema */
    uint32_t tx_xid;    /* of the open transaction, 0 unknown */
    uint32_t visible_xid; /* last transaction wait_visible() saw visible */
    int guard_log;      /* sql/007's guard log exists: 1, 0, -1 not asked on this connection */
    bool tx_rows;       /* the open transaction showed a row of the schema */
};

struct partition_map *partition_map_new(const char *dsn, const char *slot, const char *schema,
                                        const char *table)
{
    struct partition_map *pm = calloc(1, sizeof *pm);
    if (pm == NULL)
        return NULL;
    pm->guard_log = -1;
    pm->dsn = strdup(dsn ? dsn : "");
    pm->slot = strdup(slot ? slot : "");
    pm->schema = strdup(schema ? schema : "");
    pm->table = strdup(table ? table : "");
    pm->seen = partition_seen_new(SEEN_CAPACITY);
    if (!pm->dsn || !pm->slot || !pm->schema || !pm->table || !pm->seen) {
        partition_map_free(pm);
        return NULL;
    }
    return pm;
}

void partition_map_free(struct partition_map *pm)
{
    if (pm == NULL)
        return;
    PQfinish(pm->conn);
    for (size_t i = 0; i < pm->ncache; i++)
        free(pm->cache[i].name);
    free(pm->cache);
    partition_seen_free(pm->seen);
    free(pm->dsn);
    free(pm->slot);
    free(pm->schema);
    free(pm->table);
    free(pm);
}

void partition_tx_begin(struct partition_map *pm, int64_t xid)
{
    pm->tx++;
    pm->tx_xid = xid > 0 && xid <= UINT32_MAX ? (uint32_t) xid : 0;
    pm->tx_rows = false;
}

void partition_tx_commit(struct partition_map *pm, int64_t xid, lsn_t commit_end)
{
    uint32_t x = xid > 0 && xid <= UINT32_MAX ? (uint32_t) xid : pm->tx_xid;
    if (x != 0)
        partition_seen_add(pm->seen, x, commit_end);
    if (!pm->tx_rows)
        pm->gen++; /* possibly catalog-only: "member" answers are asked again */
    pm->tx_xid = 0;
}

/* The lookup of step 1: one row per relation on the chain from the table
 * named $2 up to its root, nearest first. Catalog reads only (no
 * pg_partition_tree, which locks the partitions: a lookup must not queue
 * behind the reaper's lock on a partition it is about to drop). */
/* $1 schema, $2 the row's table, $3 the outbox, $4 the slot, $5 the row's
 * LSN (with the guard log only). Column 2 says whether the chain row's xmin is known to have
 * committed before the row: older than the slot's catalog_xmin or, with
 * sql/007's guard log, a command the guard let through at a W0 before the
 * row (GUARD_OK; no insert into the table can commit between W0 and that
 * command's commit, so a row decoded past W0 came after it). */
#define LOOKUP_SQL_HEAD                                                                   \
    "WITH RECURSIVE chain(relid, child, depth) AS ("                                      \
    "  SELECT c.oid, 0::oid, 0 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace" \
    "   WHERE n.nspname = $1 AND c.relname = $2"                                          \
    "  UNION ALL"                                                                         \
    "  SELECT i.inhparent, ch.relid, ch.depth + 1 FROM pg_inherits i"                     \
    "    JOIN chain ch ON i.inhrelid = ch.relid WHERE ch.depth < 15),"                    \
    " slot AS (SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = $4)"       \
    " SELECT ch.depth, c.xmin::text,"                                                     \
    "  coalesce(age(c.xmin) > age((SELECT catalog_xmin FROM slot)), false)"
#define GUARD_OK                                                                          \
    " OR EXISTS (SELECT 1 FROM outbox_relay_guard.log g"                 \
    "   WHERE g.relid = (SELECT relid FROM chain WHERE depth = 0)"                        \
    "     AND g.xid::text::bigint % 4294967296 = c.xmin::text::bigint"                   \
    "     AND g.xid::text::bigint >"                                                      \
    "         pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 2147483648"         \
    "     AND g.w0 < $5::pg_lsn)"
static const char LOOKUP_SQL_TAIL[] =
    ","
    "  (n.nspname = $1 AND c.relname = $3),"
    "  EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid"
    "    JOIN pg_type t ON t.oid = k.reltype"
    "    WHERE i.inhrelid = ch.child AND i.inhparent = ch.relid AND i.xmin = t.xmin),"
    "  c.relkind::text"
    " FROM chain ch JOIN pg_class c ON c.oid = ch.relid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace ORDER BY ch.depth";

/* Whether transaction xid is visible to a new snapshot: the 32-bit xid
 * widened with the epoch of the snapshot's xmax (it is older than xmax). */
#define VISIBLE_SQL                                                                       \
    "WITH s AS (SELECT pg_current_snapshot() AS snap),"                                   \
    " x AS (SELECT snap, pg_snapshot_xmax(snap)::text::bigint AS xmax FROM s)"            \
    " SELECT pg_visible_in_snapshot((xmax - ((xmax - $1::bigint) % 4294967296"            \
    "   + 4294967296) % 4294967296)::text::xid8, snap) FROM x"

/* The walsender decodes a commit as soon as its WAL record is flushed,
 * which can be before the committing backend has made it visible to other
 * sessions. A lookup in that moment would see the catalog as it was before
 * the transaction whose rows are being decided (a CREATE TABLE ... PARTITION
 * OF in it would look like no table at all): waits, bounded, until the
 * transaction is visible. */
static int wait_visible(struct partition_map *pm, uint32_t xid, char *err, size_t errlen)
{
    char x[16];
    snprintf(x, sizeof x, "%u", xid);
    const char *params[] = {x};
    double deadline = mono_now() + LOOKUP_TIMEOUT;
    for (;;) {
        char msg[512] = "";
        PGresult *res = pgconn_exec(pm->conn, VISIBLE_SQL, 1, params, LOOKUP_TIMEOUT, msg,
                                    sizeof msg);
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
            PQclear(res); /* msg: pgconn_exec's reason, the server's for an error result */
            snprintf(err, errlen, "cannot tell whether transaction %u is visible yet: %.400s",
                     xid, msg);
            return -1;
        }
        bool visible = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (visible)
            return 0;
        if (mono_now() >= deadline) {
            snprintf(err, errlen, "transaction %u, decoded as committed, is still not visible "
                     "to other sessions after %.0f s", xid, LOOKUP_TIMEOUT);
            return -1;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int lookup(struct partition_map *pm, const char *name, lsn_t at,
                  struct partition_facts *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (pm->conn != NULL && PQstatus(pm->conn) != CONNECTION_OK) {
        PQfinish(pm->conn);
        pm->conn = NULL;
    }
    if (pm->conn == NULL) {
        char msg[512];
        pm->conn = pgconn_open(pm->dsn, "outbox-relay partitions", msg, sizeof msg);
        pm->guard_log = -1;
        if (pm->conn == NULL) {
            snprintf(err, errlen, "cannot connect to PostgreSQL to look the table up: %.400s", msg);
            return -1;
        }
    }
    if (pm->guard_log < 0) { /* once per connection: is sql/007's guard log there? */
        char m[512] = "";
        PGresult *g = pgconn_exec(pm->conn, "SELECT to_regclass("
                                  "'outbox_relay_guard.log') IS NOT NULL",
                                  0, NULL, LOOKUP_TIMEOUT, m, sizeof m);
        if (PQresultStatus(g) == PGRES_TUPLES_OK && PQntuples(g) == 1)
            pm->guard_log = strcmp(PQgetvalue(g, 0, 0), "t") == 0;
        PQclear(g);
        if (pm->guard_log < 0) {
            snprintf(err, errlen, "cannot look the guard log up: %.400s", m);
            return -1;
        }
    }
    /* Once per transaction: visibility, once reached, stays. */
    if (pm->tx_xid != 0 && pm->tx_xid != pm->visible_xid) {
        if (wait_visible(pm, pm->tx_xid, err, errlen) < 0)
            return -1;
        pm->visible_xid = pm->tx_xid;
    }
    char lsn[32], sql[2048];
    snprintf(lsn, sizeof lsn, LSN_FMT, LSN_ARGS(at));
    snprintf(sql, sizeof sql, "%s%s%s", LOOKUP_SQL_HEAD, pm->guard_log ? GUARD_OK : "",
             LOOKUP_SQL_TAIL);
    const char *params[] = {pm->schema, name, pm->table, pm->slot, lsn};
    /* $5 is only in GUARD_OK: the server refuses a parameter the query
     * does not use. */
    int nparams = pm->guard_log ? 5 : 4;
    char msg[512] = "";
    /* Bounded: a stalled path must not hang the relay loop (pgconn.h). */
    PGresult *res = pgconn_exec(pm->conn, sql, nparams, params, LOOKUP_TIMEOUT, msg, sizeof msg);
    int rc = -1;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "cannot look the table up in the catalog: %.400s", msg);
        goto out;
    }
    int n = PQntuples(res);
    f->exists = n > 0 && strcmp(PQgetvalue(res, 0, 0), "0") == 0;
    bool leaf = f->exists && strcmp(PQgetvalue(res, 0, 5), "r") == 0;
    bool links_at_birth = true;
    for (int i = 0; i < n && f->nchain < PARTITION_MAX_DEPTH; i++) {
        f->xmin[f->nchain] = (uint32_t) strtoul(PQgetvalue(res, i, 1), NULL, 10);
        f->xmin_old[f->nchain] = strcmp(PQgetvalue(res, i, 2), "t") == 0;
        f->nchain++;
        if (i > 0 && strcmp(PQgetvalue(res, i, 4), "t") != 0)
            links_at_birth = false;
        if (i > 0 && strcmp(PQgetvalue(res, i, 3), "t") == 0) {
            f->member = leaf;
            break; /* the outbox: what is above it does not matter */
        }
    }
    f->since_birth = f->member && links_at_birth;
    if (!f->member && n > PARTITION_MAX_DEPTH) {
        snprintf(err, errlen, "its inheritance tree is deeper than %d levels",
                 PARTITION_MAX_DEPTH);
        goto out;
    }
    rc = 0;
out:
    PQclear(res);
    return rc;
}

static struct cached *find(struct partition_map *pm, const char *name)
{
    for (size_t i = 0; i < pm->ncache; i++)
        if (strcmp(pm->cache[i].name, name) == 0)
            return &pm->cache[i];
    return NULL;
}

void partition_tx_row(struct partition_map *pm)
{
    pm->tx_rows = true;
}

int partition_member(struct partition_map *pm, const char *name, lsn_t at, char *err,
                     size_t errlen)
{
    pm->tx_rows = true;
    if (name == NULL || *name == '\0' || strlen(name) >= NAME_MAX_LEN) {
        snprintf(err, errlen, "cannot tell whether a table of the schema %s belongs to the "
                 "outbox: its name cannot be read", pm->schema);
        return PARTITION_UNKNOWN;
    }
    struct cached *c = find(pm, name);
    if (c != NULL && (c->member ? c->gen == pm->gen : c->tx == pm->tx))
        return c->member;

    struct partition_facts f;
    char why[512];
    if (lookup(pm, name, at, &f, why, sizeof why) < 0) {
        snprintf(err, errlen, "cannot tell whether table %s.%s belongs to the outbox: %s",
                 pm->schema, name, why);
        return PARTITION_UNKNOWN;
    }
    int answer = partition_decide(&f, pm->seen, pm->tx_xid, at, why, sizeof why);
    if (answer == PARTITION_UNKNOWN) {
        snprintf(err, errlen,
                 "cannot tell whether table %s.%s was a partition of the outbox %s.%s when "
                 "these rows were written (xid %u): %s. Stopping rather than guessing; the "
                 "slot stays before them. To go on: make the table that holds them (renamed or "
                 "detached) a partition of the outbox again, drop the slot and start once with "
                 "--recreate-slot --backfill pending (consumers drop duplicates by event_id); "
                 "sql/007_partition_guard.sql makes such DDL wait for the relayer instead "
                 "(docs/failure-modes.md, \"Partitioned outbox\")",
                 pm->schema, name, pm->schema, pm->table, pm->tx_xid, why);
        return PARTITION_UNKNOWN;
    }
    bool was_member = c != NULL && c->member;
    if (c == NULL) {
        struct cached *grown = realloc(pm->cache, (pm->ncache + 1) * sizeof *grown);
        char *copy = strdup(name);
        if (grown == NULL || copy == NULL) {
            free(copy);
            if (grown != NULL)
                pm->cache = grown;
            return answer; /* not cached: asked again next time */
        }
        pm->cache = grown;
        c = &pm->cache[pm->ncache++];
        *c = (struct cached){.name = copy};
    }
    if (answer && !was_member)
        log_info("slot=%s: relaying partition %s.%s of the outbox", pm->slot, pm->schema, name);
    else if (!answer && was_member)
        log_info("slot=%s: table %s.%s is no longer a partition of the outbox", pm->slot,
                 pm->schema, name);
    c->member = answer;
    c->tx = pm->tx;
    c->gen = pm->gen;
    return answer;
}
