/*
 * check_internal.h — what the preflight's files share (check.h is the
 * public side): the state the checks pass along, and the checks
 * themselves, each a function that adds its items to the report.
 *
 * check.c runs the table in order; a check that needs something an earlier
 * one found missing (no connection, no table) adds nothing, since the
 * earlier FAIL already says what to fix first.
 */
#ifndef OUTBOX_RELAY_CHECK_INTERNAL_H
#define OUTBOX_RELAY_CHECK_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "outbox_relay/ops/check.h"
#include "outbox_relay/ops/check_report.h"
#include "outbox_relay/ops/check_verdict.h"
#include "outbox_relay/pg/plugin.h"

#define CHECK_QUERY_TIMEOUT 15.0 /* s: pgconn_exec's deadline for one query */
#define CHECK_STATEMENT_TIMEOUT "10s" /* the server's, below it: a cancel, not a lost link */
#define CHECK_MAX_TOPICS 64      /* topics listed from the outbox's types */
#define CHECK_TYPE_SAMPLE "10000"   /* newest rows whose types name the topics */
#define CHECK_PAYLOAD_SAMPLE "100000" /* newest rows whose payloads are measured */

/* What the checks learn and pass on. Borrowed: cfg, report. */
struct check_ctx {
    const struct relay_config *cfg;
    struct check_report *report;
    PGconn *conn;          /* ordinary connection; NULL when it failed */
    int server_version;
    struct plugin_libs libs; /* the server's output_plugin_libraries */
    enum relay_plugin plugin; /* cfg's, or what PLUGIN_AUTO resolves to
                                 (check_plugin): what the relayer would use */
    char role[128];        /* current_user */
    bool superuser, replication;
    bool wal_logical;
    bool slots_free;       /* a slot can be created (or ours exists) */
    bool slot_exists;
    bool table_exists, partitioned;
    char table_oid[16];
    char qtable[300];      /* "schema"."table", quoted */
    bool has_column[CHECK_NCOLUMNS]; /* the relayer's column c (its mapped name) exists */
    char payload_type[64]; /* of that payload column (format_type, no typmod) */
    bool created_at_index;
    long long max_payload; /* bytes, -1 unknown */
    long long payload_rows; /* rows it was measured over */
    char payload_scope[160]; /* what max_payload was measured on */
    char *topics[CHECK_MAX_TOPICS]; /* the outbox's current topics (owned) */
    size_t ntopics;
    bool topics_known;     /* the types could be read */
};

/* check_pg.c: runs sql (text parameters) on ctx->conn. Returns the result when its
 * status is want (the caller's, PQclear it), or NULL with the server's
 * reason in msg. */
PGresult *check_query(struct check_ctx *c, ExecStatusType want, const char *sql, int nparams,
                      const char *const *params, char *msg, size_t msglen);

/* check_pg.c: the server, the role, the plugin, slots and settings. */
void check_server(struct check_ctx *c);
void check_wal_level(struct check_ctx *c);
void check_role(struct check_ctx *c);
void check_replication_slots(struct check_ctx *c);
void check_wal_senders(struct check_ctx *c);
void check_plugin(struct check_ctx *c);
void check_keep_size(struct check_ctx *c);
void check_sender_timeout(struct check_ctx *c);
void check_slot(struct check_ctx *c);

/* check_failover.c: failover slots on a primary, the slot's copy (or the
 * standby's own slot) on a standby. */
void check_failover(struct check_ctx *c);

/* check_table.c: the outbox table, its privileges, the bookkeeping tables,
 * the publication, the payloads and types in it. */
void check_table(struct check_ctx *c);
/* check_eos.c: --delivery exactly-once's needs (the coordinator, the
 * transaction timeout, the progress topic). */
void check_exactly_once(struct check_ctx *c);
void check_columns(struct check_ctx *c);
void check_logged(struct check_ctx *c);
void check_indexes(struct check_ctx *c);
void check_privileges(struct check_ctx *c);
void check_bookkeeping(struct check_ctx *c);
void check_publication(struct check_ctx *c);
void check_contents(struct check_ctx *c);

/* check_kafka.c: reachability, topics, record size. */
void check_kafka(struct check_ctx *c);

#endif
