#!/usr/bin/python3
"""chart.py — the peers bench's chart: one PNG from one results JSON
(bench/peers/run.sh writes both; docs/benchmarks.md shows the PNG).

    /usr/bin/python3 bench/peers/chart.py RESULTS.json OUT.png

Four panels, one bar per peer, from the same run: the drain's events/s
(medians of its repetitions), CPU µs per event of the peer's process tree,
peak RSS (log scale: Debezium's JVM is two orders of magnitude above the
rest) and, when the run had steady rates, the p99 latency at each rate
(medians too: the JSON's "medians" and "steady_medians", as peers.py
computed them for its tables).
The title carries what the numbers depend on: events, repetitions, the
machine's cores and its load average before and after.

Needs matplotlib (Debian: python3-matplotlib; run.sh installs it)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend)

# Short names for the bars, in the table's order.
SHORT = [("pg_recvlogical (wal2json)", "recvlogical\nwal2json"),
         ("pg_recvlogical (pgoutput)", "recvlogical\npgoutput"),
         ("outbox-relay (wal2json)", "outbox-relay\nwal2json"),
         ("outbox-relay (pgoutput)", "outbox-relay\npgoutput"),
         ("Debezium", "Debezium"),
         ("go-pq-cdc-kafka", "go-pq-cdc-\nkafka"),
         ("polling relayer (seed)", "polling\n(seed)")]
OURS = "outbox-relay"


def short(peer):
    for prefix, name in SHORT:
        if peer.startswith(prefix):
            return name
    return peer


def order(peer):
    for i, (prefix, _) in enumerate(SHORT):
        if peer.startswith(prefix):
            return i
    return len(SHORT)


def bars(ax, peers, values, title, unit, log=False, fmt="%.0f"):
    names = [short(p) for p in peers]
    colors = ["#1f77b4" if p.startswith(OURS) else "#999999" for p in peers]
    kept = [(n, v, c) for n, v, c in zip(names, values, colors) if v is not None]
    if not kept:
        ax.set_visible(False)
        return
    names, values, colors = zip(*kept)
    rects = ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(names, fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(unit, fontsize=8)
    if log:
        ax.set_yscale("log")
    for r, v in zip(rects, values):
        ax.annotate(fmt % v, (r.get_x() + r.get_width() / 2, r.get_height()),
                    ha="center", va="bottom", fontsize=7)


def steady_panel(ax, steady_medians):
    steady = [r for r in steady_medians if r.get("p99_ms") is not None]
    if not steady:
        ax.set_visible(False)
        return
    rates = sorted({r["rate"] for r in steady})
    peers = sorted({r["peer"] for r in steady}, key=order)
    width = 0.8 / len(rates)
    for k, rate in enumerate(rates):
        vals = []
        for p in peers:
            v = [r["p99_ms"] for r in steady if r["peer"] == p and r["rate"] == rate]
            vals.append(v[0] if v else 0)
        xs = [i + (k - (len(rates) - 1) / 2) * width for i in range(len(peers))]
        ax.bar(xs, vals, width, label="%d events/s" % rate)
    ax.set_xticks(range(len(peers)))
    ax.set_xticklabels([short(p) for p in peers], fontsize=7)
    ax.set_yscale("log")
    ax.set_title("p99 latency, INSERT to consumer (steady rate)", fontsize=9)
    ax.set_ylabel("ms (log)", fontsize=8)
    ax.legend(fontsize=7)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    med = doc["medians"]
    peers = sorted(med, key=order)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    bars(axes[0][0], peers, [med[p].get("events_per_s") for p in peers],
         "backlog drain (events/s, higher is better)", "events/s")
    bars(axes[0][1], peers, [med[p].get("cpu_us_per_event") for p in peers],
         "CPU per event, whole process tree (lower is better)", "µs/event", fmt="%.1f")
    bars(axes[1][0], peers, [med[p].get("peak_rss_mib") for p in peers],
         "peak RSS (lower is better)", "MiB (log)", log=True, fmt="%.0f")
    steady_panel(axes[1][1], doc.get("steady_medians", []))
    fig.suptitle("outbox-relay and its peers, same WAL and broker: %s events, %s repetition(s), "
                 "%s cores, load %s before, %s after (%s)"
                 % (doc.get("events"), doc.get("reps"), doc.get("nproc"),
                    (doc.get("loadavg_before") or ["?"])[0],
                    (doc.get("loadavg_after") or ["?"])[0], doc.get("started")), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(argv[2], dpi=90)
    print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
