/*
 * stream.c — the replication connection (see stream.h).
 *
 * The flow follows pg_recvlogical: connect with replication=database,
 * check the server, the table and the slot (slot.c: the slot's
 * administration), START_REPLICATION, then read CopyData without blocking
 * and answer with standby status updates.
 */
#include "outbox_relay/pg/stream.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/clock.h"
#include "outbox_relay/decode/decoder.h"
#include "outbox_relay/pg/failover.h"
#include "outbox_relay/pg/layout.h"
#include "outbox_relay/base/log.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/plugin.h"
#include "outbox_relay/pg/publication.h"
#include "outbox_relay/pg/slot.h"

#define STREAM_ERRLEN 1024

struct stream {
    char *dsn;
    char *slot;
    char *table_schema;
    char *table_name;
    char *message_prefix;
    char *publication;
    char *primary_dsn;
    bool create_slot;
    struct decoder *own_decoder;      /* when the options named none */
    const struct decoder *decoder;    /* the output plugin (decoder.h) */
    struct slot admin; /* the slot's administration (slot.h), on conn */
    PGconn *conn;
    bool streaming; /* START_REPLICATION succeeded on conn */
    bool partitioned; /* the outbox table is partitioned */
    struct outbox_columns_map *columns; /* checked against the table (layout.h) */
    char *copybuf; /* last frame from PQgetCopyData, freed on the next read */
    bool publication_skipped; /* the server warned that pgoutput skipped our
                                 publication (see on_notice) */
    char notice[512];         /* that warning */
    unsigned streamed_tli;    /* the server's timeline when replication last
                                 started (0: never): another one at a
                                 reconnect means a promotion (failover.h) */
    int verdict;              /* failover_judge's at the last start; -1 none */
    char errstr[STREAM_ERRLEN];
};

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

struct stream *stream_new(const struct stream_options *opts)
{
    struct stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->dsn = dup_or_empty(opts->dsn);
    s->slot = dup_or_empty(opts->slot);
    s->table_schema = dup_or_empty(opts->table_schema);
    s->table_name = dup_or_empty(opts->table_name);
    s->message_prefix = dup_or_empty(opts->message_prefix);
    s->publication = dup_or_empty(opts->publication && *opts->publication ? opts->publication
                                                                          : "outbox_relay");
    s->primary_dsn = opts->primary_dsn && *opts->primary_dsn ? strdup(opts->primary_dsn) : NULL;
    s->create_slot = opts->create_slot;
    s->verdict = -1;
    s->decoder = opts->decoder;
    s->columns = opts->columns;
    if (s->decoder == NULL)
        s->decoder = s->own_decoder = decoder_w2j_new();
    if (!s->dsn || !s->slot || !s->table_schema || !s->table_name || !s->message_prefix ||
        !s->publication || !s->decoder) {
        stream_free(s);
        return NULL;
    }
    s->admin = (struct slot){.name = s->slot, .table_schema = s->table_schema,
                             .table_name = s->table_name, .columns = opts->columns,
                             .plugin = decoder_plugin(s->decoder),
                             .plugin_package = decoder_package(s->decoder),
                             .plugin_auto = opts->plugin_auto,
                             .recreate_slot = opts->recreate_slot,
                             .failover_slot = opts->failover_slot,
                             .primary_dsn = s->primary_dsn,
                             .takeover_after = opts->takeover_after,
                             .query_timeout = opts->query_timeout,
                             .on_creating = opts->on_creating, .on_created = opts->on_created,
                             .on_created_ctx = opts->on_created_ctx, .err = s->errstr,
                             .errlen = sizeof s->errstr};
    return s;
}

void stream_free(struct stream *s)
{
    if (s == NULL)
        return;
    stream_close(s);
    free(s->dsn);
    free(s->slot);
    free(s->table_schema);
    free(s->table_name);
    free(s->message_prefix);
    free(s->publication);
    free(s->primary_dsn);
    decoder_free(s->own_decoder);
    free(s);
}

const char *stream_errstr(const struct stream *s)
{
    return s->errstr;
}

const char *stream_database(const struct stream *s)
{
    return s->conn != NULL && PQstatus(s->conn) == CONNECTION_OK ? PQdb(s->conn) : NULL;
}

const char *stream_system_id(const struct stream *s)
{
    return s->admin.system_id[0] != '\0' ? s->admin.system_id : NULL;
}

const char *stream_switch_plugin(const struct stream *s)
{
    return s->admin.switch_to;
}

bool stream_connected(const struct stream *s)
{
    return s->conn != NULL;
}

void stream_set_create_slot(struct stream *s, bool create)
{
    s->create_slot = create;
}

int stream_socket(const struct stream *s)
{
    return s->conn ? PQsocket(s->conn) : -1;
}

int stream_backend_pid(const struct stream *s)
{
    return s->conn ? PQbackendPID(s->conn) : 0;
}

static int fail(struct stream *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct stream *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errstr, sizeof s->errstr, fmt, ap);
    va_end(ap);
    return rc;
}

void stream_close(struct stream *s)
{
    if (s->conn != NULL && s->streaming)
        s->admin.dead_pid = PQbackendPID(s->conn);
    if (s->copybuf != NULL) {
        PQfreemem(s->copybuf);
        s->copybuf = NULL;
    }
    if (s->conn != NULL) {
        PQfinish(s->conn);
        s->conn = NULL;
    }
    s->admin.conn = NULL;
    s->streaming = false;
}

int stream_timed_out(struct stream *s, double silence)
{
    return fail(s, STREAM_RETRY, "slot=%s: nothing received from the server for %.1f s "
                "(--wal-receiver-timeout): the connection is considered dead (a stalled "
                "network path?)", s->slot, silence);
}

bool stream_streaming(const struct stream *s)
{
    return s->conn != NULL && s->streaming;
}

/* Connection failures that no retry cures: say what to change. */
static int classify_connect_error(struct stream *s, const char *msg)
{
    if (strstr(msg, "must be superuser or replication role") ||
        strstr(msg, "permission denied to start WAL sender"))
        return fail(s, STREAM_FATAL,
                    "the role lacks the REPLICATION attribute needed for a replication "
                    "slot: ALTER ROLE <role> REPLICATION, or use the outbox_relay role from "
                    "sql/003_relay_role.sql (server said: %s)", msg);
    if (strstr(msg, "no pg_hba.conf entry") && strstr(msg, "replication"))
        return fail(s, STREAM_FATAL,
                    "pg_hba.conf does not allow this replication connection: add a "
                    "\"host replication <role> <address> scram-sha-256\" line (server said: %s)",
                    msg);
    if (strstr(msg, "password authentication failed") || strstr(msg, "no pg_hba.conf entry") ||
        (strstr(msg, "role \"") && strstr(msg, "does not exist")) ||
        (strstr(msg, "database \"") && strstr(msg, "does not exist")))
        return fail(s, STREAM_FATAL, "cannot connect to PostgreSQL: %s", msg);
    return fail(s, STREAM_RETRY, "cannot connect to PostgreSQL (will retry): %s", msg);
}

/* The server's notices on the replication connection. PostgreSQL 18's
 * pgoutput no longer ends the stream when it reaches a change made after
 * its publication was dropped: it warns "skipped loading publication" and
 * skips what the publication would have sent, while keepalives go on. That
 * warning arrives before anything that follows it, so stream_read stops
 * at once (as the stream's error made it stop on earlier majors), with
 * nothing past it read, let alone confirmed. Other notices are logged. */
static void on_notice(void *arg, const PGresult *res)
{
    struct stream *s = arg;
    char msg[512];
    pgconn_result_error(res, msg, sizeof msg);
    if (strstr(msg, "skipped loading publication") != NULL) {
        s->publication_skipped = true;
        snprintf(s->notice, sizeof s->notice, "%s", msg);
        return;
    }
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (sev != NULL && strcmp(sev, "WARNING") == 0)
        log_warn("slot=%s: the server said: %s", s->slot, msg);
    else
        log_info("slot=%s: the server said: %s", s->slot, msg);
}

static int connect_replication(struct stream *s)
{
    stream_close(s);
    s->publication_skipped = false;
    s->conn = pgconn_connectdb(s->dsn, "outbox-relay", "database");
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "cannot connect to PostgreSQL: out of memory");
    PQsetNoticeReceiver(s->conn, on_notice, s);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        char msg[STREAM_ERRLEN];
        pgconn_error(s->conn, msg, sizeof msg);
        stream_close(s);
        return classify_connect_error(s, msg);
    }
    s->admin.conn = s->conn;
    return STREAM_OK;
}
bool stream_outbox_partitioned(const struct stream *s)
{
    return s->partitioned;
}

/* The command: the plugin's options (decoder.h) for this slot. */
static int build_start_command(const struct decoder *d, const struct stream_options *opts,
                               lsn_t start, char *buf, size_t cap)
{
    int w = snprintf(buf, cap, "START_REPLICATION SLOT \"%s\" LOGICAL " LSN_FMT " (", opts->slot,
                     LSN_ARGS(start));
    if (w < 0 || (size_t) w >= cap)
        return -1;
    size_t n = (size_t) w;
    struct decoder_slot ds = {.table_schema = opts->table_schema,
                              .table_name = opts->table_name,
                              .message_prefix = opts->message_prefix,
                              .partitioned = opts->partitioned,
                              .publication = opts->publication};
    int o = decoder_start_options(d, &ds, buf + n, cap - n);
    if (o < 0)
        return -1;
    n += (size_t) o;
    if (n + 2 > cap)
        return -1;
    buf[n++] = ')';
    buf[n] = '\0';
    return (int) n;
}

int stream_build_start_command(const struct stream_options *opts, lsn_t start, char *buf,
                               size_t cap)
{
    struct decoder *own = opts->decoder == NULL ? decoder_w2j_new() : NULL;
    const struct decoder *d = opts->decoder != NULL ? opts->decoder : own;
    int n = d != NULL ? build_start_command(d, opts, start, buf, cap) : -1;
    decoder_free(own);
    return n;
}

static int start_replication(struct stream *s, lsn_t start)
{
    struct stream_options o = {.slot = s->slot, .table_schema = s->table_schema,
                               .table_name = s->table_name, .message_prefix = s->message_prefix,
                               .partitioned = s->partitioned, .publication = s->publication};
    char cmd[1024];
    if (build_start_command(s->decoder, &o, start, cmd, sizeof cmd) < 0)
        return fail(s, STREAM_FATAL, "slot=%s: START_REPLICATION command too long", s->slot);

    PGresult *res = slot_exec(&s->admin, cmd);
    if (PQresultStatus(res) == PGRES_COPY_BOTH) {
        PQclear(res);
        s->streaming = true;
        s->admin.dead_pid = 0;
        return STREAM_OK;
    }
    char msg[STREAM_ERRLEN];
    pgconn_failure(s->conn, res, msg, sizeof msg);
    PQclear(res);
    if (strstr(msg, "is active for PID"))
        return fail(s, STREAM_BUSY, "slot=%s is active for another process; waiting (another "
                    "relayer may own it): %s", s->slot, msg);
    if (plugin_refused_error(msg))
        return slot_refused(&s->admin, msg);
    char pkg[128];
    if (slot_plugin_missing(decoder_plugin(s->decoder), msg))
        return fail(s, STREAM_FATAL, "slot=%s: the %s output plugin cannot be loaded on the "
                    "server (install %s): %s", s->slot, decoder_plugin(s->decoder),
                    slot_package_for(decoder_package(s->decoder), PQserverVersion(s->conn), pkg,
                                     sizeof pkg), msg);
    if (strstr(msg, "can no longer get changes") || strstr(msg, "invalidated"))
        return fail(s, STREAM_FATAL, "slot=%s was invalidated (max_slot_wal_keep_size?): "
                    "events may have been lost; drop the slot and start again: %s", s->slot,
                    msg);
    if (strstr(msg, "does not exist"))
        return fail(s, STREAM_FATAL, "slot=%s does not exist any more (dropped while in use?); "
                    "not recreating it silently, as events would be lost: %s", s->slot, msg);
    return fail(s, PQstatus(s->conn) == CONNECTION_OK ? STREAM_FATAL : STREAM_RETRY,
                "slot=%s: START_REPLICATION from " LSN_FMT " failed: %s", s->slot,
                LSN_ARGS(start), msg);
}

/* The server is on another timeline than the one last streamed from: a
 * standby was promoted (failover.h). Refuses (STREAM_FAILOVER) what cannot
 * go on safely; otherwise sets *from_slot: the relayer's memory of what it
 * confirmed belongs to the old timeline and may be past what the promoted
 * server has, so the slot's own position is where to go on. */
static int after_promotion(struct stream *s, bool exists, bool *from_slot)
{
    char why[STREAM_ERRLEN];
    enum failover_resume r =
        failover_after_promotion(s->slot, exists, s->verdict == FAILOVER_UNPROTECTED,
                                 s->streamed_tli, s->admin.timeline, why, sizeof why);
    if (r != FAILOVER_RESUME_FROM_SLOT)
        return fail(s, STREAM_FAILOVER, "%s", why);
    log_warn("%s", why);
    *from_slot = true;
    return STREAM_OK;
}

/* PostgreSQL 17+, a slot that exists: how its failover protection stands
 * (failover.h), said when it changes; kept for after_promotion. A probe
 * that fails is only logged: it decides nothing here. */
static void judge_failover(struct stream *s)
{
    if (PQserverVersion(s->conn) < 170000)
        return;
    struct failover_info fi;
    char why[STREAM_ERRLEN];
    if (failover_probe(s->conn, s->slot, s->admin.query_timeout, &fi, why, sizeof why) < 0) {
        log_warn("slot=%s: cannot read its failover settings: %s", s->slot, why);
        return;
    }
    int v = (int) failover_judge(&fi, s->slot, why, sizeof why);
    if (v != s->verdict && v == FAILOVER_PROTECTED)
        log_info("%s", why);
    else if (v != s->verdict && v != FAILOVER_NOT_USED)
        log_warn("%s", why);
    s->verdict = v;
}

int stream_start(struct stream *s, lsn_t start, lsn_t *slot_confirmed, bool *created)
{
    bool from_slot = false;
    *created = false;
    *slot_confirmed = 0;
    int rc;
    /* A standby keeps its connection between looks at the slot, so waiting
     * costs one query per look, not a new backend. */
    if (s->conn == NULL || PQstatus(s->conn) != CONNECTION_OK) {
        if ((rc = connect_replication(s)) != STREAM_OK)
            return rc;
        if ((rc = slot_check_server(&s->admin)) != STREAM_OK)
            goto fail;
    }
    if ((rc = slot_check_table(&s->admin, &s->partitioned)) != STREAM_OK)
        goto fail;
    if (s->columns != NULL && (rc = layout_check(&s->admin, s->columns)) != STREAM_OK)
        goto fail;

    bool exists = false;
    if ((rc = slot_lookup(&s->admin, &exists, slot_confirmed)) != STREAM_OK)
        goto fail;
    if (s->streamed_tli != 0 && s->admin.timeline != 0 && s->admin.timeline != s->streamed_tli &&
        (rc = after_promotion(s, exists, &from_slot)) != STREAM_OK)
        goto fail;
    /* Before the slot: its first change must come after the publication. */
    if (decoder_uses_publication(s->decoder) &&
        (rc = publication_ensure(&s->admin, s->publication, s->partitioned, exists)) !=
            STREAM_OK)
        goto fail;
    if (!exists) {
        if (!s->create_slot) {
            rc = fail(s, STREAM_FATAL, "slot=%s does not exist any more (dropped while in "
                      "use?); not recreating it silently, as events committed meanwhile would "
                      "be lost. To go on, start once with --recreate-slot (with --backfill "
                      "pending to republish the rows still in the outbox table)", s->slot);
            goto fail;
        }
        if ((rc = slot_create(&s->admin, slot_confirmed, created)) != STREAM_OK)
            goto fail;
    }
    if ((rc = slot_check_backfill_marker(&s->admin)) != STREAM_OK)
        goto fail;
    judge_failover(s);
    if (start < *slot_confirmed || from_slot)
        start = *slot_confirmed;
    unsigned tli = s->admin.timeline;
    char host[256];
    snprintf(host, sizeof host, "%s:%s", PQhost(s->conn) ? PQhost(s->conn) : "",
             PQport(s->conn) ? PQport(s->conn) : "");
    /* START_REPLICATION on a walsender that has run no SQL: on PostgreSQL
     * 17 and 18 the catalog queries above (the publication's check reads
     * pg_publication_tables, which opens the outbox's relations) leave
     * relation cache entries that pgoutput then decodes older rows with:
     * a row of a partition written before an ADD COLUMN on the partitioned
     * root failed with "could not convert row type", at every reconnect.
     * A fresh connection costs one backend start per (re)connect. */
    if ((rc = connect_replication(s)) != STREAM_OK)
        goto fail;
    /* With a list of hosts, the fresh connection may reach another server
     * than the one just checked (a failover in between): check again. */
    char again[sizeof host];
    snprintf(again, sizeof again, "%s:%s", PQhost(s->conn) ? PQhost(s->conn) : "",
             PQport(s->conn) ? PQport(s->conn) : "");
    if (strcmp(host, again) != 0) {
        rc = fail(s, STREAM_RETRY, "slot=%s: the connection reached %s after checking the slot "
                  "on %s (a failover?): checking again", s->slot, again, host);
        goto fail;
    }
    if ((rc = start_replication(s, start)) != STREAM_OK)
        goto fail;
    if (PQsetnonblocking(s->conn, 1) != 0) {
        rc = fail(s, STREAM_RETRY, "slot=%s: cannot make the connection non-blocking", s->slot);
        goto fail;
    }
    s->streamed_tli = tli;
    return STREAM_OK;
fail:
    if (rc != STREAM_BUSY && rc != STREAM_BACKFILL)
        stream_close(s);
    return rc;
}

static int publication_gone(struct stream *s, const char *msg)
{
    return fail(s, STREAM_FATAL, "slot=%s: pgoutput found no publication %s as of a change "
                "it had to decode (created after the slot, or dropped): it cannot get past "
                "that change. Create the publication (sql/008_publication.sql), drop the "
                "slot and start with --recreate-slot --backfill pending: %s", s->slot,
                s->publication, msg);
}

/* After the server ended the copy: collect its final result and say why. */
static int copy_ended(struct stream *s)
{
    PGresult *res;
    char msg[STREAM_ERRLEN] = "";
    while ((res = PQgetResult(s->conn)) != NULL) {
        if (PQresultStatus(res) == PGRES_FATAL_ERROR)
            pgconn_result_error(res, msg, sizeof msg);
        PQclear(res);
    }
    if (*msg == '\0')
        return fail(s, STREAM_END, "slot=%s: the server ended the replication stream", s->slot);
    if (strstr(msg, "can no longer get changes") || strstr(msg, "invalidated"))
        return fail(s, STREAM_FATAL, "slot=%s was invalidated while streaming: %s", s->slot,
                    msg);
    if (strstr(msg, "publication \"") && strstr(msg, "does not exist"))
        return publication_gone(s, msg);
    return fail(s, STREAM_RETRY, "slot=%s: replication stream ended: %s", s->slot, msg);
}

int stream_read(struct stream *s, struct wire_msg *msg)
{
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: not connected", s->slot);
    if (s->copybuf != NULL) {
        PQfreemem(s->copybuf);
        s->copybuf = NULL;
    }
    int len = PQgetCopyData(s->conn, &s->copybuf, 1);
    if (s->publication_skipped) /* before the frame that followed the warning */
        return publication_gone(s, s->notice);
    if (len == 0)
        return 0;
    if (len == -1)
        return copy_ended(s);
    if (len < 0) {
        char m[STREAM_ERRLEN];
        pgconn_error(s->conn, m, sizeof m);
        return fail(s, STREAM_RETRY, "slot=%s: lost the replication connection: %s", s->slot, m);
    }
    char err[256];
    if (wire_parse(s->copybuf, (size_t) len, msg, err, sizeof err) < 0)
        return fail(s, STREAM_FATAL, "slot=%s: protocol violation from the server: %s", s->slot,
                    err);
    return 1;
}

int stream_consume(struct stream *s)
{
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: not connected", s->slot);
    if (PQconsumeInput(s->conn) == 0) {
        char m[STREAM_ERRLEN];
        pgconn_error(s->conn, m, sizeof m);
        return fail(s, STREAM_RETRY, "slot=%s: lost the replication connection: %s", s->slot, m);
    }
    return 0;
}

int stream_send_status(struct stream *s, lsn_t write, lsn_t flush, bool reply_requested)
{
    if (s->conn == NULL)
        return fail(s, STREAM_RETRY, "slot=%s: not connected", s->slot);
    char buf[WIRE_STATUS_LEN];
    size_t n = wire_build_status(buf, write, flush, flush, wire_unix_to_pg_us(wall_now_us()),
                                 reply_requested);
    if (PQputCopyData(s->conn, buf, (int) n) < 0 || PQflush(s->conn) < 0) {
        char m[STREAM_ERRLEN];
        pgconn_error(s->conn, m, sizeof m);
        return fail(s, STREAM_RETRY, "slot=%s lsn=" LSN_FMT ": cannot send status update: %s",
                    s->slot, LSN_ARGS(flush), m);
    }
    return 0;
}

void stream_stop(struct stream *s, int timeout_ms)
{
    if (!stream_streaming(s)) {
        stream_close(s);
        return;
    }
    double t0 = mono_now();
    if (PQputCopyEnd(s->conn, NULL) > 0) {
        for (;;) {
            PQflush(s->conn);
            if (s->copybuf != NULL) {
                PQfreemem(s->copybuf);
                s->copybuf = NULL;
            }
            int len = PQgetCopyData(s->conn, &s->copybuf, 1);
            if (len == -1) {
                PGresult *res;
                while (!PQisBusy(s->conn) && (res = PQgetResult(s->conn)) != NULL)
                    PQclear(res);
                if (!PQisBusy(s->conn))
                    break;
            } else if (len < -1) {
                break;
            } else if (len > 0) {
                continue;
            }
            long elapsed = (long) ((mono_now() - t0) * 1000);
            if (elapsed >= timeout_ms)
                break;
            struct pollfd pfd = {.fd = PQsocket(s->conn), .events = POLLIN};
            if (poll(&pfd, 1, (int) (timeout_ms - elapsed)) < 0 && errno != EINTR)
                break;
            if (PQconsumeInput(s->conn) == 0)
                break;
        }
    }
    stream_close(s);
}
