"""bench/hot-partition: on a 10,000 WCU table (10 partitions), events keyed by
a time-only partition key versus seed 003's time_bucket with 10 shards,
written by the Tidemark writer through the proxy: goodput of each."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from writer_capacity import create_table  # noqa: E402

SECS = float(os.environ.get("BENCH_SECS", "30"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "10"))
RATE = int(os.environ.get("BENCH_RATE", "8000"))
WCU, SIZE = 10_000, 200


def main():
    proxy = h.Proxy()
    exe = os.path.join(h.target_dir(), "debug", "write_load")
    results = {}
    try:
        for mode in ("time", "time_bucket:10"):
            table = f"bench-hot-{mode.replace(':', '-')}-{int(time.time())}"
            create_table(proxy.url, table, WCU)
            proxy.reset()
            s = h.Sampler(proxy, table)
            s.start()
            print(f"running keys={mode} for {SECS:.0f} s ...", flush=True)
            out = subprocess.run([exe, proxy.url, table, str(RATE), str(SECS), str(SIZE), mode],
                                 capture_output=True, text=True, check=True, env={**os.environ, "RUST_LOG": "warn"})
            s.stop.set()
            s.join()
            r = json.loads(out.stdout.strip().splitlines()[-1])
            fig = h.steady(s.rows, WARMUP, SECS)
            parts = s.last["partitions"]
            fig.update(partitions_hit=sum(1 for p in parts if p > 0), per_partition_items=parts,
                       submitted=r["submitted"], lost=r["submitted"] - proxy.sink_count(table))
            results[mode] = (s.rows, fig)
            h.write_csv(os.path.join(h.OUT, f"hot-partition-{mode.replace(':', '-')}.csv"), s.rows)
        h.plot(os.path.join(h.OUT, "hot-partition.png"), {k: v[0] for k, v in results.items()},
               f"hot-partition: {WCU} WCU table (10 partitions), offered {RATE} items/s", capacity=WCU)
        print(f"\nhot-partition: {WCU} WCU table, 10 partitions, offered {RATE} x {SIZE} B items/s, {SECS:.0f} s, after {WARMUP:.0f} s")
        print(f"{'keys':<16} {'goodput WCU/s':>14} {'% of table':>11} {'partitions hit':>15} {'% throttled':>12} {'lost':>6}")
        for mode, (_, f) in results.items():
            print(f"{mode:<16} {f['goodput_wcu_s']:>14.0f} {100 * f['goodput_wcu_s'] / WCU:>10.1f}% {f['partitions_hit']:>15} "
                  f"{f['throttled_pct']:>11.2f}% {f['lost']:>6}")
        with open(os.path.join(h.OUT, "hot-partition.json"), "w") as fh:
            json.dump({k: v[1] for k, v in results.items()}, fh, indent=2)
        print(f"\nCSV, PNG and JSON in {h.OUT}/hot-partition*")
    finally:
        proxy.close()


if __name__ == "__main__":
    main()
