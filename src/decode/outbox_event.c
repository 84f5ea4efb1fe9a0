/*
 * outbox_event.c — the plugin-neutral parts of decoding an outbox event
 * (see outbox_event.h): the scratch buffer, ids, the logical-message
 * envelope and PostgreSQL timestamps. Knows JSON (the envelope is JSON, via
 * jscan), not wal2json.
 */
#include "outbox_relay/decode/outbox_event.h"

#include "outbox_relay/base/hex.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/decode/jscan.h"

const struct outbox_columns_map OUTBOX_DEFAULT_COLUMNS = {.id = "id",
                                                    .aggregate_id = "aggregate_id",
                                                    .type = "type",
                                                    .payload = "payload",
                                                    .created_at = "created_at"};

void outbox_columns_needed(const struct outbox_columns_map *map,
                           const char *names[OUTBOX_NEEDED_COLUMNS])
{
    const struct outbox_columns_map *m = map != NULL ? map : &OUTBOX_DEFAULT_COLUMNS;
    names[0] = m->id;
    names[1] = m->aggregate_id;
    names[2] = m->type;
    names[3] = m->payload;
    names[4] = m->created_at;
}

int outbox_columns_extra_index(const struct outbox_columns_map *map, const char *name)
{
    for (size_t i = 0; i < map->nextra; i++)
        if (strcmp(map->extra[i].column, name) == 0)
            return (int) i;
    return -1;
}

int outbox_columns_add_extra(struct outbox_columns_map *map, const char *column,
                             const char *header)
{
    int i = outbox_columns_extra_index(map, column);
    if (i >= 0) {
        if (map->extra[i].header == NULL)
            map->extra[i].header = header;
        return i;
    }
    if (map->nextra >= OUTBOX_MAX_EXTRA)
        return -1;
    map->extra[map->nextra] = (struct outbox_extra_column){column, header};
    return (int) map->nextra++;
}

/* ------------------------------------------------------------- scratch */

void outbox_scratch_free(struct outbox_scratch *s)
{
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
    s->cap = 0;
}

int outbox_scratch_reserve(struct outbox_scratch *s, size_t need)
{
    s->len = 0;
    if (need <= s->cap)
        return 0;
    size_t cap = s->cap > 256 ? s->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(s->buf, cap);
    if (p == NULL)
        return -1;
    s->buf = p;
    s->cap = cap;
    return 0;
}

/* -------------------------------------------------------------- events */

void outbox_event_reset(struct outbox_event *ev, lsn_t lsn)
{
    ev->event_id[0] = '\0';
    ev->aggregate_id = NULL;
    ev->aggregate_id_len = 0;
    ev->type = NULL;
    ev->type_len = 0;
    ev->payload = NULL;
    ev->payload_len = 0;
    ev->created_at = NULL;
    ev->created_at_len = 0;
    ev->lsn = lsn;
    ev->message = false;
    memset(ev->extra, 0, sizeof ev->extra);
}

#if defined(__GNUC__)
__attribute__((cold, noinline))
#endif
int outbox_event_fail(char *errbuf, size_t errlen, lsn_t lsn, const char *fmt, ...)
{
    if (errbuf != NULL && errlen > 0) {
        int n = snprintf(errbuf, errlen, "event at LSN " LSN_FMT ": ", LSN_ARGS(lsn));
        if (n >= 0 && (size_t) n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(errbuf + n, errlen - (size_t) n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static inline bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

int outbox_event_set_id(struct outbox_event *ev, const char *text, size_t len, bool sign_ok)
{
    size_t i = sign_ok && len > 0 && text[0] == '-' ? 1 : 0;

    if (len == i || len - i > 19)
        return -1;
    for (size_t k = i; k < len; k++)
        if (!is_digit((unsigned char) text[k]))
            return -1;
    memcpy(ev->event_id, text, len);
    ev->event_id[len] = '\0';
    return 0;
}

int outbox_event_set_text_id(struct outbox_event *ev, const char *text, size_t len)
{
    if (len == 0 || len >= sizeof ev->event_id)
        return -1;
    for (size_t k = 0; k < len; k++)
        if ((unsigned char) text[k] < 0x20 || text[k] == 0x7f)
            return -1;
    memcpy(ev->event_id, text, len);
    ev->event_id[len] = '\0';
    return 0;
}

long outbox_hex_decode(const char *text, size_t len, char *out)
{
    if (len % 2 != 0)
        return -1;
    size_t n = len / 2;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit((unsigned char) text[2 * i]);
        int lo = hex_digit((unsigned char) text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (char) (hi << 4 | lo);
    }
    return (long) n;
}

long outbox_bytea_decode(const char *text, size_t len, char *out)
{
    if (len < 2 || text[0] != '\\' || text[1] != 'x')
        return -1;
    return outbox_hex_decode(text + 2, len - 2, out);
}

void outbox_event_set_message_id(struct outbox_event *ev)
{
    snprintf(ev->event_id, sizeof ev->event_id, "m-%016" PRIX64, (uint64_t) ev->lsn);
    ev->message = true;
}

/* ------------------------------------------------------------ envelope */

static const char *const type_names[] = {"absent", "null", "a boolean", "a number",
                                         "a string", "an object or array"};

/* Whether the key (a scanned string) is name (n bytes, n < 256). */
static bool key_is(const struct jscan_value *key, const char *name, size_t n)
{
    char buf[256];
    size_t got;

    if (!key->escaped)
        return key->len == n && memcmp(key->ptr, name, n) == 0;
    if (jscan_unescape(key->ptr, key->len, buf, sizeof buf - 1, &got) < 0)
        return false;
    return got == n && memcmp(buf, name, n) == 0;
}

/* Hands out a scanned string: a span of the content when it has no escape,
 * else its text appended to the scratch (room reserved by the caller). */
static int take_string(const struct jscan_value *v, struct outbox_scratch *s, const char **ptr,
                       size_t *len)
{
    if (!v->escaped || v->len == 0) {
        *ptr = v->ptr;
        *len = v->len;
        return 0;
    }
    size_t n;
    if (jscan_unescape(v->ptr, v->len, s->buf + s->len, s->cap - s->len, &n) < 0)
        return -1;
    *ptr = s->buf + s->len;
    *len = n;
    s->len += n;
    return 0;
}

/* The envelope's object into agg/type/pay (JSCAN_ABSENT when missing). */
static int scan_envelope(struct jscan *sc, struct jscan_value *agg, struct jscan_value *type,
                         struct jscan_value *pay)
{
    unsigned seen = 0;

    jscan_ws(sc);
    if (jscan_peek(sc) != '{')
        return jscan_fail(sc, sc->pos, "not a JSON object");
    sc->pos++;
    jscan_ws(sc);
    if (jscan_peek(sc) == '}') {
        sc->pos++;
    } else {
        for (;;) {
            struct jscan_value key, tmp, *dst = &tmp;
            size_t key_at = sc->pos;
            unsigned bit = 0;
            if (jscan_peek(sc) != '"')
                return jscan_fail(sc, sc->pos, "expected a key");
            if (jscan_string(sc, &key) < 0)
                return -1;
            jscan_ws(sc);
            if (jscan_expect(sc, ':', "':'") < 0)
                return -1;
            jscan_ws(sc);
            if (key_is(&key, "aggregate_id", 12)) {
                dst = agg;
                bit = 1;
            } else if (key_is(&key, "type", 4)) {
                dst = type;
                bit = 2;
            } else if (key_is(&key, "payload", 7)) {
                dst = pay;
                bit = 4;
            }
            if (seen & bit)
                return jscan_fail(sc, key_at, "duplicate key \"%.*s\"", (int) key.len, key.ptr);
            seen |= bit;
            if (jscan_value(sc, 1, dst) < 0)
                return -1;
            jscan_ws(sc);
            if (jscan_peek(sc) == ',') {
                sc->pos++;
                jscan_ws(sc);
                continue;
            }
            if (jscan_peek(sc) == '}') {
                sc->pos++;
                break;
            }
            return jscan_fail(sc, sc->pos, "expected ',' or '}'");
        }
    }
    jscan_ws(sc);
    if (sc->pos != sc->len)
        return jscan_fail(sc, sc->pos, "trailing garbage");
    return 0;
}

int outbox_event_from_envelope(const char *content, size_t len, struct outbox_scratch *scratch,
                               struct outbox_event *ev, char *errbuf, size_t errlen)
{
    struct jscan_value agg = {JSCAN_ABSENT, false, NULL, 0}, type = agg, pay = agg;
    char serr[256];
    struct jscan sc = {content, len, 0, serr, sizeof serr};

    if (scan_envelope(&sc, &agg, &type, &pay) < 0)
        return outbox_event_fail(errbuf, errlen, ev->lsn, "bad envelope: %s", serr);
    if (type.type != JSCAN_STRING)
        return outbox_event_fail(errbuf, errlen, ev->lsn,
                                 "envelope \"type\" is %s, not a string", type_names[type.type]);
    if (type.len == 0)
        return outbox_event_fail(errbuf, errlen, ev->lsn, "envelope \"type\" is empty");
    if (agg.type != JSCAN_STRING && agg.type != JSCAN_NULL && agg.type != JSCAN_ABSENT)
        return outbox_event_fail(errbuf, errlen, ev->lsn,
                                 "envelope \"aggregate_id\" is %s, not a string",
                                 type_names[agg.type]);
    /* The scanner validated every escape: these fail only when the caller
     * did not reserve the room. */
    if (take_string(&type, scratch, &ev->type, &ev->type_len) < 0 ||
        (agg.type == JSCAN_STRING &&
         take_string(&agg, scratch, &ev->aggregate_id, &ev->aggregate_id_len) < 0))
        return outbox_event_fail(errbuf, errlen, ev->lsn, "envelope: no room in the scratch");
    if (pay.type == JSCAN_STRING) {
        ev->payload = pay.ptr - 1; /* raw: keep the quotes */
        ev->payload_len = pay.len + 2;
    } else if (pay.type != JSCAN_ABSENT) {
        ev->payload = pay.ptr;
        ev->payload_len = pay.len;
    }
    return 0;
}

/* ---------------------------------------------------------- timestamps */

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (what
 * PostgreSQL uses for every date, BC included); y is astronomical (1 BC is
 * year 0). Counts in 400-year eras of 146097 days, years starting in March
 * so that the leap day falls at the end. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Reads exactly n digits at p[*i]; -1 when any is not a digit. */
static long digits(const char *p, size_t len, size_t *i, size_t n)
{
    long x = 0;
    if (len - *i < n)
        return -1;
    for (size_t k = 0; k < n; k++) {
        if (!is_digit((unsigned char) p[*i + k]))
            return -1;
        x = x * 10 + (p[*i + k] - '0');
    }
    *i += n;
    return x;
}

int outbox_timestamp_us(const char *p, size_t n, int64_t *unix_us)
{
    size_t i = 0, ydigits = 0;
    int64_t year = 0;

    if (p == NULL)
        return -1;
    while (i < n && is_digit((unsigned char) p[i])) {
        if (++ydigits > 6)
            return -1;
        year = year * 10 + (p[i++] - '0');
    }
    if (ydigits < 4 || year == 0 || i >= n || p[i++] != '-')
        return -1;
    long mon = digits(p, n, &i, 2);
    if (mon < 1 || mon > 12 || i >= n || p[i++] != '-')
        return -1;
    long day = digits(p, n, &i, 2);
    if (day < 1 || i >= n || (p[i] != ' ' && p[i] != 'T'))
        return -1;
    i++;
    long hh = digits(p, n, &i, 2);
    if (hh < 0 || hh > 23 || i >= n || p[i++] != ':')
        return -1;
    long mi = digits(p, n, &i, 2);
    if (mi < 0 || mi > 59 || i >= n || p[i++] != ':')
        return -1;
    long ss = digits(p, n, &i, 2);
    if (ss < 0 || ss > 59)
        return -1;
    long frac = 0;
    if (i < n && p[i] == '.') {
        size_t fd = 0;
        i++;
        while (i < n && is_digit((unsigned char) p[i])) {
            if (++fd > 6)
                return -1;
            frac = frac * 10 + (p[i++] - '0');
        }
        if (fd == 0)
            return -1;
        for (; fd < 6; fd++)
            frac *= 10;
    }
    if (i >= n || (p[i] != '+' && p[i] != '-'))
        return -1;
    int sign = p[i++] == '-' ? -1 : 1;
    long oh = digits(p, n, &i, 2), om = 0, os = 0;
    if (oh < 0 || oh > 15)
        return -1;
    if (i < n && p[i] == ':') {
        i++;
        om = digits(p, n, &i, 2);
        if (om < 0 || om > 59)
            return -1;
        if (i < n && p[i] == ':') {
            i++;
            os = digits(p, n, &i, 2);
            if (os < 0 || os > 59)
                return -1;
        }
    }
    if (n - i == 3 && memcmp(p + i, " BC", 3) == 0) {
        year = 1 - year;
        i += 3;
    }
    if (i != n)
        return -1;

    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day > mdays[mon - 1] + (mon == 2 && leap))
        return -1;

    int64_t secs = days_from_civil(year, (int) mon, (int) day) * 86400 + hh * 3600 + mi * 60 + ss;
    secs -= sign * (oh * 3600 + om * 60 + os);
    /* Years up to 294276 are valid in PostgreSQL; the last ones do not fit
     * in int64 microseconds since 1970. */
    if (secs > INT64_MAX / 1000000 - 1 || secs < INT64_MIN / 1000000 + 1)
        return -1;
    *unix_us = secs * 1000000 + frac;
    return 0;
}

/* Days since 1970-01-01 to a civil date (the inverse of days_from_civil). */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int) (doy - (153 * mp + 2) / 5 + 1);
    *m = (int) (mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

size_t outbox_time_format(int64_t unix_usec, bool rfc3339, char *buf)
{
    int64_t secs = unix_usec / 1000000, frac = unix_usec % 1000000;
    if (frac < 0) {
        frac += 1000000;
        secs--;
    }
    int64_t days = secs / 86400, rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days--;
    }
    int64_t y;
    int mo, d;
    civil_from_days(days, &y, &mo, &d);
    if (y < 1 || y > 9999)
        return 0;
    int n = snprintf(buf, OUTBOX_TIME_MAX, "%04" PRId64 "-%02d-%02d%c%02d:%02d:%02d", y, mo, d,
                     rfc3339 ? 'T' : ' ', (int) (rem / 3600), (int) (rem / 60 % 60),
                     (int) (rem % 60));
    if (frac != 0) {
        int digits = 6;
        while (frac % 10 == 0) {
            frac /= 10;
            digits--;
        }
        n += snprintf(buf + n, (size_t) (OUTBOX_TIME_MAX - n), ".%0*" PRId64, digits, frac);
    }
    n += snprintf(buf + n, (size_t) (OUTBOX_TIME_MAX - n), rfc3339 ? "Z" : "+00");
    return (size_t) n;
}
