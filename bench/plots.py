"""Draws the documentation's plots from the benchmarks' output in bench/out/.

    bench/plots.py [--out docs/images]

Reads what bench/writer-capacity, bench/hot-partition and bench/pipeline-cpu
wrote (CSV time series and JSON summaries) and writes, for each benchmark
whose output is present:

- writer-capacity.png: goodput and throttled/partial requests over time,
  Tidemark writer against the boto3 batch_writer loop;
- hot-partition.png: goodput by partition-key layout, per-partition items;
- hot-partition-hot-device.png: one device at 2,000 writes/s among 1,000,
  per-key pacing on against off: cold devices' goodput, throttled requests,
  stored per second over time;
- hot-partition-planned.png: time_bucket with the planner's shard count
  against 10 shards: % of the table's capacity, items per partition;
- hot-partition-hot-entity.png: the seeds' sensor at 2,000 writes/s among
  1,000 under time_bucket, adaptive write sharding on against off: the hot
  sensor's and the cold sensors' stored per second, with the splits made;
- pipeline-cpu.png: CPU-microseconds per record, Tidemark against boto3.

Run it with moto's venv (it has matplotlib once a benchmark ran):
localstack/.cache/venv/bin/python bench/plots.py --out docs/images
"""
import argparse
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")


def load(name):
    """A benchmark's JSON summary in bench/out/, or None before it ran."""
    path = os.path.join(OUT, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def save(fig, dest, name):
    fig.tight_layout()
    fig.savefig(os.path.join(dest, name), dpi=90)
    plt.close(fig)
    return True


def rows(path):
    with open(path, newline="") as f:
        return [{k: float(v) if v else 0.0 for k, v in r.items()} for r in csv.DictReader(f)]


def writer_capacity(dest):
    series = {}
    for name, label in (("tidemark-writer", "Tidemark writer"), ("boto3-batch_writer", "boto3 batch_writer loop")):
        path = os.path.join(OUT, f"writer-capacity-{name}.csv")
        if not os.path.exists(path):
            return False
        series[label] = rows(path)
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for label, rs in series.items():
        a.plot([r["t"] for r in rs], [r["wcu"] for r in rs], label=label)
        b.plot([r["t"] for r in rs], [r["req_throttled"] for r in rs], label=f"{label}: throttled (400)")
        b.plot([r["t"] for r in rs], [r["req_partial"] for r in rs], linestyle=":",
               label=f"{label}: partial (UnprocessedItems)")
    a.axhline(1000, color="grey", linestyle="--", label="provisioned 1,000 WCU/s")
    a.set_ylabel("goodput (WCU/s)")
    b.set_ylabel("requests/s")
    b.set_xlabel("seconds since start")
    a.set_title("1,000 WCU table offered 2,000 items/s: goodput and throttling")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    return save(fig, dest, "writer-capacity.png")


def hot_partition(dest):
    res = load("hot-partition.json")
    if res is None:
        return False
    labels = {"time": "time only\n(one hour = one key)", "time_bucket:10": "time_bucket,\n10 shards"}
    names = [k for k in ("time", "time_bucket:10") if k in res]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4))
    a.bar([labels[k] for k in names], [res[k]["goodput_wcu_s"] for k in names], color=["tab:red", "tab:green"])
    a.axhline(10000, color="grey", linestyle="--", label="table capacity 10,000 WCU/s")
    a.axhline(1000, color="grey", linestyle=":", label="one partition: 1,000 WCU/s")
    a.set_ylabel("goodput (WCU/s)")
    a.set_title("goodput by partition-key layout")
    a.legend(fontsize=8)
    width = 0.4
    for i, k in enumerate(names):
        parts = res[k].get("per_partition_items", [])
        b.bar([p + (i - 0.5) * width for p in range(len(parts))], parts, width, label=labels[k].replace("\n", " "))
    b.set_xlabel("partition")
    b.set_ylabel("items stored")
    b.set_title("items per partition (10 partitions)")
    b.legend(fontsize=8)
    return save(fig, dest, "hot-partition.png")


def hot_device(dest):
    runs = load("hot-partition-hot-device.json")
    if runs is None:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"on": "tab:green", "off": "tab:red"}
    names = {"on": "per-key pacing", "off": "table-wide control"}
    for i, (metric, title) in enumerate((("cold_goodput_pct", "cold devices' goodput\n% of their offered load"),
                                         ("throttled_or_partial_pct", "throttled + partial\nrequests %"))):
        for j, mode in enumerate(("on", "off")):
            vals = [r[metric] for r in runs if r["pacing"] == mode]
            if not vals:
                continue
            x = i * 3 + j
            a.bar(x, sum(vals) / len(vals), color=colors[mode], label=names[mode] if i == 0 else None)
            a.plot([x] * len(vals), vals, "k.", markersize=4)
            a.text(x, sum(vals) / len(vals), f"{sum(vals) / len(vals):.1f}", ha="center", va="bottom", fontsize=8)
    a.set_xticks([0.5, 3.5])
    a.set_xticklabels(["cold goodput, % of offered", "throttled + partial requests, %"], fontsize=8)
    a.axhline(95, color="grey", linestyle="--", linewidth=0.8)
    a.set_title("8,000 items/s on 10,000 WCU, one device at 2,000/s\n(bars: mean of runs; dots: each run)", fontsize=9)
    a.legend(fontsize=8)
    for mode in ("on", "off"):
        r = next((r for r in runs if r["pacing"] == mode and r.get("per_sec")), None)
        if not r:
            continue
        cum = r["per_sec"]
        t = list(range(1, len(cum)))
        cold = [cum[k][1] - cum[k - 1][1] for k in t]
        hot = [cum[k][0] - cum[k - 1][0] for k in t]
        b.plot(t, cold, color=colors[mode], label=f"{names[mode]}: cold devices")
        b.plot(t, hot, color=colors[mode], linestyle=":", label=f"{names[mode]}: hot device")
    b.axhline(6000, color="grey", linestyle="--", linewidth=0.8, label="cold offered 6,000/s")
    b.axhline(1000, color="grey", linestyle=":", linewidth=0.8, label="one partition 1,000 WCU/s")
    b.set_xlabel("seconds (offer ends at BENCH_SECS, then the backlog drains)")
    b.set_ylabel("items acknowledged per second")
    b.set_title("stored per second (first round)", fontsize=9)
    b.legend(fontsize=7)
    return save(fig, dest, "hot-partition-hot-device.png")


def hot_entity(dest):
    d = load("hot-partition-hot-entity.json")
    if d is None:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"on": "tab:green", "off": "tab:red"}
    names = {"on": "adaptive sharding on", "off": "adaptive sharding off"}
    for r in d["runs"]:
        mode, cum = r["adaptive_sharding"], r["per_sec"]
        t = list(range(1, len(cum)))
        a.plot(t, [cum[k][0] - cum[k - 1][0] for k in t], color=colors[mode], label=names[mode])
        b.plot(t, [cum[k][1] - cum[k - 1][1] for k in t], color=colors[mode], label=names[mode])
        for fan_out, _, start in r.get("splits", []):
            a.axvline(start, color=colors[mode], linestyle=":", linewidth=0.8)
            a.text(start, 2650, f"x{int(fan_out)}", color=colors[mode], fontsize=8, ha="center")
    hot, cold = d["hot_rate"], d["rate"] - d["hot_rate"]
    a.axhline(hot, color="grey", linestyle="--", linewidth=0.8, label=f"offered {hot:,}/s")
    a.axhline(1000, color="grey", linestyle=":", linewidth=0.8, label="one partition 1,000 WCU/s")
    a.axvline(d["from"], color="black", linewidth=0.5)
    a.set_ylim(0, 2900)
    a.set_title(f"sensor-alpha-001 (time_bucket:{d['shards']}, {d['partitions']} partitions)\n"
                f"dotted: a split starts; figures from {d['from']:.0f} s", fontsize=9)
    b.axhline(cold, color="grey", linestyle="--", linewidth=0.8, label=f"offered {cold:,}/s")
    b.set_title("the 999 cold sensors", fontsize=9)
    for ax in (a, b):
        ax.set_xlabel(f"seconds (offer ends at {d['secs']:.0f} s, then the backlog drains)")
        ax.set_ylabel("events stored per second")
        ax.legend(fontsize=7)
    return save(fig, dest, "hot-partition-hot-entity.png")


def planned(dest):
    res = load("hot-partition-planned.json")
    if res is None:
        return False
    runs = res["runs"]
    names = sorted(runs, key=lambda k: -int(k.split(":")[1]))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.bar([k.replace("time_bucket:", "time_bucket,\n") + " shards" for k in names],
          [runs[k]["table_pct"] for k in names], color=["tab:green", "tab:red"][:len(names)])
    for x, k in enumerate(names):
        a.text(x, runs[k]["table_pct"], f"{runs[k]['table_pct']:.1f}%", ha="center", va="bottom", fontsize=8)
    a.axhline(85, color="grey", linestyle="--", label="target 85%")
    a.axhline(100 * res["rate"] / 10000, color="grey", linestyle=":", label=f"offered {res['rate']:,} items/s")
    a.set_ylabel("goodput, % of the 10,000 WCU table")
    a.set_title("planner's shard count vs 10 shards (10 partitions)", fontsize=9)
    a.legend(fontsize=8)
    width = 0.4
    for i, k in enumerate(names):
        parts = runs[k].get("per_partition_items", [])
        b.bar([p + (i - 0.5) * width for p in range(len(parts))], parts, width, label=k)
    b.set_xlabel("partition")
    b.set_ylabel("items stored")
    b.set_title("items per partition", fontsize=9)
    b.legend(fontsize=8)
    return save(fig, dest, "hot-partition-planned.png")


def pipeline_cpu(dest):
    res = load("pipeline-cpu.json")
    if res is None:
        return False
    t, b = res["tidemark"], res["boto3"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [f"Tidemark (tidemark replay)\nmedian of {t.get('runs', 1)}", "boto3 batch_writer loop"]
    values = [t["cpu_us_per_record"], b["cpu_us_per_record"]]
    bars = ax.barh(labels, values, color=["tab:green", "tab:grey"])
    for bar, v in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:.2f} µs", va="center")
    ax.set_xlabel("CPU-microseconds per record (user + system), lower is better")
    ax.set_title(f"CPU per record, {t['records']:,} records")
    ax.set_xlim(0, max(values) * 1.2)
    return save(fig, dest, "pipeline-cpu.png")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(HERE, "..", "docs", "images"), help="where the images go")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    plots = (("writer-capacity", writer_capacity), ("hot-partition", hot_partition),
             ("hot-partition-hot-device", hot_device), ("hot-partition-planned", planned),
             ("hot-partition-hot-entity", hot_entity), ("pipeline-cpu", pipeline_cpu))
    drawn = [name for name, draw in plots if draw(args.out)]
    missing = {name for name, _ in plots} - set(drawn)
    print(f"drew {', '.join(drawn) or 'nothing'} into {args.out}")
    if missing:
        print(f"no output yet for {', '.join(sorted(missing))}: run bench/<name> first", file=sys.stderr)


if __name__ == "__main__":
    main()
