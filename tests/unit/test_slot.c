/*
 * test_slot.c — the slot administration's pure parts: the
 * CREATE_REPLICATION_SLOT command for each server generation (snapshot
 * export for the backfill, FAILOVER on 17+, the plugin by name) and the
 * recognition of a server that cannot load the output plugin.
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/pg/slot.h"

static void test_create_command(void)
{
    char buf[256];
    /* PostgreSQL 15+: the option list. */
    int n = slot_build_create_command("outbox_relay", "wal2json", 150004, false, false, buf,
                                      sizeof buf);
    CHECK(n > 0);
    CHECK_SPAN(buf, (size_t) n,
               "CREATE_REPLICATION_SLOT \"outbox_relay\" LOGICAL wal2json (SNAPSHOT 'nothing')");
    n = slot_build_create_command("s", "wal2json", 170000, true, true, buf, sizeof buf);
    CHECK_SPAN(buf, (size_t) n,
               "CREATE_REPLICATION_SLOT \"s\" LOGICAL wal2json (SNAPSHOT 'export', FAILOVER)");
    /* Before 15: the old keywords. */
    n = slot_build_create_command("s", "wal2json", 140010, true, false, buf, sizeof buf);
    CHECK_SPAN(buf, (size_t) n, "CREATE_REPLICATION_SLOT \"s\" LOGICAL wal2json EXPORT_SNAPSHOT");
    n = slot_build_create_command("s", "wal2json", 140010, false, false, buf, sizeof buf);
    CHECK_SPAN(buf, (size_t) n,
               "CREATE_REPLICATION_SLOT \"s\" LOGICAL wal2json NOEXPORT_SNAPSHOT");
    /* The plugin comes from the caller, not from this module. */
    n = slot_build_create_command("s", "pgoutput", 160000, false, false, buf, sizeof buf);
    CHECK(n > 0 && strstr(buf, "LOGICAL pgoutput (") != NULL);
    /* Too small a buffer fails cleanly. */
    CHECK_EQ_INT(slot_build_create_command("outbox_relay", "wal2json", 150000, false, false,
                                           buf, 20),
                 -1);
}

static void test_plugin_missing(void)
{
    CHECK(slot_plugin_missing("wal2json", "could not access file \"wal2json\": No such file or "
                                          "directory"));
    CHECK(slot_plugin_missing("wal2json", "ERROR: could not load library "
                                          "\"/usr/lib/wal2json.so\": No such file"));
    CHECK(!slot_plugin_missing("wal2json", "replication slot \"x\" does not exist"));
    /* Another plugin's library missing is not this plugin's. */
    CHECK(!slot_plugin_missing("pgoutput", "\"wal2json.so\": No such file or directory"));
}

static void test_package_for(void)
{
    char buf[128];
    CHECK(strcmp(slot_package_for("postgresql-<version>-wal2json", 150004, buf, sizeof buf),
                 "postgresql-15-wal2json") == 0);
    CHECK(strcmp(slot_package_for("postgresql-<version>-wal2json", 170000, buf, sizeof buf),
                 "postgresql-17-wal2json") == 0);
    CHECK(strcmp(slot_package_for("none: built in", 150004, buf, sizeof buf),
                 "none: built in") == 0);
}

int main(void)
{
    test_create_command();
    test_plugin_missing();
    test_package_for();
    CHECK_DONE();
}
