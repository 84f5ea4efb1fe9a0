/*
 * test_kafka_errors.c — the classes of Kafka errors: every code a broker
 * sends during leader changes and disconnects is retriable, missing topics
 * and authorization refusals are waited out, only record faults are poison,
 * and what we do not know is fatal (never dead-lettered on a guess).
 */
#include <librdkafka/rdkafka.h>

#include "check.h"
#include "outbox_relay/kafka/kafka_errors.h"

int main(void)
{
    /* Leader changes, disconnects, replicas short: Kafka's retriable codes,
     * whether librdkafka 2.0.2 retries them itself (5, 6, 7, 8, 9, 19, 20,
     * 56) or fails the batch to us (2, 13, 74, 75). */
    static const int retriable[] = {-1, 2, 5, 6, 7, 8, 9, 13, 14, 15, 16, 19, 20, 41, 51, 56,
                                    74, 75, 78, 80, 83, 89};
    for (size_t i = 0; i < sizeof retriable / sizeof *retriable; i++) {
        CHECK_EQ_INT(kafka_err_classify(retriable[i]), KAFKA_ERR_RETRIABLE);
        CHECK(kafka_err_waits(kafka_err_classify(retriable[i])));
    }
    static const int local_retriable[] = {
        RD_KAFKA_RESP_ERR__TRANSPORT,     RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
        RD_KAFKA_RESP_ERR__TIMED_OUT,     RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE,
        RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__PURGE_QUEUE,
        RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, RD_KAFKA_RESP_ERR__QUEUE_FULL};
    for (size_t i = 0; i < sizeof local_retriable / sizeof *local_retriable; i++)
        CHECK_EQ_INT(kafka_err_classify(local_retriable[i]), KAFKA_ERR_RETRIABLE);

    /* A topic that is not there yet. */
    CHECK_EQ_INT(kafka_err_classify(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART), KAFKA_ERR_TOPIC_WAIT);
    CHECK_EQ_INT(kafka_err_classify(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC), KAFKA_ERR_TOPIC_WAIT);
    CHECK_EQ_INT(kafka_err_classify(RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION), KAFKA_ERR_TOPIC_WAIT);
    CHECK(kafka_err_waits(KAFKA_ERR_TOPIC_WAIT));

    /* Authorization: waited out, the caller decides when it is permanent. */
    CHECK_EQ_INT(kafka_err_classify(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED), KAFKA_ERR_AUTH);
    CHECK_EQ_INT(kafka_err_classify(RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED), KAFKA_ERR_AUTH);
    CHECK(kafka_err_waits(KAFKA_ERR_AUTH));

    /* The record's fault. */
    static const int poison[] = {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
                                 RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE,
                                 RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION,
                                 RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP,
                                 RD_KAFKA_RESP_ERR_POLICY_VIOLATION,
                                 RD_KAFKA_RESP_ERR_INVALID_RECORD};
    for (size_t i = 0; i < sizeof poison / sizeof *poison; i++) {
        CHECK_EQ_INT(kafka_err_classify(poison[i]), KAFKA_ERR_POISON);
        CHECK(!kafka_err_waits(KAFKA_ERR_POISON));
    }

    /* The producer's: fatal, and so is anything unknown. */
    static const int fatal[] = {RD_KAFKA_RESP_ERR__FATAL,
                                RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
                                RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID,
                                RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS,
                                RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE,
                                RD_KAFKA_RESP_ERR__INVALID_ARG,
                                RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION,
                                12345};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++) {
        CHECK_EQ_INT(kafka_err_classify(fatal[i]), KAFKA_ERR_FATAL);
        CHECK(!kafka_err_waits(KAFKA_ERR_FATAL));
    }

    CHECK_EQ_INT(kafka_err_classify(0), KAFKA_ERR_NONE);
    CHECK(strcmp(kafka_err_class_name(KAFKA_ERR_TOPIC_WAIT), "topic_missing") == 0);
    CHECK(strcmp(kafka_err_class_name(KAFKA_ERR_AUTH), "authorization") == 0);
    CHECK(strcmp(kafka_err_class_name(KAFKA_ERR_RETRIABLE), "retriable") == 0);

    /* Refusals a broker gives a whole batch for one record's sake. */
    CHECK(kafka_err_batch_refusal(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
    CHECK(kafka_err_batch_refusal(RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE));
    CHECK(!kafka_err_batch_refusal(RD_KAFKA_RESP_ERR_POLICY_VIOLATION));
    CHECK(!kafka_err_batch_refusal(RD_KAFKA_RESP_ERR_INVALID_RECORD));
    CHECK(!kafka_err_batch_refusal(RD_KAFKA_RESP_ERR_NO_ERROR));

    /* The transactional producer's failures (exactly-once). */
    CHECK_EQ_INT(kafka_txn_classify(0, false, false, false), KAFKA_TXN_OK);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR__FENCED, false, false, true),
                 KAFKA_TXN_FENCED);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR_PRODUCER_FENCED, false, false, true),
                 KAFKA_TXN_FENCED);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH, false, true, false),
                 KAFKA_TXN_FENCED);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR__FATAL, false, false, false),
                 KAFKA_TXN_FATAL);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    false, false, true), KAFKA_TXN_FATAL);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR__TIMED_OUT, true, true, false),
                 KAFKA_TXN_ABORT); /* abortable wins over retriable */
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR__TIMED_OUT, true, false, false),
                 KAFKA_TXN_RETRY);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR__STATE, false, false, false),
                 KAFKA_TXN_ABORT);
    CHECK_EQ_INT(kafka_txn_classify(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, false, true, true),
                 KAFKA_TXN_FATAL); /* fatal wins over abortable */
    CHECK(kafka_err_fenced(RD_KAFKA_RESP_ERR_PRODUCER_FENCED));
    CHECK(!kafka_err_fenced(RD_KAFKA_RESP_ERR__FATAL));

    CHECK_DONE();
}
