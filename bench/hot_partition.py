"""bench/hot-partition: DynamoDB partitions and key layout, through the proxy.

Scenarios (BENCH_SCENARIOS, comma-separated; all by default):
- layout: a 10,000 WCU table (10 partitions), events keyed by a time-only
  partition key versus seed 003's time_bucket with 10 shards, offered
  BENCH_RATE (8,000) items/s;
- hot_device: the same table, 1,000 devices under the `entity` key
  strategy, one of them at 2,000 writes/s, 8,000 items/s in all (80% of
  capacity); the writer with per-key pacing (on) and with the table-wide
  control alone (off), alternating, BENCH_AB_ROUNDS (2) times each; the proxy
  splits a partition that stays hot for 5 s (adaptive capacity). Cold
  devices' goodput as % of their offered load, throttled requests, the hot
  device's rate and what it lost;
- planned: time_bucket with the shard count `tidemark plan` recommends for
  10 partitions (plan_shards), offered BENCH_PLANNED_RATE (9,000) items/s,
  against time_bucket:10 at the same rate: % of the table's capacity."""

import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from writer_capacity import create_table  # noqa: E402

SECS = float(os.environ.get("BENCH_SECS", "30"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "10"))
RATE = int(os.environ.get("BENCH_RATE", "8000"))
PLANNED_RATE = int(os.environ.get("BENCH_PLANNED_RATE", "9000"))
AB_ROUNDS = int(os.environ.get("BENCH_AB_ROUNDS", "2"))
HOT_RATE = 2000
SCENARIOS = os.environ.get("BENCH_SCENARIOS", "layout,hot_device,planned").split(",")
WCU, SIZE, PARTITIONS = 10_000, 200, 10


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def run_load(proxy, mode, rate, env=None, tag=None):
    """One write_load run on a fresh table; proxy and client figures."""
    exe = h.bin_path("write_load")
    label = tag or mode
    table = f"bench-hot-{label.replace(':', '-').replace('_', '-')}-{int(time.time())}"
    create_table(proxy.url, table, WCU)
    proxy.reset()
    s = h.Sampler(proxy, table)
    s.start()
    print(f"running {label} at {rate} items/s for {SECS:.0f} s (load {loadavg()[0]:.1f}) ...", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    out = subprocess.run([exe, proxy.url, table, str(rate), str(SECS), str(SIZE), mode],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "RUST_LOG": "warn", **(env or {})})
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    s.stop.set()
    s.join()
    r = json.loads(out.stdout.strip().splitlines()[-1])
    fig = h.steady(s.rows, WARMUP, SECS)
    parts = s.last["partitions"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    fig.update(partitions_hit=sum(1 for p in parts if p > 0), per_partition_items=parts,
               submitted=r["submitted"], lost=r["submitted"] - proxy.sink_count(table),
               drain_secs=round(r["drain_secs"], 1), client_cpu_secs=round(cpu, 1),
               client_cores=round(cpu / wall, 2), wall_secs=round(wall, 1), loadavg=loadavg(),
               splits=proxy.stats()["dynamodb"]["tables"].get(table, {}).get("splits", 0))
    fig["table_pct"] = 100.0 * fig["goodput_wcu_s"] / WCU
    fig["throttled_or_partial_pct"] = fig["throttled_pct"] + fig["partial_pct"]
    if "per_sec" in r and r.get("offered_hot", 0) + r.get("offered_cold", 0) > 0:
        cum = r["per_sec"]
        lo, hi = int(WARMUP), min(int(SECS), len(cum)) - 1

        def delta(k):
            return cum[hi][k] - cum[lo][k] if hi > lo else 0
        fig.update(cold_goodput_pct=100.0 * delta(1) / max(1, delta(3)),
                   hot_goodput_wcu_s=delta(0) / max(1, hi - lo),
                   hot_offered_wcu_s=delta(2) / max(1, hi - lo),
                   hot_lost=r["offered_hot"] - r["stored_hot"], key_pacing=r["key_pacing"],
                   per_sec=cum)
    h.write_csv(os.path.join(h.OUT, f"hot-partition-{label.replace(':', '-')}.csv"), s.rows)
    return s.rows, fig


def layout():
    proxy = h.Proxy()
    results = {}
    try:
        for mode in ("time", "time_bucket:10"):
            results[mode] = run_load(proxy, mode, RATE)
    finally:
        proxy.close()
    h.plot(os.path.join(h.OUT, "hot-partition.png"), {k: v[0] for k, v in results.items()},
           f"hot-partition: {WCU} WCU table (10 partitions), offered {RATE} items/s", capacity=WCU)
    print(f"\nlayout: {WCU} WCU table, 10 partitions, offered {RATE} x {SIZE} B items/s, {SECS:.0f} s, after {WARMUP:.0f} s")
    print(f"{'keys':<16} {'goodput WCU/s':>14} {'% of table':>11} {'partitions hit':>15} {'% throttled':>12} {'lost':>6}")
    for mode, (_, f) in results.items():
        print(f"{mode:<16} {f['goodput_wcu_s']:>14.0f} {f['table_pct']:>10.1f}% {f['partitions_hit']:>15} "
              f"{f['throttled_pct']:>11.2f}% {f['lost']:>6}")
    with open(os.path.join(h.OUT, "hot-partition.json"), "w") as fh:
        json.dump({k: v[1] for k, v in results.items()}, fh, indent=2)


def hot_device():
    # Adaptive capacity: a partition hot for 5 s is split (at most 8 times).
    proxy = h.Proxy(["--split-hot-after", "5"])
    runs = []
    try:
        for rnd in range(AB_ROUNDS):
            for pacing in ("on", "off"):
                env = {"TIDEMARK_KEY_PACING": "1" if pacing == "on" else "0", "BENCH_MAX_IN_FLIGHT": "400000"}
                rows, fig = run_load(proxy, f"hot_device:{HOT_RATE}", RATE, env, tag=f"hot_device-{pacing}-{rnd}")
                fig["pacing"] = pacing
                runs.append(fig)
    finally:
        proxy.close()
    print(f"\nhot_device: {WCU} WCU table, 1,000 devices (entity keys), one at {HOT_RATE}/s, {RATE} items/s offered, "
          f"{SECS:.0f} s, figures after {WARMUP:.0f} s")
    print(f"{'per-key pacing':<15} {'cold goodput':>13} {'throttled+partial':>18} {'hot WCU/s':>10} {'hot lost':>9} "
          f"{'table %':>8} {'drain s':>8} {'client cores':>13} {'load':>6}")
    for f in runs:
        print(f"{f['pacing']:<15} {f['cold_goodput_pct']:>12.1f}% {f['throttled_or_partial_pct']:>17.2f}% "
              f"{f['hot_goodput_wcu_s']:>10.0f} {f['hot_lost']:>9} {f['table_pct']:>7.1f}% {f['drain_secs']:>8} "
              f"{f['client_cores']:>13} {f['loadavg'][0]:>6.1f}")
    with open(os.path.join(h.OUT, "hot-partition-hot-device.json"), "w") as fh:
        json.dump(runs, fh, indent=2)


def planned():
    plan = json.loads(subprocess.run([h.bin_path("plan_shards"), str(PLANNED_RATE), str(SIZE), str(PARTITIONS)],
                                     capture_output=True, text=True, check=True).stdout)
    n = plan["even_write_shards"]
    print(f"planner: {n} write shards for {PARTITIONS} partitions (expected skew {plan['even_partition_skew']:.2f}, "
          f"{100 * plan['even_usable_fraction']:.0f}% usable)", flush=True)
    proxy = h.Proxy()
    results = {}
    try:
        for mode in (f"time_bucket:{n}", "time_bucket:10"):
            results[mode] = run_load(proxy, mode, PLANNED_RATE)
    finally:
        proxy.close()
    print(f"\nplanned: {WCU} WCU table, 10 partitions, offered {PLANNED_RATE} x {SIZE} B items/s, {SECS:.0f} s, after {WARMUP:.0f} s")
    print(f"{'keys':<18} {'goodput WCU/s':>14} {'% of table':>11} {'partitions hit':>15} {'throttled+partial':>18} "
          f"{'lost':>6} {'client cores':>13} {'load':>6}")
    for mode, (_, f) in results.items():
        print(f"{mode:<18} {f['goodput_wcu_s']:>14.0f} {f['table_pct']:>10.1f}% {f['partitions_hit']:>15} "
              f"{f['throttled_or_partial_pct']:>17.2f}% {f['lost']:>6} {f['client_cores']:>13} {f['loadavg'][0]:>6.1f}")
    with open(os.path.join(h.OUT, "hot-partition-planned.json"), "w") as fh:
        json.dump({"plan": plan, "rate": PLANNED_RATE, "runs": {k: v[1] for k, v in results.items()}}, fh, indent=2)


def main():
    for name, fn in (("layout", layout), ("hot_device", hot_device), ("planned", planned)):
        if name in SCENARIOS:
            fn()
    print(f"\nCSV, PNG and JSON in {h.OUT}/hot-partition*")


if __name__ == "__main__":
    main()
