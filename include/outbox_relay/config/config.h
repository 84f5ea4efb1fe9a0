/*
 * config.h — the relayer's configuration: one table of options, read from
 * defaults, then a config file (--config FILE, `name = value` lines), then
 * the environment (OUTBOX_RELAY_<NAME>), then the command line; later
 * sources win. Pure apart from reading the config file.
 *
 * librdkafka properties pass through untouched, kcat style:
 *   command line   -X security.protocol=SASL_SSL
 *   config file    kafka.security.protocol = SASL_SSL
 *   environment    OUTBOX_RELAY_KAFKA_SECURITY_PROTOCOL=SASL_SSL
 * (in the environment form '_' stands for '.').
 *
 * The table machinery and the parsers both programs share are options.h;
 * this module is the relayer's option set and its checks.
 */
#ifndef OUTBOX_RELAY_CONFIG_H
#define OUTBOX_RELAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/log.h"
#include "outbox_relay/base/options.h" /* struct config_kv, CONFIG_*, enum config_result */
#include "outbox_relay/decode/outbox_event.h" /* struct outbox_columns_map */

enum relay_command { RELAY_CMD_RUN = 0, RELAY_CMD_REAP, RELAY_CMD_STATUS, RELAY_CMD_CHECK };
enum poison_policy { POISON_HALT = 0, POISON_DEAD_LETTER };
/* --delivery: at-least-once (the slot is confirmed on delivery reports) or
 * exactly-once (Kafka transactions with a progress record,
 * progress_record.h; the slot is confirmed after each Kafka commit). */
enum delivery_mode { DELIVERY_AT_LEAST_ONCE = 0, DELIVERY_EXACTLY_ONCE };
/* PLUGIN_AUTO (no --plugin): an existing slot keeps its plugin, a new one
 * is made with wal2json where the server allows and has it, otherwise with
 * pgoutput (plugin.h). The relayer resolves it to one of the other two
 * before it streams (main.c). */
enum relay_plugin { PLUGIN_WAL2JSON = 0, PLUGIN_PGOUTPUT, PLUGIN_AUTO };
enum report_format { REPORT_FORMAT_TEXT = 0, REPORT_FORMAT_JSON }; /* `check --format` */
/* The outbox table's layout: ours (sql/001_outbox.sql) or Debezium's
 * outbox event router table (id uuid, aggregatetype, aggregateid, type,
 * payload). */
enum relay_layout { LAYOUT_DEFAULT = 0, LAYOUT_DEBEZIUM };

struct relay_config {
    enum relay_command command;
    char *dsn;
    char *brokers;
    char *slot;
    enum relay_plugin plugin; /* the output plugin: auto (default), wal2json or pgoutput */
    char *publication;  /* pgoutput: the publication (default outbox_relay) */
    char *table;        /* as given: "schema.table" */
    char *table_schema; /* split and validated */
    char *table_name;
    char *topic;        /* template: {type} {prefix} {column}, or a fixed topic;
                           default by layout */
    enum relay_layout layout;
    char *column_id;    /* --column-*: as given (NULL: the layout's); */
    char *column_key;   /* "" or "none": no such column (key, created-at) */
    char *column_type;
    char *column_payload;
    char *column_created_at;
    char *header_columns; /* --header-column NAME[:HEADER], ','-joined */
    int envelope;         /* enum event_envelope (event_headers.h): --envelope */
    char *ce_source;      /* --ce-source; NULL: /postgresql/<db>/<schema>.<table> */
    /* Built by config_load from the above: names point into cfg. */
    struct outbox_columns_map columns;
    const char *id_header; /* the event id also under this header (Debezium: "id") */
    char *extra_strs[3 * OUTBOX_MAX_EXTRA]; /* owned names of columns' extras */
    char *message_prefix; /* logical-message prefix ("" = off) */
    long max_inflight;
    long max_inflight_bytes;
    double status_interval;    /* seconds */
    double wal_receiver_timeout; /* seconds without any frame before reconnecting, 0 = off */
    double shutdown_timeout;   /* seconds to wait for deliveries on stop */
    double reconnect_max;      /* seconds: cap of the reconnect backoff */
    enum poison_policy on_poison;
    char *dead_letter_topic;
    enum delivery_mode delivery;  /* --delivery */
    char *progress_topic;         /* exactly-once: the compacted progress topic */
    long transaction_max_events;  /* exactly-once: close a Kafka transaction at the first
                                     PostgreSQL commit after this many events */
    long transaction_max_ms;      /* ... or after it was open this long (ms) */
    char *retention;           /* PostgreSQL interval text; "0" = reaper off */
    long reap_batch;
    double reap_interval;      /* seconds between reaper runs */
    double reap_pause;         /* seconds between batches */
    char *metrics_addr;        /* HOST:PORT, NULL/"" = off */
    double heartbeat_interval; /* seconds, 0 = off */
    long max_lag_bytes;        /* readiness and `status` threshold */
    double max_age;            /* `status` threshold, seconds */
    double takeover_after;     /* seconds, 0 = never terminate a holder */
    bool failover_slot;
    char *primary_dsn;         /* --primary-dsn: the primary when --dsn is a standby;
                                  NULL/"" none */
    bool recreate_slot;
    bool backfill_pending;     /* --backfill pending */
    enum log_level log_level;
    enum log_format log_format;
    enum report_format format; /* `check`: text or json */
    char *config_file;
    struct config_kv kafka[CONFIG_MAX_KAFKA_PROPS]; /* in order given */
    size_t nkafka;
};

/* Fills cfg from defaults, the config file, envp (NULL-terminated
 * "NAME=value" strings) and argv. CONFIG_OK: ready to run. CONFIG_EXIT:
 * --help or --version was printed to stdout; exit 0. CONFIG_ERROR: err holds
 * what was wrong and what to do; exit 2. cfg owns every string in it; free
 * with config_free() in every case. */
enum config_result config_load(struct relay_config *cfg, int argc, char **argv,
                               char **envp, char *err, size_t errlen);

void config_free(struct relay_config *cfg);

/* The value of a librdkafka property set by the user, or NULL. */
const char *config_kafka_get(const struct relay_config *cfg, const char *key);

/* Registers every secret in cfg (DSN password, *.password / secret
 * properties) with the logger so they are scrubbed from every line
 * (options_register_secrets). */
void config_register_secrets(const struct relay_config *cfg);

/* Whether the n bytes at s are a plain identifier: 1 to 63 of letters,
 * '_', then digits and '$' too (config_columns.c). */
bool config_ident_ok(const char *s, size_t n);

/* --layout and --column-* into cfg->columns (the layout's defaults for
 * what is not given, its topic when --topic is not), --header-column into
 * its extra columns (config_columns.c). Returns 0, or -1 with err. */
int config_build_columns(struct relay_config *cfg, char *err, size_t errlen);

/* The {column}s of cfg->topic become extra columns without a header.
 * Returns 0, or -1 with err. */
int config_topic_columns(struct relay_config *cfg, char *err, size_t errlen);

/* Validates a replication slot name (PostgreSQL's rule: 1-63 of [a-z0-9_]).
 * Returns 0, or -1 with a message in err. */
int config_check_slot_name(const char *name, char *err, size_t errlen);

#endif
