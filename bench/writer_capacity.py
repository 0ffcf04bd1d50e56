"""bench/writer-capacity: a 1,000 WCU table, offered twice that in 200-byte
items for SECS (60) seconds, measured after 15 s; the Tidemark writer and a
boto3 batch_writer loop, one after the other, through the same proxy and table."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import boto3  # noqa: E402

import boto3_loop  # noqa: E402
import harness as h  # noqa: E402

SECS = float(os.environ.get("BENCH_SECS", "60"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "15"))
WCU, RATE, SIZE = 1000, 2000, 200


def create_table(url, name, wcu):
    c = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test")
    c.create_table(TableName=name,
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
                   ProvisionedThroughput={"ReadCapacityUnits": 10, "WriteCapacityUnits": wcu})


def measure(proxy, table, run):
    proxy.reset()
    s = h.Sampler(proxy, table)
    s.start()
    t0 = time.time()
    submitted, detail = run()
    s.stop.set()
    s.join()
    stored = proxy.sink_count(table)
    fig = h.steady(s.rows, WARMUP, SECS)
    fig.update(submitted=submitted, stored_keys=stored, lost=submitted - stored,
               wall_secs=round(time.time() - t0, 1), **detail)
    fig["goodput_pct"] = 100.0 * fig["goodput_wcu_s"] / WCU
    return s.rows, fig


def tidemark(proxy, table):
    exe = h.bin_path("write_load")
    if not os.path.exists(exe):
        raise SystemExit(f"{exe} missing: cargo build -p tidemark-bench --bin write_load")
    out = subprocess.run([exe, proxy.url, table, str(RATE), str(SECS), str(SIZE), "spread"],
                         capture_output=True, text=True, check=True, env={**os.environ, "RUST_LOG": "warn"})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["submitted"], {"rejected": r["rejected"], "drain_secs": round(r["drain_secs"], 1)}


def baseline(proxy, table):
    keys, errors, offered = boto3_loop.run(proxy.url, table, RATE, SECS, SIZE)
    return len(keys), {"client_errors": errors}


def main():
    proxy = h.Proxy()
    try:
        table = f"bench-capacity-{int(time.time())}"
        create_table(proxy.url, table, WCU)
        results = {}
        for name, run in (("tidemark-writer", lambda: tidemark(proxy, table)),
                          ("boto3-batch_writer", lambda: baseline(proxy, table))):
            print(f"running {name} for {SECS:.0f} s ...", flush=True)
            rows, fig = measure(proxy, table, run)
            results[name] = (rows, fig)
            h.write_csv(os.path.join(h.OUT, f"writer-capacity-{name}.csv"), rows)
        h.plot(os.path.join(h.OUT, "writer-capacity.png"), {k: v[0] for k, v in results.items()},
               f"writer-capacity: {WCU} WCU table, offered {RATE} x {SIZE} B items/s", capacity=WCU)
        print(f"\nwriter-capacity: {WCU} WCU table, offered {RATE} items/s of {SIZE} B, {SECS:.0f} s, steady state after {WARMUP:.0f} s")
        print(f"{'client':<20} {'goodput WCU/s':>14} {'% capacity':>11} {'req/s':>7} {'% throttled':>12} {'% partial':>10} {'submitted':>10} {'lost':>6}")
        for name, (_, f) in results.items():
            print(f"{name:<20} {f['goodput_wcu_s']:>14.0f} {f['goodput_pct']:>10.1f}% {f['requests_s']:>7.1f} "
                  f"{f['throttled_pct']:>11.2f}% {f['partial_pct']:>9.2f}% {f['submitted']:>10} {f['lost']:>6}")
        with open(os.path.join(h.OUT, "writer-capacity.json"), "w") as fh:
            json.dump({k: v[1] for k, v in results.items()}, fh, indent=2)
        print(f"\nCSV, PNG and JSON in {h.OUT}/writer-capacity*")
    finally:
        proxy.close()


if __name__ == "__main__":
    main()
