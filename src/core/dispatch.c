/*
 * dispatch.c — records → tracker and sink actions (see dispatch.h). Pure:
 * every effect outside the tracker goes through struct dispatch_ops.
 */
#include "outbox_relay/core/dispatch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/core/partition_rule.h"
#include "outbox_relay/core/tracker.h"
#include "outbox_relay/decode/outbox_event.h"

struct dispatch {
    struct dispatch_options opts;
    struct tracker *tracker;
    struct decoder *decoder;
    struct dispatch_ops ops;
    bool partitioned;
    int64_t tx_commit_us; /* commit time of the open transaction, 0 unknown */
    bool fatal;
    char errstr[DISPATCH_ERRLEN];
};

static int fail(struct dispatch *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct dispatch *d, const char *fmt, ...)
{
    if (!d->fatal) { /* keep the first cause */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->errstr, sizeof d->errstr, fmt, ap);
        va_end(ap);
        d->fatal = true;
    }
    return DISPATCH_FATAL;
}

struct dispatch *dispatch_new(const struct dispatch_options *opts, struct tracker *tracker,
                              struct decoder *decoder, const struct dispatch_ops *ops)
{
    struct dispatch *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->opts = *opts;
    if (d->opts.message_prefix == NULL)
        d->opts.message_prefix = "";
    d->tracker = tracker;
    d->decoder = decoder;
    d->ops = *ops;
    return d;
}

void dispatch_free(struct dispatch *d)
{
    free(d);
}

void dispatch_set_partitioned(struct dispatch *d, bool partitioned)
{
    d->partitioned = partitioned;
}

static bool name_is(const char *p, size_t n, const char *s)
{
    return p != NULL && n == strlen(s) && memcmp(p, s, n) == 0;
}

/* An event the decoder could not map (missing type, bad id): it can never
 * be routed, so it is poison. ev holds what the decoder could read of it:
 * the dead letter carries the row's id and key when it had them, else
 * event_id "lsn-<LSN>". */
static int undecodable(struct dispatch *d, uint64_t token, const struct decoder_record *rec,
                       struct outbox_event *ev, const char *why)
{
    if (d->opts.dead_letter) {
        if (ev->event_id[0] == '\0')
            snprintf(ev->event_id, sizeof ev->event_id, "lsn-" LSN_FMT,
                     LSN_ARGS(rec->wal_start));
        const char *value;
        size_t value_len;
        decoder_describe(d->decoder, rec, &value, &value_len); /* else the raw frame */
        if (d->ops.dead_letter(d->ops.ctx, token, rec->wal_start, ev, value, value_len,
                               why) >= 0)
            return DISPATCH_OK;
    }
    return fail(d, "slot=%s lsn=" LSN_FMT ": undecodable outbox change: %s", d->opts.slot,
                LSN_ARGS(rec->wal_start), why);
}

/* Whether an insert is a row of the outbox. Returns 1, 0, or
 * DISPATCH_FATAL (membership undecidable). */
static int outbox_row(struct dispatch *d, const struct decoder_record *rec)
{
    if (!name_is(rec->schema, rec->schema_len, d->opts.table_schema))
        return 0;
    if (name_is(rec->table, rec->table_len, d->opts.table_name))
        return 1;
    if (!d->partitioned)
        return 0;
    /* Decided as of the row's commit, not by today's catalog alone
     * (partition_rule.h). */
    char why[1536];
    int member = d->ops.member(d->ops.ctx, rec, why, sizeof why);
    if (member == PARTITION_UNKNOWN)
        return fail(d, "slot=%s lsn=" LSN_FMT ": %s", d->opts.slot, LSN_ARGS(rec->wal_start),
                    why);
    return member == PARTITION_YES;
}

/* An outbox row or message of the open transaction: track, map, produce. */
static int relay_event(struct dispatch *d, const struct decoder_record *rec)
{
    /* Only transactional changes get here, and logical decoding sends each
     * inside its begin/commit. One outside a transaction means a broken
     * stream: stop, never guess a position for it. */
    uint64_t token = tracker_add(d->tracker);
    if (token == 0)
        return fail(d, "slot=%s lsn=" LSN_FMT ": protocol violation: an outbox change outside "
                    "a transaction (no 'B' before it); nothing from here on is confirmed",
                    d->opts.slot, LSN_ARGS(rec->wal_start));
    struct outbox_event ev;
    char err[DECODER_ERRLEN];
    outbox_event_reset(&ev, rec->lsn); /* what a failing decoder leaves unread */
    if (decoder_event(d->decoder, rec, &ev, err, sizeof err) < 0)
        return undecodable(d, token, rec, &ev, err);
    if (d->ops.produce(d->ops.ctx, &ev, token) == 0 && d->tx_commit_us)
        tracker_stamp(d->tracker, token, d->tx_commit_us);
    return DISPATCH_OK;
}

int dispatch_record(struct dispatch *d, const struct decoder_record *rec)
{
    int rc = DISPATCH_OK;
    switch (rec->kind) {
    case DECODER_BEGIN:
        d->tx_commit_us = rec->timestamp_us;
        if (tracker_begin(d->tracker) < 0)
            rc = fail(d, "slot=%s lsn=" LSN_FMT ": transaction begins inside another one",
                      d->opts.slot, LSN_ARGS(rec->wal_start));
        if (d->partitioned)
            d->ops.tx_begin(d->ops.ctx, rec->xid);
        return rc;
    case DECODER_COMMIT:
        if (d->partitioned)
            d->ops.tx_commit(d->ops.ctx, rec->xid, rec->end_lsn);
        if (tracker_commit(d->tracker, rec->end_lsn) < 0)
            rc = fail(d, "slot=%s lsn=" LSN_FMT ": commit without a transaction", d->opts.slot,
                      LSN_ARGS(rec->wal_start));
        return rc;
    case DECODER_INSERT:
        rc = outbox_row(d, rec);
        return rc == 1 ? relay_event(d, rec) : rc;
    case DECODER_MESSAGE:
        if (!rec->transactional)
            d->tx_commit_us = rec->timestamp_us;
        if (!rec->transactional || *d->opts.message_prefix == '\0' ||
            !name_is(rec->prefix, rec->prefix_len, d->opts.message_prefix))
            return DISPATCH_OK; /* non-transactional or foreign messages are never relayed */
        return relay_event(d, rec);
    case DECODER_NONE:
    default:
        return DISPATCH_OK; /* updates, deletes, truncates, plugin state */
    }
}

int dispatch_frame(struct dispatch *d, const char *data, size_t len, lsn_t wal_start)
{
    struct decoder_record rec;
    char err[DECODER_ERRLEN];
    if (decoder_decode(d->decoder, data, len, wal_start, &rec, err, sizeof err) < 0)
        return fail(d, "slot=%s lsn=" LSN_FMT ": %s", d->opts.slot, LSN_ARGS(wal_start), err);
    return dispatch_record(d, &rec);
}

int dispatch_keepalive(struct dispatch *d, lsn_t wal_end, bool reply_requested)
{
    tracker_idle(d->tracker, wal_end);
    return reply_requested ? DISPATCH_STATUS : DISPATCH_OK;
}

int64_t dispatch_commit_us(const struct dispatch *d)
{
    return d->tx_commit_us;
}

bool dispatch_failed(const struct dispatch *d)
{
    return d->fatal;
}

const char *dispatch_errstr(const struct dispatch *d)
{
    return d->errstr;
}

bool dispatch_window_open(const struct dispatch_window *w)
{
    return !w->rewinding && w->inflight < (size_t) w->max_inflight &&
           w->inflight_bytes < (size_t) w->max_inflight_bytes;
}
