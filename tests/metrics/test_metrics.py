"""toggled --metrics: /metrics scraped over TCP and a Unix socket, parsed by
prometheus_client's parser, every value checked against the agents' own
counters as togglectl --json reports them."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

B = os.environ.get("B", "build")
TOGGLED = os.environ.get("TOGGLED", os.path.join(B, "toggled-san"))
TOGGLECTL = os.path.join(B, "togglectl")
DEMO = os.path.join(B, "examples", "demo_agent")
# toggled answers scrapes within this long of a render from that render's text
# (metrics.c, METRICS_CACHE_MS): a scrape that must see what came before it waits
# that long after the previous one.
CACHE_S = 0.25


class Env:
    def __init__(self, metrics):
        self.dir = tempfile.mkdtemp(prefix="graphtoggle-metrics.")
        self.sock = os.path.join(self.dir, "toggled.sock")
        self.logpath = os.path.join(self.dir, "toggled.log")
        self.metrics = metrics.replace("DIR", self.dir)
        self.agents = []
        self.last_scrape = 0.0
        self.start()

    def start(self):
        log = open(self.logpath, "w")
        self.proc = subprocess.Popen([TOGGLED, "--socket", self.sock, "--state-dir",
                                      os.path.join(self.dir, "state"), "--metrics", self.metrics],
                                     stdout=log, stderr=log)
        log.close()
        self.address = None
        end = time.monotonic() + 15
        while time.monotonic() < end and self.address is None:
            m = re.search(r"metrics on (\S+) ", open(self.logpath).read())
            if m and self.ctl("status", check=False).returncode == 0:
                self.address = m.group(1)
            time.sleep(0.02)
        assert self.address, "toggled did not start: " + open(self.logpath).read()

    def ctl(self, *args, check=True):
        r = subprocess.run([TOGGLECTL, "-s", self.sock, "--json"] + list(args),
                           capture_output=True, text=True, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError("togglectl %s: %s" % (" ".join(args), r.stderr))
        return r

    def ctl_json(self, *args):
        return json.loads(self.ctl(*args).stdout)

    def agent(self, name, group):
        self.agents.append(subprocess.Popen(
            [DEMO, "--backend", "sim", "--socket", self.sock, "--period-ms", "5", "--name", name,
             "--group", group], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def wait_agents(self, n):
        end = time.monotonic() + 15
        while time.monotonic() < end:
            a = self.ctl_json("agents")["agents"]
            if len(a) == n and all(x["step"] >= 1 for x in a):
                return
            time.sleep(0.02)
        raise AssertionError("%d agents did not register" % n)

    def get(self, path="/metrics", method="GET"):
        """(status, content type, body) over TCP or the Unix socket."""
        if self.address.startswith("/"):
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.address)
            s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                       % (method, path)).encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            s.close()
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            status = int(lines[0].split()[1])
            ctype = next((l.split(":", 1)[1].strip() for l in lines[1:]
                          if l.lower().startswith("content-type:")), "")
            return status, ctype, body.decode()
        req = urllib.request.Request("http://%s%s" % (self.address, path), method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read().decode()

    def scrape(self):
        wait = self.last_scrape + CACHE_S + 0.02 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        status, ctype, body = self.get()
        self.last_scrape = time.monotonic()
        assert status == 200, body
        assert ctype.startswith("text/plain; version=0.0.4")
        out = {}
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def restart(self, down_s):
        """Stop toggled, leave its socket dead for down_s, start it again."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        assert rc == 0, "toggled exited %d:\n%s" % (rc, open(self.logpath).read())
        time.sleep(down_s)
        self.start()

    def stop(self):
        for p in self.agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        log = open(self.logpath).read()
        shutil.rmtree(self.dir, ignore_errors=True)
        assert rc == 0, "toggled exited %d (sanitizer reports?):\n%s" % (rc, log)


@pytest.fixture(params=["127.0.0.1:0", "DIR/metrics.sock"], ids=["tcp", "unix"])
def env(request):
    e = Env(request.param)
    try:
        e.agent("m-a", "ga")
        e.agent("m-b", "gb")
        e.wait_agents(2)
        yield e
    finally:
        e.stop()


def value(m, name, **labels):
    key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
    assert key in m, "no sample %s %s" % (name, labels)
    return m[key]


def value0(m, name, **labels):
    """A counter before its first increment: series of non-OK codes appear then."""
    return m.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))), 0)


def agent_labels(a):
    return {"agent": a["name"], "group": a["group"] or "", "pid": a["pid"], "id": a["agent_id"]}


def graph_replays(e):
    out = {}
    for g in e.ctl_json("graphs")["graphs"]:
        out[g["agent_id"]] = out.get(g["agent_id"], 0) + g["replays"]
    return out


def test_agents_against_their_counters(env):
    env.ctl("-t", "group:ga", "set", "resid_post:0-3", "--wait")
    env.ctl("-t", "group:gb", "set", "attn_out:*", "--wait")
    env.ctl("-t", "group:gb", "enable", "mlp_out:1", "--wait")
    before = {a["agent_id"]: a for a in env.ctl_json("agents")["agents"]}
    rep_before = graph_replays(env)
    m = env.scrape()
    after = {a["agent_id"]: a for a in env.ctl_json("agents")["agents"]}
    rep_after = graph_replays(env)
    assert value(m, "graphtoggle_agents") == 2
    assert value(m, "graphtoggle_peers", kind="agent") == 2
    assert value(m, "graphtoggle_up") == 1
    for aid, a in before.items():
        L = agent_labels(a)
        assert value(m, "graphtoggle_agent_connected", **L) == 1
        assert value(m, "graphtoggle_agent_status_valid", **L) == 1
        assert a["step"] <= value(m, "graphtoggle_agent_step", **L) <= after[aid]["step"]
        assert value(m, "graphtoggle_agent_set_changes_total", **L) == a["control_version"]
        assert a["control_version"] == (1 if a["group"] == "ga" else 2)
        # --wait returned: every version written was run by a replay
        assert value(m, "graphtoggle_agent_applied_version_lag", **L) == 0
        assert rep_before[aid] <= value(m, "graphtoggle_agent_replays_total", **L) <= rep_after[aid]
        an = sum(value(m, "graphtoggle_agent_anomalies_total", kind=k, **L) for k in (
            "record_outside_window", "record_not_capturing", "record_not_kernel", "launch_unbound",
            "launch_stale", "driver_errors", "late_plans", "control_errors"))
        assert a["anomalies"] <= an <= after[aid]["anomalies"]
        assert value(m, "graphtoggle_agent_graphs", **L) == a["graphs"]
        assert value(m, "graphtoggle_agent_launches_refused_total", **L) == 0
        assert value(m, "graphtoggle_agent_late_plans_total", **L) == 0


CONN_STATES = ("connecting", "connected", "reconnecting", "unknown")


def conn_state(m, L):
    """The one state whose series is 1 (each state has a series, exactly one is 1)."""
    vals = {s: value(m, "graphtoggle_agent_conn_state", state=s, **L) for s in CONN_STATES}
    assert sorted(vals.values()) == [0, 0, 0, 1], vals
    return next(s for s, v in vals.items() if v == 1)


def test_agent_conn_state(env):
    """The agents' own connection words (status lane: state, sessions, failures)."""
    agents = env.ctl_json("agents")["agents"]
    m = env.scrape()
    for a in agents:
        L = agent_labels(a)
        assert conn_state(m, L) == "connected"
        assert value(m, "graphtoggle_agent_conn_sessions_total", **L) == 1
        assert value(m, "graphtoggle_agent_conn_failures_total", **L) == 0
    # toggled goes away for a while: each agent fails to reconnect, then registers again.
    env.restart(0.5)
    env.wait_agents(2)
    end = time.monotonic() + 15
    while True:
        agents = env.ctl_json("agents")["agents"]
        m = env.scrape()
        Ls = [agent_labels(a) for a in agents]
        if all(value(m, "graphtoggle_agent_conn_sessions_total", **L) == 2 for L in Ls):
            break
        assert time.monotonic() < end, "the agents' second session is not in the metrics"
        time.sleep(0.02)
    for L in Ls:
        assert conn_state(m, L) == "connected"
        assert value(m, "graphtoggle_agent_conn_failures_total", **L) >= 1


def test_late_plan_counted(env):
    a = next(x for x in env.ctl_json("agents")["agents"] if x["name"] == "m-a")
    L = agent_labels(a)
    m0 = env.scrape()
    # a plan for a step that has begun is refused by the daemon (nothing reaches the agent)
    r = subprocess.run([TOGGLECTL, "-s", env.sock, "--json", "-t", str(a["agent_id"]), "plan",
                        "submit", "-"], input='[{"step": 0, "hooks": "all"}]', capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["name"] == "ELATE"
    m1 = env.scrape()
    d = lambda name, **l: value(m1, name, **l) - value0(m0, name, **l)  # noqa: E731
    assert d("graphtoggle_rpc_requests_total", method="submit_plan", code="LATE") == 1
    assert d("graphtoggle_agent_late_plans_total", **L) == 0


def test_rpc_counts_and_latency(env):
    m0 = env.scrape()
    k = 5
    for _ in range(k):
        env.ctl("status")
    r = env.ctl("set", "no_such_hook:1", check=False)
    assert r.returncode == 1
    m1 = env.scrape()
    d = lambda name, **l: value(m1, name, **l) - value0(m0, name, **l)  # noqa: E731
    assert d("graphtoggle_rpc_requests_total", method="status", code="OK") == k
    assert d("graphtoggle_rpc_requests_total", method="hello", code="OK") == k + 1
    assert d("graphtoggle_rpc_requests_total", method="set_enabled", code="SPEC") == 1
    assert d("graphtoggle_rpc_duration_seconds_count", method="status") == k
    assert value(m1, "graphtoggle_rpc_duration_seconds_bucket", method="status", le="+Inf") == \
        value(m1, "graphtoggle_rpc_duration_seconds_count", method="status")
    assert value(m1, "graphtoggle_rpc_duration_seconds_sum", method="status") > 0
    # the daemon's own totals agree
    st = env.ctl_json("status")
    total = sum(v for (n, _), v in m1.items() if n == "graphtoggle_rpc_requests_total")
    assert total <= st["requests"]
    errs = sum(v for (n, l), v in m1.items()
               if n == "graphtoggle_rpc_requests_total" and dict(l)["code"] != "OK")
    assert errs <= st["errors"]


def test_store_saves(env):
    m0 = env.scrape()
    env.ctl("set", "attn_out:1")
    m1 = env.scrape()
    saves = value(m1, "graphtoggle_store_saves_total") - value(m0, "graphtoggle_store_saves_total")
    assert saves >= 1
    assert value(m1, "graphtoggle_store_save_failures_total") == 0
    assert value(m1, "graphtoggle_store_save_duration_seconds_count") == \
        value(m1, "graphtoggle_store_saves_total") + value(m1, "graphtoggle_store_save_failures_total")


def test_non_canonical_frame_counted(env):
    """A frame that does not re-encode to its own length (main's guard against a NUL
    in a string) is refused with INVAL, counted, and the connection kept."""
    m0 = env.scrape()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(env.sock)

    def send_recv(body):
        s.sendall(len(body).to_bytes(4, "big") + body)
        n = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "big")
        return s.recv(n, socket.MSG_WAITALL)

    # Envelope{id 1, hello{protocol_version 2, min_protocol_version 0 sent explicitly}}
    rep = send_recv(bytes([0x08, 0x01, 0x52, 0x04, 0x08, 0x02, 0x18, 0x00]))
    assert rep[:3] == bytes([0x08, 0x01, 0x62]), rep  # id 1, error
    assert b"not canonically encoded" in rep
    # the same hello, canonical: answered on the same connection
    rep = send_recv(bytes([0x08, 0x02, 0x52, 0x02, 0x08, 0x02]))
    assert rep[:3] == bytes([0x08, 0x02, 0x5A]), rep  # id 2, hello_reply
    s.close()
    m1 = env.scrape()
    assert value(m1, "graphtoggle_frames_refused_total") - \
        value(m0, "graphtoggle_frames_refused_total") == 1


def test_only_get_metrics(env):
    assert env.get("/")[0] == 404
    assert env.get("/metrics", method="POST")[0] == 405
