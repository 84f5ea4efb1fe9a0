/*
 * kafka_errors.c — the classes of Kafka errors (see kafka_errors.h).
 *
 * Sources: Kafka's protocol error table (which codes are retriable) and
 * librdkafka 2.0.2's rdkafka_request.c / rdkafka.h (its local codes). Every
 * code a broker answers a Produce request with during leader changes and
 * disconnects is listed as retriable, whether or not librdkafka retries it
 * itself: those it retries never reach us, those it gives up on must not
 * stop the relayer.
 */
#include "outbox_relay/kafka/kafka_errors.h"

#include <librdkafka/rdkafka.h>

enum kafka_err_class kafka_err_classify(int err)
{
    switch ((rd_kafka_resp_err_t) err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
        return KAFKA_ERR_NONE;

    /* Broker codes Kafka marks retriable (leadership, replicas,
     * connectivity, load), plus UNKNOWN_SERVER_ERROR: an unexpected broker
     * exception is neither the record's nor the producer's fault. */
    case RD_KAFKA_RESP_ERR_UNKNOWN:                          /* -1 */
    case RD_KAFKA_RESP_ERR_INVALID_MSG:                      /* 2 CORRUPT_MESSAGE */
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:             /* 5 */
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:         /* 6 */
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:                /* 7 */
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:             /* 8 */
    case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:            /* 9 */
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:                /* 13 */
    case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:     /* 14 */
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:        /* 15 */
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:                  /* 16 */
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:              /* 19 */
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND: /* 20 */
    case RD_KAFKA_RESP_ERR_NOT_CONTROLLER:                   /* 41 */
    case RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS:          /* 51 */
    case RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR:              /* 56 */
    case RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH:              /* 74 */
    case RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH:             /* 75 */
    case RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE:             /* 78 */
    case RD_KAFKA_RESP_ERR_PREFERRED_LEADER_NOT_AVAILABLE:   /* 80 */
    case RD_KAFKA_RESP_ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE:   /* 83 */
    case RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED:        /* 89 */
    /* librdkafka's local transient codes. A message timeout (only with a
     * user's -X message.timeout.ms) is a wait that ran out, not a verdict
     * on the record. Purges happen on shutdown and after a fatal error. */
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__RESOLVE:
    case RD_KAFKA_RESP_ERR__WAIT_COORD:
    case RD_KAFKA_RESP_ERR__RETRY:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
    case RD_KAFKA_RESP_ERR__NODE_UPDATE:
        return KAFKA_ERR_RETRIABLE;

    /* The topic (or its partition) is not there, as far as the metadata
     * says: not created yet (auto-creation off), being re-created, or its
     * metadata still propagating. */
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:  /* 3 */
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
        return KAFKA_ERR_TOPIC_WAIT;

    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:   /* 29 */
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED: /* 31 */
        return KAFKA_ERR_AUTH;

    /* The record: no retry stores it. */
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:    /* 10 */
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:       /* 17 invalid topic name */
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE: /* 18 */
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:     /* 32 */
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:      /* 44 */
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:        /* 87 */
        return KAFKA_ERR_POISON;

    /* The producer: __FATAL (idempotence), a fenced or unknown producer,
     * sequence desynchronization, a configuration the broker refuses. */
    default:
        return KAFKA_ERR_FATAL;
    }
}

bool kafka_err_waits(enum kafka_err_class c)
{
    return c == KAFKA_ERR_RETRIABLE || c == KAFKA_ERR_TOPIC_WAIT || c == KAFKA_ERR_AUTH;
}

const char *kafka_err_class_name(enum kafka_err_class c)
{
    switch (c) {
    case KAFKA_ERR_NONE:
        return "none";
    case KAFKA_ERR_RETRIABLE:
        return "retriable";
    case KAFKA_ERR_TOPIC_WAIT:
        return "topic_missing";
    case KAFKA_ERR_AUTH:
        return "authorization";
    case KAFKA_ERR_POISON:
        return "poison";
    case KAFKA_ERR_FATAL:
        break;
    }
    return "fatal";
}

bool kafka_err_batch_refusal(int err)
{
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

bool kafka_err_fenced(int code)
{
    return code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
           code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
}

enum kafka_txn_verdict kafka_txn_classify(int code, bool retriable, bool requires_abort,
                                          bool fatal)
{
    if (code == RD_KAFKA_RESP_ERR_NO_ERROR && !fatal)
        return KAFKA_TXN_OK;
    if (kafka_err_fenced(code))
        return KAFKA_TXN_FENCED;
    if (fatal || code == RD_KAFKA_RESP_ERR__FATAL)
        return KAFKA_TXN_FATAL;
    if (requires_abort)
        return KAFKA_TXN_ABORT;
    if (retriable)
        return KAFKA_TXN_RETRY;
    /* Neither: a state error (a call out of order) or a timeout librdkafka
     * does not call retriable. The transaction cannot be trusted: abort. */
    return KAFKA_TXN_ABORT;
}
