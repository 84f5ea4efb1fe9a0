/*
 * pgo_test.h — reads the captured pgoutput fixtures
 * (tests/fixtures/pgoutput/<name>.frames: "<wal_start X/X> <payload hex>"
 * per frame, see capture.sh) for the pgoutput unit tests. Each frame is
 * its own allocation of exactly its length, so that ASan flags a read past
 * its end.
 */
#ifndef OUTBOX_RELAY_PGO_TEST_H
#define OUTBOX_RELAY_PGO_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_relay/base/lsn.h"

struct pgo_frame {
    lsn_t wal_start;
    char *data;
    size_t len;
};

struct pgo_frames {
    struct pgo_frame *f;
    size_t n;
};

static int pgo_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Hex text (n digits) into a new exact-size allocation; NULL when bad. */
static char *pgo_unhex(const char *hex, size_t n, size_t *len)
{
    if (n % 2)
        return NULL;
    char *out = malloc(n / 2 ? n / 2 : 1);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = pgo_hexval(hex[2 * i]), lo = pgo_hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (char) (hi << 4 | lo);
    }
    *len = n / 2;
    return out;
}

/* Loads FIXTURES_DIR/pgoutput/<name>; exits on a missing or bad file. */
static struct pgo_frames pgo_load(const char *name)
{
    char path[512];
    struct pgo_frames fr = {NULL, 0};
    size_t cap = 0;
    snprintf(path, sizeof path, "%s/pgoutput/%s", FIXTURES_DIR, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, f)) > 0) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        char *sp = strchr(line, ' ');
        lsn_t lsn;
        if (sp == NULL || lsn_parse(line, (size_t) (sp - line), &lsn) < 0) {
            fprintf(stderr, "%s: bad line %zu\n", path, fr.n + 1);
            exit(2);
        }
        if (fr.n == cap) {
            cap = cap ? cap * 2 : 64;
            fr.f = realloc(fr.f, cap * sizeof *fr.f);
        }
        struct pgo_frame *fp = &fr.f[fr.n++];
        fp->wal_start = lsn;
        fp->data = pgo_unhex(sp + 1, strlen(sp + 1), &fp->len);
        if (fp->data == NULL) {
            fprintf(stderr, "%s: bad hex on line %zu\n", path, fr.n);
            exit(2);
        }
    }
    free(line);
    fclose(f);
    return fr;
}

static void pgo_frames_free(struct pgo_frames *fr)
{
    for (size_t i = 0; i < fr->n; i++)
        free(fr->f[i].data);
    free(fr->f);
    fr->f = NULL;
    fr->n = 0;
}

#endif
