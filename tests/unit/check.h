/*
 * check.h — the few assertion macros our unit tests use. A failed check
 * prints file:line and the expression, and the test binary exits non-zero
 * at the end (checks keep going so one run shows every failure).
 */
#ifndef OUTBOX_RELAY_CHECK_H
#define OUTBOX_RELAY_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(expr)                                                           \
    do {                                                                      \
        check_count++;                                                        \
        if (!(expr)) {                                                        \
            check_failures++;                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #expr);                                                   \
        }                                                                     \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long check_a_ = (long long) (a), check_b_ = (long long) (b);      \
        check_count++;                                                         \
        if (check_a_ != check_b_) {                                            \
            check_failures++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n",  \
                    __FILE__, __LINE__, #a, #b, check_a_, check_b_);           \
        }                                                                      \
    } while (0)

/* Compares a (ptr, len) byte span with a NUL-terminated string. */
#define CHECK_SPAN(ptr, len, str)                                              \
    do {                                                                       \
        const char *check_s_ = (str);                                          \
        const char *check_p_ = (const char *) (ptr);                           \
        size_t check_l_ = strlen(check_s_);                                    \
        check_count++;                                                         \
        if ((len) != check_l_ || (check_p_ == NULL && check_l_ > 0) ||         \
            (check_p_ != NULL && memcmp(check_p_, check_s_, check_l_) != 0)) { \
            check_failures++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s == \"%s\" (got \"%.*s\")\n", \
                    __FILE__, __LINE__, #ptr, check_s_, (int) (len),           \
                    check_p_ ? check_p_ : "(null)");                           \
        }                                                                      \
    } while (0)

/* Two C strings equal; both printed when not. */
#define CHECK_STR(got, want)                                                   \
    do {                                                                       \
        const char *g_ = (got), *w_ = (want);                                  \
        check_count++;                                                         \
        if (strcmp(g_, w_) != 0) {                                             \
            check_failures++;                                                  \
            fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__, g_, w_); \
        }                                                                      \
    } while (0)

#define CHECK_DONE()                                                           \
    do {                                                                       \
        printf("%s: %d checks, %d failed\n", __FILE__, check_count,            \
               check_failures);                                                \
        return check_failures ? 1 : 0;                                         \
    } while (0)

#endif
