/*
 * test_stream.c — the START_REPLICATION command the stream sends: option
 * names quoted, values quoted, the table and message filters in place.
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/pg/stream.h"

int main(void)
{
    char buf[1024];
    struct stream_options o = {.slot = "outbox_relay", .table_schema = "public",
                               .table_name = "events_outbox", .message_prefix = "outbox"};
    int n = stream_build_start_command(&o, ((lsn_t) 0x16 << 32) | 0xB374D848, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_SPAN(buf, (size_t) n,
               "START_REPLICATION SLOT \"outbox_relay\" LOGICAL 16/B374D848 ("
               "\"format-version\" '2', \"include-timestamp\" '1', "
               "\"include-types\" '0', \"add-tables\" 'public.events_outbox', "
               "\"actions\" 'insert', \"add-msg-prefixes\" 'outbox')");

    /* No message prefix: no message filter option at all. */
    o.message_prefix = "";
    n = stream_build_start_command(&o, 0, buf, sizeof buf);
    CHECK(n > 0 && strstr(buf, "add-msg-prefixes") == NULL);
    CHECK(strstr(buf, "LOGICAL 0/0 (") != NULL);

    /* A partitioned outbox: every table of its schema (rows arrive under
     * the leaf partitions' names; the relay picks the partitions), and the
     * xid of every transaction (partition.h needs the commits it saw). A
     * plain outbox pays for neither. */
    CHECK(strstr(buf, "include-xids") == NULL);
    o.partitioned = true;
    n = stream_build_start_command(&o, 0, buf, sizeof buf);
    CHECK(n > 0 && strstr(buf, "\"add-tables\" 'public.*'") != NULL);
    CHECK(strstr(buf, "\"include-xids\" '1'") != NULL);
    o.partitioned = false;

    /* Too small a buffer fails cleanly. */
    CHECK_EQ_INT(stream_build_start_command(&o, 0, buf, 40), -1);
    CHECK_DONE();
}
