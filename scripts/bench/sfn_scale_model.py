#!/usr/bin/env python3
"""How the scale benchmark's figures grow with executions and instances, by simulation where
this machine cannot run the real thing (10,000 executions, 500 instances).

What decides how soon a client sees an end, with N instances behind a load balancer and no
coordination between them (only the engine's answers):

* Each instance learns of ends from its own listings of the running executions
  (ListExecutions, 1,000 a page; 10,000 executions are 10 pages). The account's listing rate
  (5 calls/s in us-east-1) is shared: N instances converged on it list it once every
  N x pages / 5 s each (one alone, every max(1 s, pages / 4) s: 80% of the refill).
* A client polls every `pollIntervalMs` (the instances advertise how often they list the
  account together: max(2 s, pages / 4 s)); each poll reaches a random instance, which shows
  the end if its last listing, finished, began after the end (it then reads the history at
  once, out of a budget of its own that polling waits behind).
* The history reads an end costs must fit GetExecutionHistory's refill (20/s): executions /
  mean duration ends a second, each read once by the instance that shows it.

This model runs those rules (Monte Carlo over random listing phases, poll phases and load
balancer picks) for each case and prints p50/p95/max of end -> first poll showing it. Compare
its 1, 5 and 40 instance rows with scripts/bench/sfn_scale.py's measured ones first.

    python3 scripts/bench/sfn_scale_model.py [--latency SECONDS] [--ends N]
"""

import argparse
import math
import random

LIST_REFILL = 5.0
CEILING_SHARE = 0.8
HISTORY_REFILL = 20.0
PAGE = 1000
END_POLL = 2.0
SWEEP_MIN = 1.0


def case(executions, instances, latency, ends, rng, mean_duration):
    pages = max(1, math.ceil(executions / PAGE))
    if instances == 1:
        period = max(SWEEP_MIN, pages / (LIST_REFILL * CEILING_SHARE))
    else:
        # Converged: together at the account's refill rate (throttled calls aside).
        period = max(SWEEP_MIN, instances * pages / LIST_REFILL)
    poll = max(END_POLL, SWEEP_MIN, pages / (LIST_REFILL * CEILING_SHARE))
    delays = []
    for _ in range(ends):
        phases = {}
        u = rng.uniform(0, poll)
        k = 0
        while True:
            t = u + k * poll
            i = rng.randrange(instances)
            if i not in phases:
                phases[i] = rng.uniform(0, period)
            # The last listing this instance began at or before t - latency (finished by t).
            begun = t - latency
            last = begun - ((begun - phases[i]) % period)
            if last >= 0:
                delays.append(t)
                break
            k += 1
    delays.sort()
    ends_per_s = executions / mean_duration
    return {
        "pages": pages, "period": period, "poll": poll,
        "p50": delays[len(delays) // 2], "p95": delays[int(0.95 * (len(delays) - 1))],
        "max": delays[-1], "ends_per_s": ends_per_s,
        "reads_fit": ends_per_s <= HISTORY_REFILL * CEILING_SHARE,
        "polls_per_s": executions / poll,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=0.5,
                        help="seconds a listing takes to answer (moto on this machine: about 0.5)")
    parser.add_argument("--ends", type=int, default=20000, help="ends simulated per case")
    parser.add_argument("--mean-duration", type=float, default=180.0,
                        help="mean execution duration, seconds (the benchmark's 60-300 s)")
    args = parser.parse_args()
    rng = random.Random(5)
    print(f"{'executions':>10} {'instances':>9} {'pages':>5} {'each lists every':>16} "
          f"{'pollIntervalMs':>14} {'p50':>6} {'p95':>6} {'max':>6} {'ends/s':>7} {'polls/s':>8}  histories")
    for executions, instances in [(1000, 1), (1000, 5), (1000, 40), (1000, 500),
                                  (10000, 1), (10000, 40), (10000, 500)]:
        r = case(executions, instances, args.latency, args.ends, rng, args.mean_duration)
        print(f"{executions:>10} {instances:>9} {r['pages']:>5} {r['period']:>15.1f}s {r['poll'] * 1000:>14.0f} "
              f"{r['p50']:>5.1f}s {r['p95']:>5.1f}s {r['max']:>5.1f}s {r['ends_per_s']:>7.1f} {r['polls_per_s']:>8.0f}  "
              + ("fit" if r["reads_fit"] else f"do not fit: {r['ends_per_s']:.0f} ends/s > 16 reads/s"))


if __name__ == "__main__":
    main()
