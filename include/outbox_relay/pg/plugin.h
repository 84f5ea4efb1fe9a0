/*
 * plugin.h — which output plugin a slot is made with, and what to tell the
 * operator when the server refuses one. Pure: no I/O; the queries that
 * feed it (SHOW output_plugin_libraries, the slot's row) are the callers'
 * (slot.c, check_pg.c, status.c).
 *
 * Since the November 2026 minors (15.19, 16.11, 17.7, 18.1 and later),
 * PostgreSQL loads an output plugin for a REPLICATION role only when the
 * server parameter output_plugin_libraries names it; its default is
 * 'pgoutput, test_decoding', so wal2json is refused on a server left at its
 * defaults. The parameter is a list: ALTER SYSTEM SET takes its elements
 * as separate literals ('pgoutput', 'test_decoding', 'wal2json'); one
 * literal holding the whole list is stored as one quoted element that
 * names no library at all.
 *
 * Without --plugin (PLUGIN_AUTO) an existing slot keeps its plugin, and a
 * new one is made with wal2json where the server allows and has it,
 * otherwise with pgoutput (plugin_choose_new).
 */
#ifndef OUTBOX_RELAY_PLUGIN_H
#define OUTBOX_RELAY_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>

/* What is known of the server's output_plugin_libraries. */
enum plugin_libs_state {
    PLUGIN_LIBS_ABSENT = 0, /* a minor before the parameter: every installed
                               plugin loads */
    PLUGIN_LIBS_KNOWN,      /* value holds it (SHOW's text) */
    PLUGIN_LIBS_HIDDEN      /* it exists, but only superusers and members of
                               pg_read_all_settings may read it */
};

struct plugin_libs {
    enum plugin_libs_state state;
    char value[512];
};

/* Whether the server's list lets a replication role use `plugin`, as
 * the server reads it: elements split on commas outside double quotes, a
 * quoted element taken whole, an element naming a path ($libdir/wal2json,
 * wal2json.so) matched by its file name. ABSENT: true; HIDDEN: true (not
 * known to refuse: only trying tells). */
bool plugin_allowed(const struct plugin_libs *libs, const char *plugin);

/* Whether msg (a server error) says the plugin was refused because
 * output_plugin_libraries does not name it. */
bool plugin_refused_error(const char *msg);

/* The statement that adds `plugin` to what the list allows, keeping every
 * name there (a mis-quoted element holding several names is split into
 * them), each as its own literal:
 *   ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding',
 *   'wal2json'; SELECT pg_reload_conf();
 * into buf (capacity cap); a list not KNOWN is taken as the server's
 * default ('pgoutput, test_decoding'). Returns the length, or -1 when buf is
 * too small. */
int plugin_allow_statement(const struct plugin_libs *libs, const char *plugin, char *buf,
                           size_t cap);

/* The operator's answer to a refusal of `plugin` (never pgoutput, which is
 * built in): the parameter, its current value (or that this role cannot
 * see it), the statement above, and the way round (--plugin pgoutput: for
 * a new slot, just that; for an existing wal2json slot, the documented
 * switch at an LSN, so nothing is skipped or sent twice). Into buf
 * (capacity cap), one line. */
void plugin_refusal_advice(const char *plugin, const struct plugin_libs *libs,
                           bool slot_exists, char *buf, size_t cap);

/* The plugin a new slot is made with when --plugin was not given:
 * "wal2json" unless the list is known not to name it, or the server
 * refused it (refused) or does not have it (missing), then "pgoutput";
 * why (capacity whylen) says which and why, with how to get wal2json when
 * it was passed over. Returns a static string. */
const char *plugin_choose_new(const struct plugin_libs *libs, bool refused, bool missing,
                              char *why, size_t whylen);

/* What a server of server_version (PQserverVersion) means for the relayer,
 * as one line for check and status: the plugin restriction (libs), the
 * pgoutput protocol used, decoding on a standby (16+), failover slots
 * (17+), idle slot invalidation (18+). */
void plugin_describe_server(int server_version, const struct plugin_libs *libs, char *buf,
                            size_t cap);

#endif
