"""The baseline writer, written the way the seeds' readers would: a boto3
Table.batch_writer() loop. Paced to offer RATE items/s for SECS seconds."""

import time

import boto3
from botocore.exceptions import ClientError


def item(i, size):
    # 200 bytes by DynamoDB's rules: names + values; pad the payload to fit.
    pk, sk = f"dev#{i % 1000}", f"{i:012d}"
    base = len("pk") + len(pk) + len("sk") + len(sk) + len("payload")
    return {"pk": pk, "sk": sk, "payload": "x" * max(0, size - base)}


def run(endpoint, table_name, rate, secs, size=200):
    """Returns (submitted_keys, errors)."""
    t = boto3.resource("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test").Table(table_name)
    submitted, errors, i = set(), 0, 0
    start = time.time()
    bw = t.batch_writer()
    bw.__enter__()
    while True:
        el = time.time() - start
        if el >= secs:
            break
        due = int(el * rate)
        if i >= due:
            time.sleep(0.001)
            continue
        it = item(i, size)
        i += 1
        try:
            bw.put_item(Item=it)
            submitted.add((it["pk"], it["sk"]))
        except ClientError:
            # The batch that failed after boto3's own retries is gone from
            # batch_writer's buffer: those items are lost. Keep going.
            submitted.add((it["pk"], it["sk"]))
            errors += 1
    try:
        bw.__exit__(None, None, None)
    except ClientError:
        errors += 1
    return submitted, errors, i
