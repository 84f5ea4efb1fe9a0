/*
 * stream_rc.h — the result codes of setting up and running replication,
 * shared by stream (stream.h) and the slot's administration (slot.h), which
 * stream uses: a header of their own so that neither includes the other.
 */
#ifndef OUTBOX_RELAY_STREAM_RC_H
#define OUTBOX_RELAY_STREAM_RC_H

enum stream_rc {
    STREAM_OK = 0,
    STREAM_RETRY = -1,
    STREAM_BUSY = -2,
    STREAM_FATAL = -3,
    STREAM_END = -4, /* the server ended the copy (e.g. after our CopyDone) */
    STREAM_BACKFILL = -5, /* the slot exists but its backfill has not finished
                             (public.outbox_relay_slots): finish it first,
                             then call stream_start again */
    STREAM_REFUSED = -6,  /* the server refuses the slot's output plugin
                             (output_plugin_libraries): nothing to retry
                             soon, but a reload of the server's
                             configuration cures it, so wait and look again */
    STREAM_PLUGIN = -7,   /* without --plugin: the slot needs the other
                             output plugin (stream_switch_plugin); start
                             over with it */
    STREAM_FAILOVER = -8  /* after a promotion (failover.h), or on a standby
                             whose slot is only a synced copy: the slot
                             cannot be streamed safely here. A human must
                             act; wait, alerting, and look again */
};

#endif
