"""Plots leases per worker over time from `fleet-sim --series FILE` output.

    fleet-sim --scenario tools/fleet-sim/scenarios/rolling-deploy.toml --compare --series out.csv
    python tools/fleet-sim/plot.py out.csv docs/images/fleet-rolling-deploy.png [FROM_SECOND]

One panel per run in the file (before / after tuning): a thin line per
worker (each replaced worker is a new line), and the min / max over live
workers, so balance (max - min <= 1) is visible at a glance. Needs
matplotlib (bench/requirements.txt).
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dest, start=0):
    runs = defaultdict(lambda: defaultdict(dict))
    for r in csv.DictReader(open(src, newline="")):
        if int(r["second"]) >= start:
            runs[r["scenario"]][r["worker"]][int(r["second"])] = int(r["leases"])
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.4 * len(runs)), sharex=True, squeeze=False)
    for ax, (name, workers) in zip(axes[:, 0], runs.items()):
        per_second = defaultdict(list)
        for w, pts in workers.items():
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], linewidth=0.4, alpha=0.35)
            for x in xs:
                per_second[x].append(pts[x])
        xs = sorted(per_second)
        ax.plot(xs, [max(per_second[x]) for x in xs], color="black", linewidth=1.2, label="max over live workers")
        ax.plot(xs, [min(per_second[x]) for x in xs], color="black", linewidth=1.2, linestyle="--",
                label="min over live workers")
        ax.set_title(name)
        ax.set_ylabel("leases per worker")
        ax.legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("simulated seconds")
    fig.tight_layout()
    fig.savefig(dest, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
