/*
 * progress_record.c — the progress record's value, its parser, the skip
 * rule and the names derived from the slot (see progress_record.h). Pure.
 *
 * The parser reads one flat JSON object of string and integer values: what
 * we write, plus unknown keys a later version may add. It is not a general
 * JSON reader and need not be: a value we cannot read as ours is refused,
 * and the caller stops rather than guess where the slot's events end.
 */
#include "outbox_relay/core/progress_record.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static bool plain(const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char) *s < 0x20)
            return false;
    return true;
}

int progress_record_format(const struct progress_record *rec, char *buf, size_t cap)
{
    if (!plain(rec->slot) || !plain(rec->database) || !plain(rec->transactional_id) ||
        !plain(rec->system_id) || rec->slot[0] == '\0')
        return -1;
    char at[40] = "";
    if (rec->committed_at_ms > 0) {
        time_t secs = (time_t) (rec->committed_at_ms / 1000);
        struct tm tm;
        if (gmtime_r(&secs, &tm) == NULL)
            return -1;
        size_t n = strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(at + n, sizeof at - n, ".%03dZ", (int) (rec->committed_at_ms % 1000));
    }
    int n = snprintf(buf, cap,
                     "{\"format\":\"" PROGRESS_RECORD_FORMAT "\",\"version\":%d,"
                     "\"system_identifier\":\"%s\",\"slot\":\"%s\","
                     "\"database\":\"%s\",\"lsn\":\"" LSN_FMT "\",\"transactional_id\":\"%s\","
                     "\"committed_at\":\"%s\"}",
                     PROGRESS_RECORD_VERSION, rec->system_id, rec->slot, rec->database,
                     LSN_ARGS(rec->lsn), rec->transactional_id, at);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

/* The parser's cursor over [p, end). */
struct cur {
    const char *p, *end;
};

static void skip_ws(struct cur *c)
{
    while (c->p < c->end && isspace((unsigned char) *c->p))
        c->p++;
}

static bool eat(struct cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A string without escapes: its span. */
static bool string(struct cur *c, const char **s, size_t *len)
{
    if (!eat(c, '"'))
        return false;
    const char *start = c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\' || (unsigned char) *c->p < 0x20)
            return false;
        c->p++;
    }
    if (c->p >= c->end)
        return false;
    *s = start;
    *len = (size_t) (c->p - start);
    c->p++;
    return true;
}

/* An integer, or (unknown keys) any bare word such as true, null, 1.5. */
static bool bare(struct cur *c, const char **s, size_t *len)
{
    skip_ws(c);
    const char *start = c->p;
    while (c->p < c->end && (isalnum((unsigned char) *c->p) || *c->p == '-' || *c->p == '+' ||
                             *c->p == '.'))
        c->p++;
    *s = start;
    *len = (size_t) (c->p - start);
    return *len > 0;
}

static bool is_key(const char *k, size_t klen, const char *name)
{
    return strlen(name) == klen && memcmp(k, name, klen) == 0;
}

static int copy_name(char *dst, const char *s, size_t len, const char *what, char *err,
                     size_t errlen)
{
    if (len >= PROGRESS_NAME_MAX) {
        snprintf(err, errlen, "progress record: %s longer than %d bytes", what,
                 PROGRESS_NAME_MAX - 1);
        return -1;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

int progress_record_parse(const char *buf, size_t len, struct progress_record *rec, char *err,
                          size_t errlen)
{
    memset(rec, 0, sizeof *rec);
    struct cur c = {buf, buf + len};
    bool format = false, slot = false, lsn = false;
    if (!eat(&c, '{'))
        goto malformed;
    if (eat(&c, '}'))
        goto check;
    do {
        const char *k, *v;
        size_t klen, vlen;
        bool quoted;
        if (!string(&c, &k, &klen) || !eat(&c, ':'))
            goto malformed;
        skip_ws(&c);
        quoted = c.p < c.end && *c.p == '"';
        if (quoted ? !string(&c, &v, &vlen) : !bare(&c, &v, &vlen))
            goto malformed;
        if (is_key(k, klen, "format")) {
            if (!quoted || !is_key(v, vlen, PROGRESS_RECORD_FORMAT)) {
                snprintf(err, errlen, "not a progress record: format is \"%.*s\"", (int) vlen, v);
                return -1;
            }
            format = true;
        } else if (is_key(k, klen, "version")) {
            int ver = 0;
            for (size_t i = 0; i < vlen && ver < 1000000; i++) {
                if (quoted || !isdigit((unsigned char) v[i]))
                    goto malformed;
                ver = ver * 10 + (v[i] - '0');
            }
            rec->version = ver;
        } else if (is_key(k, klen, "slot")) {
            if (!quoted || vlen == 0 || copy_name(rec->slot, v, vlen, "slot", err, errlen) < 0)
                return vlen == 0 ? (snprintf(err, errlen, "progress record: empty slot"), -1)
                                 : -1;
            slot = true;
        } else if (is_key(k, klen, "system_identifier")) {
            if (!quoted || vlen >= PROGRESS_SYSID_MAX) {
                snprintf(err, errlen, "progress record: system_identifier \"%.*s\" is not one",
                         (int) vlen, v);
                return -1;
            }
            memcpy(rec->system_id, v, vlen);
            rec->system_id[vlen] = '\0';
        } else if (is_key(k, klen, "database")) {
            if (!quoted || copy_name(rec->database, v, vlen, "database", err, errlen) < 0)
                return -1;
        } else if (is_key(k, klen, "transactional_id")) {
            if (!quoted ||
                copy_name(rec->transactional_id, v, vlen, "transactional_id", err, errlen) < 0)
                return -1;
        } else if (is_key(k, klen, "lsn")) {
            if (!quoted || lsn_parse(v, vlen, &rec->lsn) < 0) {
                snprintf(err, errlen, "progress record: lsn \"%.*s\" is not a WAL position",
                         (int) vlen, v);
                return -1;
            }
            lsn = true;
        }
        /* committed_at and unknown keys: for people, or for later versions */
    } while (eat(&c, ','));
    if (!eat(&c, '}'))
        goto malformed;
    skip_ws(&c);
    if (c.p != c.end)
        goto malformed;
check:
    if (!format) {
        snprintf(err, errlen, "not a progress record: no \"format\":\"" PROGRESS_RECORD_FORMAT
                 "\"");
        return -1;
    }
    if (rec->version < 1 || rec->version > PROGRESS_RECORD_VERSION) {
        snprintf(err, errlen, "progress record of version %d: this relayer reads version %d%s",
                 rec->version, PROGRESS_RECORD_VERSION,
                 rec->version > PROGRESS_RECORD_VERSION ? " (a newer relayer wrote it)" : "");
        return -1;
    }
    if (!slot || !lsn) {
        snprintf(err, errlen, "progress record without %s", !slot ? "slot" : "lsn");
        return -1;
    }
    return 0;
malformed:
    snprintf(err, errlen, "progress record is not a flat JSON object of plain strings and "
             "numbers (at byte %zu of %zu)", (size_t) (c.p - buf), len);
    return -1;
}

int progress_record_key(const char *system_id, const char *slot, char *buf, size_t cap)
{
    int n = system_id != NULL && *system_id != '\0' ? snprintf(buf, cap, "%s.%s", system_id, slot)
                                                   : snprintf(buf, cap, "%s", slot);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

enum progress_owner progress_record_owner(const struct progress_record *rec,
                                          const char *system_id, const char *txn_id)
{
    if (rec->system_id[0] != '\0')
        return system_id != NULL && strcmp(rec->system_id, system_id) == 0 ? PROGRESS_OURS
                                                                           : PROGRESS_FOREIGN;
    /* Written before the field: its transactional.id may say. */
    if (txn_id != NULL && *txn_id != '\0' && strcmp(rec->transactional_id, txn_id) == 0)
        return PROGRESS_OURS;
    const char *t = rec->transactional_id;
    const char *prefix = "outbox-relay.";
    size_t plen = strlen(prefix), slen = strlen(rec->slot);
    if (strncmp(t, prefix, plen) != 0)
        return PROGRESS_UNKNOWN;
    const char *id = t + plen, *dot = strchr(id, '.');
    size_t idlen = dot ? (size_t) (dot - id) : 0;
    bool digits = idlen > 0;
    for (size_t i = 0; i < idlen; i++)
        digits = digits && isdigit((unsigned char) id[i]);
    /* "outbox-relay.<digits>.<slot>": a system identifier, another one than
     * ours (ours would have matched txn_id unless -X transactional.id). */
    if (digits && strcmp(dot + 1, rec->slot) == 0 && slen > 0) {
        if (system_id != NULL && strlen(system_id) == idlen && memcmp(id, system_id, idlen) == 0)
            return PROGRESS_OURS;
        return PROGRESS_FOREIGN;
    }
    return PROGRESS_UNKNOWN;
}

bool progress_skip(lsn_t progress, lsn_t commit_end)
{
    return commit_end <= progress;
}

lsn_t progress_start_lsn(lsn_t slot_confirmed, lsn_t progress)
{
    return slot_confirmed > progress ? slot_confirmed : progress;
}

int progress_transactional_id(const char *system_id, const char *slot, char *buf, size_t cap)
{
    int n = system_id != NULL && *system_id != '\0'
                ? snprintf(buf, cap, "outbox-relay.%s.%s", system_id, slot)
                : snprintf(buf, cap, "outbox-relay.%s", slot);
    return n < 0 || (size_t) n >= cap ? -1 : n;
}

int32_t progress_partition(const char *key, size_t len, int32_t nparts)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char) key[i];
        h *= 16777619u;
    }
    return nparts > 0 ? (int32_t) (h % (uint32_t) nparts) : 0;
}
