/*
 * kafka_errors.h — what a Kafka error means for one outbox event. Pure: no
 * I/O, no producer; tested by tests/unit/test_kafka_errors.c.
 *
 * librdkafka reports a failed delivery with a bare rd_kafka_resp_err_t (the
 * delivery report carries no rd_kafka_error_t, so there is no
 * rd_kafka_error_is_retriable() to ask). Its own retry decisions
 * (rd_kafka_err_action() in rdkafka_request.c, 2.0.2) treat every code it
 * does not list as permanent, and it fails the batch to the application
 * for codes that Kafka's protocol calls retriable: NETWORK_EXCEPTION,
 * FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, CORRUPT_MESSAGE, ... So the
 * classes here follow Kafka's protocol table (the "retriable" column of the
 * protocol's error codes) and librdkafka's documented local codes:
 *
 *   KAFKA_ERR_RETRIABLE  leader changes, disconnects, timeouts, replicas
 *                        short: the event is produced again, in order,
 *                        however often it takes;
 *   KAFKA_ERR_TOPIC_WAIT the topic does not exist (yet): produced again
 *                        with backoff until someone creates it, alerting;
 *   KAFKA_ERR_AUTH       an authorization refusal: produced again with
 *                        backoff, because ACLs take a moment to reach every
 *                        broker; the caller decides when it has become
 *                        permanent (fatal, never dead-lettered);
 *   KAFKA_ERR_POISON     the record itself can never be stored (too large,
 *                        invalid, refused by policy): --on-poison decides;
 *   KAFKA_ERR_FATAL      the producer or its configuration is broken
 *                        (fatal idempotence states, fenced epoch, bad
 *                        acks): stop without confirming; codes we do not
 *                        know land here too, so nothing is dead-lettered
 *                        or skipped on a guess.
 */
#ifndef OUTBOX_RELAY_KAFKA_ERRORS_H
#define OUTBOX_RELAY_KAFKA_ERRORS_H

#include <stdbool.h>

enum kafka_err_class {
    KAFKA_ERR_NONE = 0,
    KAFKA_ERR_RETRIABLE,
    KAFKA_ERR_TOPIC_WAIT,
    KAFKA_ERR_AUTH,
    KAFKA_ERR_POISON,
    KAFKA_ERR_FATAL
};

/* The class of an rd_kafka_resp_err_t (0 = KAFKA_ERR_NONE). */
enum kafka_err_class kafka_err_classify(int err);

/* True for the classes that are waited out by producing again. */
bool kafka_err_waits(enum kafka_err_class c);

/* Whether err is a refusal a broker gives a whole record batch (a produce
 * request's records for one partition) for one record's sake:
 * MSG_SIZE_TOO_LARGE (10: Kafka checks max.message.bytes against the
 * batch) and RECORD_LIST_TOO_LARGE (18). Every event of the batch gets it
 * in its delivery report, the innocent ones too. */
bool kafka_err_batch_refusal(int err);

/* "retriable", "topic_missing", "authorization", "poison", "fatal", "none":
 * the label the metrics and logs use. */
const char *kafka_err_class_name(enum kafka_err_class c);

/* What a failed call of the transactional producer (init, begin, commit,
 * abort, or a fatal error of the producer itself) means, from the
 * rd_kafka_error_t's flags and code (--delivery exactly-once):
 *   KAFKA_TXN_RETRY   retriable: call the same function again;
 *   KAFKA_TXN_ABORT   the transaction must be aborted, then everything
 *                     after the last committed progress is produced again;
 *   KAFKA_TXN_FENCED  another producer with our transactional.id (a replica
 *                     that took over) initialised after us: this one stops
 *                     producing for good and goes standby;
 *   KAFKA_TXN_FATAL   anything else fatal: stop without confirming.
 * Fencing is told by its codes (librdkafka's _FENCED, the broker's
 * PRODUCER_FENCED and INVALID_PRODUCER_EPOCH), whatever the flags; fatal
 * wins over abortable, abortable over retriable. */
enum kafka_txn_verdict {
    KAFKA_TXN_OK = 0,
    KAFKA_TXN_RETRY,
    KAFKA_TXN_ABORT,
    KAFKA_TXN_FENCED,
    KAFKA_TXN_FATAL
};
enum kafka_txn_verdict kafka_txn_classify(int code, bool retriable, bool requires_abort,
                                          bool fatal);

/* Whether code says this producer was fenced by a newer one. */
bool kafka_err_fenced(int code);

#endif
