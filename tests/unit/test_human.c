/*
 * test_human.c — the human units printed beside exact figures (status,
 * progress lines): separators, binary units at their edges, durations in
 * two units, unknown values.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/base/human.h"

static void test_count(void)
{
    char b[HUMAN_LEN];
    CHECK_STR(human_count(0, b, sizeof b), "0");
    CHECK_STR(human_count(999, b, sizeof b), "999");
    CHECK_STR(human_count(1000, b, sizeof b), "1,000");
    CHECK_STR(human_count(120000, b, sizeof b), "120,000");
    CHECK_STR(human_count(1234567, b, sizeof b), "1,234,567");
    CHECK_STR(human_count(UINT64_MAX, b, sizeof b), "18,446,744,073,709,551,615");
    char small[4];
    CHECK_STR(human_count(123456, small, sizeof small), "123"); /* truncated, terminated */
}

static void test_bytes(void)
{
    char b[HUMAN_LEN];
    CHECK_STR(human_bytes(0, b, sizeof b), "0 B");
    CHECK_STR(human_bytes(1023, b, sizeof b), "1023 B");
    CHECK_STR(human_bytes(1024, b, sizeof b), "1.0 KiB");
    CHECK_STR(human_bytes(1864, b, sizeof b), "1.8 KiB");
    CHECK_STR(human_bytes(12345678, b, sizeof b), "11.8 MiB");
    CHECK_STR(human_bytes(1048575, b, sizeof b), "1.0 MiB"); /* not "1024.0 KiB" */
    CHECK_STR(human_bytes(1073741824, b, sizeof b), "1.0 GiB");
    CHECK_STR(human_bytes((int64_t) 5 << 40, b, sizeof b), "5.0 TiB");
    CHECK_STR(human_bytes(INT64_MAX, b, sizeof b), "8.0 EiB");
    CHECK_STR(human_bytes(-2048, b, sizeof b), "-2.0 KiB");
    CHECK_STR(human_bytes(INT64_MIN, b, sizeof b), "-8.0 EiB");
}

static void test_duration(void)
{
    char b[HUMAN_LEN];
    CHECK_STR(human_duration(0, b, sizeof b), "0 ms");
    CHECK_STR(human_duration(0.006, b, sizeof b), "6 ms");
    CHECK_STR(human_duration(0.9999, b, sizeof b), "1.0 s");
    CHECK_STR(human_duration(4.24, b, sizeof b), "4.2 s");
    CHECK_STR(human_duration(21, b, sizeof b), "21 s");
    CHECK_STR(human_duration(59.6, b, sizeof b), "1 min");
    CHECK_STR(human_duration(93, b, sizeof b), "1 min 33 s");
    CHECK_STR(human_duration(3600, b, sizeof b), "1 h");
    CHECK_STR(human_duration(7300, b, sizeof b), "2 h 1 min");
    CHECK_STR(human_duration(604790, b, sizeof b), "6 d 23 h");
    CHECK_STR(human_duration(-1, b, sizeof b), "unknown");
    CHECK_STR(human_duration(NAN, b, sizeof b), "unknown");
    CHECK_STR(human_duration(INFINITY, b, sizeof b), "unknown");
    CHECK(strlen(human_duration(1e300, b, sizeof b)) < HUMAN_LEN);
}

int main(void)
{
    test_count();
    test_bytes();
    test_duration();
    CHECK_DONE();
}
