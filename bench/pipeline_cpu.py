"""pipeline-cpu: a fixture of N IoT events (about 200 bytes each) replayed
through consumer -> router -> writer (`tidemark replay`, release build) into
the limits proxy in sink mode with unconstrained capacity, then the same
fixture through a boto3 batch_writer loop (the baseline), both on the same
proxy. Each client runs as its own process and is measured with wait4():
CPU time (user + system) per record and peak RSS of that process alone.
Goodput over time comes from the proxy's counters, as in the other benches.

Tidemark runs TIDEMARK_RUNS times (default 5; CPU per record moves by about
+-10% between runs on a small VM) and the median run is reported, with the
range; the boto3 baseline runs once (it takes minutes).

Before each client run the fixture is read once, untimed, so that every run
finds it in the page cache. This VM evicts idle file pages within minutes,
and a run that reads the 500 MB fixture from disk spends about 1 s more
system time filling the cache (1M records: 5.9 against 4.7 CPU-us per
record): a cost of the fixture file, not of the pipeline, which reads
Kinesis in production.

A/B mode: with TIDEMARK_BIN_B set to a second tidemark binary (e.g. one
built from another commit), the two binaries run alternately A, B, A, B...
TIDEMARK_RUNS times each on the same proxy and fixture (so drift in the
machine's load hits both alike), the boto3 baseline is skipped, and the
medians of each and their ratio are reported (pipeline-cpu-ab.json).

Mapping mode: with BENCH_MAPPING=1 the fixture holds wider events (12
payload fields, about 330 bytes, the shape of the criterion bench
`route_mapping`), and one binary runs alternately with the default mapping
(A) and with an `[event]` mapping that renames 5 fields (two nested paths,
one array index) and includes 10 (B), TIDEMARK_RUNS times each; the medians
and their ratio are reported (pipeline-cpu-mapping.json).

Usage: bench/pipeline-cpu   (BENCH_EVENTS=1000000 by default)"""

import base64
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness  # noqa: E402

EVENTS = int(os.environ.get("BENCH_EVENTS", "1000000"))
RUNS = max(1, int(os.environ.get("TIDEMARK_RUNS", "5")))
BIN_B = os.environ.get("TIDEMARK_BIN_B")
MAPPING = os.environ.get("BENCH_MAPPING") == "1"
# The mapping mode's [event] section: 5 renames (two nested paths, one array
# index) and a 10-field include, as in the criterion bench.
MAPPING_TOML = """
[event]
rename = { temperature = "temp_c", humidity = "rh", "site.name" = "site_name", "site.zone" = "site_zone", "tags[0]" = "first_tag" }
include = ["temp_c", "rh", "site_name", "site_zone", "first_tag", "pressure", "fw", "battery", "rssi", "state"]
"""
SHARDS = 4
TABLE_PREFIX = "pipecpu"


def wide_event(i, dev, stamp, rnd):
    """The mapping mode's event: 12 payload fields, nested and an array."""
    return {
        "deviceId": dev, "timestamp": stamp, "eventId": f"evt-{i:010d}",
        "temperature": round(15 + rnd.random() * 15, 2), "humidity": 48.2, "pressure": 1013.25,
        "site": {"name": f"plant-{i % 7}", "zone": f"z{i % 3}"}, "tags": ["a", "b"], "fw": "1.4.2",
        "battery": 87, "rssi": -61, "state": "ok", "seq": i, "debug": "x",
    }


def fixture(path, n, wide=False):
    """Writes n records in the fixture format (docs: "Fixtures"), 4 shards."""
    rnd = random.Random(7)
    now = datetime.now(timezone.utc)
    base_ms = int(now.timestamp() * 1000) - 60_000
    seqs = [0] * SHARDS
    with open(path, "w") as f:
        for i in range(n):
            dev = f"device-{rnd.randrange(2000):04d}"
            shard = hash(dev) % SHARDS
            ts = datetime.fromtimestamp((base_ms + i % 60_000) / 1000, timezone.utc)
            event = {
                "deviceId": dev,
                "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z",
                "eventId": f"evt-{i:010d}",
                "temperature": round(15 + rnd.random() * 15, 2),
                "humidity": round(30 + rnd.random() * 50, 2),
                "pressure": round(990 + rnd.random() * 40, 2),
                "firmware": "v2.4.1-stable",
                "site": "plant-north-04/line-2",
            }
            if wide:
                event = wide_event(i, dev, event["timestamp"], rnd)
            data = json.dumps(event, separators=(",", ":")).encode()
            seqs[shard] += 1
            f.write(json.dumps({
                "stream": "bench", "shard_id": f"shardId-{shard:012d}", "parent_shard_ids": [],
                "sequence_number": f"4968{shard:04d}{seqs[shard]:048d}", "partition_key": dev,
                "arrival_ms": base_ms, "data": base64.b64encode(data).decode(),
            }) + "\n")


def warm(path):
    """Reads `path` once so the timed run finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def measured(cmd, env):
    """Runs cmd, returns (seconds, cpu seconds, peak RSS MB, stdout)."""
    start = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    secs = time.time() - start
    if status != 0:
        raise SystemExit(f"{cmd[0]} failed ({status}): {err.decode()[-2000:]}")
    return secs, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out.decode()


def fixture_day(path):
    """The UTC day a fixture was written on."""
    return datetime.fromtimestamp(os.path.getmtime(path), timezone.utc).date()


def main():
    os.makedirs(harness.OUT, exist_ok=True)
    fx = os.path.join(harness.OUT, f"pipeline-cpu-{'wide-' if MAPPING else ''}{EVENTS}.jsonl")
    # Its events are stamped when it is written: one from an earlier day
    # lands in a table past its late-arrival grace, where the worker's
    # late-data path (not the pipeline measured) dead-letters most of it.
    if not os.path.exists(fx) or fixture_day(fx) != datetime.now(timezone.utc).date():
        t = time.time()
        fixture(fx, EVENTS, wide=MAPPING)
        print(f"fixture: {EVENTS} records in {time.time() - t:.0f}s -> {fx}")
    avg = sum(len(json.loads(l)["data"]) * 3 // 4 for l, _ in zip(open(fx), range(1000))) / 1000
    print(f"fixture: {EVENTS} records, about {avg:.0f} bytes of event each")

    # Unconstrained: the proxy's limits far above what a client can send.
    proxy = harness.Proxy(["--partition-wcu", "1000000000", "--on-demand-wcu", "1000000000"])
    # TIDEMARK_BIN measures a given binary (e.g. a copy, while other
    # checkouts sharing the target directory rebuild release/tidemark).
    tidemark = os.environ.get("TIDEMARK_BIN") or os.path.join(harness.target_dir(), "release", "tidemark")
    results = {}
    try:
        conf = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        conf.write(f"""
[source]
kind = "kinesis"
stream = "bench"
lease_table = "bench-leases"
worker_id = "bench"
[schema]
table_prefix = "{TABLE_PREFIX}"
key = {{ strategy = "time_bucket", shards = 10, bucket = "hour" }}
tiers = {{ active = {{ read = 1000, write = 1000000 }}, prebuild = {{ read = 1000, write = 1000000 }} }}
[writer]
max_in_flight_items = 20000
[dead_letters]
kind = "file"
path = "{harness.OUT}/pipeline-cpu-dead-letters.jsonl"
[maintenance]
enabled = false
""")
        conf.close()
        env = dict(os.environ, AWS_ENDPOINT_URL_DYNAMODB=proxy.url, RUST_LOG="warn")
        env.pop("RUST_BACKTRACE", None)
        table = f"{TABLE_PREFIX}_{datetime.now(timezone.utc).strftime('%Y-%m-%d')}"
        series = {}
        if BIN_B:
            ab(proxy, env, fx, table, [(tidemark, conf.name), (BIN_B, conf.name)], "pipeline-cpu-ab.json")
            return
        if MAPPING:
            mapped = conf.name.replace(".toml", "-mapping.toml")
            with open(conf.name) as f, open(mapped, "w") as g:
                g.write(f.read() + MAPPING_TOML)
            ab(proxy, env, fx, table, [(tidemark, conf.name), (tidemark, mapped)], "pipeline-cpu-mapping.json")
            return
        runs = [("tidemark", [tidemark, "replay", "--quiet", "--config", conf.name, "--fixture", fx])] * RUNS
        runs.append(("boto3", [sys.executable, os.path.join(os.path.dirname(__file__), "lib", "boto3_replay.py"), fx, proxy.url, table]))
        tidemark_runs = []
        for name, cmd in runs:
            warm(fx)
            proxy.reset()
            sampler = harness.Sampler(proxy, table)
            sampler.start()
            secs, cpu, rss, out = measured(cmd, env)
            sampler.stop.set()
            sampler.join()
            stored = proxy.sink_count(table)
            run = {
                "records": EVENTS, "seconds": secs, "records_per_s": EVENTS / secs,
                "cpu_s": cpu, "cpu_us_per_record": cpu * 1e6 / EVENTS, "peak_rss_mb": rss,
                "stored_in_sink": stored,
            }
            print(f"{name:9} {EVENTS / secs:9.0f} records/s  {cpu * 1e6 / EVENTS:6.2f} CPU-us/record  "
                  f"peak RSS {rss:7.1f} MB  stored {stored}  ({out.strip()[:120]})")
            if stored != EVENTS:
                raise SystemExit(f"{name} stored {stored} of {EVENTS} records")
            if name == "tidemark":
                tidemark_runs.append((run, sampler.rows))
            else:
                results[name], series[name] = run, sampler.rows
        # The median run by CPU per record stands for Tidemark; all runs' CPU
        # figures are kept beside it.
        tidemark_runs.sort(key=lambda r: r[0]["cpu_us_per_record"])
        median, rows = tidemark_runs[len(tidemark_runs) // 2]
        cpus = [r["cpu_us_per_record"] for r, _ in tidemark_runs]
        results = {"tidemark": dict(median, runs=len(cpus), cpu_us_per_record_min=cpus[0],
                                    cpu_us_per_record_max=cpus[-1]), **results}
        series["tidemark"] = rows
        print(f"tidemark  median of {len(cpus)} runs: {median['cpu_us_per_record']:.2f} CPU-us/record "
              f"(range {cpus[0]:.2f}-{cpus[-1]:.2f}), {median['records_per_s']:.0f} records/s, "
              f"peak RSS {median['peak_rss_mb']:.1f} MB")
        t, b = results["tidemark"], results["boto3"]
        print(f"ratio    tidemark uses {b['cpu_us_per_record'] / t['cpu_us_per_record']:.1f}x less CPU per record "
              f"and runs {t['records_per_s'] / b['records_per_s']:.1f}x faster than the boto3 loop")
        print(f"targets  <= 5 CPU-us/record: {'met' if t['cpu_us_per_record'] <= 5 else 'NOT met'}; "
              f"peak RSS <= 150 MB: {'met' if t['peak_rss_mb'] <= 150 else 'NOT met'}")
        rows = [dict(client=k, **v) for k, v in results.items()]
        harness.write_csv(os.path.join(harness.OUT, "pipeline-cpu.csv"), rows)
        harness.plot(os.path.join(harness.OUT, "pipeline-cpu.png"), series, "pipeline-cpu: replay into sink mode")
        with open(os.path.join(harness.OUT, "pipeline-cpu.json"), "w") as f:
            json.dump(results, f, indent=2)
    finally:
        proxy.close()


def ab(proxy, env, fx, table, clients, out):
    """Runs clients[0] (A) and clients[1] (B), each a (binary, config),
    alternately, RUNS times each."""
    cpus = {"A": [], "B": []}
    for i in range(RUNS):
        for name, (binary, conf) in zip("AB", clients):
            warm(fx)
            proxy.reset()
            secs, cpu, rss, out = measured([binary, "replay", "--quiet", "--config", conf, "--fixture", fx], env)
            stored = proxy.sink_count(table)
            if stored != EVENTS:
                raise SystemExit(f"{name} stored {stored} of {EVENTS} records")
            us = cpu * 1e6 / EVENTS
            cpus[name].append(us)
            print(f"run {i + 1} {name}: {us:6.2f} CPU-us/record  {EVENTS / secs:9.0f} records/s  peak RSS {rss:7.1f} MB")
    med = {k: sorted(v)[len(v) // 2] for k, v in cpus.items()}
    for k, b in zip("AB", clients):
        print(f"{k} {b}: median {med[k]:.2f} CPU-us/record (range {min(cpus[k]):.2f}-{max(cpus[k]):.2f}, {RUNS} runs)")
    print(f"ratio A/B: {med['A'] / med['B']:.3f}")
    with open(os.path.join(harness.OUT, out), "w") as f:
        json.dump({"events": EVENTS, "runs": RUNS, "clients": clients, "cpu_us_per_record": cpus,
                   "median": med, "ratio_a_over_b": med["A"] / med["B"]}, f, indent=2)


if __name__ == "__main__":
    main()
