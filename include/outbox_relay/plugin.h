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

/* Whether the server's list `libraries` (the text SHOW prints; NULL: the
 * server has no such parameter, so every installed plugin loads) lets a
 * replication role use `plugin`, as the server reads the list: elements
 * split on commas outside double quotes, a quoted element taken whole, and
 * an element naming a path ($libdir/wal2json, wal2json.so) matched by its
 * file name. */
bool plugin_allowed(const char *libraries, const char *plugin);

/* Whether msg (a server error) says the plugin was refused because
 * output_plugin_libraries does not name it. */
bool plugin_refused_error(const char *msg);

/* The statement that adds `plugin` to what `libraries` allows, keeping
 * every name there (a mis-quoted element holding several names is split
 * into them), each as its own literal:
 *   ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding',
 *   'wal2json'; SELECT pg_reload_conf();
 * into buf (capacity cap). Returns the length, or -1 when buf is too small. */
int plugin_allow_statement(const char *libraries, const char *plugin, char *buf, size_t cap);

/* The operator's answer to a refusal of `plugin` (never pgoutput, which is
 * built in): the
 * parameter, its current value, the statement above, and the way round it
 * (--plugin pgoutput: for a new slot, just that; for an existing wal2json
 * slot, the documented switch at an LSN, so nothing is skipped or sent
 * twice). Into buf (capacity cap), one line. */
void plugin_refusal_advice(const char *plugin, const char *libraries, bool slot_exists,
                           char *buf, size_t cap);

/* The plugin a new slot is made with when --plugin was not given: "wal2json"
 * when `libraries` allows it and it is not known to be missing, else
 * "pgoutput"; why (capacity whylen) says which and why, with how to get
 * wal2json when it was passed over. Returns a static string. */
const char *plugin_choose_new(const char *libraries, bool wal2json_missing, char *why,
                              size_t whylen);

/* What a server of server_version (PQserverVersion) with or without
 * output_plugin_libraries means for the relayer, as one line for check and
 * status: the plugin restriction, the pgoutput protocol used, decoding on
 * a standby (16+), failover slots (17+), idle slot invalidation (18+). */
void plugin_describe_server(int server_version, bool has_plugin_libraries, char *buf,
                            size_t cap);

#endif
