/*
 * backfill_internal.h — what the backfill's two files share: the struct
 * behind struct backfill, the marker row as read, and the marker's reads
 * and writes on the lock connection (backfill.c) that a run
 * (backfill_run.c) makes. Dependencies go one way: backfill_run.c →
 * backfill.c. Not for other modules: their header is backfill.h.
 */
#ifndef OUTBOX_RELAY_BACKFILL_INTERNAL_H
#define OUTBOX_RELAY_BACKFILL_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "outbox_relay/base/lsn.h"
#include "outbox_relay/core/progress.h"
#include "outbox_relay/relay/backfill.h"

#define BACKFILL_ERRLEN 1024
#define ID_MAX BACKFILL_ID_MAX
#define APP_NAME "outbox-relay-backfill" /* both connections' application_name */

struct backfill {
    char *dsn;
    char *slot;
    char *table_schema;
    char *table_name;
    PGconn *conn; /* the lock and the marker; autocommit */
    bool locked;
    bool schema_ok; /* the backfill columns exist */
    const struct outbox_columns_map *columns; /* the outbox's layout (borrowed) */
    char errstr[BACKFILL_ERRLEN];
    /* During backfill_run: its progress and sink (backfill_progress_tick). */
    const struct backfill_sink *sink;
    struct progress pr;
};

/* What the marker row says. */
struct backfill_marker {
    enum backfill_state state;
    bool has_max, has_done;
    char max_id[ID_MAX], done_id[ID_MAX];
    unsigned long long rows;
};

/* Sets b's error text; returns rc. */
int backfill_fail(struct backfill *b, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies src into dst (capacity ID_MAX); *has is whether it fit. */
void backfill_copy_id(char *dst, const char *src, bool *has);

/* Reads the slot's marker row on the lock connection (all zero when there
 * is none). BACKFILL_FATAL when the backfill columns are missing or the
 * state is unknown; BACKFILL_RETRY when the connection is lost. */
int backfill_read_marker(struct backfill *b, struct backfill_marker *m);

/* Records the bound of the backlog (m->max_id, or none) and the slot's
 * consistent point (0: keep it): state 'running', nothing done yet.
 * BACKFILL_FATAL when the marker row disappeared. */
int backfill_write_running(struct backfill *b, const struct backfill_marker *m,
                           lsn_t consistent);

/* Records done_id as backfill_done_id and rows as backfill_rows, while the
 * state is 'running'. Never waits long for the row: when someone holds it
 * (the reaper checking it, an operator), the write is skipped and a later
 * one carries the progress. BACKFILL_OK, or BACKFILL_RETRY when the lock
 * connection is gone (and with it the lock). */
int backfill_write_progress(struct backfill *b, const char *done_id, unsigned long long rows);

/* Every row is acknowledged: state 'done', rows the total over all runs. */
int backfill_write_done(struct backfill *b, unsigned long long rows);

#endif
