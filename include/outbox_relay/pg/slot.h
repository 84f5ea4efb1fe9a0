/*
 * slot.h — the replication slot's administration, on the replication
 * connection that the stream owns (replication=database: plain SQL in the
 * simple protocol, so literals are escaped with PQescapeLiteral):
 *
 *  - the server and the outbox table: IDENTIFY_SYSTEM names a database,
 *    wal_level = logical, the table exists, neither it nor any partition
 *    is UNLOGGED or temporary (such a table writes no WAL: its rows would
 *    be skipped by decoding, then reaped as delivered);
 *  - the slot: looked up in pg_replication_slots and refused when it is of
 *    another type, plugin or database, or invalidated; a slot held by a
 *    silent or by our own dead walsender is taken over;
 *  - creating it (CREATE_REPLICATION_SLOT, with the on_creating/on_created
 *    hooks the backfill uses), but never silently again after an earlier
 *    slot of the same name was dropped: public.outbox_relay_slots keeps its
 *    history (sql/003_relay_role.sql);
 *  - the backfill marker of that table (backfill.h): a slot whose backfill
 *    has not finished is not streamed.
 *
 * Every function returns an enum stream_rc (stream_rc.h) and says why in
 * err. Nothing here starts replication: that is stream.c's, which also
 * owns the connection; a struct slot only borrows it.
 */
#ifndef OUTBOX_RELAY_SLOT_H
#define OUTBOX_RELAY_SLOT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/pg/stream_rc.h"

/* The slot being administered. Every pointer is borrowed (the stream's);
 * the struct itself holds no resource, so it needs no _free. */
struct outbox_columns_map; /* outbox_event.h */

struct slot {
    PGconn *conn;               /* the replication connection, or NULL */
    const char *name;           /* the slot */
    const char *table_schema;   /* the outbox table */
    const char *table_name;
    const struct outbox_columns_map *columns; /* the outbox's (layout.h); NULL:
                                              OUTBOX_DEFAULT_COLUMNS */
    const char *plugin;         /* output plugin the slot must have */
    bool plugin_auto;           /* no --plugin: an existing slot keeps its
                                   own plugin, a new one is made as
                                   plugin_choose_new says; another plugin
                                   than `plugin` is then STREAM_PLUGIN */
    char switch_to[16];         /* with STREAM_PLUGIN: the plugin to use */
    const char *plugin_package; /* what to install when it is missing */
    bool recreate_slot;         /* stream_options.recreate_slot */
    bool failover_slot;         /* stream_options.failover_slot */
    double takeover_after;      /* stream_options.takeover_after */
    double query_timeout;       /* stream_options.query_timeout */
    int (*on_creating)(void *ctx, bool *export_snapshot, char *err, size_t errlen);
    int (*on_created)(void *ctx, const char *snapshot, lsn_t consistent, bool *drop_slot,
                      char *err, size_t errlen);
    void *on_created_ctx;
    const char *primary_dsn;    /* stream_options.primary_dsn: the primary of
                                   a standby --dsn; NULL or "" none */
    bool in_recovery;           /* the server is a standby (slot_lookup) */
    unsigned timeline; /* the server's, from IDENTIFY_SYSTEM (slot_check_server) */
    char system_id[32]; /* the cluster's system identifier, from the same;
                           "" until then. A promoted standby keeps it. */
    int dead_pid; /* walsender of our last streaming connection, closed since
                     (it may still hold the slot: see slot_lookup) */
    char *err;    /* where failures are said (the stream's errstr) */
    size_t errlen;
};

/* Says why in s->err (printf-style) and returns rc: the one way the
 * slot's administration (slot.c, publication.c, layout.c) reports. */
int slot_fail(struct slot *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Runs sql on the slot's connection with query_timeout (a stalled path
 * cannot hang the setup: without an answer in time the connection is shut
 * down, PQstatus turns CONNECTION_BAD, and NULL is returned). Returns the
 * last result (the caller's, PQclear it). */
PGresult *slot_exec(struct slot *s, const char *sql);

/* IDENTIFY_SYSTEM names a database and wal_level is logical; notes the
 * server's timeline in s->timeline. */
int slot_check_server(struct slot *s);

/* The outbox table exists and writes WAL; *partitioned says whether it is
 * a partitioned table. */
int slot_check_table(struct slot *s, bool *partitioned);

/* Looks the slot up. *exists says whether it is there; when it is and may
 * be streamed, *confirmed is its confirmed_flush_lsn (0 when NULL). A slot
 * held by another walsender is STREAM_BUSY (after terminating the holder
 * when takeover_after or dead_pid allow it). On a standby (17+), a slot
 * that is only a synced copy of the primary's is STREAM_FAILOVER. */
int slot_lookup(struct slot *s, bool *exists, lsn_t *confirmed);

/* Creates the missing slot, unless its history says an earlier one was
 * dropped or lost (STREAM_FATAL without recreate_slot); *created is set
 * once it exists. Then looks it up (*confirmed) and records it in
 * public.outbox_relay_slots. */
int slot_create(struct slot *s, lsn_t *confirmed, bool *created);

/* STREAM_BACKFILL when the slot's backfill marker says 'creating' or
 * 'running'; STREAM_OK when it says anything else, or there is none. */
int slot_check_backfill_marker(struct slot *s);

/* What the server's output_plugin_libraries is (plugin.h): STREAM_OK, or a
 * negative stream_rc with err set when it cannot be asked. */
struct plugin_libs;
int slot_plugin_libraries(struct slot *s, struct plugin_libs *libs);

/* The server refused the existing slot's plugin (msg, from
 * START_REPLICATION): STREAM_REFUSED with the operator's fix in err
 * (plugin_refusal_advice), or a negative stream_rc when the server's list
 * cannot be read. */
int slot_refused(struct slot *s, const char *msg);

/* Whether msg (a server error) says the plugin cannot be loaded. Pure. */
bool slot_plugin_missing(const char *plugin, const char *msg);

/* The package to install (decoder_package(): "postgresql-<version>-wal2json")
 * with <version> replaced by the major version of a server of
 * server_version (PQserverVersion), into buf. Pure. Returns buf. */
const char *slot_package_for(const char *package, int server_version, char *buf, size_t cap);

/* Builds the CREATE_REPLICATION_SLOT command for a server of
 * server_version (PQserverVersion) into buf (capacity cap). Pure; exposed
 * for tests. Returns the length or -1 when buf is too small. */
int slot_build_create_command(const char *name, const char *plugin, int server_version,
                              bool export_snapshot, bool failover, char *buf, size_t cap);

#endif
