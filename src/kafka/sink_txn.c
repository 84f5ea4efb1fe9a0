/*
 * sink_txn.c — the sink's Kafka transactions, for --delivery exactly-once
 * (see sink.h). Shaped after librdkafka's examples/transactions.c: every
 * call's rd_kafka_error_t is judged by its flags (retriable, abortable,
 * fatal) and code, through kafka_txn_classify (kafka_errors.h), so the
 * caller sees one verdict: retry, abort and produce again, fenced (stand
 * by), fatal.
 *
 * Commit: librdkafka's commit flushes first and serves delivery reports
 * while it does; it is given the caller's bound, and a retriable timeout is
 * the caller's to call again (the transaction stays as it was).
 */
#include <stdio.h>

#include "sink_internal.h"

#include "outbox_relay/base/log.h"
#include "outbox_relay/kafka/kafka_errors.h"

/* Judges err (owned, destroyed here) from what: a verdict, the message in
 * sk->errstr. */
static int judge(struct sink *sk, rd_kafka_error_t *err, const char *what)
{
    if (err == NULL)
        return KAFKA_TXN_OK;
    int code = rd_kafka_error_code(err);
    int v = kafka_txn_classify(code, rd_kafka_error_is_retriable(err),
                               rd_kafka_error_txn_requires_abort(err),
                               rd_kafka_error_is_fatal(err));
    if (v == KAFKA_TXN_FENCED || v == KAFKA_TXN_FATAL) {
        char buf[256];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(sk->rk, buf, sizeof buf);
        if (orig != RD_KAFKA_RESP_ERR_NO_ERROR && kafka_err_fenced(orig))
            v = KAFKA_TXN_FENCED;
        sk->fatal = true;
        sk->fatal_code = orig != RD_KAFKA_RESP_ERR_NO_ERROR ? (int) orig : code;
    }
    snprintf(sk->errstr, sizeof sk->errstr, "Kafka transaction: %s failed: %s (%s)%s", what,
             rd_kafka_error_string(err), rd_kafka_error_name(err),
             v == KAFKA_TXN_FENCED  ? "; another producer with this transactional.id took over"
             : v == KAFKA_TXN_ABORT ? "; the transaction must be aborted"
             : v == KAFKA_TXN_RETRY ? "; retriable"
                                    : "");
    rd_kafka_error_destroy(err);
    return v;
}

int sink_txn_init(struct sink *sk, int timeout_ms)
{
    return judge(sk, rd_kafka_init_transactions(sk->rk, timeout_ms), "init");
}

int sink_txn_begin(struct sink *sk)
{
    if (sk->fatal)
        return sink_fenced(sk) ? KAFKA_TXN_FENCED : KAFKA_TXN_FATAL;
    int v = judge(sk, rd_kafka_begin_transaction(sk->rk), "begin");
    if (v == KAFKA_TXN_OK)
        sk->txn_open = true;
    return v;
}

int sink_txn_commit(struct sink *sk, int timeout_ms)
{
    int v = judge(sk, rd_kafka_commit_transaction(sk->rk, timeout_ms), "commit");
    if (v == KAFKA_TXN_OK)
        sk->txn_open = false;
    return v;
}

int sink_txn_abort(struct sink *sk, int timeout_ms)
{
    int v = judge(sk, rd_kafka_abort_transaction(sk->rk, timeout_ms), "abort");
    if (v == KAFKA_TXN_OK)
        sk->txn_open = false;
    return v;
}

bool sink_txn_open(const struct sink *sk)
{
    return sk->txn_open;
}

bool sink_fenced(const struct sink *sk)
{
    if (sk->fatal)
        return kafka_err_fenced(sk->fatal_code);
    /* Fenced while the error callback that says so waits in the queue (a
     * delivery report or a produce saw it first). */
    char buf[8];
    return sk->txn && sk->rk != NULL &&
           kafka_err_fenced(rd_kafka_fatal_error(sk->rk, buf, sizeof buf));
}
