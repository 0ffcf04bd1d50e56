#!/usr/bin/env python3
"""Generate shard-assignment test vectors from seed 003's Python.

    shard = int(hashlib.sha256(s.encode('utf-8')).hexdigest(), 16) % n

The Rust `shard_of` must agree on every line, so that tables written by the
seed's code stay readable. Standard library only; deterministic output.

Run from this directory:  python3 gen_shard_vectors.py > shard_vectors.tsv
Output: one `n<TAB>shard<TAB>id` line per vector; `id` is JSON-quoted so that
tabs, non-ASCII and empty strings survive.
"""

import hashlib
import json
import random


def shard_of(s: str, n: int) -> int:
    # Exactly seed 003's get_calculated_shard_id / _get_shard_id.
    return int(hashlib.sha256(s.encode("utf-8")).hexdigest(), 16) % n


def ids(rng: random.Random):
    fixed = [
        "",
        "a",
        "sensor-alpha-001",
        "sensor-beta-002",
        "device-0",
        "Größe",
        "capteur-température",
        "датчик-7",
        "传感器-四十二",
        "センサー",
        "🌊tide🌊",
        "tab\there",
        "quote\"and\\backslash",
        "shardId-000000000001:49590338271490256608559692538361571095921575989136588898:0",
        "sqs:059f36b4-87a3-44ab-83d2-661975830a7d:3",
    ]
    yield from fixed
    alphabet = (
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_#:."
        "éüßçñøå" "абвгд" "中文字" "ひらがな" "😀🚀"
    )
    while True:
        length = rng.randint(1, 40)
        yield "".join(rng.choice(alphabet) for _ in range(length))


def main():
    rng = random.Random(3)  # issue 3: fixed seed, reproducible file
    out = []
    gen = ids(rng)
    # Every n from 1 to 1,000 once, plus edge values and random extras.
    ns = list(range(1, 1001)) + [2**31 - 1, 2**32 - 1, 4096, 65536] + [
        rng.randint(1, 2**32 - 1) for _ in range(196)
    ]
    for n in ns:
        s = next(gen)
        out.append(f"{n}\t{shard_of(s, n)}\t{json.dumps(s)}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
