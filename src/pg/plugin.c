/*
 * plugin.c — choosing the output plugin and answering its refusal (see
 * plugin.h). Pure.
 */
#include "outbox_relay/pg/plugin.h"

#include <stdio.h>
#include <string.h>

#define PARAM "output_plugin_libraries"

/* The next element of a GUC list at *p (commas outside double quotes end
 * one; surrounding blanks dropped; a quoted element unquoted, "" as "),
 * into buf. Returns false at the end of the list. */
static bool next_element(const char **p, char *buf, size_t cap, bool *quoted)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == ',')
        s++;
    if (*s == '\0')
        return false;
    size_t n = 0;
    *quoted = *s == '"';
    if (*quoted) {
        for (s++; *s != '\0'; s++) {
            if (*s == '"' && s[1] == '"')
                s++;
            else if (*s == '"') {
                s++;
                break;
            }
            if (n + 1 < cap)
                buf[n++] = *s;
        }
        while (*s != '\0' && *s != ',')
            s++;
    } else {
        for (; *s != '\0' && *s != ','; s++)
            if (n + 1 < cap)
                buf[n++] = *s;
        while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\n'))
            n--;
    }
    buf[n] = '\0';
    *p = s;
    return true;
}

/* Whether the library element names plugin: the name itself, or a path or
 * file name that ends in it ($libdir/wal2json, wal2json.so). */
static bool names(const char *element, const char *plugin)
{
    const char *base = strrchr(element, '/');
    base = base != NULL ? base + 1 : element;
    size_t n = strlen(plugin);
    return strncmp(base, plugin, n) == 0 && (base[n] == '\0' || strcmp(base + n, ".so") == 0);
}

bool plugin_allowed(const struct plugin_libs *libs, const char *plugin)
{
    if (libs == NULL || libs->state != PLUGIN_LIBS_KNOWN)
        return true;
    char el[256];
    bool quoted;
    for (const char *p = libs->value; next_element(&p, el, sizeof el, &quoted);)
        if (names(el, plugin))
            return true;
    return false;
}

bool plugin_refused_error(const char *msg)
{
    return strstr(msg, "may not be used as an output plugin") != NULL ||
           strstr(msg, PARAM) != NULL;
}

/* Appends ", 'name'" (the first without the comma), name's quotes doubled. */
static bool add_literal(char *buf, size_t cap, size_t *n, const char *name, bool first)
{
    if (!first) {
        if (*n + 2 >= cap)
            return false;
        buf[(*n)++] = ',';
        buf[(*n)++] = ' ';
    }
    if (*n + 1 >= cap)
        return false;
    buf[(*n)++] = '\'';
    for (const char *c = name; *c; c++) {
        if (*n + 2 >= cap)
            return false;
        if (*c == '\'')
            buf[(*n)++] = '\'';
        buf[(*n)++] = *c;
    }
    if (*n + 1 >= cap)
        return false;
    buf[(*n)++] = '\'';
    buf[*n] = '\0';
    return true;
}

int plugin_allow_statement(const struct plugin_libs *libs, const char *plugin, char *buf,
                           size_t cap)
{
    static const char head[] = "ALTER SYSTEM SET " PARAM " = ";
    static const char tail[] = "; SELECT pg_reload_conf();";
    if (cap < sizeof head)
        return -1;
    memcpy(buf, head, sizeof head);
    size_t n = sizeof head - 1;
    /* Every name there, a mis-quoted list split into its names, each once. */
    char seen[1024] = ",";
    bool first = true, have = false, quoted;
    char el[256];
    const char *list = libs != NULL && libs->state == PLUGIN_LIBS_KNOWN
                           ? libs->value
                           : "pgoutput, test_decoding";
    for (const char *p = list; next_element(&p, el, sizeof el, &quoted);) {
        char name[256];
        for (const char *q = el; next_element(&q, name, sizeof name, &quoted);) {
            char key[260];
            snprintf(key, sizeof key, ",%s,", name);
            if (strstr(seen, key) != NULL)
                continue;
            if (strlen(seen) + strlen(name) + 2 < sizeof seen) {
                strcat(seen, name);
                strcat(seen, ",");
            }
            if (!add_literal(buf, cap, &n, name, first))
                return -1;
            first = false;
            have = have || names(name, plugin);
        }
    }
    if (!have && !add_literal(buf, cap, &n, plugin, first))
        return -1;
    if (n + sizeof tail > cap)
        return -1;
    memcpy(buf + n, tail, sizeof tail);
    return (int) (n + sizeof tail - 1);
}

/* "(currently '...')", or what is known instead. */
static const char *current(const struct plugin_libs *libs, char *buf, size_t cap)
{
    if (libs != NULL && libs->state == PLUGIN_LIBS_KNOWN)
        snprintf(buf, cap, "currently '%s'", libs->value);
    else
        snprintf(buf, cap, "its value is visible only to superusers and pg_read_all_settings; "
                 "the statement below assumes the server's default");
    return buf;
}

void plugin_refusal_advice(const char *plugin, const struct plugin_libs *libs,
                           bool slot_exists, char *buf, size_t cap)
{
    char stmt[600], cur[600];
    if (plugin_allow_statement(libs, plugin, stmt, sizeof stmt) < 0)
        snprintf(stmt, sizeof stmt, "ALTER SYSTEM SET " PARAM " = ..., '%s'; SELECT "
                 "pg_reload_conf();", plugin);
    snprintf(buf, cap,
             "the server refuses the %s output plugin: " PARAM " (%s) does not name it. As a "
             "superuser run: %s (no restart needed; the relayer tries again every few "
             "seconds). Or use PostgreSQL's built-in pgoutput instead: %s",
             plugin, current(libs, cur, sizeof cur), stmt,
             slot_exists ? "the slot exists with wal2json, so switch it at an LSN without a "
                           "gap or a repeat as docs/operations.md says (\"Choosing and "
                           "switching the output plugin\")"
                         : "start with --plugin pgoutput");
}

const char *plugin_choose_new(const struct plugin_libs *libs, bool refused, bool missing,
                              char *why, size_t whylen)
{
    if (missing) {
        snprintf(why, whylen, "wal2json is not installed on the server, so the new slot uses "
                 "PostgreSQL's built-in pgoutput (to have wal2json instead, install the server's "
                 "wal2json package before the slot is created)");
        return "pgoutput";
    }
    if (refused || !plugin_allowed(libs, "wal2json")) {
        char stmt[600], cur[600];
        if (plugin_allow_statement(libs, "wal2json", stmt, sizeof stmt) < 0)
            *stmt = '\0';
        snprintf(why, whylen, PARAM " (%s) does not name wal2json, so the new slot uses "
                 "PostgreSQL's built-in pgoutput (to have wal2json instead, run %s before the "
                 "slot is created)", current(libs, cur, sizeof cur), stmt);
        return "pgoutput";
    }
    snprintf(why, whylen, "the server allows wal2json%s, so the new slot uses it",
             libs != NULL && libs->state == PLUGIN_LIBS_KNOWN ? " (" PARAM " names it)" : "");
    return "wal2json";
}

void plugin_describe_server(int server_version, const struct plugin_libs *libs, char *buf,
                            size_t cap)
{
    int major = server_version / 10000;
    bool absent = libs == NULL || libs->state == PLUGIN_LIBS_ABSENT;
    snprintf(buf, cap,
             "%s; pgoutput protocol 1 (what the relayer asks for on every major)%s%s%s",
             !absent ? "output_plugin_libraries restricts output plugins (wal2json must be "
                       "named there)"
                     : "no output_plugin_libraries (a minor before the November 2026 releases: "
                       "every installed plugin loads)",
             major >= 16 ? "; logical decoding on a standby possible"
                         : "; no logical decoding on a standby (16+)",
             major >= 17 ? "; failover slots (--failover-slot) possible"
                         : "; no failover slots (17+)",
             major >= 18 ? "; idle_replication_slot_timeout can invalidate a stopped "
                           "relayer's slot"
                         : "");
}
