/*
 * dispatch.h — the pure core of the relay: turns decoded replication records
 * (decoder.h) and keepalives into ack-tracker actions and sink requests.
 * No I/O: the sink, the dead-letter topic and the partition catalog are
 * reached through struct dispatch_ops, which the relay fills and unit tests
 * fake (tests/unit/test_dispatch.c).
 *
 * The transitions, for records in stream order:
 *   begin      tracker_begin (inside a transaction: fatal); the commit time
 *              is kept for the tokens of the transaction
 *   insert     into the outbox table (or, partitioned, a table ops->member
 *              says is a partition of it; unknown: fatal): tracker_add (no
 *              transaction open: fatal, a protocol violation), the row is
 *              mapped to an event (decoder_event) and produced under the
 *              token, which is then stamped with the commit time; a row
 *              that maps to no event is undecodable: dead-lettered under
 *              the token when the policy says so, else fatal. Other tables
 *              are skipped
 *   message    transactional with the configured prefix: as an insert;
 *              non-transactional or foreign ones are skipped (a
 *              non-transactional one's time becomes the kept commit time)
 *   commit     tracker_commit at the end of the commit record (none open:
 *              fatal). A transaction without an outbox row still moves the
 *              confirmed position (tracker.h)
 *   keepalive  tracker_idle at the server's position; a reply request asks
 *              for a status update now
 *   none       nothing
 * Fatal errors are protocol violations or undecidable changes: nothing from
 * there on may be confirmed, the caller stops; dispatch_errstr() says why
 * with slot and LSN. The first cause is kept.
 */
#ifndef OUTBOX_RELAY_DISPATCH_H
#define OUTBOX_RELAY_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/base/lsn.h"

#define DISPATCH_ERRLEN 2048

struct outbox_event;
struct tracker;

enum dispatch_rc {
    DISPATCH_OK = 0,
    DISPATCH_STATUS = 1,  /* send a status update now (keepalive asked) */
    DISPATCH_FATAL = -1   /* stop: dispatch_errstr() says why */
};

struct dispatch_options {
    const char *slot;           /* for messages */
    const char *table_schema;   /* the outbox table */
    const char *table_name;
    const char *message_prefix; /* "" or NULL: no logical message is relayed */
    bool dead_letter;           /* undecodable rows go to the dead-letter
                                   topic (--on-poison dead-letter); else fatal */
};

/* The world dispatch acts on. Every function gets ctx. */
struct dispatch_ops {
    /* Produces ev under token. Returns 0 when the sink took it (dispatch
     * stamps the token's group with the commit time), anything else when
     * it did not: the caller has dealt with that (a rewind, a dead letter,
     * a stop, its own fatal error). ev lives only during the call. */
    int (*produce)(void *ctx, const struct outbox_event *ev, uint64_t token);
    /* Sends an undecodable change to the dead-letter topic under token:
     * ev as far as it could be read (event_id the row's, or "lsn-<LSN>"
     * when the id itself could not be read; aggregate_id and type NULL
     * when unknown), the frame (described, or raw) as value, why. Returns
     * >= 0 (sent, or deferred to a rewind that sends it again) or -1
     * (fatal). */
    int (*dead_letter)(void *ctx, uint64_t token, lsn_t lsn, const struct outbox_event *ev,
                       const char *value, size_t value_len, const char *why);
    /* Partitioned outbox only (dispatch_set_partitioned): whether an
     * insert into another table of the outbox's schema is a row of the
     * outbox, as an enum partition_answer (core/partition_rule.h;
     * PARTITION_UNKNOWN fills why). The relay answers it with
     * decoder_shaped and the catalog (pg/partition.h). */
    int (*member)(void *ctx, const struct decoder_record *rec, char *why, size_t whylen);
    /* Partitioned outbox only: the transaction boundaries (pg/partition.h
     * places catalog changes by the commits it saw). */
    void (*tx_begin)(void *ctx, int64_t xid);
    void (*tx_commit)(void *ctx, int64_t xid, lsn_t commit_end);
    void *ctx;
};

struct dispatch;

/* A dispatcher for opts (strings borrowed, must outlive it), acting on
 * tracker and mapping rows through decoder (both borrowed). ops is copied.
 * NULL on OOM. Free with dispatch_free(). */
struct dispatch *dispatch_new(const struct dispatch_options *opts, struct tracker *tracker,
                              struct decoder *decoder, const struct dispatch_ops *ops);
void dispatch_free(struct dispatch *d);

/* Whether the outbox is a partitioned table (known after stream_start):
 * its rows arrive under the names of its partitions. */
void dispatch_set_partitioned(struct dispatch *d, bool partitioned);

/* Decodes one XLogData payload at wal_start with the decoder, then
 * dispatch_record(). A frame the decoder cannot read is fatal. */
int dispatch_frame(struct dispatch *d, const char *data, size_t len, lsn_t wal_start);

/* Acts on one decoded record (see the top). Returns an enum dispatch_rc. */
int dispatch_record(struct dispatch *d, const struct decoder_record *rec);

/* A primary keepalive: the server has sent everything up to wal_end.
 * Returns DISPATCH_STATUS when it asked for a reply, else DISPATCH_OK. */
int dispatch_keepalive(struct dispatch *d, lsn_t wal_end, bool reply_requested);

/* The commit time of the open transaction (Unix µs, 0 unknown). */
int64_t dispatch_commit_us(const struct dispatch *d);

bool dispatch_failed(const struct dispatch *d);
const char *dispatch_errstr(const struct dispatch *d);

/* The in-flight window: whether to read more WAL. */
struct dispatch_window {
    size_t inflight;        /* deliveries not reported yet */
    size_t inflight_bytes;  /* their key + value bytes */
    long max_inflight;
    long max_inflight_bytes;
    bool rewinding;         /* a rewind waits for the deliveries in flight:
                               what would be read is read again after it */
};

bool dispatch_window_open(const struct dispatch_window *w);

#endif
