"""A consumer group member with manual commits, on confluent-kafka-python.

Usage: kafka_groups_confluent.py BOOTSTRAP GROUP TOPIC COUNT MODE

Subscribes to TOPIC in GROUP (enable.auto.commit=false, from the earliest
offset when the group has no commit), reads COUNT records (giving up 30 s
after the start), then with MODE "commit" commits what it read with
commit(asynchronous=False), and closes. Prints one JSON object:
{"read": [{"partition", "offset", "value"}...],
 "committed": [{"partition", "offset"}...]} (what commit() returned).
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException


def main():
    bootstrap, group, topic, count, mode = sys.argv[1:6]
    count = int(count)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": "confluent-manual",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    })
    consumer.subscribe([topic])
    read = []
    deadline = time.monotonic() + 30
    while len(read) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        read.append({"partition": msg.partition(), "offset": msg.offset(),
                     "value": msg.value().decode()})
    committed = []
    if mode == "commit":
        for tp in consumer.commit(asynchronous=False):
            if tp.error:
                raise KafkaException(tp.error)
            committed.append({"partition": tp.partition, "offset": tp.offset})
    consumer.close()
    json.dump({"read": read, "committed": committed}, sys.stdout)


if __name__ == "__main__":
    main()
