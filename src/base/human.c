/*
 * human.c — numbers for people (see human.h).
 */
#include "outbox_relay/base/human.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

char *human_count(uint64_t n, char *buf, size_t cap)
{
    char digits[24], out[32];
    int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long) n);
    size_t o = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
    if (cap > 0)
        snprintf(buf, cap, "%s", out);
    return buf;
}

char *human_bytes(int64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    const char *sign = n < 0 ? "-" : "";
    /* The magnitude as unsigned: -INT64_MIN does not fit an int64_t. */
    uint64_t mag = n < 0 ? (uint64_t) 0 - (uint64_t) n : (uint64_t) n;
    if (cap == 0)
        return buf;
    if (mag < 1024) {
        snprintf(buf, cap, "%s%llu B", sign, (unsigned long long) mag);
        return buf;
    }
    double v = (double) mag / 1024;
    size_t u = 0;
    /* Switch unit before the rounded value would print as "1024.0". */
    while (v >= 1023.95 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%s%.1f %s", sign, v, units[u]);
    return buf;
}

char *human_duration(double s, char *buf, size_t cap)
{
    if (cap == 0)
        return buf;
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "unknown");
        return buf;
    }
    if (s < 0.9995) {
        snprintf(buf, cap, "%.0f ms", s * 1000);
        return buf;
    }
    if (s < 9.95) {
        snprintf(buf, cap, "%.1f s", s);
        return buf;
    }
    unsigned long long t = (unsigned long long) llround(s > 1e15 ? 1e15 : s);
    unsigned long long big, small;
    const char *bu, *su;
    if (t < 60) {
        snprintf(buf, cap, "%llu s", t);
        return buf;
    } else if (t < 3600) {
        big = t / 60, small = t % 60, bu = "min", su = "s";
    } else if (t < 86400) {
        big = t / 3600, small = t % 3600 / 60, bu = "h", su = "min";
    } else {
        big = t / 86400, small = t % 86400 / 3600, bu = "d", su = "h";
    }
    if (small == 0)
        snprintf(buf, cap, "%llu %s", big, bu);
    else
        snprintf(buf, cap, "%llu %s %llu %s", big, bu, small, su);
    return buf;
}
