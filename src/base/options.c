/*
 * options.c — the option-table machinery both programs' configurations
 * share (see options.h). The messages here are the ones users of either
 * program see: change them with both programs' tests in mind.
 */
#include "outbox_relay/base/options.h"

#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/log.h"

_Static_assert(sizeof(enum log_format) == sizeof(int), "OPT_ENUM stores an int");

const struct option_word option_log_formats[] = {
    {"text", LOG_FORMAT_TEXT}, {"json", LOG_FORMAT_JSON}, {NULL, 0}};

const struct option_def *options_find(const struct options_spec *spec, const char *name,
                                      size_t len)
{
    for (size_t i = 0; i < spec->ndefs; i++) {
        const char *o = spec->defs[i].name;
        if (strlen(o) != len)
            continue;
        size_t j = 0;
        for (; j < len; j++) {
            char c = name[j] == '_' ? '-' : (char) tolower((unsigned char) name[j]);
            if (c != o[j])
                break;
        }
        if (j == len)
            return &spec->defs[i];
    }
    return NULL;
}

int options_parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

int options_parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}

static int parse_size(const char *s, long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || v < 0)
        return -1;
    long long mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024LL, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1024LL * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1024LL * 1024 * 1024, end++;
    if (*end == 'i' && mult > 1)
        end++;
    if ((*end == 'B' || *end == 'b') && end[1] == '\0')
        end++;
    if (*end != '\0' || v > (long long) (LONG_MAX / mult))
        return -1;
    *out = (long) (v * mult);
    return 0;
}

/* "a or b", "a, b or c": the words an option accepts, for its message. */
static void list_words(const struct option_word *w, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; w[i].word != NULL && n < cap; i++) {
        const char *sep = i == 0 ? "" : w[i + 1].word == NULL ? " or " : ", ";
        int k = snprintf(buf + n, cap - n, "%s%s", sep, w[i].word);
        if (k < 0)
            break;
        n += (size_t) k;
    }
}

/* 1 for true/1/yes/on, 0 for false/0/no/off, -1 for anything else. */
static int bool_word(const char *s)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(s, yes[i]) == 0)
            return 1;
        if (strcmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}

int options_set(void *cfg, const struct option_def *o, const char *value, const char *source,
                char *err, size_t errlen)
{
    void *field = (char *) cfg + o->offset;
    const char *expected = NULL; /* what the message says the option expects */
    char words[128];

    switch (o->kind) {
    case OPT_STR: {
        char *copy = strdup(value);
        if (copy == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        free(*(char **) field);
        *(char **) field = copy;
        return 0;
    }
    case OPT_LIST: {
        char *old = *(char **) field;
        size_t n = old != NULL ? strlen(old) : 0;
        char *joined = malloc(n + 1 + strlen(value) + 1);
        if (joined == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (old != NULL && *value != '\0')
            sprintf(joined, "%s,%s", old, value);
        else
            strcpy(joined, *value != '\0' ? value : (old != NULL ? old : ""));
        free(old);
        *(char **) field = joined;
        return 0;
    }
    case OPT_LONG:
        if (options_parse_long(value, (long *) field) == 0)
            return 0;
        expected = "a whole number";
        break;
    case OPT_SIZE:
        if (parse_size(value, (long *) field) == 0)
            return 0;
        expected = "a byte count such as 16M";
        break;
    case OPT_SECONDS:
        if (options_parse_seconds(value, (double *) field) == 0)
            return 0;
        expected = "seconds (e.g. 10 or 0.5)";
        break;
    case OPT_BOOL: {
        int b = bool_word(value);
        if (b >= 0) {
            *(bool *) field = b == 1;
            return 0;
        }
        expected = "true or false";
        break;
    }
    case OPT_LOGLEVEL: {
        int lvl = log_level_parse(value);
        if (lvl >= 0) {
            *(enum log_level *) field = (enum log_level) lvl;
            return 0;
        }
        expected = "debug, info, warn or error";
        break;
    }
    case OPT_ENUM:
    case OPT_FLAG:
        for (const struct option_word *w = o->words; w->word != NULL; w++) {
            if (strcmp(value, w->word) != 0)
                continue;
            if (o->kind == OPT_FLAG)
                *(bool *) field = w->value != 0;
            else
                *(int *) field = w->value;
            return 0;
        }
        list_words(o->words, words, sizeof words);
        expected = words;
        break;
    }
    if (expected == NULL)
        return -1; /* a kind this switch does not know: a table bug */
    snprintf(err, errlen, "%s: --%s expects %s, got \"%s\"", source, o->name, expected, value);
    return -1;
}

int options_set_defaults(const struct options_spec *spec, void *cfg, char *err,
                         size_t errlen)
{
    for (size_t i = 0; i < spec->ndefs; i++)
        if (spec->defs[i].defval &&
            options_set(cfg, &spec->defs[i], spec->defs[i].defval, "default", err, errlen) < 0)
            return -1;
    return 0;
}

static struct config_kv *kafka_list(const struct options_spec *spec, void *cfg, size_t **n)
{
    *n = (size_t *) ((char *) cfg + spec->nkafka_offset);
    return (struct config_kv *) ((char *) cfg + spec->kafka_offset);
}

int options_load_env(const struct options_spec *spec, void *cfg, char **envp, char *err,
                     size_t errlen)
{
    size_t plen = strlen(spec->env_prefix);
    size_t *nkafka;
    struct config_kv *kafka = kafka_list(spec, cfg, &nkafka);

    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, spec->env_prefix, plen) != 0)
            continue;
        const char *name = *e + plen;
        const char *eq = strchr(name, '=');
        if (eq == NULL)
            continue;
        if (strncmp(name, "KAFKA_", 6) == 0) {
            const char *k = name + 6;
            char key[256];
            size_t n = (size_t) (eq - k);
            if (n >= sizeof key)
                continue;
            for (size_t i = 0; i < n; i++)
                key[i] = k[i] == '_' ? '.' : (char) tolower((unsigned char) k[i]);
            key[n] = '\0';
            if (options_kafka_set(kafka, nkafka, key, n, eq + 1, err, errlen) < 0)
                return -1;
            continue;
        }
        const struct option_def *o = options_find(spec, name, (size_t) (eq - name));
        if (o == NULL || (o->flags & OPT_READ_FIRST))
            continue; /* OUTBOX_RELAY_BUILD and friends belong to others */
        char source[128];
        snprintf(source, sizeof source, "environment %.*s", (int) (eq - *e), *e);
        if (options_set(cfg, o, eq + 1, source, err, errlen) < 0)
            return -1;
    }
    return 0;
}

int options_load_args(const struct options_spec *spec, void *cfg, int argc, char **argv,
                      int first, char *err, size_t errlen, bool *exit_now)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            spec->print_help(argv[0]);
            *exit_now = true;
            return 0;
        }
        if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
            printf("%s %s\n", spec->program, OUTBOX_RELAY_VERSION);
            if (spec->print_libraries != NULL)
                spec->print_libraries();
            *exit_now = true;
            return 0;
        }
        if (strncmp(a, "-X", 2) == 0) {
            const char *kv = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (spec->set_kafka_arg(cfg, kv, err, errlen) < 0)
                return -1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (options_safe_to_echo(a))
                snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", a);
            else
                snprintf(err, errlen, "unexpected argument #%d (options start with --; not "
                         "shown: it may hold a secret; see --help)", i);
            return -1;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t) (eq - name) : strlen(name);
        const struct option_def *o = options_find(spec, name, nlen);
        if (o == NULL || memchr(name, '_', nlen) != NULL) {
            snprintf(err, errlen, "unknown option --%.*s (see --help)", (int) nlen, name);
            return -1;
        }
        /* A boolean takes its value from the next word only when that word
         * is one (--failover-slot true, as --help shows it); alone, or
         * before another option, it means true. No program here takes a
         * positional argument, so a bool word after it has no other use. */
        const char *value = eq ? eq + 1
                          : o->kind != OPT_BOOL ? (i + 1 < argc ? argv[++i] : NULL)
                          : i + 1 < argc && bool_word(argv[i + 1]) >= 0 ? argv[++i]
                                                                        : "true";
        if (value == NULL) {
            snprintf(err, errlen, "--%s needs a value (%s)", o->name, o->arg ? o->arg : "");
            return -1;
        }
        if (o->flags & OPT_READ_FIRST)
            continue; /* the program read it already */
        if (options_set(cfg, o, value, "command line", err, errlen) < 0)
            return -1;
    }
    return 0;
}

void options_print_table(const struct options_spec *spec)
{
    int w = spec->help_width;
    for (size_t i = 0; i < spec->ndefs; i++) {
        const struct option_def *o = &spec->defs[i];
        char left[64];
        snprintf(left, sizeof left, "--%s %s", o->name, o->arg ? o->arg : "");
        printf("  %-*s %s", w, left, o->help);
        if (o->defval)
            printf(" (default: %s)", o->defval);
        printf("\n");
    }
    printf("  %-*s %s\n", w, "-X PROPERTY=VALUE", spec->kafka_help);
    printf("  %-*s env %sKAFKA_<PROPERTY> with '_' for '.'\n", w, "", spec->env_prefix);
    printf("  %-*s %s\n", w, "-h, --help", "this help");
    printf("  %-*s %s\n", w, "-V, --version", "print the version");
}

void options_free(const struct options_spec *spec, void *cfg)
{
    for (size_t i = 0; i < spec->ndefs; i++)
        if (spec->defs[i].kind == OPT_STR || spec->defs[i].kind == OPT_LIST) {
            char **f = (char **) ((char *) cfg + spec->defs[i].offset);
            free(*f);
            *f = NULL;
        }
    size_t *nkafka;
    struct config_kv *kafka = kafka_list(spec, cfg, &nkafka);
    for (size_t i = 0; i < *nkafka; i++) {
        free(kafka[i].key);
        free(kafka[i].value);
    }
    *nkafka = 0;
}

/* ---- value parsers and checks both programs share ---------------------- */

int options_kafka_set(struct config_kv *kv, size_t *n, const char *key, size_t keylen,
                      const char *value, char *err, size_t errlen)
{
    if (keylen == 0) {
        snprintf(err, errlen, "empty librdkafka property name (use -X name=value)");
        return -1;
    }
    for (size_t i = 0; i < *n; i++) {
        if (strlen(kv[i].key) == keylen && memcmp(kv[i].key, key, keylen) == 0) {
            char *v = strdup(value);
            if (v == NULL)
                goto oom;
            free(kv[i].value);
            kv[i].value = v;
            return 0;
        }
    }
    if (*n >= CONFIG_MAX_KAFKA_PROPS) {
        snprintf(err, errlen, "too many librdkafka properties (at most %d)",
                 CONFIG_MAX_KAFKA_PROPS);
        return -1;
    }
    kv[*n].key = strndup(key, keylen);
    kv[*n].value = strdup(value);
    (*n)++; /* freed with the list even when half set */
    if (kv[*n - 1].key == NULL || kv[*n - 1].value == NULL)
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -1;
}

const char *options_kv_get(const struct config_kv *kv, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0)
            return kv[i].value;
    return NULL;
}

bool options_safe_to_echo(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 40)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char) s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

int options_check_dsn(const char *dsn, char *err, size_t errlen)
{
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(dsn, &errmsg);
    if (opts == NULL) {
        /* libpq's message may quote the DSN, password included: do not echo it. */
        snprintf(err, errlen, "--dsn is not a valid PostgreSQL connection string (%s)",
                 errmsg && strstr(errmsg, "missing") ? "missing \"=\" after a keyword"
                                                     : "syntax error");
        PQfreemem(errmsg);
        return -1;
    }
    PQconninfoFree(opts);
    return 0;
}

bool options_topic_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

void options_register_secrets(const char *dsn, const struct config_kv *kafka, size_t nkafka)
{
    if (dsn != NULL) {
        PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
        for (PQconninfoOption *o = opts; o && o->keyword; o++)
            if (o->val && (strcmp(o->keyword, "password") == 0 ||
                           strcmp(o->keyword, "sslpassword") == 0))
                log_add_secret(o->val);
        PQconninfoFree(opts);
    }
    for (size_t i = 0; i < nkafka; i++) {
        const char *k = kafka[i].key;
        if (strstr(k, "password") || strstr(k, "secret") || strstr(k, "jaas") ||
            strstr(k, "token"))
            log_add_secret(kafka[i].value);
    }
}
