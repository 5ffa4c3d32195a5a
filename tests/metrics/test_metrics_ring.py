"""toggled --metrics and data rings (issue 24: drops "counted and shown in
`togglectl agents` and `/metrics`"): tests/record/ring_agent shares a ring,
`togglectl record` forwards some of it; the graphtoggle_agent_ring_* series
parse with prometheus_client's parser (HELP and TYPE per family, counters
named _total), equal what `togglectl --json agents` reports in "ring", and
exist only for agents that share a ring (demo_agent shares none).  Drops
under a hostile agent are tests/check_record_drops.c's."""

import os
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from test_metrics import B, Env

RING_AGENT = os.path.join(B, "tests", "record_ring_agent")
FAMILIES = {  # family name (the parser strips _total) -> (type, the ring object's key)
    "graphtoggle_agent_ring_size_bytes": ("gauge", "bytes"),
    "graphtoggle_agent_ring_records": ("counter", "records"),
    "graphtoggle_agent_ring_dropped": ("counter", "dropped"),
    "graphtoggle_agent_ring_errors": ("counter", "errors"),
    "graphtoggle_agent_ring_counter_faults": ("counter", "counter_faults"),
    "graphtoggle_agent_ring_forwarded_records": ("counter", "forwarded_records"),
    "graphtoggle_agent_ring_forwarded_bytes": ("counter", "forwarded_bytes"),
}


def families(e):
    e.scrape()  # waits out the render cache, like every scrape of the suite
    _, _, body = e.get()
    return {f.name: f for f in text_string_to_metric_families(body)}


def test_ring_series_equal_the_listing():
    e = Env("DIR/metrics.sock")
    try:
        e.agents.append(subprocess.Popen(
            [RING_AGENT, "--socket", e.sock, "--name", "rng", "--period-ms", "5"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        e.agent("plain", "g")
        e.wait_agents(2)
        r = e.ctl("--agents", "name:rng", "record", "resid_post:1", "--steps", "3", "-o",
                  os.path.join(e.dir, "rec"))
        assert r.returncode == 0, r.stderr
        # The agent keeps stepping with nothing recorded: the forwarded counts stay put.
        agents = {a["name"]: a for a in e.ctl_json("agents")["agents"]}
        fam = families(e)
        ring = agents["rng"]["ring"]
        assert agents["plain"]["ring"] is None
        assert ring["forwarded_records"] == 3 and ring["forwarded_bytes"] == 3 * 2 * 8 * 4, ring
        assert ring["counter_faults"] == 0 and ring["dropped"] == 0, ring
        for name, (typ, key) in FAMILIES.items():
            assert name in fam, "no family " + name
            f = fam[name]
            assert f.type == typ and f.documentation, (name, f.type)
            by = {s.labels["agent"]: s for s in f.samples}
            assert set(by) == {"rng"}, (name, "series for", set(by))
            s = by["rng"]
            assert s.labels["id"] == str(agents["rng"]["agent_id"])
            if typ == "counter":
                assert s.name == name + "_total"
            # ring_agent publishes only while a recording asks: nothing moves after it
            assert s.value == ring[key], (name, s.value, ring[key])
    finally:
        e.stop()
