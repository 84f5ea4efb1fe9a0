/*
 * lsn.h — WAL positions (LSNs) as 64-bit integers, and the one way we print
 * and parse them.
 *
 * Every log line and error that names a WAL position prints it with
 * LSN_FMT / LSN_ARGS so that it matches what PostgreSQL shows in
 * pg_replication_slots ("16/B374D848").
 */
#ifndef OUTBOX_RELAY_LSN_H
#define OUTBOX_RELAY_LSN_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t lsn_t;

#define LSN_FMT "%X/%X"
#define LSN_ARGS(lsn) \
    (unsigned) ((uint64_t) (lsn) >> 32), (unsigned) ((uint64_t) (lsn) & 0xffffffffu)

/* Parses "HI/LO" (hex, as PostgreSQL prints it) from exactly len bytes.
 * Returns 0 and stores the position in *out, or -1 when s is not an LSN. */
int lsn_parse(const char *s, size_t len, lsn_t *out);

#endif
