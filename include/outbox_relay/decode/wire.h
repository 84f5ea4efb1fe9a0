/*
 * wire.h — messages of PostgreSQL's streaming replication sub-protocol, as
 * carried in CopyData after START_REPLICATION. Pure: no I/O.
 *
 * Server → client (first byte is the kind):
 *   'w' XLogData:          Byte1('w') Int64 dataStart Int64 walEnd Int64 sendTime Byte[n] data
 *   'k' Primary keepalive: Byte1('k') Int64 walEnd Int64 sendTime Byte1 replyRequested
 * Client → server:
 *   'r' Standby status:    Byte1('r') Int64 write Int64 flush Int64 apply Int64 clock Byte1 replyRequested
 * All integers are big-endian; times are microseconds since 2000-01-01 UTC.
 */
#ifndef OUTBOX_RELAY_WIRE_H
#define OUTBOX_RELAY_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

#define WIRE_XLOGDATA 'w'
#define WIRE_KEEPALIVE 'k'
#define WIRE_XLOGDATA_HDR 25 /* 1 + 8 + 8 + 8 */
#define WIRE_KEEPALIVE_LEN 18 /* 1 + 8 + 8 + 1 */
#define WIRE_STATUS_LEN 34   /* 1 + 8 + 8 + 8 + 8 + 1 */

/* Seconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define WIRE_PG_EPOCH_OFFSET_S 946684800LL

struct wire_msg {
    char kind;            /* WIRE_XLOGDATA or WIRE_KEEPALIVE */
    lsn_t wal_start;      /* 'w' only */
    lsn_t wal_end;
    int64_t send_time;    /* PostgreSQL epoch microseconds */
    bool reply_requested; /* 'k' only */
    const char *data;     /* 'w' only: points into the frame */
    size_t data_len;
};

/* Parses one CopyData frame. Returns 0 and fills *msg (data points into buf),
 * or -1 with a message in errbuf for an empty, truncated, oversized
 * keepalive or unknown-kind frame. The message names the kind and the
 * byte counts found and expected. errbuf may be NULL (errlen 0). *msg is
 * zeroed on failure. */
int wire_parse(const char *buf, size_t len, struct wire_msg *msg, char *errbuf,
               size_t errlen);

/* Writes a standby status update into out (WIRE_STATUS_LEN bytes) and
 * returns WIRE_STATUS_LEN. now_pg_us is the client clock in PostgreSQL epoch
 * microseconds. */
size_t wire_build_status(char *out, lsn_t write, lsn_t flush, lsn_t apply,
                         int64_t now_pg_us, bool reply_requested);

/* Converts microseconds since the Unix epoch to PostgreSQL epoch and back.
 * Results that would overflow int64_t saturate at INT64_MIN / INT64_MAX. */
int64_t wire_unix_to_pg_us(int64_t unix_us);
int64_t wire_pg_to_unix_us(int64_t pg_us);

#endif
