/*
 * human.h — numbers as a person reads them: "1,234,567", "11.8 MiB",
 * "1 min 33 s". Used beside the exact figure (status, progress lines),
 * never instead of it: scripts read the exact one.
 *
 * Pure: no I/O, no state. Each writes into the caller's buffer (truncated
 * to cap, always NUL-terminated when cap > 0) and returns it, so that a
 * call can sit inside a printf argument list.
 */
#ifndef OUTBOX_RELAY_HUMAN_H
#define OUTBOX_RELAY_HUMAN_H

#include <stddef.h>
#include <stdint.h>

#define HUMAN_LEN 32 /* enough for any value below */

/* A count with thousands separators: 1234567 -> "1,234,567". */
char *human_count(uint64_t n, char *buf, size_t cap);

/* Bytes in binary units with one decimal: 512 -> "512 B", 1900 ->
 * "1.9 KiB", 12345678 -> "11.8 MiB", up to EiB; negative values keep
 * their sign. */
char *human_bytes(int64_t n, char *buf, size_t cap);

/* A duration in at most two units: 0.006 -> "6 ms", 4.2 -> "4.2 s",
 * 93 -> "1 min 33 s", 7300 -> "2 h 1 min", 604790 -> "6 d 23 h"; a
 * negative or non-finite value -> "unknown". */
char *human_duration(double seconds, char *buf, size_t cap);

#endif
