#!/usr/bin/env python3
"""orchestrator.py - send a plan for the next 100 steps of a group and watch it
being applied, with graphtoggle.client (docs/protocol.md).

    make && make python-client
    build/toggled --socket /tmp/t.sock --state-dir /tmp/t-state &
    build/examples/demo_agent --socket /tmp/t.sock --group decode --period-ms 20 &
    PYTHONPATH=python examples/orchestrator.py --socket /tmp/t.sock --group decode

For every agent of the group it plans steps current+LEAD .. current+LEAD+99,
a different layer of resid_post every step (a layer sweep, as a probe that
reads one layer per step would want), then follows each agent's step and the
set of its current step until the plan is used up, and reports what it saw:
steps seen running their planned set, plan entries left, rejected batches
(events) and anomalies.  Exit status 0 when every step it saw inside the plan
ran the planned set.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from graphtoggle import errors  # noqa: E402
from graphtoggle.client import Client  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="toggled's socket (default: $TOGGLE_SOCKET, ...)")
    ap.add_argument("--group", required=True, help="the agents' group")
    ap.add_argument("--steps", type=int, default=100, help="steps to plan (default 100)")
    ap.add_argument("--lead", type=int, default=50,
                    help="first planned step is this many after the current one (default 50)")
    ap.add_argument("--hook", default="resid_post", help="hook type to sweep (default resid_post)")
    ap.add_argument("--timeout", type=float, default=60, help="give up after this many seconds")
    args = ap.parse_args()

    with Client(args.socket) as c:
        try:
            agents = c.list_agents({"group": args.group})
        except errors.NoAgentError:
            sys.exit("orchestrator: no agent in group %r" % args.group)
        print("toggled %s, protocol %d; group %s: %s" % (
            c.daemon_version, c.protocol_version, args.group,
            ", ".join("%s (id %d, step %d)" % (a.name, a.agent_id, a.step) for a in agents)))

        # One plan per agent: each has its own step counter and catalog.
        planned = {}
        for a in agents:
            first = a.step + args.lead
            layers = a.n_layers
            spec_of = lambda s, n=layers: "%s:%d" % (args.hook, s % n)  # noqa: E731
            try:
                c.plan(first, args.steps, spec_of, target=a.agent_id)
            except errors.GraphToggleError as e:
                sys.exit("orchestrator: plan for %s refused: %s (agents: %s)" % (
                    a.name, e, getattr(e, "agents", [])))
            planned[a.agent_id] = (first, {s: spec_of(s) for s in range(first, first + args.steps)})
            print("planned %s steps %d-%d (%s, %d layers)" % (
                a.name, first, first + args.steps - 1, args.hook, layers))

        # Watch it applied: rejected batches and anomalies come as events; the
        # set of each agent's current step is polled (plans do not change the
        # control version, so there is no SET_APPLIED event for them).
        seen = {aid: {} for aid in planned}
        with c.watch({"group": args.group}) as w:
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                ev = w.next(timeout=0.005)
                if ev is not None and ev.kind in ("plan_rejected", "anomaly", "left"):
                    print("event: %r" % ev)
                # A step read before and after the sets: the set is that step's
                # only if the agent did not move in between.
                before = {a.agent_id: a.step for a in c.list_agents({"group": args.group})}
                hooks = c.hooks({"group": args.group})
                after = {a.agent_id: a.step for a in c.list_agents({"group": args.group})}
                done = True
                for h in hooks:
                    if h.agent_id not in planned:
                        continue  # joined after the plan was made
                    first, plan = planned[h.agent_id]
                    step = after.get(h.agent_id, -1)
                    if step == before.get(h.agent_id) and step in plan:
                        seen[h.agent_id].setdefault(step, h.current)
                    if step < first + args.steps:
                        done = False
                if done:
                    break

        bad = 0
        for a in agents:
            first, plan = planned[a.agent_id]
            got = seen[a.agent_id]
            wrong = {s: (cur, plan[s]) for s, cur in got.items() if cur != plan[s]}
            left = c.show_plan(a.agent_id).get(a.agent_id, [])
            print("%s: saw %d of %d planned steps running, %d with another set%s; %d entries left" % (
                a.name, len(got), len(plan), len(wrong),
                "" if not wrong else " (e.g. step %d: %s, planned %s)" % next(
                    (s, v[0], v[1]) for s, v in sorted(wrong.items())),
                len(left)))
            bad += len(wrong)
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
