/*
 * test_plugin.c — the output plugin's choice and refusal advice (plugin.h):
 * output_plugin_libraries read as the server reads it (quoted elements,
 * paths, blanks), the ALTER SYSTEM statement that works (one literal per
 * name, a mis-quoted list split), the choice for a new slot, and the
 * refusal text naming the parameter, its value, the fix and the way round.
 * Also pgconn_failure's rule that a failure is never said with an empty
 * reason.
 */
#include <libpq-fe.h>
#include <string.h>

#include "check.h"
#include "outbox_relay/pg/pgconn.h"
#include "outbox_relay/pg/plugin.h"

static const struct plugin_libs *known(const char *value)
{
    static struct plugin_libs l;
    l.state = PLUGIN_LIBS_KNOWN;
    snprintf(l.value, sizeof l.value, "%s", value);
    return &l;
}

static const struct plugin_libs absent = {PLUGIN_LIBS_ABSENT, ""};
static const struct plugin_libs hidden = {PLUGIN_LIBS_HIDDEN, ""};

static void test_allowed(void)
{
    CHECK(plugin_allowed(&absent, "wal2json")); /* a server before the parameter */
    CHECK(plugin_allowed(&hidden, "wal2json"));  /* not known to refuse: try */
    CHECK(!plugin_allowed(known("pgoutput, test_decoding"), "wal2json"));
    CHECK(plugin_allowed(known("pgoutput, test_decoding"), "pgoutput"));
    CHECK(plugin_allowed(known("pgoutput, test_decoding, wal2json"), "wal2json"));
    CHECK(plugin_allowed(known("pgoutput,wal2json"), "wal2json"));
    CHECK(plugin_allowed(known("\"wal2json\""), "wal2json"));
    CHECK(plugin_allowed(known("$libdir/wal2json"), "wal2json"));
    CHECK(plugin_allowed(known("wal2json.so"), "wal2json"));
    CHECK(!plugin_allowed(known("wal2json_v2"), "wal2json"));
    CHECK(!plugin_allowed(known(""), "wal2json"));
    /* ALTER SYSTEM SET ... = 'pgoutput, test_decoding, wal2json' stores one
     * quoted element, which the server does not split: still refused. */
    CHECK(!plugin_allowed(known("\"pgoutput, test_decoding, wal2json\""), "wal2json"));
}

static void test_statement(void)
{
    char b[600];
    CHECK(plugin_allow_statement(known("pgoutput, test_decoding"), "wal2json", b, sizeof b) > 0);
    CHECK_STR(b, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', "
                 "'wal2json'; SELECT pg_reload_conf();");
    /* The mis-quoted form is split into its names, each once. */
    CHECK(plugin_allow_statement(known("\"pgoutput, test_decoding, wal2json\""), "wal2json", b,
                                 sizeof b) > 0);
    CHECK_STR(b, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', "
                 "'wal2json'; SELECT pg_reload_conf();");
    /* What is there stays, in its order; a name already there is not added. */
    CHECK(plugin_allow_statement(known("test_decoding, pgoutput, my_plugin"), "wal2json", b,
                                 sizeof b) > 0);
    CHECK_STR(b, "ALTER SYSTEM SET output_plugin_libraries = 'test_decoding', 'pgoutput', "
                 "'my_plugin', 'wal2json'; SELECT pg_reload_conf();");
    CHECK(plugin_allow_statement(known(""), "wal2json", b, sizeof b) > 0);
    CHECK_STR(b, "ALTER SYSTEM SET output_plugin_libraries = 'wal2json'; SELECT "
                 "pg_reload_conf();");
    CHECK(plugin_allow_statement(known("it's"), "wal2json", b, sizeof b) > 0);
    CHECK_STR(b, "ALTER SYSTEM SET output_plugin_libraries = 'it''s', 'wal2json'; SELECT "
                 "pg_reload_conf();");
    char small[40];
    CHECK_EQ_INT(plugin_allow_statement(known("pgoutput"), "wal2json", small, sizeof small), -1);
}

static void test_refused(void)
{
    CHECK(plugin_refused_error("ERROR:  library \"wal2json\" may not be used as an output "
                               "plugin HINT:  If it is safe ..."));
    CHECK(!plugin_refused_error("ERROR:  could not access file \"wal2json\": No such file"));
    char b[1500];
    plugin_refusal_advice("wal2json", known("pgoutput, test_decoding"), false, b, sizeof b);
    CHECK(strstr(b, "output_plugin_libraries (currently 'pgoutput, test_decoding')") != NULL);
    CHECK(strstr(b, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', "
                    "'wal2json'; SELECT pg_reload_conf();") != NULL);
    CHECK(strstr(b, "--plugin pgoutput") != NULL);
    plugin_refusal_advice("wal2json", known("pgoutput, test_decoding"), true, b, sizeof b);
    CHECK(strstr(b, "switch it at an LSN") != NULL);
    CHECK(strstr(b, "docs/operations.md") != NULL);
}

static void test_choose(void)
{
    char why[1000];
    CHECK_STR(plugin_choose_new(&absent, false, false, why, sizeof why), "wal2json");
    CHECK_STR(plugin_choose_new(known("pgoutput, test_decoding, wal2json"), false, false, why, sizeof why),
              "wal2json");
    CHECK_STR(plugin_choose_new(known("pgoutput, test_decoding"), false, false, why, sizeof why), "pgoutput");
    CHECK(strstr(why, "does not name wal2json") != NULL);
    CHECK(strstr(why, "'pgoutput', 'test_decoding', 'wal2json'") != NULL);
    CHECK_STR(plugin_choose_new(&absent, false, true, why, sizeof why), "pgoutput");
    CHECK(strstr(why, "not installed") != NULL);
    /* A role that may not read the list: wal2json is tried; once refused,
     * pgoutput, with the statement for a server at its default. */
    CHECK_STR(plugin_choose_new(&hidden, false, false, why, sizeof why), "wal2json");
    CHECK_STR(plugin_choose_new(&hidden, true, false, why, sizeof why), "pgoutput");
    CHECK(strstr(why, "visible only to superusers") != NULL);
    CHECK(strstr(why, "'pgoutput', 'test_decoding', 'wal2json'") != NULL);
    char b[1500];
    plugin_refusal_advice("wal2json", &hidden, false, b, sizeof b);
    CHECK(strstr(b, "visible only to superusers") != NULL);
    CHECK(strstr(b, "'pgoutput', 'test_decoding', 'wal2json'") != NULL);
}

/* A failed command is never said with an empty reason: a result without a
 * message (what libpq hands back in corner cases) and a connection whose
 * message is empty still give a text. */
static void test_failure_never_empty(void)
{
    char b[256];
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_FATAL_ERROR);
    pgconn_failure(NULL, res, b, sizeof b);
    CHECK(*b != '\0');
    PQclear(res);
    res = PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK);
    pgconn_failure(NULL, res, b, sizeof b);
    CHECK(strstr(b, "PGRES_COMMAND_OK") != NULL);
    PQclear(res);
    pgconn_failure(NULL, NULL, b, sizeof b);
    CHECK(*b != '\0');
    /* A connection that never came up has its own message. */
    PGconn *c = PQconnectdb("host=127.0.0.1 port=1 connect_timeout=1");
    pgconn_failure(c, NULL, b, sizeof b);
    CHECK(*b != '\0');
    PQfinish(c);
}

int main(void)
{
    test_allowed();
    test_statement();
    test_refused();
    test_choose();
    test_failure_never_empty();
    CHECK_DONE();
}
