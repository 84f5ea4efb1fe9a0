/*
 * options.h — the option-table machinery that outbox-relay's configuration
 * (config.c) and outbox-consume's (consume_config.c) share.
 *
 * Each program keeps its own table of options (name, kind, field offset in
 * its config struct, default, --help text) and its own checks; this module
 * finds an option by name, sets a field from text with the program-
 * independent error messages, fills the defaults, prints the table as
 * --help lines, reads the environment (PREFIX<NAME>, PREFIXKAFKA_<PROPERTY>)
 * and the command line (--name value, --name=value, -X, -h, -V) into the
 * config struct, and frees what it set. Pure apart from printing --help and
 * --version to stdout.
 *
 * It also holds the value parsers and checks both programs apply (whole
 * numbers, seconds, the list of librdkafka properties, what may be quoted
 * back in an error, a DSN's syntax, Kafka topic characters, which values
 * are secrets). Dependencies go one way: config.c (the relayer's table and
 * checks) and consume_config.c (the consumer's) use this module; it knows
 * neither.
 */
#ifndef OUTBOX_RELAY_OPTIONS_H
#define OUTBOX_RELAY_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* These names predate this module; both programs' config structs,
 * their callers and main() use them, so they keep the config_ spelling. */
#define CONFIG_ERRLEN 512
#define CONFIG_MAX_KAFKA_PROPS 128

/* What config_load() and consume_config_load() return. */
enum config_result { CONFIG_OK = 0, CONFIG_EXIT = 1, CONFIG_ERROR = -1 };

/* One librdkafka property as given (-X key=value); the list owns both. */
struct config_kv {
    char *key;
    char *value;
};

enum option_kind {
    OPT_STR,      /* char *: a copy of the text; freed by options_free() */
    OPT_LONG,     /* long: a whole number */
    OPT_SIZE,     /* long: a byte count with an optional K/M/G (KiB, MB...) suffix */
    OPT_SECONDS,  /* double: seconds, fractions allowed */
    OPT_BOOL,     /* bool: true/1/yes/on or false/0/no/off; on the command
                     line as --x, --x=VALUE or --x VALUE (the next word
                     is taken only when it is one of those words); alone
                     it means true */
    OPT_LOGLEVEL, /* enum log_level, as log_level_parse() reads it */
    OPT_ENUM,     /* an enum (int-sized) field: one of `words` */
    OPT_FLAG,     /* bool: one of two `words`, the first false, the second true */
    OPT_LIST,     /* char *: repeatable; every value given (in any source) is
                     appended, ',' between them; freed by options_free() */
};

/* OPT_READ_FIRST: read before every other source by the program itself
 * (--config FILE); the environment and command-line readers skip it. */
#define OPT_READ_FIRST 1u

/* A word an OPT_ENUM or OPT_FLAG option accepts and the value it stands
 * for; a table of them ends with {NULL, 0}. */
struct option_word {
    const char *word;
    int value;
};

/* text → LOG_FORMAT_TEXT, json → LOG_FORMAT_JSON: both programs' --log-format. */
extern const struct option_word option_log_formats[];

struct option_def {
    const char *name;   /* long option name, dashes */
    enum option_kind kind;
    size_t offset;      /* of the field in the program's config struct */
    const char *defval; /* set by options_set_defaults(); NULL for none */
    const char *arg;    /* placeholder in --help, NULL for none */
    const char *help;
    const struct option_word *words; /* OPT_ENUM and OPT_FLAG */
    unsigned flags;                  /* OPT_READ_FIRST */
};

/* One program's options: its table and how its sources are named. The
 * config struct holds its librdkafka properties as
 * `struct config_kv kafka[CONFIG_MAX_KAFKA_PROPS]; size_t nkafka;` at the
 * offsets given. */
struct options_spec {
    const char *program;    /* "outbox-relay": --version prints "<program> <version>" */
    const struct option_def *defs;
    size_t ndefs;
    const char *env_prefix; /* "OUTBOX_RELAY_"; properties: env_prefix "KAFKA_" */
    size_t kafka_offset;    /* offsetof(config struct, kafka) */
    size_t nkafka_offset;   /* offsetof(config struct, nkafka) */
    int help_width;         /* width of the left column of --help */
    const char *kafka_help; /* what --help says of -X PROPERTY=VALUE */
    /* Prints the whole --help; argv0 is the program's path. */
    void (*print_help)(const char *argv0);
    /* Takes the argument of -X (NULL when it is missing): 0, or -1 with err.
     * Each program words its own messages. */
    int (*set_kafka_arg)(void *cfg, const char *kv, char *err, size_t errlen);
    /* Prints the libraries the program runs with after --version's first
     * line (NULL: nothing). */
    void (*print_libraries)(void);
};

/* The option named by the len bytes at name, or NULL. Case-insensitive and
 * '_' matches '-', so that the environment's BATCH_MS finds batch-ms (the
 * command line refuses '_' itself). */
const struct option_def *options_find(const struct options_spec *spec, const char *name,
                                      size_t len);

/* Sets o's field in cfg from value. source ("command line", "default",
 * "FILE:LINE", "environment NAME") leads the error message. Returns 0, or
 * -1 with err. */
int options_set(void *cfg, const struct option_def *o, const char *value, const char *source,
                char *err, size_t errlen);

/* Sets every option that has a default. Returns 0, or -1 with err. */
int options_set_defaults(const struct options_spec *spec, void *cfg, char *err,
                         size_t errlen);

/* Reads env_prefix<NAME>=value options and env_prefix KAFKA_<PROPERTY>
 * librdkafka properties ('_' for '.') from envp (NULL-terminated "NAME=value"
 * strings); names not in the table are someone else's and skipped. Returns
 * 0, or -1 with err. */
int options_load_env(const struct options_spec *spec, void *cfg, char **envp, char *err,
                     size_t errlen);

/* Reads argv[first..argc): -h/--help and -V/--version (printed to stdout;
 * *exit_now set), -X PROPERTY=VALUE, --name value and --name=value. Never
 * quotes back an argument that may hold a secret (options_safe_to_echo).
 * Returns 0, or -1 with err. */
int options_load_args(const struct options_spec *spec, void *cfg, int argc, char **argv,
                      int first, char *err, size_t errlen, bool *exit_now);

/* Prints the options part of --help to stdout: one "--name ARG  help
 * (default: ...)" line per option, then -X (and its environment form), -h
 * and -V. */
void options_print_table(const struct options_spec *spec);

/* Frees every OPT_STR field and the librdkafka properties, leaving them
 * NULL / empty. */
void options_free(const struct options_spec *spec, void *cfg);

/* ---- value parsers and checks both programs share ---- */

/* Whole-string parsers: 0, or -1 when s is not entirely a number of the
 * kind (seconds: finite, >= 0, fractions allowed). */
int options_parse_long(const char *s, long *out);
int options_parse_seconds(const char *s, double *out);

/* Sets key (keylen bytes) = value in a list of librdkafka properties of at
 * most CONFIG_MAX_KAFKA_PROPS entries, replacing an earlier value of the
 * same key. The list owns the copies. Returns 0, or -1 with err. */
int options_kafka_set(struct config_kv *kv, size_t *n, const char *key, size_t keylen,
                      const char *value, char *err, size_t errlen);

/* The value of key in a list of n librdkafka properties, or NULL. */
const char *options_kv_get(const struct config_kv *kv, size_t n, const char *key);

/* True when a user-typed word may be quoted back in an error message: a
 * short run of [A-Za-z0-9._-]. Anything else (a mistyped DSN, a
 * `-X sasl.password:…`) may hold a secret and is not echoed. */
bool options_safe_to_echo(const char *s);

/* Checks that dsn parses as a PostgreSQL connection string (key=value or
 * URI), without quoting it back: it may hold a password. Returns 0, or -1
 * with a message in err. */
int options_check_dsn(const char *dsn, char *err, size_t errlen);

/* True for the characters Kafka allows in topic names: [A-Za-z0-9._-]. */
bool options_topic_char_ok(char c);

/* Registers every secret of a program's configuration with the logger so
 * it is scrubbed from every line: the DSN's password and sslpassword (dsn
 * may be NULL) and the librdkafka properties whose name holds password,
 * secret, jaas or token. */
void options_register_secrets(const char *dsn, const struct config_kv *kafka, size_t nkafka);

#endif
