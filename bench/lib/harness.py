"""Shared benchmark plumbing: start a tidemark-limits proxy in sink mode,
sample its /_limits/stats once a second, write CSV and PNG, summarise.

Goodput and throttles are read from the proxy, so every client (boto3, the
Tidemark writer) is measured by the same counters."""

import csv
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "bench", "out")


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def profile():
    """Cargo profile of the binaries the benchmarks run (BENCH_PROFILE)."""
    return os.environ.get("BENCH_PROFILE", "debug")


def bin_path(name):
    return os.path.join(target_dir(), profile(), name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, method="GET"):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Proxy:
    """A tidemark-limits process in sink mode, stopped by close()."""

    def __init__(self, extra_args=()):
        binary = os.environ.get("TIDEMARK_LIMITS_BIN") or bin_path("tidemark-limits")
        if not os.path.exists(binary):
            raise SystemExit(f"tidemark-limits not built at {binary}: run cargo build -p tidemark-limits (or set TIDEMARK_LIMITS_BIN)")
        for var in ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_SQS"):
            if var not in os.environ:
                raise SystemExit(f"{var} unset: run localstack/up and `set -a; . localstack/.env; set +a`")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        os.makedirs(OUT, exist_ok=True)
        self.log = open(os.path.join(OUT, "proxy.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "--listen", f"127.0.0.1:{port}",
             "--dynamodb", os.environ["AWS_ENDPOINT_URL_DYNAMODB"],
             "--kinesis", os.environ["AWS_ENDPOINT_URL_KINESIS"],
             "--sqs", os.environ["AWS_ENDPOINT_URL_SQS"], "--sink", *extra_args],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while True:
            try:
                self.stats()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"tidemark-limits did not start; see {OUT}/proxy.log")
                time.sleep(0.1)

    def stats(self):
        return http(self.url + "/_limits/stats")

    def reset(self):
        http(self.url + "/_limits/reset", "POST")

    def sink_count(self, table):
        # From the counters, not GET /_limits/sink/TABLE: that lists every
        # item, and a million of them grew this process to ~460 MB, which
        # every later child inherited as its starting peak RSS (Linux keeps
        # the high-water mark across fork and exec), inflating the measured
        # clients' ru_maxrss.
        return self.stats()["dynamodb"]["sink"].get(table, {}).get("items", 0)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


class Sampler(threading.Thread):
    """Samples one table's counters every second into rows of per-second deltas."""

    def __init__(self, proxy, table):
        super().__init__(daemon=True)
        self.proxy, self.table, self.rows = proxy, table, []
        self.stop = threading.Event()

    def snapshot(self):
        s = self.proxy.stats()
        d = s["dynamodb"]
        t = d["tables"].get(self.table, {})
        return {
            "wcu": t.get("consumed_wcu", 0),
            "items": t.get("accepted_items", 0),
            "throttled_items": t.get("throttled_table", 0) + t.get("throttled_key_range", 0),
            "req_ok": d["requests_accepted"], "req_partial": d["requests_partial"], "req_throttled": d["requests_throttled"],
            "partitions": [p["accepted_items"] for p in t.get("partitions", [])],
        }

    def run(self):
        t0 = time.time()
        prev = self.snapshot()
        nxt = t0 + 1
        while not self.stop.is_set():
            time.sleep(max(0.0, nxt - time.time()))
            cur = self.snapshot()
            row = {"t": round(time.time() - t0, 2)}
            for k in ("wcu", "items", "throttled_items", "req_ok", "req_partial", "req_throttled"):
                row[k] = cur[k] - prev[k]
            self.rows.append(row)
            self.last = cur
            prev = cur
            nxt += 1


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        # The union of the rows' keys, in first-seen order; missing cells empty.
        fields = list(dict.fromkeys(k for r in rows for k in r))
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)


def steady(rows, start=15.0, end=None):
    """Figures over rows with start < t <= end."""
    sel = [r for r in rows if r["t"] > start and (end is None or r["t"] <= end)]
    secs = len(sel) or 1
    reqs = sum(r["req_ok"] + r["req_partial"] + r["req_throttled"] for r in sel) or 1
    return {
        "seconds": len(sel),
        "goodput_wcu_s": sum(r["wcu"] for r in sel) / secs,
        "goodput_items_s": sum(r["items"] for r in sel) / secs,
        "requests_s": reqs / secs,
        "throttled_pct": 100.0 * sum(r["req_throttled"] for r in sel) / reqs,
        "partial_pct": 100.0 * sum(r["req_partial"] for r in sel) / reqs,
    }


def plot(path, series, title, capacity=None):
    """series: {label: rows}. Goodput (WCU/s) on top, throttled requests/s below."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for label, rows in series.items():
        a.plot([r["t"] for r in rows], [r["wcu"] for r in rows], label=label)
        b.plot([r["t"] for r in rows], [r["req_throttled"] + r["req_partial"] for r in rows], label=label)
    if capacity:
        a.axhline(capacity, color="grey", linestyle="--", label=f"capacity {capacity} WCU/s")
    a.set_ylabel("goodput (WCU/s)")
    b.set_ylabel("throttled + partial requests/s")
    b.set_xlabel("seconds")
    a.set_title(title)
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
