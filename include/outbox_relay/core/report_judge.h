/*
 * report_judge.h — what a delivery report means for the relay: the one
 * decision behind relay_sink.c's report callback, taken here without I/O
 * so that every outcome is unit-tested (tests/unit/test_report_judge.c).
 * The callback gathers the facts (report, token, trackers, policy), asks
 * report_judge, and does what the verdict says: count, ack, log, rewind,
 * queue a dead letter, or halt.
 *
 * Backfill tokens are judged apart first: their rows belong to a backfill
 * run, which is resumed from its last acknowledged rows rather than
 * rewound, and a row of an interrupted run is sent again by the run that
 * replaced it.
 */
#ifndef OUTBOX_RELAY_REPORT_JUDGE_H
#define OUTBOX_RELAY_REPORT_JUDGE_H

#include <stdbool.h>

/* What the callback knows of one report. */
struct report_facts {
    bool delivered;          /* the broker acknowledged it (err == 0) */
    bool backfill;           /* a backfill row's token (not a streamed event's) */
    bool live;               /* the token is still tracked by its tracker: not
                                from before a rewind, reconnect or restarted run */
    bool waits;              /* the error is waited out (kafka_err_waits) */
    bool poison;             /* the event itself can never be produced */
    bool dead_letter_policy; /* --on-poison dead-letter */
    bool rewinding;          /* a rewind is pending (for a backfill row: its run is
                                stopping, to be resumed) */
    bool to_dead_letter_topic; /* the failed record was a dead letter */
    bool shared;             /* the refusal may be its batch's, not the event's
                                (kafka_err_batch_refusal, and other events were
                                in flight with it) */
};

enum report_verdict {
    REPORT_ACK = 0,        /* delivered: ack the token in its tracker */
    REPORT_STALE,          /* an earlier round's failure: the event was (or
                              is being) produced again; nothing to do */
    REPORT_BACKFILL_RETRY, /* a backfill row failed retriably: stop the run
                              and resume it from its last acknowledged rows */
    REPORT_REWIND,         /* a streamed event failed retriably: produce
                              everything unconfirmed again, in order */
    REPORT_SKIP,           /* a poison event while a rewind is pending: it is
                              produced again after it, and judged then */
    REPORT_DEAD_LETTER,    /* send it to the dead-letter topic */
    REPORT_HALT,           /* stop the relay: nothing after it is confirmed */
    REPORT_ISOLATE,        /* a streamed event refused with its batch: produce
                              everything unconfirmed again one at a time, up to
                              it, so that each is judged by its own refusal */
    REPORT_BACKFILL_ISOLATE /* a backfill row refused with its batch: stop the
                              run and resume it producing one row at a time up
                              to the last row produced, for the same reason */
};

/* The verdict for f (pure; f must not be NULL). */
enum report_verdict report_judge(const struct report_facts *f);

/* For REPORT_HALT: the last sentence of the halt's error, what the
 * operator can do (pure; static storage). */
const char *report_halt_advice(const struct report_facts *f);

/* The verdict's name, for logs and tests ("ack", "stale", …). */
const char *report_verdict_name(enum report_verdict v);

#endif
