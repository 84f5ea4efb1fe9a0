"""kafka_io.py — reading topics back and producing to them with
confluent_kafka, for the tests' assertions and their direct input (no
auto-creation of topics). harness.py re-exports every name.
"""

import time
import uuid

# --------------------------------------------------------------------------
# Kafka read-back
# --------------------------------------------------------------------------

class Message:
    __slots__ = ("topic", "partition", "offset", "key", "value", "headers", "raw_value")

    def __init__(self, m):
        self.topic = m.topic()
        self.partition = m.partition()
        self.offset = m.offset()
        k = m.key()
        self.key = k.decode("utf-8") if k is not None else None
        self.raw_value = m.value()
        try:  # a bytea payload need not be UTF-8: raw_value has its bytes
            self.value = self.raw_value.decode("utf-8") if self.raw_value is not None else None
        except UnicodeDecodeError:
            self.value = None
        self.headers = {}
        for name, val in (m.headers() or []):
            self.headers[name] = val.decode("utf-8") if val is not None else None

    def __repr__(self):
        return "Message(%s[%d]@%d key=%r headers=%r value=%r)" % (
            self.topic, self.partition, self.offset, self.key, self.headers,
            self.value if self.value is None or len(self.value) < 200 else self.value[:200] + "...")


def _consumer_conf(bootstrap):
    # auto.offset.reset: the reads assign OFFSET_BEGINNING, but when the
    # broker refuses that offset query for good (UNKNOWN_TOPIC_OR_PART from
    # a partition leader that does not know a topic just auto-created yet),
    # librdkafka falls back to auto.offset.reset, "latest" by default: the
    # read then skipped what the partition already held, a "6 of 7 events"
    # that was the reader's, not the relayer's.
    return {"bootstrap.servers": bootstrap,
            "group.id": "harness-" + uuid.uuid4().hex[:8],
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            "log_level": 0}


def list_topics(bootstrap, timeout=10):
    """Names of the topics the cluster knows (no auto-creation)."""
    from confluent_kafka import Consumer
    c = Consumer(_consumer_conf(bootstrap))
    try:
        md = c.list_topics(timeout=timeout)
        return sorted(t for t, tm in md.topics.items() if tm.error is None)
    finally:
        c.close()


def topic_partitions(bootstrap, topic, timeout=10):
    """Partition ids of `topic`, or None if it does not exist."""
    from confluent_kafka import Consumer
    c = Consumer(_consumer_conf(bootstrap))
    try:
        md = c.list_topics(timeout=timeout)
        tm = md.topics.get(topic)
        if tm is None or tm.error is not None:
            return None
        return sorted(tm.partitions)
    finally:
        c.close()


# Errors a consumer of a topic being created (auto-creation by the
# relayer's first produce) or of a partition changing leader sees for a
# moment on a real cluster: read on.
_TRANSIENT = ("_PARTITION_EOF", "UNKNOWN_TOPIC_OR_PART", "LEADER_NOT_AVAILABLE",
              "NOT_LEADER_FOR_PARTITION", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC")


def _transient(err):
    from confluent_kafka import KafkaError
    return any(err.code() == getattr(KafkaError, name, None) for name in _TRANSIENT)


def _ends(c, topic, parts):
    """{partition: high watermark} now (-1 for one that cannot be asked)."""
    from confluent_kafka import TopicPartition
    ends = {}
    for p in parts:
        try:
            ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
        except Exception:  # a partition without a leader for a moment
            ends[p] = -1
    return ends


def read_messages(bootstrap, topic, expected=None, timeout=30, wait_topic=True):
    """Reads `topic` from the beginning of every partition.

    Returns when `expected` messages have arrived, or after `timeout`
    seconds. expected=None means "everything seen within timeout, and at
    least everything the topic held when the read began": a read that has
    not reached the high watermarks of its start by the deadline goes on
    for up to 60 s more (a loaded real cluster can take longer than a short
    window to hand back a few messages).
    A topic that does not exist yet is waited for (until the deadline)
    without being auto-created; if it never appears, [] is returned.
    Messages come back per partition in offset order.
    """
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    deadline = time.monotonic() + timeout
    c = Consumer(_consumer_conf(bootstrap))
    out = []
    try:
        parts = None
        while True:
            md = c.list_topics(timeout=max(0.5, min(5, deadline - time.monotonic())))
            tm = md.topics.get(topic)
            if tm is not None and tm.error is None and tm.partitions:
                parts = sorted(tm.partitions)
                break
            if not wait_topic or time.monotonic() >= deadline:
                return out
            time.sleep(0.2)
        ends = _ends(c, topic, parts) if expected is None else {}
        seen = {p: 0 for p in parts}  # next offset to read per partition
        hard = deadline + 60
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        while expected is None or len(out) < expected:
            now = time.monotonic()
            if now >= hard or (now >= deadline and
                               all(seen[p] >= e for p, e in ends.items())):
                break
            batch = c.consume(num_messages=10000, timeout=max(0.05, min(deadline - now, 0.5)))
            for m in batch:
                if m.error() is not None:
                    if _transient(m.error()):
                        continue
                    raise RuntimeError("consume error: %s" % m.error())
                out.append(Message(m))
                seen[m.partition()] = max(seen.get(m.partition(), 0), m.offset() + 1)
    finally:
        c.close()
    out.sort(key=lambda m: (m.partition, m.offset))
    return out


def scan_messages(bootstrap, topic, on_message, expected, timeout=60):
    """Like read_messages, for big topics: calls on_message(m) with each raw
    confluent_kafka.Message instead of keeping them; returns the count seen
    when `expected` arrived or the timeout passed."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    deadline = time.monotonic() + timeout
    c = Consumer(dict(_consumer_conf(bootstrap), **{"fetch.max.bytes": 52428800,
                                                     "queued.max.messages.kbytes": 262144}))
    n = 0
    try:
        while True:
            md = c.list_topics(timeout=max(0.5, min(5, deadline - time.monotonic())))
            tm = md.topics.get(topic)
            if tm is not None and tm.error is None and tm.partitions:
                break
            if time.monotonic() >= deadline:
                return 0
            time.sleep(0.2)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(tm.partitions)])
        while n < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for m in c.consume(num_messages=100000, timeout=min(left, 0.5)):
                if m.error() is not None:
                    if _transient(m.error()):
                        continue
                    raise RuntimeError("consume error: %s" % m.error())
                on_message(m)
                n += 1
    finally:
        c.close()
    return n


def produce(bootstrap, topic, messages, timeout=30, **conf):
    """Produces (key, value, headers) tuples; returns the delivery errors
    (empty list = all delivered)."""
    from confluent_kafka import Producer
    p = Producer(dict({"bootstrap.servers": bootstrap, "log_level": 3}, **conf))
    errors = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)

    for key, value, headers in messages:
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=dr)
    left = p.flush(timeout)
    if left:
        errors.append("%d message(s) not delivered within %.1fs" % (left, timeout))
    return errors

