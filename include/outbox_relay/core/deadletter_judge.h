/*
 * deadletter_judge.h — the dead-letter policy (--on-poison dead-letter):
 * what becomes of an event that failed. Pure, so that every outcome is
 * unit-tested (tests/unit/test_deadletter_judge.c); the record and its
 * sending are kafka/deadletter.h's, the callers relay_sink.c's produce path
 * and report_judge (a failed delivery report).
 */
#ifndef OUTBOX_RELAY_DEADLETTER_JUDGE_H
#define OUTBOX_RELAY_DEADLETTER_JUDGE_H

#include <stdbool.h>

enum deadletter_verdict {
    DEADLETTER_SKIP = 0, /* a rewind is pending: the event is produced again
                            after it, and judged then */
    DEADLETTER_SEND,     /* produce it to the dead-letter topic */
    DEADLETTER_HALT      /* stop: nothing after it is confirmed */
};

/* The verdict. policy_dead_letter: --on-poison dead-letter. poison: the
 * event itself can never be produced (kafka_errors.h). rewinding: a rewind
 * is pending. to_dead_letter_topic: it was the dead letter itself that
 * failed (it is never dead-lettered again). */
enum deadletter_verdict deadletter_judge(bool policy_dead_letter, bool poison, bool rewinding,
                                         bool to_dead_letter_topic);

#endif
