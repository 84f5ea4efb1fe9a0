/*
 * report_judge.c — a delivery report's verdict (see report_judge.h). Pure.
 */
#include "outbox_relay/core/report_judge.h"

#include "outbox_relay/core/deadletter_judge.h"

enum report_verdict report_judge(const struct report_facts *f)
{
    if (f->delivered)
        return REPORT_ACK;
    /* A token no longer tracked: a backfill row of a run that was
     * interrupted (the run now going sends it again), or a streamed event
     * from before a rewind or reconnect (the server sends it again). */
    if (!f->live)
        return REPORT_STALE;
    if (f->waits)
        return f->backfill ? REPORT_BACKFILL_RETRY : REPORT_REWIND;
    /* A broker refuses a whole batch for one record's size: before any
     * event of it is judged poison, each is produced alone (a backfill row
     * by the run resumed one row at a time). Even when a rewind is already
     * pending: it would produce the event in a batch again. A streamed
     * event's own refusal met by a pending rewind is isolated too: the
     * rewind runs on a new producer, and a broker takes any first sequence
     * number from a producer id it does not know, so an event produced
     * right behind it would be written if its first batch were refused. */
    if (f->poison && !f->to_dead_letter_topic && (f->shared || (f->rewinding && !f->backfill)))
        return f->backfill ? REPORT_BACKFILL_ISOLATE : REPORT_ISOLATE;
    switch (deadletter_judge(f->dead_letter_policy, f->poison, f->rewinding,
                             f->to_dead_letter_topic)) {
    case DEADLETTER_SKIP:
        return REPORT_SKIP;
    case DEADLETTER_SEND:
        return REPORT_DEAD_LETTER;
    case DEADLETTER_HALT:
        break;
    }
    return REPORT_HALT;
}

const char *report_verdict_name(enum report_verdict v)
{
    switch (v) {
    case REPORT_ACK:
        return "ack";
    case REPORT_STALE:
        return "stale";
    case REPORT_BACKFILL_RETRY:
        return "backfill-retry";
    case REPORT_REWIND:
        return "rewind";
    case REPORT_SKIP:
        return "skip";
    case REPORT_DEAD_LETTER:
        return "dead-letter";
    case REPORT_HALT:
        return "halt";
    case REPORT_ISOLATE:
        return "isolate";
    case REPORT_BACKFILL_ISOLATE:
        return "backfill-isolate";
    }
    return "?";
}

const char *report_halt_advice(const struct report_facts *f)
{
    if (f->backfill)
        return "It was a backfill delivery: the backfill stays unfinished and the next start "
               "redoes or resumes it";
    if (f->poison && !f->dead_letter_policy)
        return "Fix the cause and restart, or run with --on-poison dead-letter";
    if (f->poison)
        return "The dead-letter topic refused it too: fix the cause and restart";
    return "The producer, not the event, failed: restart to send it again";
}
