/*
 * log.c — leveled, secret-scrubbing logger (see log.h).
 *
 * A line is formatted completely in a local buffer, scrubbed, and written
 * with one fwrite under a mutex, so lines from librdkafka's threads never
 * interleave with ours.
 */
#include "outbox_relay/base/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define LOG_LINE_MAX 8192
#define LOG_MAX_SECRETS 16

static enum log_level log_min_level = LOG_LEVEL_INFO;
static enum log_format log_fmt = LOG_FORMAT_TEXT;
static char *log_secrets[LOG_MAX_SECRETS];
static int log_nsecrets;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_setup(enum log_level level, enum log_format format)
{
    log_min_level = level;
    log_fmt = format;
}

void log_add_secret(const char *secret)
{
    if (secret == NULL || strlen(secret) < 3 || log_nsecrets >= LOG_MAX_SECRETS)
        return;
    for (int i = 0; i < log_nsecrets; i++)
        if (strcmp(log_secrets[i], secret) == 0)
            return;
    char *copy = strdup(secret);
    if (copy != NULL)
        log_secrets[log_nsecrets++] = copy;
}

void log_shutdown(void)
{
    for (int i = 0; i < log_nsecrets; i++)
        free(log_secrets[i]);
    log_nsecrets = 0;
}

int log_enabled(enum log_level level)
{
    return level >= log_min_level;
}

int log_level_parse(const char *s)
{
    if (strcmp(s, "debug") == 0)
        return LOG_LEVEL_DEBUG;
    if (strcmp(s, "info") == 0)
        return LOG_LEVEL_INFO;
    if (strcmp(s, "warn") == 0 || strcmp(s, "warning") == 0)
        return LOG_LEVEL_WARN;
    if (strcmp(s, "error") == 0)
        return LOG_LEVEL_ERROR;
    return -1;
}

/* Replaces every occurrence of each secret in buf (NUL-terminated, capacity
 * cap) by "****". */
static void scrub(char *buf, size_t cap)
{
    for (int i = 0; i < log_nsecrets; i++) {
        const char *sec = log_secrets[i];
        size_t slen = strlen(sec);
        char *p = buf;
        while ((p = strstr(p, sec)) != NULL) {
            size_t tail = strlen(p + slen);
            if (4 + tail + (size_t) (p - buf) + 1 > cap)
                tail = cap - (size_t) (p - buf) - 5;
            memmove(p + 4, p + slen, tail);
            memcpy(p, "****", 4);
            p[4 + tail] = '\0';
            p += 4;
        }
    }
}

/* Appends s to out as JSON string content. */
static size_t json_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s != '\0' && n + 7 < cap; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char) c;
        } else if (c == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else if (c < 0x20) {
            n += (size_t) snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char) c;
        }
    }
    out[n] = '\0';
    return n;
}

/* Copies s to out with control characters written as \n, \r, \t or \xNN. */
static void text_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s != '\0' && n + 5 < cap; s++) {
        unsigned char c = (unsigned char) *s;
        if (c >= 0x20 && c != 0x7f) {
            out[n++] = (char) c;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            out[n++] = '\\';
            out[n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else {
            n += (size_t) snprintf(out + n, cap - n, "\\x%02x", c);
        }
    }
    out[n] = '\0';
}

void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;

    char msg[LOG_LINE_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t mlen = strlen(msg);
    while (mlen > 0 && (msg[mlen - 1] == '\n' || msg[mlen - 1] == ' '))
        msg[--mlen] = '\0';

    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    char ts[96];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int) (tv.tv_usec / 1000));

    char line[2 * LOG_LINE_MAX + 256];
    pthread_mutex_lock(&log_lock);
    scrub(msg, sizeof msg);
    if (log_fmt == LOG_FORMAT_JSON) {
        char esc[2 * LOG_LINE_MAX];
        json_escape(esc, sizeof esc, msg);
        snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts,
                 level_names[level], esc);
    } else {
        /* One event, one line: control characters (a newline in an event
         * type, say) are escaped so nothing can forge a log line. */
        char esc[2 * LOG_LINE_MAX];
        text_escape(esc, sizeof esc, msg);
        snprintf(line, sizeof line, "%s %-5s %s\n", ts, level_names[level], esc);
    }
    fputs(line, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}
