/*
 * decoder.h — the output-plugin interface: what the relay loop and dispatch
 * know of a logical decoding plugin. Pure: a decoder does no I/O.
 *
 * A decoder turns one replication frame (an XLogData payload and the
 * frame's wal_start) into one plugin-neutral struct decoder_record:
 *
 *   DECODER_BEGIN    a transaction begins: xid, commit timestamp
 *   DECODER_COMMIT   it committed: end_lsn, the end of its commit record
 *   DECODER_INSERT   a row was inserted: schema, table, xid, lsn
 *   DECODER_MESSAGE  a logical message: transactional flag, prefix, lsn
 *   DECODER_NONE     nothing the relayer acts on: updates, deletes,
 *                    truncates, and frames that only update the decoder's
 *                    own state (pgoutput's relation, type, origin messages)
 *
 * An insert or a message maps to a struct outbox_event through
 * decoder_event(); how is the plugin's business. Whether an insert has the
 * outbox's columns at all is decoder_shaped(): for a partitioned outbox
 * whose rows the plugin names after the leaf partition (wal2json), that is
 * the first step of the membership rule (core/partition_rule.h), before the
 * relay loop asks the catalog (pg/partition.h). A plugin that reports rows
 * under the root (pgoutput with publish_via_partition_root,
 * decoder_names_root) never needs the catalog: its inserts carry the
 * outbox's own name.
 *
 * A plugin is one file: a struct decoder_ops and a constructor
 * (decoder_w2j_new in decoder_w2j.c is the first, decoder_pgoutput_new in
 * decoder_pgoutput.c the second). Neither dispatch nor the
 * relay loop names a plugin.
 */
#ifndef OUTBOX_RELAY_DECODER_H
#define OUTBOX_RELAY_DECODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

#define DECODER_ERRLEN 512

struct outbox_event;   /* outbox_event.h; the mapping's output */

enum decoder_kind {
    DECODER_NONE = 0,
    DECODER_BEGIN,
    DECODER_COMMIT,
    DECODER_INSERT,
    DECODER_MESSAGE
};

/* One decoded frame. Strings are NOT NUL-terminated, point into the frame
 * or the decoder and are valid until the next decoder_decode() on the same
 * decoder (or until the frame is freed). A name the plugin sent in a form
 * that cannot be compared as is (wal2json: with JSON escapes) is NULL, so it
 * matches no configured name. kind, wal_start and data are always set, the
 * other fields only for the kinds their comments name: a decoder runs for
 * every frame and need not clear the rest. */
struct decoder_record {
    enum decoder_kind kind;
    lsn_t wal_start;     /* the frame's position (XLogData header) */
    lsn_t lsn;           /* the record's own position: insert, message */
    lsn_t end_lsn;       /* commit: the end of the commit record */
    int64_t xid;         /* begin, commit, insert: -1 unknown */
    int64_t timestamp_us; /* begin: commit time; message: its time;
                             Unix microseconds, 0 unknown */
    const char *schema; size_t schema_len; /* insert */
    const char *table;  size_t table_len;  /* insert */
    bool transactional;  /* message */
    const char *prefix; size_t prefix_len; /* message */
    const char *data; size_t data_len;     /* the raw frame, for dead letters */
};

/* What the plugin is asked for, from the slot's configuration. */
struct decoder_slot {
    const char *table_schema;
    const char *table_name;
    const char *message_prefix; /* "" or NULL: no logical messages */
    bool partitioned;           /* the outbox is a partitioned table */
    const char *publication;    /* pgoutput: the publication; NULL or "":
                                   "outbox_relay" (wal2json ignores it) */
};

struct decoder;

struct decoder_ops {
    const char *plugin;  /* the output plugin's name, for CREATE_REPLICATION_SLOT */
    const char *package; /* what to install when the server lacks it */
    bool publication;    /* the plugin sends what a publication names
                            (publication.h): pgoutput */
    bool names_root;     /* see decoder_names_root(): pgoutput */
    /* See decoder_start_options(). */
    int (*start_options)(const struct decoder_slot *slot, char *buf, size_t cap);
    /* See decoder_decode(). */
    int (*decode)(struct decoder *d, const char *data, size_t len, lsn_t wal_start,
                  struct decoder_record *rec, char *err, size_t errlen);
    /* See decoder_event(). */
    int (*event)(struct decoder *d, const struct decoder_record *rec,
                 struct outbox_event *ev, char *err, size_t errlen);
    /* See decoder_shaped(). */
    bool (*shaped)(struct decoder *d, const struct decoder_record *rec);
    /* See decoder_table_name(). NULL: rec->table is the name as is. */
    int (*table_name)(struct decoder *d, const struct decoder_record *rec, char *buf,
                      size_t cap);
    /* See decoder_describe(). NULL: the frame is text a person can read
     * (wal2json's JSON line) and is its own description. */
    int (*describe)(struct decoder *d, const struct decoder_record *rec, const char **out,
                    size_t *len);
    void (*free)(struct decoder *d);
};

struct outbox_columns_map; /* outbox_event.h */

/* The base every plugin's decoder starts with. */
struct decoder {
    const struct decoder_ops *ops;
    /* The outbox table's columns (borrowed, set by the owner after the
     * constructor and before the first frame; NULL: OUTBOX_DEFAULT_COLUMNS).
     * It may change between frames only while no event is being decoded
     * (layout_check() fills in its types at each connect). */
    const struct outbox_columns_map *columns;
};

/* The wal2json (format-version 2) decoder. NULL on OOM. Free with
 * decoder_free(). */
struct decoder *decoder_w2j_new(void);

/* The pgoutput (protocol version 1, PostgreSQL's built-in plugin) decoder
 * (decoder_pgoutput.c, on pgoutput.h). It keeps the relation cache and the
 * open transaction's xid and commit time across frames. NULL on OOM. Free
 * with decoder_free(). Selected with --plugin pgoutput. */
struct decoder *decoder_pgoutput_new(void);

void decoder_free(struct decoder *d);

/* The last decoded frame (rec) as text a person can read, for the value of
 * a dead letter: wal2json's line as is; pgoutput's binary frame in the
 * shape of a wal2json format-version 2 line ({"action":"I","schema":…,
 * "columns":[{"name","typeoid","value"}…]} or {"action":"M","transactional",
 * "prefix","content"}). *out lives until the next decoder_decode(). Returns
 * 0, or -1 (out of memory: *out is then the raw frame). */
int decoder_describe(struct decoder *d, const struct decoder_record *rec, const char **out,
                     size_t *len);

/* The output plugin's name ("wal2json"). Static storage. */
const char *decoder_plugin(const struct decoder *d);

/* Whether the plugin needs a publication (decoder_ops.publication). */
bool decoder_uses_publication(const struct decoder *d);

/* Whether the plugin names every row of a partitioned outbox by the root
 * table (decoder_ops.names_root): then no catalog lookups and no partition
 * transaction hooks are needed. Otherwise (wal2json) rows arrive under the
 * leaf partitions' names, and which of those belong to the outbox is
 * pg/partition.h's question. */
bool decoder_names_root(const struct decoder *d);

/* What to install when the server lacks the plugin. Static storage. */
const char *decoder_package(const struct decoder *d);

/* Writes the option list of START_REPLICATION for slot into buf (capacity
 * cap), without the parentheses: `"name" 'value', ...`. Values are the
 * plugin's own or validated names (no quote). Returns the length or -1 when
 * cap is too small. */
int decoder_start_options(const struct decoder *d, const struct decoder_slot *slot, char *buf,
                          size_t cap);

/* Decodes one frame of len bytes (not NUL-terminated) at wal_start into
 * *rec. Returns 0, or -1 with a message in err (the frame is malformed: a
 * protocol violation the caller stops on). */
int decoder_decode(struct decoder *d, const char *data, size_t len, lsn_t wal_start,
                   struct decoder_record *rec, char *err, size_t errlen);

/* Maps the last decoded insert or message (rec, as decoder_decode filled
 * it) to an event whose strings live until the next decoder_decode().
 * Returns 0, or -1 with err when the row or message is no event (missing
 * type, bad id: the caller treats it as poison); ev then holds what could
 * be read before the failure (event_id "" when the id itself is bad, the
 * key when it could be read), for the dead letter to name the row by. */
int decoder_event(struct decoder *d, const struct decoder_record *rec, struct outbox_event *ev,
                  char *err, size_t errlen);

/* Whether the last decoded insert (rec, as decoder_decode filled it) has
 * every column an event of the outbox is read from: id, aggregate_id, type,
 * payload and created_at as d->columns maps them (NULL:
 * OUTBOX_DEFAULT_COLUMNS; an unmapped one is not needed; extra columns are
 * not asked for). Names compare as they are, byte for byte (a wal2json
 * column name with JSON escapes matches none). A row without
 * them cannot be an event of the outbox (core/partition_rule.h, step 0).
 * False for anything but an insert. */
bool decoder_shaped(struct decoder *d, const struct decoder_record *rec);

/* The last decoded insert's table name as the server has it (wal2json's
 * escapes undone, where decoder_record.table is NULL), NUL-terminated into
 * buf (capacity cap), for a catalog lookup by name. Returns its length, or
 * -1 when rec is no insert or the name is empty, cannot be read, has a NUL
 * or does not fit. */
int decoder_table_name(struct decoder *d, const struct decoder_record *rec, char *buf,
                       size_t cap);

#endif
