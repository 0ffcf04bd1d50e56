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
  against time_bucket:10 at the same rate: % of the table's capacity;
- hot_entity_adaptive (not in the default set: about 8 minutes): the seeds'
  sensor-alpha-001 at 2,000 events/s among 1,000 sensors at
  BENCH_ENTITY_RATE (6,000) events/s in all, routed by the product's router
  (time_bucket, 10 shards, hour buckets) on a 10,000 WCU table of
  BENCH_ENTITY_PARTITIONS (40) partitions, adaptive write sharding on then
  off, BENCH_ENTITY_SECS (150) s each; figures from 60 s after the start:
  the hot sensor's and the cold ones' stored rate against their offered
  rate, throttled or partial calls, events lost (offered minus the keys the
  proxy's sink holds), the splits made."""

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
ENTITY_RATE = int(os.environ.get("BENCH_ENTITY_RATE", "6000"))
ENTITY_SECS = float(os.environ.get("BENCH_ENTITY_SECS", "150"))
ENTITY_PARTITIONS = int(os.environ.get("BENCH_ENTITY_PARTITIONS", "40"))
ENTITY_FROM = float(os.environ.get("BENCH_ENTITY_FROM", "60"))
ENTITY_SHARDS = 10
WCU, SIZE, PARTITIONS = 10_000, 200, 10


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def run_load(proxy, mode, rate, env=None, tag=None, table=None, target=None, secs=SECS, warmup=WARMUP):
    """One write_load run on a fresh table; proxy and client figures.
    `target` is write_load's TABLE argument (the table prefix in
    hot_entity mode, whose router names `table`)."""
    exe = h.bin_path("write_load")
    label = tag or mode
    table = table or f"bench-hot-{label.replace(':', '-').replace('_', '-')}-{int(time.time())}"
    create_table(proxy.url, table, WCU)
    proxy.reset()
    s = h.Sampler(proxy, table)
    s.start()
    print(f"running {label} at {rate} items/s for {secs:.0f} s (load {loadavg()[0]:.1f}) ...", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    out = subprocess.run([exe, proxy.url, target or table, str(rate), str(secs), str(SIZE), mode],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "RUST_LOG": "warn", **(env or {})})
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    s.stop.set()
    s.join()
    r = json.loads(out.stdout.strip().splitlines()[-1])
    fig = h.steady(s.rows, warmup, secs)
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
        lo, hi = int(warmup), min(int(secs), len(cum)) - 1

        def delta(k):
            return cum[hi][k] - cum[lo][k] if hi > lo else 0
        fig.update(cold_goodput_pct=100.0 * delta(1) / max(1, delta(3)),
                   hot_goodput_wcu_s=delta(0) / max(1, hi - lo),
                   hot_offered_wcu_s=delta(2) / max(1, hi - lo),
                   cold_goodput_items_s=delta(1) / max(1, hi - lo),
                   cold_offered_items_s=delta(3) / max(1, hi - lo),
                   hot_lost=r["offered_hot"] - r["stored_hot"], key_pacing=r["key_pacing"],
                   per_sec=cum)
        fig["hot_goodput_pct"] = 100.0 * fig["hot_goodput_wcu_s"] / max(1.0, fig["hot_offered_wcu_s"])
    for k in ("offered", "adaptive", "splits", "route_holds", "most_waiting", "rejected"):
        if k in r:
            fig[k] = r[k]
    if "offered" in r:
        fig["lost"] = r["offered"] - proxy.sink_count(table)
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


def hot_entity_adaptive():
    # The router names the table by the events' day; the proxy is told its
    # partitions before it starts.
    stamp, day = int(time.time()), time.strftime("%Y-%m-%d", time.gmtime())
    prefixes = {a: f"bench-entity-{a}-{stamp}" for a in ("on", "off")}
    tables = {a: f"{p}_{day}" for a, p in prefixes.items()}
    proxy = h.Proxy([x for t in tables.values() for x in ("--partitions", f"{t}={ENTITY_PARTITIONS}")])
    runs = []
    try:
        for a in ("on", "off"):
            env = {"TIDEMARK_ADAPTIVE": "1" if a == "on" else "0", "BENCH_MAX_IN_FLIGHT": "400000",
                   "BENCH_SPLITS_ENDPOINT": os.environ["AWS_ENDPOINT_URL_DYNAMODB"]}
            rows, fig = run_load(proxy, f"hot_entity:{HOT_RATE}:{ENTITY_SHARDS}", ENTITY_RATE, env,
                                 tag=f"hot_entity-{a}", table=tables[a], target=prefixes[a],
                                 secs=ENTITY_SECS, warmup=ENTITY_FROM)
            fig["adaptive_sharding"] = a
            runs.append(fig)
    finally:
        proxy.close()
    print(f"\nhot_entity_adaptive: {WCU} WCU table, {ENTITY_PARTITIONS} partitions, time_bucket:{ENTITY_SHARDS} (hour), "
          f"sensor-alpha-001 at {HOT_RATE}/s among 1,000 sensors, {ENTITY_RATE} events/s, {ENTITY_SECS:.0f} s, "
          f"figures after {ENTITY_FROM:.0f} s")
    print(f"{'adaptive':<9} {'hot stored/s':>13} {'hot %':>7} {'cold %':>7} {'throttled+partial':>18} {'lost':>6} "
          f"{'fan-out (decided s, from s)':>30} {'drain s':>8} {'client cores':>13} {'load':>6}")
    for f in runs:
        steps = " ".join(f"x{int(x)}({d:.0f},{fr:.0f})" for x, d, fr in f.get("splits", [])) or "-"
        print(f"{f['adaptive_sharding']:<9} {f['hot_goodput_wcu_s']:>13.0f} {f['hot_goodput_pct']:>6.1f}% "
              f"{f['cold_goodput_pct']:>6.1f}% {f['throttled_or_partial_pct']:>17.2f}% {f['lost']:>6} {steps:>30} "
              f"{f['drain_secs']:>8} {f['client_cores']:>13} {f['loadavg'][0]:>6.1f}")
    with open(os.path.join(h.OUT, "hot-partition-hot-entity.json"), "w") as fh:
        json.dump({"rate": ENTITY_RATE, "hot_rate": HOT_RATE, "secs": ENTITY_SECS, "from": ENTITY_FROM,
                   "partitions": ENTITY_PARTITIONS, "shards": ENTITY_SHARDS, "runs": runs}, fh, indent=2)


def main():
    for name, fn in (("layout", layout), ("hot_device", hot_device), ("planned", planned),
                     ("hot_entity_adaptive", hot_entity_adaptive)):
        if name in SCENARIOS:
            fn()
    print(f"\nCSV, PNG and JSON in {h.OUT}/hot-partition*")


if __name__ == "__main__":
    main()
