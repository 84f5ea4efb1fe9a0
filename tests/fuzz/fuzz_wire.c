/*
 * fuzz_wire.c — libFuzzer target for the replication message parser: any
 * bytes as a CopyData frame must parse or fail cleanly, never read out of
 * bounds (the input is copied to an exact-size buffer for ASan).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    struct wire_msg msg = {0};
    char err[128];
    if (wire_parse(buf, size, &msg, err, sizeof err) == 0 && msg.kind == WIRE_XLOGDATA) {
        /* the payload must lie inside the frame */
        volatile char sink = 0;
        for (size_t i = 0; i < msg.data_len; i++)
            sink ^= msg.data[i];
        (void) sink;
    }
    char status[WIRE_STATUS_LEN];
    wire_build_status(status, msg.wal_end, msg.wal_start, 0, 0, size & 1);
    free(buf);
    return 0;
}
