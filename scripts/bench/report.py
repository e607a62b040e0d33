#!/usr/bin/env python3
"""The summary scripts/bench/run prints from its results file: one line per measurement,
`NAME [round=N] key=value ...` (names: idle, floor, flowgate, fastmcp, after-floor, after, before-floor and before with BEFORE_BIN, peak,
many, starts).

    scripts/bench/report.py RESULTS
"""

import os
import statistics
import sys


def parse(path):
    rows = []
    for line in open(path):
        name, *pairs = line.split()
        values = {}
        for pair in pairs:
            key, _, value = pair.partition("=")
            values[key] = float(value)
        rows.append((name, values))
    return rows


def spread(xs, fmt="{:,.0f}"):
    """Median, with the range when there is more than one figure."""
    med = statistics.median(xs)
    if len(xs) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main():
    rows = parse(sys.argv[1])
    by = {}
    for name, values in rows:
        by.setdefault(name, []).append(values)
    one = lambda name: by[name][-1]

    rounds = len(by["flowgate"])
    print(f"\ntasks/get, 64 connections: median of {rounds} rounds (range)")
    print(f"{'':12}{'requests/s':>28}{'p50 ms':>24}{'p99 ms':>24}{'errors':>8}")
    for name, label in [("floor", "floor (404)"), ("flowgate", "flowgate"), ("fastmcp", "fastmcp")]:
        rs = by[name]
        print(f"{label:12}{spread([r['rps'] for r in rs]):>28}"
              f"{spread([r['p50_ms'] for r in rs], '{:.2f}'):>24}"
              f"{spread([r['p99_ms'] for r in rs], '{:.2f}'):>24}"
              f"{sum(r['errors'] for r in rs):>8.0f}")
    # Ratios within each round (the three ran back to back), then their median and range.
    to_floor = [f["rps"] / fl["rps"] for f, fl in zip(by["flowgate"], by["floor"])]
    to_peer = [f["rps"] / p["rps"] for f, p in zip(by["flowgate"], by["fastmcp"])]
    print(f"\nflowgate / floor:   {spread([100 * x for x in to_floor], '{:.0f}')} %")
    print(f"flowgate / fastmcp: x{spread(to_peer, '{:.1f}')}")
    if "before" in by:
        # BEFORE_BIN: this build and an earlier one, each started afresh in every round and
        # measured against its own floor.
        hz = os.sysconf("SC_CLK_TCK")
        def ratios(name):
            return [b["rps"] / fl["rps"] for b, fl in zip(by[name], by[name + "-floor"])]
        def cpu(name):
            return [r["cpu_ticks"] / hz * 1e6 / max(r["requests"], 1) for r in by[name]]
        after, before = ratios("after"), ratios("before")
        for name, label in (("after", "this build"), ("before", "before")):
            print(f"{label + ' / its floor:':24}{spread([100 * x for x in ratios(name)], '{:.0f}')} %"
                  f" ({spread([r['rps'] for r in by[name]])} tasks/get per s;"
                  f" server CPU per poll {spread(cpu(name), '{:.1f}')} us)")
        change = [100 * (a / b - 1) for a, b in zip(after, before)]
        print(f"this build's ratio to the floor against the earlier build's: {spread(change, '{:+.1f}')} % by round")
        change = [100 * (a / b - 1) for a, b in zip(cpu("after"), cpu("before"))]
        print(f"this build's CPU per poll against the earlier build's: {spread(change, '{:+.1f}')} % by round")
    idle, peak = one("idle"), one("peak")
    print(f"RSS flowgate: idle {idle['flowgate_rss_kb'] / 1024:.1f} MB, peak {peak['flowgate_rss_kb'] / 1024:.1f} MB;"
          f" fastmcp: idle {idle['fastmcp_rss_kb'] / 1024:.1f} MB, peak {peak['fastmcp_rss_kb'] / 1024:.1f} MB")

    print("\n1,000 connections (flowgate tasks/get):")
    for r in by["many"]:
        print(f"  {r['rps']:,.0f} requests/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.0f} ms,"
              f" errors {r['errors']:.0f}; RSS during {r['rss_during_kb'] / 1024:.1f} MB, after {r['rss_after_kb'] / 1024:.1f} MB")

    s = one("starts")
    runs = s["runs"] or 1
    print(f"\ntools/call starts (local engine, 16 clients): {s['rps']:,.0f} starts/s, p50 {s['p50_ms']:.1f} ms,"
          f" p99 {s['p99_ms']:.1f} ms, errors {s['errors']:.0f}, {s['runs']:.0f} runs recorded")
    print(f"  CPU per start: server {1000 * s['server_cpu_ms'] / runs:.0f} us,"
          f" its children (supervisor shell and command) {1000 * s['children_cpu_ms'] / runs:.0f} us")
    calls = {k[4:]: v / runs for k, v in s.items() if k.startswith("sys_")}
    if calls:
        print("  server system calls per start: " + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
