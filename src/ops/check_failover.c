/*
 * check_failover.c — the preflight's check of the PostgreSQL side of high
 * availability (see check.h; failover.h for the setup and what each side
 * can see):
 *
 *  - on a primary (17+) with a failover slot, or --failover-slot for the
 *    slot the relayer will create: synchronized_standby_slots names
 *    physical slots that exist (FAIL when empty or naming a missing one);
 *    a slot that exists without failover while --failover-slot asks for it
 *    is a WARN with the command that turns it on;
 *  - on a standby (16+): a slot that is the standby's own is decoding on a
 *    standby, said; a synced copy (or sync_replication_slots on) is checked
 *    against what keeps the slot-sync worker from running, the
 *    pg_basebackup -R mistake (no dbname in primary_conninfo) first of all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"
#include "outbox_relay/pg/failover.h"
#include "outbox_relay/pg/pgconn.h"

#define NAME "failover"

/* SHOW name into buf; NULL when it cannot be read (absent, hidden). */
static const char *show(struct check_ctx *c, const char *name, char *buf, size_t cap)
{
    return pgconn_show(c->conn, name, CHECK_QUERY_TIMEOUT, buf, cap) == 1 ? buf : NULL;
}

/* On a standby: its own slot, or its copy of the primary's (17+). */
static void check_standby(struct check_ctx *c, const struct failover_info *fi)
{
    const char *slot = c->cfg->slot;
    char sync[16], hsf[16], psn[128], conninfo[1024], why[2048];
    const char *sync_v = show(c, "sync_replication_slots", sync, sizeof sync);
    if (fi->slot_exists && !fi->synced) {
        const char *h = show(c, "hot_standby_feedback", hsf, sizeof hsf);
        const char *n = show(c, "primary_slot_name", psn, sizeof psn);
        bool safe = h != NULL && strcmp(h, "on") == 0 && n != NULL && *n != '\0';
        check_report_addf(c->report, NAME, safe ? CHECK_PASS : CHECK_WARN,
                          safe ? NULL
                               : "ALTER SYSTEM SET hot_standby_feedback = on and a "
                                 "primary_slot_name (a physical slot on the primary) on this "
                                 "standby",
                          "slot %s is this standby's own: the relayer decodes on the standby "
                          "(docs/operations.md, \"Decoding on a standby\")%s", slot,
                          safe ? "" : "; without hot_standby_feedback and a physical slot the "
                                      "primary's vacuum removes catalog rows the slot needs, "
                                      "and the standby invalidates it");
        return;
    }
    if (!fi->slot_exists && (sync_v == NULL || strcmp(sync_v, "on") != 0))
        return; /* decoding on a standby, the slot not made yet: nothing to sync */
    const char *conninfo_v = show(c, "primary_conninfo", conninfo, sizeof conninfo);
    int n = failover_standby_advice(sync_v, show(c, "hot_standby_feedback", hsf, sizeof hsf),
                                    show(c, "primary_slot_name", psn, sizeof psn), conninfo_v,
                                    why, sizeof why);
    if (n > 0) {
        check_report_addf(c->report, NAME, CHECK_FAIL, why,
                          "this standby cannot keep a synced copy of slot %s: a promotion "
                          "would leave the relayer without its slot", slot);
        return;
    }
    if (!fi->slot_exists)
        check_report_addf(c->report, NAME, CHECK_FAIL,
                          "create the slot on the primary with --failover-slot (or turn "
                          "failover on for it), and check the standby's log for the slot-sync "
                          "worker",
                          "this standby syncs slots, but holds no copy of slot %s yet%s",
                          slot, conninfo_v == NULL ? " (primary_conninfo is not readable by "
                                                     "this role: is there a dbname in it?)"
                                                   : "");
    else if (fi->temporary)
        check_report_addf(c->report, NAME, CHECK_WARN,
                          "wait until temporary = false on this standby before relying on it",
                          "this standby's copy of slot %s is synced but not yet persisted "
                          "(temporary = true): a promotion now would drop it", slot);
    else
        check_report_addf(c->report, NAME, CHECK_PASS, NULL,
                          "this standby holds a synced copy of slot %s (synced = true, "
                          "persisted): after a promotion the relayer goes on from it", slot);
}

void check_failover(struct check_ctx *c)
{
    if (c->conn == NULL || c->server_version < 160000)
        return;
    struct failover_info fi;
    char msg[1024], why[1024];
    if (failover_probe(c->conn, c->cfg->slot, CHECK_QUERY_TIMEOUT, &fi, msg, sizeof msg) < 0) {
        check_report_addf(c->report, NAME, CHECK_WARN, NULL,
                          "cannot read the failover settings: %s", msg);
        return;
    }
    if (fi.in_recovery) {
        check_standby(c, &fi);
        return;
    }
    if (c->server_version < 170000)
        return;
    if (fi.slot_exists && !fi.failover && c->cfg->failover_slot) {
        check_report_addf(c->report, NAME, CHECK_WARN,
                          "on a replication connection: ALTER_REPLICATION_SLOT <slot> "
                          "(FAILOVER true) (psql \"dbname=<db> replication=database\")",
                          "slot %s exists without failover: --failover-slot applies only when "
                          "the relayer creates the slot", c->cfg->slot);
        return;
    }
    if (!fi.slot_exists && c->cfg->failover_slot) {
        fi.slot_exists = fi.failover = true; /* what the relayer will create */
    }
    enum failover_verdict v = failover_judge(&fi, c->cfg->slot, why, sizeof why);
    if (v == FAILOVER_NOT_USED)
        return;
    if (v == FAILOVER_PROTECTED)
        check_report_addf(c->report, NAME, fi.inactive > 0 ? CHECK_WARN : CHECK_PASS,
                          fi.inactive > 0 ? "start the standby (the relayer waits for it)"
                                          : NULL,
                          "%s%s", why, fi.inactive > 0 ? "" : "; whether the standby holds a "
                          "synced copy shows only there: run check against the standby");
    else
        check_report_add(c->report, NAME, CHECK_FAIL, why,
                         v == FAILOVER_UNPROTECTED
                             ? "ALTER SYSTEM SET synchronized_standby_slots = "
                               "'<standby_physical_slot>'; SELECT pg_reload_conf();"
                             : "create the physical slot or correct "
                               "synchronized_standby_slots");
}
