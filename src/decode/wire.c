/*
 * wire.c — parse the server's CopyData frames of the streaming replication
 * sub-protocol and build the client's standby status update. Pure: no I/O,
 * no allocation. The frame is untrusted input: its length is checked
 * against the message kind before a single field is read.
 */
#include "outbox_relay/decode/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define US_PER_S 1000000LL
#define PG_EPOCH_OFFSET_US (WIRE_PG_EPOCH_OFFSET_S * US_PER_S)

static uint64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char) (v & 0xff);
        v >>= 8;
    }
}

/* Two's-complement reinterpretation without relying on the
 * implementation-defined conversion of out-of-range unsigned values. */
static int64_t u64_to_i64(uint64_t u)
{
    if (u <= (uint64_t) INT64_MAX)
        return (int64_t) u;
    return -(int64_t) (~u) - 1;
}

static void set_err(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (errbuf == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

/*
 * Frame layouts (PostgreSQL docs, "Streaming Replication Protocol"; offsets
 * in bytes from the start of the CopyData payload, integers big-endian):
 *
 *   XLogData, at least 25 bytes:
 *     0      Byte1  'w'
 *     1..8   Int64  dataStart — WAL position where `data` starts
 *     9..16  Int64  walEnd    — current end of WAL on the server
 *     17..24 Int64  sendTime  — server clock, µs since 2000-01-01 UTC
 *     25..   Byte n data      — for logical decoding: one plugin output
 *                               record (here one wal2json line), n >= 0
 *
 *   Primary keepalive, exactly 18 bytes:
 *     0      Byte1  'k'
 *     1..8   Int64  walEnd    — current end of WAL on the server
 *     9..16  Int64  sendTime  — server clock, µs since 2000-01-01 UTC
 *     17     Byte1  replyRequested — 1: answer now or be disconnected
 *                               after wal_sender_timeout
 *
 * A keepalive of any other length is rejected rather than read leniently:
 * the layout is fixed, so a different length means we are out of step
 * with the server and nothing after this frame can be trusted.
 */
int wire_parse(const char *buf, size_t len, struct wire_msg *msg, char *errbuf,
               size_t errlen)
{
    const unsigned char *p = (const unsigned char *) buf;

    memset(msg, 0, sizeof(*msg));
    if (buf == NULL || len == 0) {
        set_err(errbuf, errlen, "empty CopyData frame (0 bytes)");
        return -1;
    }

    switch (p[0]) {
    case WIRE_XLOGDATA:
        if (len < WIRE_XLOGDATA_HDR) {
            set_err(errbuf, errlen,
                    "truncated XLogData frame: %zu bytes, header needs %d",
                    len, WIRE_XLOGDATA_HDR);
            return -1;
        }
        msg->kind = WIRE_XLOGDATA;
        msg->wal_start = get_be64(p + 1);
        msg->wal_end = get_be64(p + 9);
        msg->send_time = u64_to_i64(get_be64(p + 17));
        msg->data = buf + WIRE_XLOGDATA_HDR;
        msg->data_len = len - WIRE_XLOGDATA_HDR;
        return 0;

    case WIRE_KEEPALIVE:
        if (len != WIRE_KEEPALIVE_LEN) {
            set_err(errbuf, errlen,
                    "%s primary keepalive frame: %zu bytes, expected %d",
                    len < WIRE_KEEPALIVE_LEN ? "truncated" : "oversized", len,
                    WIRE_KEEPALIVE_LEN);
            return -1;
        }
        msg->kind = WIRE_KEEPALIVE;
        msg->wal_end = get_be64(p + 1);
        msg->send_time = u64_to_i64(get_be64(p + 9));
        msg->reply_requested = p[17] != 0;
        return 0;

    default:
        if (p[0] >= 0x20 && p[0] < 0x7f)
            set_err(errbuf, errlen,
                    "unknown CopyData message kind '%c' (0x%02X), %zu bytes",
                    p[0], p[0], len);
        else
            set_err(errbuf, errlen,
                    "unknown CopyData message kind 0x%02X, %zu bytes", p[0],
                    len);
        return -1;
    }
}

/*
 * Standby status update, exactly 34 bytes:
 *   0      Byte1  'r'
 *   1..8   Int64  write  — last WAL byte + 1 received and written
 *   9..16  Int64  flush  — last WAL byte + 1 flushed (what the slot's
 *                          confirmed_flush_lsn advances to)
 *   17..24 Int64  apply  — last WAL byte + 1 applied
 *   25..32 Int64  clock  — client clock, µs since 2000-01-01 UTC
 *   33     Byte1  replyRequested — 1: ask the server to answer at once
 */
size_t wire_build_status(char *out, lsn_t write, lsn_t flush, lsn_t apply,
                         int64_t now_pg_us, bool reply_requested)
{
    unsigned char *p = (unsigned char *) out;

    p[0] = 'r';
    put_be64(p + 1, write);
    put_be64(p + 9, flush);
    put_be64(p + 17, apply);
    put_be64(p + 25, (uint64_t) now_pg_us);
    p[33] = reply_requested ? 1 : 0;
    return WIRE_STATUS_LEN;
}

/* Saturates instead of overflowing for times ~292,000 years away, which
 * only a corrupt clock value could produce. */
int64_t wire_unix_to_pg_us(int64_t unix_us)
{
    if (unix_us < INT64_MIN + PG_EPOCH_OFFSET_US)
        return INT64_MIN;
    return unix_us - PG_EPOCH_OFFSET_US;
}

int64_t wire_pg_to_unix_us(int64_t pg_us)
{
    if (pg_us > INT64_MAX - PG_EPOCH_OFFSET_US)
        return INT64_MAX;
    return pg_us + PG_EPOCH_OFFSET_US;
}
