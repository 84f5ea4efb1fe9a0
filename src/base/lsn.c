/*
 * lsn.c — parse WAL positions printed as "HI/LO" hex.
 */
#include "outbox_relay/base/lsn.h"

#include "outbox_relay/base/hex.h"

int lsn_parse(const char *s, size_t len, lsn_t *out)
{
    uint64_t hi = 0, lo = 0;
    size_t i = 0, ndigits = 0;

    for (; i < len && s[i] != '/'; i++, ndigits++) {
        int d = hex_digit((unsigned char) s[i]);
        if (d < 0 || ndigits >= 8)
            return -1;
        hi = (hi << 4) | (uint64_t) d;
    }
    if (ndigits == 0 || i == len)
        return -1;
    i++; /* '/' */
    ndigits = 0;
    for (; i < len; i++, ndigits++) {
        int d = hex_digit((unsigned char) s[i]);
        if (d < 0 || ndigits >= 8)
            return -1;
        lo = (lo << 4) | (uint64_t) d;
    }
    if (ndigits == 0)
        return -1;
    *out = (hi << 32) | lo;
    return 0;
}
