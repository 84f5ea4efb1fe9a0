/*
 * config_columns.c — the relayer's column options (--layout, --column-*,
 * --header-column and the {column}s of --topic) into the column map of
 * struct relay_config (see config.h), and the plain-identifier check that
 * these and the --table name share (config_ident_ok). Pure. config.c calls
 * into this file; nothing here calls back into config.c.
 */
#include "outbox_relay/config/config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "outbox_relay/kafka/topic.h"

bool config_ident_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9') || (i > 0 && c == '$')))
            return false;
    }
    return true;
}

/* A column option's value: the layout's default when not given, NULL for
 * "" or "none" (only where none_ok). */
static int column_option(const char *opt, const char *given, const char *dflt, bool none_ok,
                         const char **out, char *err, size_t errlen)
{
    const char *v = given != NULL ? given : dflt;
    if (v == NULL || *v == '\0' || strcmp(v, "none") == 0) {
        if (!none_ok) {
            snprintf(err, errlen, "--%s cannot be none: the relayer needs that column", opt);
            return -1;
        }
        *out = NULL;
        return 0;
    }
    if (!config_ident_ok(v, strlen(v))) {
        snprintf(err, errlen, "--%s \"%s\" must be a plain column name (letters, digits, '_', "
                 "'$'; at most 63)", opt, options_safe_to_echo(v) ? v : "?");
        return -1;
    }
    *out = v;
    return 0;
}

static char *keep(struct relay_config *cfg, const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof cfg->extra_strs / sizeof cfg->extra_strs[0]; i++)
        if (cfg->extra_strs[i] == NULL)
            return cfg->extra_strs[i] = strndup(s, n);
    return NULL;
}

/* Headers the relayer writes itself: a column may not take their names. */
static bool header_reserved(const char *h)
{
    static const char *const names[] = {"event_id", "event_type", "created_at", NULL};
    for (const char *const *n = names; *n; n++)
        if (strcmp(h, *n) == 0)
            return true;
    return strncmp(h, "ce_", 3) == 0 || strcasecmp(h, "content-type") == 0;
}

/* --layout and --column-* into cfg->columns; --header-column into its
 * extra columns. */
int config_build_columns(struct relay_config *cfg, char *err, size_t errlen)
{
    bool dbz = cfg->layout == LAYOUT_DEBEZIUM;
    struct outbox_columns_map *m = &cfg->columns;
    for (size_t i = 0; i < sizeof cfg->extra_strs / sizeof cfg->extra_strs[0]; i++) {
        free(cfg->extra_strs[i]);
        cfg->extra_strs[i] = NULL;
    }
    memset(m, 0, sizeof *m);
    if (column_option("column-id", cfg->column_id, "id", false, &m->id, err, errlen) < 0 ||
        column_option("column-key", cfg->column_key, dbz ? "aggregateid" : "aggregate_id", true,
                      &m->aggregate_id, err, errlen) < 0 ||
        column_option("column-type", cfg->column_type, "type", false, &m->type, err,
                      errlen) < 0 ||
        column_option("column-payload", cfg->column_payload, "payload", false, &m->payload, err,
                      errlen) < 0 ||
        column_option("column-created-at", cfg->column_created_at, dbz ? NULL : "created_at",
                      true, &m->created_at, err, errlen) < 0)
        return -1;
    /* Debezium's id is a uuid (layout_check() reads the real type); its
     * event router sends it as header "id". */
    m->id_kind = dbz ? OUTBOX_ID_TEXT : OUTBOX_ID_INTEGER;
    cfg->id_header = dbz ? "id" : NULL;
    /* The reaper deletes by age: without a timestamp column it is off. */
    if (m->created_at == NULL && strcmp(cfg->retention, "0") != 0) {
        free(cfg->retention);
        if ((cfg->retention = strdup("0")) == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (!dbz && cfg->topic == NULL)
        cfg->topic = strdup("{prefix}");
    if (dbz && cfg->topic == NULL)
        cfg->topic = strdup("outbox.event.{aggregatetype}");
    if (cfg->topic == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }

    for (const char *p = cfg->header_columns; p != NULL && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t clen = colon ? (size_t) (colon - p) : len;
        const char *h = colon ? colon + 1 : p;
        size_t hlen = colon ? len - clen - 1 : len;
        bool hok = hlen > 0 && hlen <= 255;
        for (size_t i = 0; hok && i < hlen; i++)
            hok = isgraph((unsigned char) h[i]) && h[i] != ':';
        if (!config_ident_ok(p, clen) || !hok) {
            snprintf(err, errlen, "--header-column \"%.*s\" must be NAME or NAME:HEADER (NAME "
                     "a column of the outbox table, HEADER printable without spaces)",
                     (int) (len > 80 ? 80 : len), p);
            return -1;
        }
        char *col = keep(cfg, p, clen), *hdr = keep(cfg, h, hlen);
        if (col == NULL || hdr == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (header_reserved(hdr) || (cfg->id_header && strcmp(hdr, cfg->id_header) == 0)) {
            snprintf(err, errlen, "--header-column %s: header \"%s\" is one the relayer sets "
                     "itself; name another with %s:HEADER", col, hdr, col);
            return -1;
        }
        int i = outbox_columns_extra_index(m, col);
        if (i >= 0 || outbox_columns_add_extra(m, col, hdr) < 0) {
            snprintf(err, errlen, i >= 0 ? "--header-column %s is given twice"
                                         : "--header-column %s: at most %d header columns",
                     col, OUTBOX_MAX_EXTRA);
            return -1;
        }
        p += len + (end != NULL);
    }
    return 0;
}

/* The {column}s of --topic become extra columns (values, no header). */
int config_topic_columns(struct relay_config *cfg, char *err, size_t errlen)
{
    const char *pos = cfg->topic;
    char name[64];
    int r;
    while ((r = topic_next_column(&pos, name, sizeof name)) > 0) {
        char *col = outbox_columns_extra_index(&cfg->columns, name) >= 0
                        ? NULL : keep(cfg, name, strlen(name));
        if (col != NULL && outbox_columns_add_extra(&cfg->columns, col, NULL) < 0) {
            snprintf(err, errlen, "--topic \"%s\": at most %d columns in braces and "
                     "--header-column together", cfg->topic, OUTBOX_MAX_EXTRA);
            return -1;
        }
    }
    return 0;
}

