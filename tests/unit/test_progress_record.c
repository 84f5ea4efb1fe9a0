/*
 * test_progress_record.c — the progress record (progress_record.h): a
 * written value reads back the same; values in another key order, with
 * unknown keys and spaces read; what is not ours (another format, a newer
 * version, no slot or lsn, escapes, truncation at every byte) is refused;
 * the skip rule at, below and above the progress; where replication
 * starts; the transactional id is the same for the same slot and differs
 * between slots and between PostgreSQL clusters (system identifiers) with a
 * slot of the same name; the partition is stable and in range; the key
 * and the system identifier keep two clusters' records apart, and a record
 * written before the system identifier was added is judged by its
 * transactional id (ours, another cluster's, or unknown: refused).
 */
#include <string.h>

#include "check.h"
#include "outbox_relay/core/progress_record.h"

static struct progress_record sample(void)
{
    struct progress_record r = {.version = 1, .lsn = ((lsn_t) 0x16 << 32) | 0xB374D848u,
                                .committed_at_ms = 1796432523123};
    strcpy(r.system_id, "7581234567890123456");
    strcpy(r.slot, "outbox_relay");
    strcpy(r.database, "shop");
    strcpy(r.transactional_id, "outbox-relay.7581234567890123456.outbox_relay");
    return r;
}

static void test_round_trip(void)
{
    struct progress_record r = sample(), back;
    char buf[PROGRESS_VALUE_MAX], err[256];
    int n = progress_record_format(&r, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_STR(buf, "{\"format\":\"outbox-relay-progress\",\"version\":1,"
                   "\"system_identifier\":\"7581234567890123456\",\"slot\":\"outbox_relay\","
                   "\"database\":\"shop\",\"lsn\":\"16/B374D848\","
                   "\"transactional_id\":\"outbox-relay.7581234567890123456.outbox_relay\","
                   "\"committed_at\":\"2026-12-05T01:02:03.123Z\"}");
    CHECK_EQ_INT(progress_record_parse(buf, (size_t) n, &back, err, sizeof err), 0);
    CHECK_STR(back.system_id, "7581234567890123456");
    CHECK_STR(back.slot, "outbox_relay");
    CHECK_STR(back.database, "shop");
    CHECK_STR(back.transactional_id, "outbox-relay.7581234567890123456.outbox_relay");
    CHECK(back.lsn == r.lsn);
    CHECK_EQ_INT(back.version, 1);

    /* too small a buffer, a name we would have to escape */
    CHECK_EQ_INT(progress_record_format(&r, buf, 20), -1);
    strcpy(r.database, "a\"b");
    CHECK_EQ_INT(progress_record_format(&r, buf, sizeof buf), -1);
    r = sample();
    r.slot[0] = '\0';
    CHECK_EQ_INT(progress_record_format(&r, buf, sizeof buf), -1);
}

static void test_any_order_and_unknown_keys(void)
{
    const char *v = " { \"lsn\" : \"0/10\", \"extra\": {\"x\":1}, \"slot\":\"s\", "
                    "\"version\": 1, \"format\":\"outbox-relay-progress\" } ";
    struct progress_record r;
    char err[256];
    /* a nested object is not ours to read: refused, not guessed */
    CHECK_EQ_INT(progress_record_parse(v, strlen(v), &r, err, sizeof err), -1);
    v = " { \"lsn\" : \"0/10\", \"extra\": true, \"n\": -1.5e3, \"slot\":\"s\", "
        "\"version\": 1, \"format\":\"outbox-relay-progress\" } ";
    CHECK_EQ_INT(progress_record_parse(v, strlen(v), &r, err, sizeof err), 0);
    CHECK(r.lsn == 0x10);
    CHECK_STR(r.slot, "s");
    CHECK_STR(r.database, "");
}

static void test_refusals(void)
{
    struct progress_record r;
    char err[256];
    const char *cases[][2] = {
        {"", "not a flat JSON"},
        {"{}", "not a progress record"},
        {"{\"format\":\"other\",\"version\":1,\"slot\":\"s\",\"lsn\":\"0/1\"}", "format is"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":2,\"slot\":\"s\",\"lsn\":\"0/1\"}",
         "a newer relayer wrote it"},
        {"{\"format\":\"outbox-relay-progress\",\"slot\":\"s\",\"lsn\":\"0/1\"}", "version 0"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":1,\"lsn\":\"0/1\"}", "without slot"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":1,\"slot\":\"s\"}", "without lsn"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":1,\"slot\":\"s\",\"lsn\":\"x\"}",
         "not a WAL position"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":1,\"slot\":\"s\\\"\",\"lsn\":\"0/1\"}",
         "not a flat JSON"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":1,\"slot\":\"\",\"lsn\":\"0/1\"}",
         "empty slot"},
        {"{\"format\":\"outbox-relay-progress\",\"version\":1,\"slot\":\"s\",\"lsn\":\"0/1\"} x",
         "not a flat JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = '\0';
        CHECK_EQ_INT(progress_record_parse(cases[i][0], strlen(cases[i][0]), &r, err, sizeof err),
                     -1);
        if (strstr(err, cases[i][1]) == NULL)
            fprintf(stderr, "case %zu: %s\n", i, err);
        CHECK(strstr(err, cases[i][1]) != NULL);
    }
    /* every truncation of a good record is refused, none read past len */
    struct progress_record s = sample();
    char buf[PROGRESS_VALUE_MAX];
    int n = progress_record_format(&s, buf, sizeof buf);
    for (int len = 0; len < n; len++)
        CHECK_EQ_INT(progress_record_parse(buf, (size_t) len, &r, err, sizeof err), -1);
    /* a name too long for us */
    char big[600];
    int m = snprintf(big, sizeof big, "{\"format\":\"outbox-relay-progress\",\"version\":1,"
                                      "\"lsn\":\"0/1\",\"slot\":\"%0300d\"}", 7);
    CHECK_EQ_INT(progress_record_parse(big, (size_t) m, &r, err, sizeof err), -1);
    CHECK(strstr(err, "longer than") != NULL);
}

static void test_skip_rule(void)
{
    lsn_t p = 0x1000;
    CHECK(progress_skip(p, 0x0fff));
    CHECK(progress_skip(p, p)); /* at: the last transaction inside */
    CHECK(!progress_skip(p, 0x1001));
    CHECK(!progress_skip(0, 1)); /* no progress yet: nothing skipped */
    CHECK(progress_start_lsn(0x10, 0x20) == 0x20);
    CHECK(progress_start_lsn(0x30, 0x20) == 0x30);
    CHECK(progress_start_lsn(0x30, 0) == 0x30);
    /* the start position skips exactly what the rule skips: the server
     * sends a transaction when its commit record starts at or after it */
    for (lsn_t commit_start = 0xf00; commit_start < 0x1100; commit_start += 0x10) {
        lsn_t commit_end = commit_start + 0x30;
        bool sent = commit_start >= progress_start_lsn(0, p);
        if (commit_end <= p || commit_start >= p) /* a commit record never straddles p */
            CHECK(sent == !progress_skip(p, commit_end));
    }
}

static void test_names(void)
{
    char a[256], b[256], c[256], d[256];
    const char *sys = "7581234567890123456";
    CHECK(progress_transactional_id(sys, "outbox_relay", a, sizeof a) > 0);
    CHECK(progress_transactional_id(sys, "outbox_relay", b, sizeof b) > 0);
    CHECK(progress_transactional_id(sys, "other", c, sizeof c) > 0);
    CHECK_STR(a, "outbox-relay.7581234567890123456.outbox_relay");
    CHECK_STR(a, b);
    CHECK(strcmp(a, c) != 0);
    /* the same slot name on another PostgreSQL cluster: never the same id */
    CHECK(progress_transactional_id("7581234567890999999", "outbox_relay", d, sizeof d) > 0);
    CHECK(strcmp(a, d) != 0);
    /* not known yet */
    CHECK(progress_transactional_id(NULL, "outbox_relay", d, sizeof d) > 0);
    CHECK_STR(d, "outbox-relay.outbox_relay");
    CHECK(progress_transactional_id("", "outbox_relay", d, sizeof d) > 0);
    CHECK_STR(d, "outbox-relay.outbox_relay");
    CHECK_EQ_INT(progress_transactional_id(sys, "outbox_relay", a, 30), -1);
    CHECK_EQ_INT(progress_transactional_id(NULL, "outbox_relay", a, 10), -1);

    int32_t p1 = progress_partition("outbox_relay", 12, 50);
    CHECK(p1 >= 0 && p1 < 50);
    CHECK_EQ_INT(progress_partition("outbox_relay", 12, 50), p1);
    CHECK_EQ_INT(progress_partition("outbox_relay", 12, 1), 0);
    CHECK_EQ_INT(progress_partition("x", 1, 0), 0);
    /* spread: 1000 slot names over 8 partitions reach every one */
    int seen[8] = {0};
    for (int i = 0; i < 1000; i++) {
        char k[32];
        int n = snprintf(k, sizeof k, "slot_%d", i);
        seen[progress_partition(k, (size_t) n, 8)]++;
    }
    for (int i = 0; i < 8; i++)
        CHECK(seen[i] > 50);
}

/* A record as the previous relayer wrote it: no system_identifier. */
static struct progress_record parsed(const char *v)
{
    struct progress_record r;
    char err[256];
    CHECK_EQ_INT(progress_record_parse(v, strlen(v), &r, err, sizeof err), 0);
    return r;
}

static void test_owner(void)
{
    const char *ours = "7581234567890123456", *theirs = "7581234567890999999";
    const char *txn = "outbox-relay.7581234567890123456.outbox_relay";
    char a[300], b[300];
    /* the key: the system identifier and the slot; the slot alone unknown */
    CHECK_EQ_INT(progress_record_key(ours, "outbox_relay", a, sizeof a), 32);
    CHECK_STR(a, "7581234567890123456.outbox_relay");
    CHECK(progress_record_key(theirs, "outbox_relay", b, sizeof b) > 0);
    CHECK(strcmp(a, b) != 0); /* two clusters: two keys, compaction keeps both */
    CHECK(progress_record_key(NULL, "outbox_relay", b, sizeof b) > 0);
    CHECK_STR(b, "outbox_relay");
    CHECK(progress_record_key("", "outbox_relay", b, sizeof b) > 0);
    CHECK_STR(b, "outbox_relay");
    CHECK_EQ_INT(progress_record_key(ours, "outbox_relay", a, 32), -1);

    /* records that carry it */
    struct progress_record r = sample();
    CHECK_EQ_INT(progress_record_owner(&r, ours, txn), PROGRESS_OURS);
    CHECK_EQ_INT(progress_record_owner(&r, theirs, "outbox-relay.7581234567890999999.outbox_relay"),
                 PROGRESS_FOREIGN);
    /* the same slot and database names on another cluster: not ours, even
     * with a -X transactional.id both share */
    strcpy(r.transactional_id, "custom");
    CHECK_EQ_INT(progress_record_owner(&r, theirs, "custom"), PROGRESS_FOREIGN);
    CHECK_EQ_INT(progress_record_owner(&r, ours, "custom"), PROGRESS_OURS);

    /* written before the field: judged by the transactional id */
    const char *head = "{\"format\":\"outbox-relay-progress\",\"version\":1,\"slot\":"
                       "\"outbox_relay\",\"database\":\"shop\",\"lsn\":\"0/16B3748\",";
    char v[512];
    snprintf(v, sizeof v, "%s\"transactional_id\":\"%s\"}", head, txn);
    r = parsed(v);
    CHECK_STR(r.system_id, "");
    CHECK_EQ_INT(progress_record_owner(&r, ours, txn), PROGRESS_OURS);
    CHECK_EQ_INT(progress_record_owner(&r, ours, "custom"), PROGRESS_OURS); /* its id says */
    CHECK_EQ_INT(progress_record_owner(&r, theirs, "outbox-relay.7581234567890999999.outbox_relay"),
                 PROGRESS_FOREIGN);
    /* written with no system identifier anywhere: nobody can say */
    snprintf(v, sizeof v, "%s\"transactional_id\":\"outbox-relay.outbox_relay\"}", head);
    r = parsed(v);
    CHECK_EQ_INT(progress_record_owner(&r, ours, txn), PROGRESS_UNKNOWN);
    snprintf(v, sizeof v, "%s\"transactional_id\":\"custom\"}", head);
    r = parsed(v);
    CHECK_EQ_INT(progress_record_owner(&r, ours, txn), PROGRESS_UNKNOWN);
    CHECK_EQ_INT(progress_record_owner(&r, ours, "custom"), PROGRESS_OURS);
    snprintf(v, sizeof v, "%s\"transactional_id\":\"outbox-relay.12ab.outbox_relay\"}", head);
    r = parsed(v);
    CHECK_EQ_INT(progress_record_owner(&r, ours, txn), PROGRESS_UNKNOWN);
    snprintf(v, sizeof v, "%s\"transactional_id\":\"outbox-relay.123.other\"}", head);
    r = parsed(v);
    CHECK_EQ_INT(progress_record_owner(&r, ours, txn), PROGRESS_UNKNOWN);

    /* a malformed system_identifier is refused */
    char err[256];
    snprintf(v, sizeof v, "%s\"system_identifier\":\"%040d\"}", head, 1);
    CHECK_EQ_INT(progress_record_parse(v, strlen(v), &r, err, sizeof err), -1);
    CHECK(strstr(err, "system_identifier") != NULL);
    snprintf(v, sizeof v, "%s\"system_identifier\":12}", head);
    CHECK_EQ_INT(progress_record_parse(v, strlen(v), &r, err, sizeof err), -1);
}

int main(void)
{
    test_owner();
    test_round_trip();
    test_any_order_and_unknown_keys();
    test_refusals();
    test_skip_rule();
    test_names();
    CHECK_DONE();
}
