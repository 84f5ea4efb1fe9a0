/*
 * log.h — leveled logging to stderr, as text or JSON lines, with secrets
 * scrubbed.
 *
 * Every line gets a UTC timestamp and a level. Callers put context in the
 * message as key=value pairs (slot=… lsn=… event_id=…). Registered secrets
 * (DSN passwords, SASL passwords) are replaced by "****" in every line before
 * it is written, whatever produced it (our code, libpq's messages,
 * librdkafka's logs), so a secret cannot reach the log by accident.
 *
 * Thread-safe: librdkafka calls log_msg from its own threads. The level,
 * format and secret list are process-wide settings made once at start-up
 * (before other threads exist); they are the only globals.
 */
#ifndef OUTBOX_RELAY_LOG_H
#define OUTBOX_RELAY_LOG_H

#include <stdarg.h>

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };
enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON };

void log_setup(enum log_level level, enum log_format format);

/* Registers a secret to scrub (copied). Empty or very short strings (< 3
 * bytes) are ignored: scrubbing them would mangle every line. */
void log_add_secret(const char *secret);

/* Frees the secret list (at exit, for leak checkers). */
void log_shutdown(void);

int log_enabled(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level level, const char *fmt, va_list ap);

/* Parses "debug", "info", "warn"/"warning", "error"; -1 when unknown. */
int log_level_parse(const char *s);

#define log_debug(...) \
    do { if (log_enabled(LOG_LEVEL_DEBUG)) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
