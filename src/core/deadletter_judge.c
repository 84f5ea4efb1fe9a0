/*
 * deadletter_judge.c — the dead-letter policy's verdict (see
 * deadletter_judge.h). Pure.
 */
#include "outbox_relay/core/deadletter_judge.h"

enum deadletter_verdict deadletter_judge(bool policy_dead_letter, bool poison, bool rewinding,
                                         bool to_dead_letter_topic)
{
    if (poison && rewinding)
        return DEADLETTER_SKIP;
    if (policy_dead_letter && poison && !to_dead_letter_topic)
        return DEADLETTER_SEND;
    return DEADLETTER_HALT;
}
