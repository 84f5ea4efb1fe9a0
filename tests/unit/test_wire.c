/*
 * test_wire.c — wire_parse against hand-built frames (every truncated
 * length, oversized keepalives, unknown kinds) and wire_build_status
 * against hand-computed big-endian bytes.
 */
#include "outbox_relay/decode/wire.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define US 1000000LL

/* Copies a byte literal into a char buffer without signedness warnings. */
static void bytes(char *dst, const unsigned char *src, size_t n)
{
    memcpy(dst, src, n);
}

static const unsigned char xlog_hdr[WIRE_XLOGDATA_HDR] = {
    'w',
    0x00, 0x00, 0x00, 0x16, 0xB3, 0x74, 0xD8, 0x48, /* dataStart 16/B374D848 */
    0x00, 0x00, 0x00, 0x16, 0xB3, 0x74, 0xD9, 0x00, /* walEnd    16/B374D900 */
    0x00, 0x02, 0xB1, 0x3C, 0x64, 0x85, 0x4E, 0x40, /* sendTime */
};
#define XLOG_SEND_TIME 0x0002B13C64854E40LL

static const unsigned char keepalive[WIRE_KEEPALIVE_LEN] = {
    'k',
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* walEnd */
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, /* sendTime -2 */
    0x01,                                           /* replyRequested */
};

static void test_empty(void)
{
    struct wire_msg m;
    char err[128] = "";

    CHECK_EQ_INT(wire_parse("", 0, &m, err, sizeof(err)), -1);
    CHECK(strstr(err, "empty") != NULL);
    CHECK(strstr(err, "0 bytes") != NULL);

    err[0] = '\0';
    CHECK_EQ_INT(wire_parse(NULL, 0, &m, err, sizeof(err)), -1);
    CHECK(strstr(err, "empty") != NULL);

    /* No error buffer: still refuses, does not crash. */
    CHECK_EQ_INT(wire_parse("", 0, &m, NULL, 0), -1);
}

static void test_xlogdata(void)
{
    char frame[WIRE_XLOGDATA_HDR + 64];
    const char *payload = "{\"action\":\"B\"}";
    size_t plen = strlen(payload);
    struct wire_msg m;
    char err[128] = "";

    bytes(frame, xlog_hdr, sizeof(xlog_hdr));
    memcpy(frame + WIRE_XLOGDATA_HDR, payload, plen);

    CHECK_EQ_INT(wire_parse(frame, WIRE_XLOGDATA_HDR + plen, &m, err, sizeof(err)), 0);
    CHECK_EQ_INT(m.kind, WIRE_XLOGDATA);
    CHECK(m.wal_start == 0x00000016B374D848ULL);
    CHECK(m.wal_end == 0x00000016B374D900ULL);
    CHECK_EQ_INT(m.send_time, XLOG_SEND_TIME);
    CHECK(!m.reply_requested);
    CHECK(m.data == frame + WIRE_XLOGDATA_HDR); /* zero copy */
    CHECK_SPAN(m.data, m.data_len, payload);

    /* Header only: a valid frame with no data. */
    CHECK_EQ_INT(wire_parse(frame, WIRE_XLOGDATA_HDR, &m, err, sizeof(err)), 0);
    CHECK_EQ_INT(m.kind, WIRE_XLOGDATA);
    CHECK_EQ_INT(m.data_len, 0);
    CHECK_SPAN(m.data, m.data_len, "");

    /* Data is opaque bytes: NULs and high bytes pass through untouched. */
    frame[WIRE_XLOGDATA_HDR] = '\0';
    frame[WIRE_XLOGDATA_HDR + 1] = (char) 0xFF;
    CHECK_EQ_INT(wire_parse(frame, WIRE_XLOGDATA_HDR + 2, &m, err, sizeof(err)), 0);
    CHECK_EQ_INT(m.data_len, 2);
    CHECK_EQ_INT((unsigned char) m.data[1], 0xFF);

    /* Every truncated length of the header is refused, naming the count. */
    for (size_t len = 1; len < WIRE_XLOGDATA_HDR; len++) {
        char want[32];

        err[0] = '\0';
        m.kind = 'x';
        CHECK_EQ_INT(wire_parse(frame, len, &m, err, sizeof(err)), -1);
        CHECK(strstr(err, "truncated XLogData") != NULL);
        snprintf(want, sizeof(want), "%zu bytes", len);
        CHECK(strstr(err, want) != NULL);
        CHECK(strstr(err, "25") != NULL);
        CHECK_EQ_INT(m.kind, 0); /* zeroed on failure */
        CHECK(m.data == NULL);
    }
}

static void test_xlogdata_extremes(void)
{
    char frame[WIRE_XLOGDATA_HDR];
    struct wire_msg m;

    memset(frame, 0xFF, sizeof(frame));
    frame[0] = 'w';
    CHECK_EQ_INT(wire_parse(frame, sizeof(frame), &m, NULL, 0), 0);
    CHECK(m.wal_start == UINT64_MAX);
    CHECK(m.wal_end == UINT64_MAX);
    CHECK_EQ_INT(m.send_time, -1);

    memset(frame, 0, sizeof(frame));
    frame[0] = 'w';
    frame[17] = (char) 0x80; /* sendTime = INT64_MIN */
    CHECK_EQ_INT(wire_parse(frame, sizeof(frame), &m, NULL, 0), 0);
    CHECK(m.wal_start == 0);
    CHECK(m.send_time == INT64_MIN);

    frame[17] = 0x7F;
    memset(frame + 18, 0xFF, 7); /* sendTime = INT64_MAX */
    CHECK_EQ_INT(wire_parse(frame, sizeof(frame), &m, NULL, 0), 0);
    CHECK(m.send_time == INT64_MAX);
}

static void test_keepalive(void)
{
    char frame[WIRE_KEEPALIVE_LEN + 32];
    struct wire_msg m;
    char err[128] = "";

    memset(frame, 0, sizeof(frame));
    bytes(frame, keepalive, sizeof(keepalive));
    CHECK_EQ_INT(wire_parse(frame, WIRE_KEEPALIVE_LEN, &m, err, sizeof(err)), 0);
    CHECK_EQ_INT(m.kind, WIRE_KEEPALIVE);
    CHECK(m.wal_end == 0x0102030405060708ULL);
    CHECK_EQ_INT(m.send_time, -2);
    CHECK(m.reply_requested);
    CHECK(m.wal_start == 0);
    CHECK(m.data == NULL);
    CHECK_EQ_INT(m.data_len, 0);

    frame[17] = 0;
    CHECK_EQ_INT(wire_parse(frame, WIRE_KEEPALIVE_LEN, &m, err, sizeof(err)), 0);
    CHECK(!m.reply_requested);
    frame[17] = 2; /* any non-zero byte asks for a reply */
    CHECK_EQ_INT(wire_parse(frame, WIRE_KEEPALIVE_LEN, &m, err, sizeof(err)), 0);
    CHECK(m.reply_requested);

    for (size_t len = 1; len < WIRE_KEEPALIVE_LEN; len++) {
        char want[32];

        err[0] = '\0';
        CHECK_EQ_INT(wire_parse(frame, len, &m, err, sizeof(err)), -1);
        CHECK(strstr(err, "truncated") != NULL);
        CHECK(strstr(err, "keepalive") != NULL);
        snprintf(want, sizeof(want), "%zu bytes", len);
        CHECK(strstr(err, want) != NULL);
        CHECK(strstr(err, "expected 18") != NULL);
        CHECK_EQ_INT(m.kind, 0);
    }
    for (size_t len = WIRE_KEEPALIVE_LEN + 1; len <= sizeof(frame); len++) {
        char want[32];

        err[0] = '\0';
        CHECK_EQ_INT(wire_parse(frame, len, &m, err, sizeof(err)), -1);
        CHECK(strstr(err, "oversized") != NULL);
        CHECK(strstr(err, "keepalive") != NULL);
        snprintf(want, sizeof(want), "%zu bytes", len);
        CHECK(strstr(err, want) != NULL);
        CHECK(strstr(err, "expected 18") != NULL);
        CHECK_EQ_INT(m.kind, 0);
    }
}

static void test_unknown_kind(void)
{
    char frame[64];
    struct wire_msg m;
    char err[128] = "";
    const unsigned char kinds[] = { 'r', 'x', 'W', 'K', 0x00, 0xFF, '\n' };

    memset(frame, 0, sizeof(frame));
    for (size_t i = 0; i < sizeof(kinds); i++) {
        size_t lens[] = { 1, WIRE_KEEPALIVE_LEN, WIRE_XLOGDATA_HDR, sizeof(frame) };

        for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
            char want[32];

            frame[0] = (char) kinds[i];
            err[0] = '\0';
            CHECK_EQ_INT(wire_parse(frame, lens[j], &m, err, sizeof(err)), -1);
            CHECK(strstr(err, "unknown CopyData message kind") != NULL);
            snprintf(want, sizeof(want), "0x%02X", kinds[i]);
            CHECK(strstr(err, want) != NULL);
            snprintf(want, sizeof(want), "%zu bytes", lens[j]);
            CHECK(strstr(err, want) != NULL);
        }
    }
    frame[0] = 'r';
    CHECK_EQ_INT(wire_parse(frame, 1, &m, err, sizeof(err)), -1);
    CHECK(strstr(err, "'r'") != NULL);
}

static void test_small_errbuf(void)
{
    struct wire_msg m;
    char err[8];

    memset(err, 'Z', sizeof(err));
    CHECK_EQ_INT(wire_parse("k", 1, &m, err, sizeof(err)), -1);
    CHECK_EQ_INT(strlen(err), sizeof(err) - 1); /* truncated, terminated */

    memset(err, 'Z', sizeof(err));
    CHECK_EQ_INT(wire_parse("k", 1, &m, err, 1), -1);
    CHECK_EQ_INT(err[0], '\0');
    CHECK_EQ_INT(err[1], 'Z'); /* nothing written past errlen */
}

static void test_status(void)
{
    /* write 16/B374D848, flush 16/B374D800, apply 0/0,
     * clock 0x0002B13C64854E40, reply requested. */
    static const unsigned char want[WIRE_STATUS_LEN] = {
        'r',
        0x00, 0x00, 0x00, 0x16, 0xB3, 0x74, 0xD8, 0x48,
        0x00, 0x00, 0x00, 0x16, 0xB3, 0x74, 0xD8, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x02, 0xB1, 0x3C, 0x64, 0x85, 0x4E, 0x40,
        0x01,
    };
    static const unsigned char want2[WIRE_STATUS_LEN] = {
        'r',
        0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA, 0x99, 0x88,
        0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, /* clock -1 */
        0x00,
    };
    char out[WIRE_STATUS_LEN + 2];

    memset(out, 0x5A, sizeof(out));
    CHECK_EQ_INT(wire_build_status(out, 0x00000016B374D848ULL, 0x00000016B374D800ULL,
                                   0, XLOG_SEND_TIME, true),
                 WIRE_STATUS_LEN);
    CHECK(memcmp(out, want, WIRE_STATUS_LEN) == 0);
    CHECK_EQ_INT(out[WIRE_STATUS_LEN], 0x5A); /* nothing written past 34 */
    CHECK_EQ_INT(out[WIRE_STATUS_LEN + 1], 0x5A);

    CHECK_EQ_INT(wire_build_status(out, 0xFFEEDDCCBBAA9988ULL, 0x0123456789ABCDEFULL,
                                   1, -1, false),
                 WIRE_STATUS_LEN);
    CHECK(memcmp(out, want2, WIRE_STATUS_LEN) == 0);

    /* A status update is client → server: the parser must not take it. */
    CHECK_EQ_INT(wire_parse(out, WIRE_STATUS_LEN, &(struct wire_msg){ 0 }, NULL, 0), -1);
}

/* The clock field survives a trip through a keepalive-shaped frame: the
 * bytes build_status writes are the bytes parse reads. */
static void test_status_roundtrip(void)
{
    const int64_t clocks[] = { 0, 1, -1, INT64_MAX, INT64_MIN, XLOG_SEND_TIME,
                               757382400LL * US };
    const lsn_t lsns[] = { 0, 1, 0x00000016B374D848ULL, UINT64_MAX,
                           0x8000000000000000ULL };
    char out[WIRE_STATUS_LEN];
    char ka[WIRE_KEEPALIVE_LEN];
    struct wire_msg m;

    for (size_t i = 0; i < sizeof(clocks) / sizeof(clocks[0]); i++) {
        for (size_t j = 0; j < sizeof(lsns) / sizeof(lsns[0]); j++) {
            wire_build_status(out, lsns[j], lsns[j], lsns[j], clocks[i], i & 1);
            /* Rebuild a keepalive from the status update's flush, clock
             * and replyRequested bytes and read them back. */
            ka[0] = 'k';
            memcpy(ka + 1, out + 9, 8);   /* flush */
            memcpy(ka + 9, out + 25, 8);  /* clock */
            ka[17] = out[33];
            CHECK_EQ_INT(wire_parse(ka, sizeof(ka), &m, NULL, 0), 0);
            CHECK(m.wal_end == lsns[j]);
            CHECK(m.send_time == clocks[i]);
            CHECK(m.reply_requested == (bool) (i & 1));
        }
    }
}

static void test_epoch(void)
{
    CHECK_EQ_INT(WIRE_PG_EPOCH_OFFSET_S, 946684800LL);
    CHECK_EQ_INT(wire_unix_to_pg_us(0), -946684800LL * US);
    CHECK_EQ_INT(wire_unix_to_pg_us(946684800LL * US), 0);
    CHECK_EQ_INT(wire_pg_to_unix_us(0), 946684800LL * US);
    /* 2024-01-01 00:00:00.000001 UTC: Unix 1704067200 s. */
    CHECK_EQ_INT(wire_unix_to_pg_us(1704067200LL * US + 1), 757382400LL * US + 1);
    CHECK_EQ_INT(wire_pg_to_unix_us(757382400LL * US + 1), 1704067200LL * US + 1);

    const int64_t samples[] = { 0, 1, -1, 1704067200LL * US, -5LL * US,
                                INT64_MAX / 2, INT64_MIN / 2 };
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        CHECK_EQ_INT(wire_pg_to_unix_us(wire_unix_to_pg_us(samples[i])), samples[i]);
        CHECK_EQ_INT(wire_unix_to_pg_us(wire_pg_to_unix_us(samples[i])), samples[i]);
    }

    /* Out of range saturates rather than overflowing. */
    CHECK(wire_unix_to_pg_us(INT64_MIN) == INT64_MIN);
    CHECK(wire_pg_to_unix_us(INT64_MAX) == INT64_MAX);
    CHECK(wire_unix_to_pg_us(INT64_MAX) == INT64_MAX - 946684800LL * US);
    CHECK(wire_pg_to_unix_us(INT64_MIN) == INT64_MIN + 946684800LL * US);
}

int main(void)
{
    test_empty();
    test_xlogdata();
    test_xlogdata_extremes();
    test_keepalive();
    test_unknown_kind();
    test_small_errbuf();
    test_status();
    test_status_roundtrip();
    test_epoch();
    CHECK_DONE();
}
