/*
 * failover.h — what the server says about the slot's failover protection
 * (PostgreSQL 17+ failover slots), asked the same way by the stream at each
 * start, the maintenance thread for /metrics, `status` and `check`, and
 * what it means, judged without I/O.
 *
 * The setup it checks (docs/operations.md, "Failover slots"): the logical
 * slot has failover = true; a physical standby runs sync_replication_slots
 * = on with hot_standby_feedback = on, a primary_slot_name and a dbname in
 * its primary_conninfo; the primary's synchronized_standby_slots names that
 * physical slot. With it, PostgreSQL's logical walsender sends a change of
 * a failover slot only once every slot named there has confirmed receiving
 * its WAL, so nothing the relayer publishes or confirms is ahead of what
 * the standby has; the standby's slot-sync worker copies the slot (synced =
 * true) no further than the WAL it has.
 *
 * What the primary can see: its synchronized_standby_slots, whether the
 * physical slots named there exist and are active, and how far their
 * restart_lsn is behind (failover_info.standby_lag_bytes). What it cannot:
 * whether the standby actually holds a synced copy of the logical slot
 * (that is in the standby's own pg_replication_slots; a standby started by
 * `pg_basebackup -R` has no dbname in primary_conninfo and never syncs,
 * silently). `check` run against the standby sees that side
 * (failover_standby_advice).
 */
#ifndef OUTBOX_RELAY_FAILOVER_H
#define OUTBOX_RELAY_FAILOVER_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One probe's answer (failover_probe). */
struct failover_info {
    bool slot_exists;     /* the slot is in pg_replication_slots */
    bool failover;        /* its failover column (17+; false before) */
    bool synced;          /* its synced column (17+): a copy from a primary */
    bool temporary;       /* its temporary column: a synced copy not yet
                             persisted is dropped at promotion */
    bool in_recovery;     /* the server is a standby */
    bool setting_known;   /* the server has synchronized_standby_slots (17+) */
    char standby_slots[256]; /* synchronized_standby_slots as set ("" none) */
    int named;            /* physical slots named there */
    int missing;          /* of them, not in pg_replication_slots (as physical) */
    int inactive;         /* of them, present but no standby connected */
    int64_t standby_lag_bytes; /* the primary's WAL position minus the
                                  oldest restart_lsn of the named slots; -1
                                  unknown (none, or on a standby) */
};

/* Asks conn (an ordinary or a replication=database connection: plain SQL
 * in the simple protocol) about slot, waiting at most timeout seconds.
 * Fills *fi and returns 0; on a server before 17 everything but
 * slot_exists/in_recovery stays false/0. -1 with the server's reason in err. */
int failover_probe(PGconn *conn, const char *slot, double timeout, struct failover_info *fi,
                   char *err, size_t errlen);

/* What a failover slot's protection is on a primary. */
enum failover_verdict {
    FAILOVER_NOT_USED,    /* not a failover slot, no slot, or a standby */
    FAILOVER_PROTECTED,   /* every slot named in synchronized_standby_slots
                             exists; the primary waits for them */
    FAILOVER_UNPROTECTED, /* synchronized_standby_slots is empty: what the
                             relayer publishes may be ahead of any standby */
    FAILOVER_BROKEN       /* it names a physical slot that does not exist
                             (the server then holds the relayer back) */
};

/* Judges fi for slot. Pure. Returns the verdict and, for every verdict but
 * FAILOVER_NOT_USED, a sentence in why (capacity whylen) that says what was
 * found and the fix. An inactive standby slot is PROTECTED (the server
 * waits for it: the relayer stalls rather than runs ahead) and said so. */
enum failover_verdict failover_judge(const struct failover_info *fi, const char *slot,
                                     char *why, size_t whylen);

/* What to do on a reconnect that found the server on another timeline than
 * the one last streamed from (a promotion). */
enum failover_resume {
    FAILOVER_RESUME_FROM_SLOT,  /* go on from the slot's own confirmed
                                   position (not the relayer's memory, which
                                   may be past what the new primary has) */
    FAILOVER_REFUSE_MISSING,    /* the slot is not on the promoted server */
    FAILOVER_REFUSE_UNPROTECTED /* it is, but the old primary's failover slot
                                   had no synchronized_standby_slots */
};

/* Decides, from whether the slot exists on the promoted server and whether
 * the old primary was unprotected (the verdict seen when streaming began),
 * and writes the reason with the fix into why. old_tli/new_tli: the
 * timelines, for the message. Pure. */
enum failover_resume failover_after_promotion(const char *slot, bool exists,
                                              bool was_unprotected, unsigned old_tli,
                                              unsigned new_tli, char *why, size_t whylen);

/* On a standby (in_recovery): what keeps it from syncing the slot, from
 * its settings: sync_replication_slots ("on"/"off"), hot_standby_feedback,
 * primary_slot_name and primary_conninfo (NULL: not readable by this role).
 * Returns the number of problems (0: none) and lists them with their fix in
 * why. Pure (PQconninfoParse only). */
int failover_standby_advice(const char *sync_replication_slots, const char *hot_standby_feedback,
                            const char *primary_slot_name, const char *primary_conninfo,
                            char *why, size_t whylen);

#endif
