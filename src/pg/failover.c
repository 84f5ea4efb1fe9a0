/*
 * failover.c — the failover slot's protection (see failover.h): one probe
 * of the server, and the pure judgements of what it found.
 */
#include "outbox_relay/pg/failover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/pg/pgconn.h"

/* The physical slots named in synchronized_standby_slots, as rows (name,
 * present, active, restart_lsn), then one row about everything. */
#define PROBE_17                                                                               \
    "WITH n AS (SELECT btrim(x) AS name FROM unnest(string_to_array("                          \
    "current_setting('synchronized_standby_slots', true), ',')) x WHERE btrim(x) <> ''), "     \
    "p AS (SELECT s.slot_name IS NOT NULL AS present, coalesce(s.active, false) AS active, "   \
    "s.restart_lsn FROM n LEFT JOIN pg_replication_slots s ON s.slot_name = n.name "           \
    "AND s.slot_type = 'physical'), "                                                          \
    "l AS (SELECT failover, synced, temporary FROM pg_replication_slots WHERE slot_name = %s) " \
    "SELECT (SELECT count(*) FROM l) > 0, coalesce((SELECT failover FROM l), false), "         \
    "coalesce((SELECT synced FROM l), false), coalesce((SELECT temporary FROM l), false), "    \
    "pg_is_in_recovery(), coalesce(current_setting('synchronized_standby_slots', true), ''), " \
    "(SELECT count(*) FROM p), (SELECT count(*) FROM p WHERE NOT present), "                   \
    "(SELECT count(*) FROM p WHERE present AND NOT active), "                                  \
    "(SELECT max(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() " \
    "ELSE pg_current_wal_lsn() END, restart_lsn))::bigint FROM p WHERE present)"
#define PROBE_OLD                                                                              \
    "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s), false, false, "  \
    "false, pg_is_in_recovery(), NULL, 0, 0, 0, NULL"

static bool is_t(const PGresult *res, int col)
{
    return !PQgetisnull(res, 0, col) && strcmp(PQgetvalue(res, 0, col), "t") == 0;
}

int failover_probe(PGconn *conn, const char *slot, double timeout, struct failover_info *fi,
                   char *err, size_t errlen)
{
    memset(fi, 0, sizeof *fi);
    fi->standby_lag_bytes = -1;
    char *lit = PQescapeLiteral(conn, slot, strlen(slot));
    if (lit == NULL) {
        snprintf(err, errlen, "cannot escape the slot name");
        return -1;
    }
    bool v17 = PQserverVersion(conn) >= 170000;
    char sql[2048];
    snprintf(sql, sizeof sql, v17 ? PROBE_17 : PROBE_OLD, lit);
    PQfreemem(lit);
    PGresult *res = pgconn_exec(conn, sql, 0, NULL, timeout, err, errlen);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 10) {
        if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK)
            snprintf(err, errlen, "unexpected answer to the failover probe");
        PQclear(res);
        return -1;
    }
    fi->slot_exists = is_t(res, 0);
    fi->failover = is_t(res, 1);
    fi->synced = is_t(res, 2);
    fi->temporary = is_t(res, 3);
    fi->in_recovery = is_t(res, 4);
    fi->setting_known = v17;
    snprintf(fi->standby_slots, sizeof fi->standby_slots, "%s",
             PQgetisnull(res, 0, 5) ? "" : PQgetvalue(res, 0, 5));
    fi->named = atoi(PQgetvalue(res, 0, 6));
    fi->missing = atoi(PQgetvalue(res, 0, 7));
    fi->inactive = atoi(PQgetvalue(res, 0, 8));
    if (!PQgetisnull(res, 0, 9) && !fi->in_recovery)
        fi->standby_lag_bytes = atoll(PQgetvalue(res, 0, 9));
    PQclear(res);
    return 0;
}

enum failover_verdict failover_judge(const struct failover_info *fi, const char *slot,
                                     char *why, size_t whylen)
{
    if (whylen > 0)
        why[0] = '\0';
    if (!fi->slot_exists || !fi->failover || fi->in_recovery || !fi->setting_known)
        return FAILOVER_NOT_USED;
    if (fi->named == 0) {
        snprintf(why, whylen,
                 "slot=%s is a failover slot, but synchronized_standby_slots is empty on this "
                 "primary: the relayer may publish and confirm changes no standby has received, "
                 "which a promotion then loses (and after it the relayer refuses to go on). "
                 "Set it to the physical slot of the standby that syncs the slot: ALTER SYSTEM "
                 "SET synchronized_standby_slots = '<standby_physical_slot>'; SELECT "
                 "pg_reload_conf();",
                 slot);
        return FAILOVER_UNPROTECTED;
    }
    if (fi->missing > 0) {
        snprintf(why, whylen,
                 "slot=%s is a failover slot and synchronized_standby_slots = '%s' names %d "
                 "physical slot(s) that do not exist on this primary: PostgreSQL holds every "
                 "change back until they exist and confirm. Create the standby's slot "
                 "(SELECT pg_create_physical_replication_slot('<name>')) and set it as the "
                 "standby's primary_slot_name, or correct synchronized_standby_slots",
                 slot, fi->standby_slots, fi->missing);
        return FAILOVER_BROKEN;
    }
    snprintf(why, whylen,
             "slot=%s is a failover slot; synchronized_standby_slots = '%s' (%d physical "
             "slot(s)%s): changes reach the relayer only once the standby has their WAL",
             slot, fi->standby_slots, fi->named,
             fi->inactive > 0 ? ", some with no standby connected: the relayer waits for it"
                              : ", all streaming");
    return FAILOVER_PROTECTED;
}

enum failover_resume failover_after_promotion(const char *slot, bool exists,
                                              bool was_unprotected, unsigned old_tli,
                                              unsigned new_tli, char *why, size_t whylen)
{
    if (!exists) {
        snprintf(why, whylen,
                 "slot=%s is missing on the server the connection now reaches (timeline %u, was "
                 "%u: a promoted standby): the standby held no synced copy of the slot at the "
                 "promotion (sync_replication_slots off, hot_standby_feedback off, no "
                 "primary_slot_name, no dbname in primary_conninfo - pg_basebackup -R omits it - "
                 "or the copy was not yet persisted). Not creating a new slot, which would "
                 "skip every event committed since the last confirmed one. Waiting: if the old "
                 "primary comes back as primary the relayer goes on there; otherwise restart "
                 "once with --recreate-slot --backfill pending to republish the rows still in "
                 "the outbox table",
                 slot, new_tli, old_tli);
        return FAILOVER_REFUSE_MISSING;
    }
    if (was_unprotected) {
        snprintf(why, whylen,
                 "slot=%s: the server was promoted (timeline %u, was %u) while the old primary's "
                 "synchronized_standby_slots was empty: the relayer may have published events "
                 "the promoted server never received (compare Kafka with the outbox table), and "
                 "its memory of confirmed positions is not valid here. Not streaming on. Check, "
                 "then restart the relayer: it resumes from the slot's own position on this "
                 "server (events after it are delivered again). Set synchronized_standby_slots "
                 "on the new primary so the next failover is safe",
                 slot, new_tli, old_tli);
        return FAILOVER_REFUSE_UNPROTECTED;
    }
    snprintf(why, whylen,
             "slot=%s: the server is on timeline %u, was %u (a promotion): resuming from the "
             "slot's confirmed position on it, not from the relayer's own (which may be past "
             "what the promoted server has); events after it are delivered again",
             slot, new_tli, old_tli);
    return FAILOVER_RESUME_FROM_SLOT;
}

/* Appends ", text" (or text) to why. */
static void add(char *why, size_t whylen, const char *text)
{
    size_t n = strlen(why);
    if (n < whylen)
        snprintf(why + n, whylen - n, "%s%s", n > 0 ? "; " : "", text);
}

int failover_standby_advice(const char *sync_replication_slots, const char *hot_standby_feedback,
                            const char *primary_slot_name, const char *primary_conninfo,
                            char *why, size_t whylen)
{
    int n = 0;
    if (whylen > 0)
        why[0] = '\0';
    if (sync_replication_slots == NULL || strcmp(sync_replication_slots, "on") != 0) {
        add(why, whylen, "sync_replication_slots is off: ALTER SYSTEM SET "
                         "sync_replication_slots = on");
        n++;
    }
    if (hot_standby_feedback == NULL || strcmp(hot_standby_feedback, "on") != 0) {
        add(why, whylen, "hot_standby_feedback is off: ALTER SYSTEM SET hot_standby_feedback "
                         "= on");
        n++;
    }
    if (primary_slot_name == NULL || *primary_slot_name == '\0') {
        add(why, whylen, "no primary_slot_name: create a physical slot on the primary and "
                         "ALTER SYSTEM SET primary_slot_name = '<it>'");
        n++;
    }
    if (primary_conninfo != NULL) {
        char *errmsg = NULL;
        PQconninfoOption *opts = PQconninfoParse(primary_conninfo, &errmsg);
        bool dbname = false;
        for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
            if (strcmp(o->keyword, "dbname") == 0 && o->val != NULL && *o->val != '\0')
                dbname = true;
        PQconninfoFree(opts);
        PQfreemem(errmsg);
        if (!dbname) {
            add(why, whylen, "primary_conninfo names no dbname (pg_basebackup -R writes it "
                             "without one), so the slot-sync worker cannot run: add "
                             "dbname=<the outbox's database> to primary_conninfo "
                             "(postgresql.auto.conf) and reload");
            n++;
        }
    }
    if (n > 0)
        add(why, whylen, "then restart the standby if a setting needs it and wait until "
                         "pg_replication_slots on it shows the slot with synced = true and "
                         "temporary = false");
    return n;
}
