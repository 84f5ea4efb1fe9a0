/*
 * pgoutput.h — a pure parser of PostgreSQL's built-in output plugin,
 * pgoutput, protocol version 1 (PostgreSQL 15 "Logical Replication Message
 * Formats"), one XLogData payload = one message. No I/O.
 *
 *   'B' Begin     final LSN, commit time, xid
 *   'C' Commit    flags, commit LSN, end LSN, commit time
 *   'O' Origin    commit LSN at the origin, origin name
 *   'R' Relation  cached by OID (pgo_parser's relation cache)
 *   'Y' Type      OID, namespace, name (reported, not kept)
 *   'I' Insert    relation OID, new tuple (values as text)
 *   'U' 'D' 'T'   Update, Delete, Truncate: checked, reported, not kept
 *   'M' Message   flags (1: transactional), LSN, prefix, content
 *
 * Every read is length-checked: a truncated or malformed frame is refused
 * with a message naming what was being read and at which byte offset; the
 * parser never reads outside [data, data + len). Trailing bytes after a
 * message are an error too. Integers are big-endian (network order).
 * Times are microseconds since 2000-01-01 00:00 UTC (PostgreSQL's epoch):
 * PGO_UNIX_EPOCH_US converts.
 *
 * Ownership: the parser owns its relation cache and value array.
 * struct pgo_msg points into the frame (strings, values) and into the
 * parser (rel, values): valid until the next pgo_parse() on the same
 * parser, or until the frame is freed. Strings are NOT NUL-terminated.
 */
#ifndef OUTBOX_RELAY_PGOUTPUT_H
#define OUTBOX_RELAY_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

#define PGO_ERRLEN 256
/* 2000-01-01 minus 1970-01-01, in microseconds. */
#define PGO_UNIX_EPOCH_US INT64_C(946684800000000)
/* At most this many relations in the cache (a Relation beyond is an
 * error): the outbox and its partitions, with room to spare. */
#define PGO_MAX_RELATIONS 4096
/* PostgreSQL's MaxTupleAttributeNumber. */
#define PGO_MAX_COLUMNS 1664

struct pgo_str {
    const char *ptr;
    size_t len;
};

struct pgo_column {
    char *name;        /* NUL-terminated, owned by the cache */
    size_t name_len;
    uint8_t flags;     /* 1: part of the replica identity key */
    uint32_t type_oid;
    int32_t typmod;
};

/* A Relation message as cached. A resent Relation (after ALTER TABLE, or
 * when the server's own cache was invalidated) replaces the entry of its
 * OID; pointers to the old entry dangle after that pgo_parse(). */
struct pgo_relation {
    uint32_t oid;
    char *nspname; size_t nspname_len; /* "" is pg_catalog (the protocol's) */
    char *relname; size_t relname_len;
    uint8_t replident; /* 'd', 'n', 'f' or 'i' */
    uint16_t ncolumns;
    struct pgo_column *columns;
};

/* One column of a tuple: 'n' NULL, 'u' unchanged TOAST value (no bytes),
 * 't' text (ptr/len into the frame). Binary values ('b') are refused: the
 * relayer never asks for them. */
struct pgo_value {
    char kind;
    const char *ptr;
    size_t len;
};

struct pgo_msg {
    char type;                /* 'B', 'C', 'O', 'R', 'Y', 'I', 'U', 'D', 'T', 'M' */
    lsn_t lsn;                /* B: final LSN; C: commit LSN; O: origin's
                                 commit LSN; M: the message's LSN */
    lsn_t end_lsn;            /* C */
    int64_t timestamp;        /* B, C: commit time, µs since 2000-01-01 */
    uint32_t xid;             /* B */
    uint8_t flags;            /* C: flags (0); M: 1 transactional */
    bool transactional;       /* M */
    struct pgo_str prefix;    /* M */
    struct pgo_str content;   /* M */
    struct pgo_str name;      /* O: origin name; Y: type name */
    struct pgo_str nspname;   /* Y */
    uint32_t oid;             /* R, Y, I, U, D: relation or type OID;
                                 T: the first truncated relation */
    uint32_t nrelations;      /* T */
    const struct pgo_relation *rel; /* R: the new entry; I: the cached one */
    size_t nvalues;           /* I: the new tuple, rel->ncolumns values */
    const struct pgo_value *values;
};

struct pgo_parser {
    struct pgo_relation *rels; /* owned; rels[0..nrels) */
    size_t nrels, cap;
    size_t last;               /* index of the last lookup hit */
    struct pgo_value *values;  /* owned; the last tuple's values */
    size_t values_cap;
};

/* Zero-initialise a struct pgo_parser; free with pgo_parser_free(). */
void pgo_parser_free(struct pgo_parser *p);

/* The cached relation of oid, or NULL. */
const struct pgo_relation *pgo_relation(const struct pgo_parser *p, uint32_t oid);

/* Parses one message of len bytes into *m (a Relation also updates the
 * cache). Returns 0, or -1 with err ("<what> at byte <n> of <len>: ...").
 * An Insert into a relation the cache does not know, or whose tuple has
 * not the cached number of columns, is an error. */
int pgo_parse(struct pgo_parser *p, const char *data, size_t len, struct pgo_msg *m, char *err,
              size_t errlen);

/* Index of the column named name (NUL-terminated) in rel, or -1. */
int pgo_column_index(const struct pgo_relation *rel, const char *name);

#endif
