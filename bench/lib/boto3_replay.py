"""Baseline for pipeline-cpu: the fixture written to DynamoDB the way the
seeds' readers would, with boto3's batch_writer: decode each record, build
the same item layout (time_bucket key: sha256(device) mod 10 # hour), put.

Usage: boto3_replay.py FIXTURE ENDPOINT TABLE"""

import base64
import hashlib
import json
import sys
from decimal import Decimal

import boto3


def main(fixture, endpoint, table_name):
    table = boto3.resource("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test").Table(table_name)
    n = 0
    with table.batch_writer() as bw, open(fixture) as f:
        for line in f:
            rec = json.loads(line)
            ev = json.loads(base64.b64decode(rec["data"]), parse_float=Decimal)
            dev, ts, eid = ev.pop("deviceId"), ev.pop("timestamp"), ev.pop("eventId")
            shard = int(hashlib.sha256(dev.encode()).hexdigest(), 16) % 10
            item = {"pk": f"{shard}#{ts[:13]}", "sk": f"{dev}#{ts}#{eid}",
                    "entity_id": dev, "event_id": eid, "ts": ts, **ev}
            bw.put_item(Item=item)
            n += 1
    print(f"{n} records written")


if __name__ == "__main__":
    main(*sys.argv[1:4])
