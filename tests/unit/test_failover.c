/*
 * test_failover.c — the pure judgements of failover.h: a failover slot's
 * protection, what a reconnect after a promotion does, and what keeps a
 * standby from syncing the slot.
 */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/pg/failover.h"

static struct failover_info primary(bool failover, int named, int missing, int inactive)
{
    struct failover_info fi;
    memset(&fi, 0, sizeof fi);
    fi.slot_exists = true;
    fi.failover = failover;
    fi.setting_known = true;
    fi.named = named;
    fi.missing = missing;
    fi.inactive = inactive;
    fi.standby_lag_bytes = -1;
    if (named > 0)
        strcpy(fi.standby_slots, "sb1");
    return fi;
}

static void test_judge(void)
{
    char why[1024];
    struct failover_info fi = primary(false, 0, 0, 0);
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_NOT_USED);
    CHECK(why[0] == '\0');

    fi = primary(true, 0, 0, 0);
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_UNPROTECTED);
    CHECK(strstr(why, "slot=s") != NULL);
    CHECK(strstr(why, "synchronized_standby_slots is empty") != NULL);
    CHECK(strstr(why, "ALTER SYSTEM SET synchronized_standby_slots") != NULL);

    fi = primary(true, 1, 1, 0);
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_BROKEN);
    CHECK(strstr(why, "'sb1'") != NULL && strstr(why, "do not exist") != NULL);

    fi = primary(true, 1, 0, 0);
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_PROTECTED);
    CHECK(strstr(why, "all streaming") != NULL);
    fi = primary(true, 1, 0, 1);
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_PROTECTED);
    CHECK(strstr(why, "waits") != NULL);

    /* Not a question for a standby, a missing slot or a server before 17. */
    fi = primary(true, 0, 0, 0);
    fi.in_recovery = true;
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_NOT_USED);
    fi = primary(true, 0, 0, 0);
    fi.slot_exists = false;
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_NOT_USED);
    fi = primary(true, 0, 0, 0);
    fi.setting_known = false;
    CHECK(failover_judge(&fi, "s", why, sizeof why) == FAILOVER_NOT_USED);

    /* A tiny buffer is not overrun. */
    char tiny[8];
    fi = primary(true, 0, 0, 0);
    CHECK(failover_judge(&fi, "s", tiny, sizeof tiny) == FAILOVER_UNPROTECTED);
    CHECK(strlen(tiny) == 7);
}

static void test_after_promotion(void)
{
    char why[2048];
    CHECK(failover_after_promotion("fo", false, false, 1, 2, why, sizeof why) ==
          FAILOVER_REFUSE_MISSING);
    CHECK(strstr(why, "slot=fo is missing") != NULL);
    CHECK(strstr(why, "timeline 2, was 1") != NULL);
    CHECK(strstr(why, "dbname") != NULL && strstr(why, "--recreate-slot") != NULL);
    /* Missing wins over unprotected: there is nothing to resume from. */
    CHECK(failover_after_promotion("fo", false, true, 1, 2, why, sizeof why) ==
          FAILOVER_REFUSE_MISSING);
    CHECK(failover_after_promotion("fo", true, true, 2, 3, why, sizeof why) ==
          FAILOVER_REFUSE_UNPROTECTED);
    CHECK(strstr(why, "synchronized_standby_slots was empty") != NULL);
    CHECK(strstr(why, "restart the relayer") != NULL);
    CHECK(failover_after_promotion("fo", true, false, 1, 2, why, sizeof why) ==
          FAILOVER_RESUME_FROM_SLOT);
    CHECK(strstr(why, "resuming from the slot's confirmed position") != NULL);
}

static void test_standby_advice(void)
{
    char why[2048];
    CHECK(failover_standby_advice("on", "on", "sb1", "host=p port=5432 dbname=app", why,
                                  sizeof why) == 0);
    CHECK(why[0] == '\0');
    /* What pg_basebackup -R writes: no dbname. */
    CHECK(failover_standby_advice("on", "on", "sb1",
                                  "user=postgres passfile='/x' host=p port=5432 sslmode=prefer",
                                  why, sizeof why) == 1);
    CHECK(strstr(why, "pg_basebackup -R") != NULL && strstr(why, "dbname=") != NULL);
    CHECK(strstr(why, "synced = true") != NULL);
    /* Unreadable primary_conninfo (NULL): not judged. */
    CHECK(failover_standby_advice("on", "on", "sb1", NULL, why, sizeof why) == 0);
    CHECK(failover_standby_advice("off", "off", "", "dbname=app", why, sizeof why) == 3);
    CHECK(strstr(why, "sync_replication_slots") != NULL);
    CHECK(strstr(why, "hot_standby_feedback") != NULL);
    CHECK(strstr(why, "primary_slot_name") != NULL);
    CHECK(failover_standby_advice("on", "on", "sb1", "postgresql://p/app", why, sizeof why) == 0);
    CHECK(failover_standby_advice("on", "on", "sb1", "postgresql://p", why, sizeof why) == 1);
}

int main(void)
{
    test_judge();
    test_after_promotion();
    test_standby_advice();
    CHECK_DONE();
}
