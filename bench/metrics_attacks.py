#!/usr/bin/python3
"""metrics_attacks.py - the clients that took toggled's /metrics away (issue
30), each held for a while against a daemon of your choice, with scrapes
meanwhile: how many were answered within 2 s, the slowest, and the daemon's
CPU time while the attack was held.  Figures only (docs/reliability.md
section 9); tests/metrics/test_metrics_faults.py asserts the bounds.

Usage: bench/metrics_attacks.py TOGGLED [--seconds S] [--scrapes N]
(Debian's python3 with pytest and prometheus_client: scripts/deps.sh)
  TOGGLED    the daemon binary (build/toggled; a build of an older commit to compare)
Runs each attack over TCP (127.0.0.1, a free port) and a Unix socket:
  slowloris16  16 connections sending a request a byte every 0.2 s
  slowloris100 100 of them, reconnecting when closed
  idle2000     2,000 connections that send nothing (then released: N more scrapes)
  flood4       4 threads scraping back to back (answers a second reported)
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "metrics"))
os.environ.setdefault("B", "build")

import test_metrics  # noqa: E402
import test_metrics_faults as tf  # noqa: E402


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrapes(address, n, seconds):
    """n scrapes spread over seconds: (answered, slowest answered in ms)."""
    ok, worst = 0, 0.0
    gap = seconds / n
    for _ in range(n):
        t0 = time.monotonic()
        try:
            status, _ = tf.scrape(address)
            if status == 200:
                ok += 1
                worst = max(worst, time.monotonic() - t0)
        except (OSError, ValueError):
            pass
        time.sleep(max(0.0, gap - (time.monotonic() - t0)))
    return ok, worst * 1e3


def run(env, name, seconds, n):
    pid = env.proc.pid
    before = cpu_s(pid)
    extra = ""
    if name.startswith("slowloris"):
        count = int(name[len("slowloris"):])
        try:
            attack = tf.Trickler(env.address, count, reconnect=count > tf.LIMIT)
        except AssertionError as e:
            print("  %-13s could not open its connections: %s" % (name, e))
            return
        time.sleep(0.5)
        ok, worst = scrapes(env.address, n, seconds)
        attack.close()
    elif name == "idle2000":
        socks, made = tf.open_idle(env.address, 2000)
        ok, worst = scrapes(env.address, n, seconds)
        for s in socks:
            s.close()
        after_ok, after_worst = scrapes(env.address, n, 2)
        extra = "; %d made; after release %d of %d (slowest %.1f ms)" % (made, after_ok, n,
                                                                          after_worst)
    else:
        f = tf.Flood(env.address, 4)
        time.sleep(0.5)
        a0, t0 = f.answered, time.monotonic()
        ok, worst = scrapes(env.address, n, seconds)
        rate = (f.answered - a0) / (time.monotonic() - t0)
        f.close()
        extra = "; the flood answered %.0f a second" % rate
    cpu = cpu_s(pid) - before
    print("  %-13s %d of %d scrapes answered (slowest %.1f ms); toggled CPU %.2f s in %.1f s%s"
          % (name, ok, n, worst, cpu, seconds, extra))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("toggled")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--scrapes", type=int, default=10)
    a = ap.parse_args()
    test_metrics.TOGGLED = a.toggled
    for transport, address in (("tcp", "127.0.0.1:0"), ("unix", "DIR/metrics.sock")):
        print("%s: %s" % (a.toggled, transport))
        for name in ("slowloris16", "slowloris100", "idle2000", "flood4"):
            env = test_metrics.Env(address)  # a fresh daemon for each attack
            try:
                run(env, name, a.seconds, a.scrapes)
            finally:
                env.stop()


if __name__ == "__main__":
    main()
