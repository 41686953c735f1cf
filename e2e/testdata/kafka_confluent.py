"""confluent-kafka-python (librdkafka) against a Strata broker's Kafka listener.

Usage: kafka_confluent.py BOOTSTRAP TOPIC DOOMED

Creates TOPIC (3 partitions, retention.ms=3600000) and DOOMED (1 partition)
with the admin client, describes TOPIC's configs and lists the topics,
produces 60 keyed records with headers and timestamps to TOPIC with an
idempotent producer (delivery reports kept), reads them back with a
consumer that assign()s every partition from offset 0, deletes DOOMED and
waits until the metadata no longer lists it. Prints one JSON object with
what each step saw; the Go test judges it. Exits non-zero when a step
raises or times out.
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

RECORDS = 60
BASE_TS = 1_700_000_000_000


def wait(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError("timed out waiting for " + what)
        time.sleep(0.05)


def served(admin, topic, partitions):
    """The topic's metadata once every partition has a leader."""
    def check():
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or len(md.partitions) != partitions:
            return None
        if any(p.leader < 0 or p.error is not None for p in md.partitions.values()):
            return None
        return md
    return wait(topic + " served", check)


def main():
    bootstrap, topic, doomed = sys.argv[1:4]
    out = {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, 3, replication_factor=-1, config={"retention.ms": "3600000"}),
         NewTopic(doomed, 1, replication_factor=-1)],
        operation_timeout=15)
    out["created"] = {name: f.result() is None for name, f in futures.items()}
    md = served(admin, topic, 3)
    served(admin, doomed, 1)
    out["leaders"] = {str(p.id): p.leader for p in md.partitions.values()}

    configs = admin.describe_configs([ConfigResource("topic", topic)])
    entries = list(configs.values())[0].result()
    out["configs"] = {name: {"value": e.value, "source": int(e.source), "default": e.is_default}
                      for name, e in entries.items()}
    listed = admin.list_topics(timeout=10).topics
    out["topics"] = {name: len(t.partitions) for name, t in listed.items()}

    reports = []

    def delivered(err, msg):
        reports.append({"error": None if err is None else str(err), "partition": msg.partition(),
                        "offset": msg.offset(), "key": msg.key().decode(), "value": msg.value().decode()})

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "partitioner": "murmur2_random", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key="k%d" % (i % 6), value="v%d" % i, headers=[("seq", str(i).encode())],
                         timestamp=BASE_TS + i, on_delivery=delivered)
    out["unflushed"] = producer.flush(30)
    out["reports"] = reports

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strata-e2e-assign",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    consumed = []
    deadline = time.monotonic() + 30
    while len(consumed) < RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise RuntimeError("consume: %s" % msg.error())
        consumed.append({"partition": msg.partition(), "offset": msg.offset(), "key": msg.key().decode(),
                         "value": msg.value().decode(), "timestamp": msg.timestamp()[1],
                         "headers": [[k, v.decode()] for k, v in (msg.headers() or [])]})
    consumer.close()
    out["consumed"] = consumed

    futures = admin.delete_topics([doomed], operation_timeout=15)
    out["deleted"] = {name: f.result() is None for name, f in futures.items()}
    wait(doomed + " gone from the metadata",
         lambda: doomed not in admin.list_topics(timeout=10).topics)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
