#!/usr/bin/python3
"""consumer.py — our reader of a peer's topics (bench/peers/run.sh).

Reads every partition of TOPICS from the beginning (assigned, no group:
no join to wait for) until it has seen COUNT distinct events with ids in
[MIN_ID, MIN_ID + COUNT), then for --grace seconds more (a duplicate that
arrives late is still counted), or until --timeout. An event's id is its
`event_id` header (outbox-relay, the polling relayer) or its `id` header
(Debezium's outbox event router); the aggregate is the record key.

Writes one JSON object to --out: seen (records read), distinct, lost,
duplicated, out_of_order (a record whose id is below an id already read
for the same key on the same topic: per-aggregate order broken), foreign (records without a
usable id, or outside the range), first_unix_us / last_new_unix_us (when
the first and the last new event arrived). Creates --ready once its
partitions are assigned. With --progress FILE it keeps the count of
distinct events read so far in FILE (rewritten at most every 0.02 s): the
crash runs kill a peer once half the events have arrived.
"""
import os
import argparse
import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topics", required=True)
    ap.add_argument("--min-id", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--grace", type=float, default=1.0)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--progress", help="file kept holding the distinct events read so far")
    ap.add_argument("--latency", action="store_true",
                    help="also read t_us (the producer's clock_timestamp() before its commit, "
                         "in µs) from each event's JSON value: latency p50/p99/max")
    a = ap.parse_args()

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "peers-bench",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 10, "log_level": 3, "enable.partition.eof": True})
    md = c.list_topics(timeout=30)
    tps = []
    for t in a.topics.split(","):
        if t not in md.topics or md.topics[t].error is not None:
            print(f"consumer.py: topic {t} missing: {md.topics.get(t)}", file=sys.stderr)
            return 1
        tps += [TopicPartition(t, p, OFFSET_BEGINNING) for p in md.topics[t].partitions]
    c.assign(tps)
    # Ready once fetching: every partition has been read to its end. assign()
    # only starts the offset lookups and the first fetches, which took up to
    # half a second here; a peer delivering within that time had the
    # consumer's start-up counted in its latency.
    early, at_end = [], set()
    wait_until = time.time() + 25
    while len(at_end) < len(tps) and time.time() < wait_until:
        m = c.poll(0.1)
        if m is None:
            continue
        if m.error() and m.error().code() == KafkaError._PARTITION_EOF:
            at_end.add((m.topic(), m.partition()))
        elif not m.error():
            early.append(m)
    if len(at_end) < len(tps):
        print("consumer.py: %d of %d partitions not read to their end in 25 s"
              % (len(tps) - len(at_end), len(tps)), file=sys.stderr)
    open(a.ready, "w").close()

    seen_n = [0] * a.count
    last_by_key = {}
    lat = []
    lat_rows = []  # (t_us, received µs, partition, id): OUT.lat.tsv, where the tail lies
    examples = []  # the first few out-of-order records, for the log
    seen = distinct = dup = ooo = foreign = 0
    first = last_new = None
    deadline = time.time() + a.timeout
    done_at = None
    lo, n = a.min_id, a.count
    shown, shown_at = -1, 0.0

    def show(now):
        tmp = a.progress + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % distinct)
        os.replace(tmp, a.progress)
        return distinct, now
    while True:
        if a.progress and distinct != shown and time.time() - shown_at >= 0.02:
            shown, shown_at = show(time.time())
        now = time.time()
        if now > deadline or (done_at is not None and now > done_at + a.grace):
            break
        # poll() returns with the first record there is; consume(timeout=0)
        # then takes what else is queued without waiting: consume() with a
        # timeout waits for a full batch, which would add up to that timeout
        # to every receive time (latency) and to the last (drain).
        if early:  # read while waiting to be ready
            msgs, early = early, []
        else:
            m0 = c.poll(0.2)
            msgs = () if m0 is None else [m0] + c.consume(num_messages=999, timeout=0)
        for m in msgs:
            if m.error():
                continue
            seen += 1
            eid = None
            for k, v in m.headers() or ():
                if k in ("event_id", "id") and v is not None:
                    try:
                        eid = int(v)
                    except ValueError:
                        pass
                    break
            if eid is None or not lo <= eid < lo + n:
                foreign += 1
                continue
            i = eid - lo
            if seen_n[i]:
                dup += 1
                seen_n[i] += 1
                continue
            else:
                distinct += 1
                last_new = time.time()
                if first is None:
                    first = last_new
            seen_n[i] += 1
            if a.latency:
                try:
                    t_us = json.loads(m.value())["t_us"]
                    lat.append(last_new * 1e6 - t_us)
                    lat_rows.append((t_us, int(last_new * 1e6), m.partition(), eid))
                except (ValueError, KeyError, TypeError):
                    pass
            # An aggregate's events go to the topics of their types: order
            # is kept (and checked) per topic and key.
            key = (m.topic(), m.key())
            prev = last_by_key.get(key)
            if prev is not None and eid < prev:
                ooo += 1
                if len(examples) < 5:
                    examples.append([repr(key), prev, eid, m.topic(), m.partition(), m.offset()])
            else:
                last_by_key[key] = eid
        if done_at is None and distinct == n:
            done_at = time.time()
    c.close()
    res = {"seen": seen, "distinct": distinct, "lost": n - distinct, "duplicated": dup,
           "out_of_order": ooo, "foreign": foreign, "out_of_order_examples": examples,
           "first_unix_us": int(first * 1e6) if first else None,
           "last_new_unix_us": int(last_new * 1e6) if last_new else None}
    if a.latency:
        with open(a.out + ".lat.tsv", "w") as f:
            f.write("t_us\treceived_us\tpartition\tid\n")
            for row in lat_rows:
                f.write("%d\t%d\t%d\t%d\n" % row)
        lat.sort()

        def q(x):
            return round(lat[min(len(lat) - 1, int(x * len(lat)))] / 1000, 2) if lat else None
        res.update(latency_n=len(lat), latency_p50_ms=q(0.50), latency_p99_ms=q(0.99),
                   latency_max_ms=q(1.0))
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
