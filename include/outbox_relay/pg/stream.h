/*
 * stream.h — the replication stream: owns the libpq connection in
 * replication=database mode, on which it has the slot checked and created
 * (slot.h), then START_REPLICATION with the output plugin's options,
 * reading CopyData frames and sending status updates.
 *
 * Errors are split into what a retry can cure (server down, connection
 * lost: STREAM_RETRY), a slot busy with another process (STREAM_BUSY: wait,
 * another relayer may own it) and what it cannot (STREAM_FATAL: wal_level,
 * missing plugin, no REPLICATION attribute, slot of another plugin, slot
 * dropped or invalidated). stream_errstr() says which, with slot and LSN.
 */
#ifndef OUTBOX_RELAY_STREAM_H
#define OUTBOX_RELAY_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/pg/stream_rc.h"
#include "outbox_relay/decode/wire.h"

struct outbox_columns_map; /* outbox_event.h */

struct decoder; /* decoder.h */

struct stream_options {
    const struct decoder *decoder; /* the output plugin: its name and
                                      START_REPLICATION options (borrowed;
                                      NULL: wal2json) */
    const char *dsn;
    const char *slot;
    struct outbox_columns_map *columns; /* checked against the table at each
                                        start, types filled in (layout.h;
                                        borrowed; NULL: not checked) */
    const char *table_schema;
    const char *table_name;
    const char *message_prefix; /* "" or NULL: no logical messages */
    const char *publication;    /* pgoutput: the publication (publication.h);
                                   NULL or "": outbox_relay */
    bool partitioned;           /* builder only: the outbox is a partitioned
                                   table, so ask for every table of its schema
                                   (wal2json names the leaf partition) */
    bool create_slot;           /* create the slot when it does not exist */
    bool recreate_slot;         /* create it even though outbox_relay_slots
                                   says an earlier one was dropped or lost */
    bool failover_slot;         /* create it with FAILOVER (PostgreSQL 17+) */
    const char *primary_dsn;    /* when dsn is a hot standby: its primary, asked
                                   for pg_log_standby_snapshot() while the slot
                                   is created (NULL or "": wait for the
                                   primary's own running-xacts record) */
    bool plugin_auto;           /* no --plugin: an existing slot keeps its
                                   plugin, a new one gets wal2json where the
                                   server allows and has it, else pgoutput
                                   (plugin.h); when that is not the
                                   decoder's, stream_start returns
                                   STREAM_PLUGIN */
    double takeover_after;      /* > 0: terminate a walsender holding the slot
                                   whose client has been silent this long */
    double query_timeout;       /* > 0: longest wait for the answer to a setup
                                   command (a stalled path); the connection is
                                   then closed and STREAM_RETRY returned */
    /* Called when the slot is missing, right before this stream creates
     * it. Returns STREAM_OK to go on (setting *export_snapshot to have the
     * snapshot of the slot's consistent point exported and handed to
     * on_created), or another enum stream_rc (e.g. STREAM_BUSY: another
     * process is about to create it) with a message in err. NULL: create
     * without a snapshot. */
    int (*on_creating)(void *ctx, bool *export_snapshot, char *err, size_t errlen);
    /* Called once, right after this stream created the slot with an
     * exported snapshot, with its name (valid only until the call returns)
     * and the slot's consistent point, before replication starts. Returns
     * STREAM_OK, or another enum stream_rc with a message in err; then
     * *drop_slot says whether to drop the new slot again (so the next start
     * redoes the work) or to keep it, and stream_start returns that rc. */
    int (*on_created)(void *ctx, const char *snapshot, lsn_t consistent, bool *drop_slot,
                      char *err, size_t errlen);
    void *on_created_ctx; /* ctx of both hooks */
};

struct stream;

/* Creates an unconnected stream. The strings in opts are copied. Returns
 * NULL on allocation failure. Free with stream_free(). */
struct stream *stream_new(const struct stream_options *opts);
void stream_free(struct stream *s);

/* Connects, checks the server (wal_level, plugin, slot) and starts
 * replication from max(start, slot's confirmed position). On STREAM_OK,
 * *slot_confirmed holds the slot's confirmed_flush_lsn as the server had it.
 * *created is set when this call created the slot. A slot whose backfill
 * marker in public.outbox_relay_slots says 'creating' or 'running' is not
 * streamed: STREAM_BACKFILL (the connection stays open, as for STREAM_BUSY). */
int stream_start(struct stream *s, lsn_t start, lsn_t *slot_confirmed, bool *created);

/* Reads the next frame without blocking. Returns 1 and fills *msg (valid
 * until the next stream_read), 0 when nothing complete is buffered (wait on
 * stream_socket), or a negative enum stream_rc. */
int stream_read(struct stream *s, struct wire_msg *msg);

/* Pulls whatever the socket has into libpq's buffer (after poll said
 * readable). Returns 0 or a negative enum stream_rc. */
int stream_consume(struct stream *s);

/* Sends a standby status update. Returns 0 or a negative enum stream_rc. */
int stream_send_status(struct stream *s, lsn_t write, lsn_t flush, bool reply_requested);

/* Says in errstr that nothing arrived for silence seconds (the relayer's
 * --wal-receiver-timeout) and returns STREAM_RETRY; the caller then closes
 * the stream and reconnects. */
int stream_timed_out(struct stream *s, double silence);

/* Whether stream_start may create a missing slot. The relayer turns it off
 * once it has streamed from the slot: a slot that disappears later was
 * dropped by someone, and recreating it would silently skip events. */
void stream_set_create_slot(struct stream *s, bool create);

/* The socket to wait on, -1 when not connected. */
int stream_socket(const struct stream *s);

/* Ends the copy politely (CopyDone, drain the results, bounded by
 * timeout_ms) and closes the connection. Safe on a closed stream. */
void stream_stop(struct stream *s, int timeout_ms);

/* Closes the connection at once (after an error). */
void stream_close(struct stream *s);

bool stream_connected(const struct stream *s);

/* The database the connection is to (PQdb), or NULL when not connected. */
const char *stream_database(const struct stream *s);

/* The server's system identifier (IDENTIFY_SYSTEM) of the last connection,
 * or NULL before the first; owned by the stream. */
const char *stream_system_id(const struct stream *s);

/* True while replication is running on the connection (not while a standby
 * merely keeps its connection to look at the slot). */
bool stream_streaming(const struct stream *s);

/* True when the outbox table is partitioned (found by stream_start): its
 * rows arrive under the names of its leaf partitions. */
bool stream_outbox_partitioned(const struct stream *s);

/* The backend pid of the walsender, for logs; 0 when not connected. */
int stream_backend_pid(const struct stream *s);

/* The last error, with context. Valid until the next call. */
const char *stream_errstr(const struct stream *s);

/* After STREAM_PLUGIN: the output plugin to start over with ("wal2json"
 * or "pgoutput"); stream_errstr says why. */
const char *stream_switch_plugin(const struct stream *s);

/* Builds the START_REPLICATION command for opts from start into buf
 * (capacity cap). Pure; exposed for tests. Returns the length or -1. */
int stream_build_start_command(const struct stream_options *opts, lsn_t start, char *buf,
                               size_t cap);

#endif
