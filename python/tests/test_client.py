"""graphtoggle.client against a real toggled on a temporary socket with simulator
agents (build/examples/demo_agent), every answer cross-checked against
`togglectl --json` on the same daemon."""

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import warnings

import pytest

from conftest import BUILD

TOGGLED = os.path.join(BUILD, "toggled")
TOGGLECTL = os.path.join(BUILD, "togglectl")
DEMO = os.path.join(BUILD, "examples", "demo_agent")
# toggled, togglectl, demo_agent and the example run without the sanitizer
# runtimes scripts/pytest.sh preloads into Python: these programs are not
# instrumented, and with libcurl linked (the cluster's etcd client) ASan's
# preload deadlocks p11-kit's destructor at exit (as in test_daemon.py).
PROG_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}

pytestmark = pytest.mark.skipif(
    not all(os.access(p, os.X_OK) for p in (TOGGLED, TOGGLECTL, DEMO)),
    reason="build/toggled, build/togglectl and build/examples/demo_agent are built by `make`")

client = pytest.importorskip("graphtoggle.client", reason="make python-client generates its messages")
from graphtoggle import errors  # noqa: E402
from graphtoggle.client import Client, pb  # noqa: E402


class Daemon:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="graphtoggle-client.")
        self.sock = os.path.join(self.dir, "toggled.sock")
        self.log = open(os.path.join(self.dir, "toggled.log"), "w")
        self.proc = subprocess.Popen([TOGGLED, "--socket", self.sock, "--state-dir",
                                      os.path.join(self.dir, "state")],
                                     stdout=self.log, stderr=self.log, env=PROG_ENV)
        self.agents = []
        for _ in range(400):
            if self.ctl("status", check=False).returncode == 0:
                return
            time.sleep(0.025)
        raise AssertionError("toggled did not come up: %s" % self.logtext())

    def logtext(self):
        self.log.flush()
        return open(self.log.name).read()

    def ctl(self, *args, check=True):
        r = subprocess.run([TOGGLECTL, "-s", self.sock, "--json"] + list(args),
                           capture_output=True, text=True, timeout=30, env=PROG_ENV)
        if check and r.returncode != 0:
            raise AssertionError("togglectl %s: %d %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    def ctl_json(self, *args):
        return json.loads(self.ctl(*args).stdout)

    def agent(self, name, group):
        """A simulator agent printing the set (gate) every step ran with."""
        out = open(os.path.join(self.dir, name + ".out"), "w")
        p = subprocess.Popen([DEMO, "--backend", "sim", "--socket", self.sock, "--period-ms", "10",
                              "--name", name, "--group", group, "--print", "all"],
                             stdout=out, stderr=subprocess.STDOUT, env=PROG_ENV)
        out.close()
        self.agents.append(p)
        return p

    def gates(self, name):
        """{step: (gate spec, "ok" or "MISMATCH")} from the agent's output."""
        got = {}
        for line in open(os.path.join(self.dir, name + ".out")):
            f = line.split()
            if len(f) >= 4 and f[0] == "step" and f[2].startswith("gate="):
                got[int(f[1])] = (f[2][5:], f[-1])
        return got

    def wait_step(self, name, step, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if step in self.gates(name):
                return self.gates(name)
            time.sleep(0.02)
        raise AssertionError("%s did not reach step %d" % (name, step))

    def wait_agents(self, names, timeout=15):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            listed = {a["name"]: a for a in self.ctl_json("agents")["agents"]}
            if all(n in listed and listed[n]["step"] >= 1 for n in names):
                return listed
            time.sleep(0.02)
        raise AssertionError("agents %s not registered and stepping" % names)

    def stop(self):
        for p in self.agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(20)
        self.log.close()
        assert rc == 0, "toggled exited %d: %s" % (rc, open(self.log.name).read())
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon():
    d = Daemon()
    try:
        d.agent("eng-a", "ga")
        d.agent("eng-b", "gb")
        d.wait_agents(["eng-a", "eng-b"])
        yield d
    finally:
        d.stop()


@pytest.fixture
def c(daemon):
    with Client(daemon.sock, timeout=15) as cl:
        yield cl


def by_name(agents):
    return {a.name: a for a in agents}


def test_hello_and_status(daemon, c):
    assert c.protocol_version == client.PROTOCOL_VERSION == 2
    assert c.may_write
    st = c.status()
    ref = daemon.ctl_json("status")
    for k in ("daemon_version", "protocol_version", "agents", "socket", "state_dir"):
        assert getattr(st, k) == ref[k], k
    assert c.daemon_version == ref["daemon_version"]
    assert st.requests <= ref["requests"]


def test_list_agents_matches_togglectl(daemon, c):
    before = {a["name"]: a for a in daemon.ctl_json("agents")["agents"]}
    mine = by_name(c.list_agents())
    after = {a["name"]: a for a in daemon.ctl_json("agents")["agents"]}
    assert set(mine) == set(before) == {"eng-a", "eng-b"}
    for name, a in mine.items():
        ref = before[name]
        for k in ("agent_id", "name", "pid", "uid", "driver_version", "control_version",
                  "enabled", "n_layers", "pending_plan"):
            assert getattr(a, k) == ref[k], (name, k)
        assert a.group == (ref["group"] or "")
        assert list(a.hook_types) == ref["hook_types"]
        assert ref["step"] <= a.step <= after[name]["step"]
        assert ref["graphs"] <= a.graphs <= after[name]["graphs"]
    # selectors: group, id, pid, dict and keyword forms
    a = mine["eng-a"]
    assert [x.name for x in c.list_agents({"group": "ga"})] == ["eng-a"]
    assert [x.name for x in c.list_agents(a.agent_id)] == ["eng-a"]
    assert [x.name for x in c.list_agents(client.selector(pid=a.pid))] == ["eng-a"]
    with pytest.raises(errors.NoAgentError):
        c.list_agents({"group": "nobody"})
    assert c.agent("eng-b").agent_id == mine["eng-b"].agent_id


def test_list_graphs_and_hooks_match_togglectl(daemon, c):
    before = daemon.ctl_json("graphs")
    mine = c.list_graphs()
    after = daemon.ctl_json("graphs")
    ref_b = {(g["agent_id"], g["nodes"], g["hooks_covered"]): g for g in before["graphs"]}
    ref_a = {(g["agent_id"], g["nodes"], g["hooks_covered"]): g for g in after["graphs"]}
    assert len(mine.graphs) == len(before["graphs"]) > 0
    for g in mine.graphs:
        key = (g.agent_id, g.nodes, g.hooks_covered)
        assert key in ref_b
        assert ref_b[key]["replays"] <= g.replays <= ref_a[key]["replays"]
        assert g.bound == bool(ref_b[key]["bound"])
    assert list(mine.truncated_agents) == before["truncated_agents"]
    hooks = {h.name: h for h in c.hooks()}
    ref = {h["name"]: h for h in daemon.ctl_json("hooks")["agents"]}
    assert set(hooks) == set(ref)
    for name, h in hooks.items():
        assert h.enabled == ref[name]["enabled"]
        assert list(h.hook_types) == ref[name]["hook_types"]


def test_set_enabled_wait_and_canonical_form(daemon, c):
    versions = c.set("resid_post:0-3", target={"group": "ga"}, wait=10)
    a = c.agent("eng-a")
    assert versions == {a.agent_id: a.control_version}
    assert a.applied_version >= a.control_version
    agents = {x["name"]: x for x in daemon.ctl_json("agents")["agents"]}
    assert agents["eng-a"]["enabled"] == "resid_post:0-3"
    assert agents["eng-b"]["enabled"] != "resid_post:0-3"
    c.enable("attn_out", target={"group": "ga"}, wait=10)
    c.disable("resid_post:0", target={"group": "ga"}, wait=10)
    # the canonical form: a full type comes back as type:*
    assert c.agent("eng-a").enabled == "resid_post:1-3,attn_out:*"
    assert daemon.ctl_json("agents")["agents"][0]["enabled"] in (
        "resid_post:1-3,attn_out:*", agents["eng-b"]["enabled"])
    with pytest.raises(ValueError):
        c.set_enabled("all", op="toggle")


def test_typed_errors(daemon, c):
    b = c.agent("eng-b")
    with pytest.raises(errors.SpecError) as e:
        c.set("no_such_type:1", target={"group": "gb"})
    assert e.value.agents == ["eng-b"] and e.value.agent_ids == [b.agent_id]
    assert "eng-b" in e.value.message and ("id %d" % b.agent_id) in e.value.message
    with pytest.raises(errors.NoAgentError):
        c.set("all", target={"group": "nobody"})
    with pytest.raises(errors.LatePlanError) as e:
        c.submit_plan({0: "all"}, target=b.agent_id)
    assert e.value.agent_ids == [b.agent_id]
    # the same error from togglectl
    r = daemon.ctl("-t", "group:gb", "set", "no_such_type:1", check=False)
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["name"] == "ESPEC"
    # nothing was applied by the refused requests
    assert c.agent("eng-b").control_version == b.control_version
    # the connection still serves
    assert c.status().agents == 2


def test_plan_limit_error_names_agent_id(daemon, c):
    """The pending-entry limit (main's, 256 per agent) is a BusyError naming the agent
    by name and id, like every error about agents in contract v1."""
    a = c.agent("eng-a")
    first = a.step + 1000000
    c.plan(first, 256, "attn_out:1", target=a.agent_id)  # retries a full ring
    with pytest.raises(errors.BusyError) as e:
        c.submit_plan({first + 256: "attn_out:1"}, target=a.agent_id)
    assert "limit of 256 pending entries" in e.value.message, e.value.message
    assert e.value.agents == ["eng-a"] and e.value.agent_ids == [a.agent_id]
    c.clear_plan(a.agent_id)


def test_unknown_request_is_unimplemented(daemon, c):
    # Envelope{id 77, field 99 (a body this daemon lacks; 60 is RecordRequest now)}:
    # what a newer client sends.
    body = b"\x08\x4d\x9a\x06\x00"
    c._sock.sendall(struct.pack("!I", len(body)) + body)
    rep = c._reader.next(10)
    assert rep.id == 77 and rep.WhichOneof("body") == "error"
    err = client.errors.from_reply(rep.error)
    assert isinstance(err, client.UnimplementedError) and err.code == -25
    assert client.UnimplementedError is errors.UnimplementedError
    assert rep.error.code == pb.ERROR_CODE_UNIMPLEMENTED == -25
    assert c.status().agents == 2


def test_newer_client_degrades(daemon):
    s = socket.socket(socket.AF_UNIX)
    s.connect(daemon.sock)
    from graphtoggle.client._wire import Reader, encode
    rd = Reader(s)
    env = pb.Envelope(id=1)
    env.hello.protocol_version = 7
    env.hello.min_protocol_version = 2
    env.hello.client = "future"
    s.sendall(encode(env))
    rep = rd.next(10)
    assert rep.WhichOneof("body") == "hello_reply" and rep.hello_reply.protocol_version == 2
    s.close()


def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _future_fields(first):
    """Fields a newer schema would have, this one lacks: a varint and a string."""
    return (_varint(first << 3) + _varint(300) +
            _varint((first + 1) << 3 | 2) + _varint(6) + b"future")


def test_newer_client_unknown_fields_accepted(daemon, c):
    """A newer Python client's requests carry fields this daemon does not know (in the
    request and in the envelope), in proto3's canonical form (zeros left out, a
    oneof member sent as set).  toggled refuses a frame that does not re-pack to its
    own length (issue 11's NUL-in-string guard); protobuf-c keeps unknown fields and
    re-packs them, so these are served, not refused."""
    a = c.agent("eng-a")
    req = pb.SetEnabledRequest(target=client.selector(a.agent_id), op=pb.SET_OP_REPLACE,
                               spec="attn_out:2")
    extra = _future_fields(900)
    req.MergeFromString(extra)  # protobuf keeps the unknown fields and sends them on
    assert req.SerializeToString().endswith(extra)
    rep = c.call("set_enabled", req, "set_enabled_reply")
    assert [v.agent_id for v in rep.versions] == [a.agent_id]
    listed = {x["name"]: x for x in daemon.ctl_json("agents")["agents"]}
    assert listed["eng-a"]["enabled"] == "attn_out:2"
    assert listed["eng-a"]["control_version"] == rep.versions[0].version

    # The envelope too, and a selector whose oneof member is a zero (agent_id 0: no
    # such agent, so NOAGENT, not "not canonically encoded").
    from graphtoggle.client._wire import Reader, encode
    s = socket.socket(socket.AF_UNIX)
    s.connect(daemon.sock)
    rd = Reader(s)
    for i, (field, msg, want) in enumerate((
            ("hello", pb.HelloRequest(protocol_version=2, client="future"), "hello_reply"),
            ("status", pb.StatusRequest(), "status_reply"),
            ("list_agents", pb.ListAgentsRequest(target=pb.Selector(agent_id=0)), "error"))):
        env = pb.Envelope(id=100 + i)
        getattr(env, field).CopyFrom(msg)
        env.MergeFromString(_future_fields(1000))
        s.sendall(encode(env))
        r = rd.next(10)
        assert r.id == 100 + i and r.WhichOneof("body") == want, (field, r)
        if want == "error":
            assert r.error.code == pb.ERROR_CODE_NOAGENT, r.error
    s.close()
    assert c.status().agents == 2


def test_plan_absolute_and_show(daemon, c):
    a = c.agent("eng-a")
    first = a.step + 300
    c.plan(first, 100, lambda s: "resid_post:%d" % (s % 4), target=a.agent_id)
    shown = c.show_plan(a.agent_id)[a.agent_id]
    ref = daemon.ctl_json("-t", str(a.agent_id), "plan", "show")
    ref_entries = [(e["step"], e["hooks"]) for p in ref["plans"] for e in p["entries"]]
    assert sorted(shown) == ref_entries
    assert [s for s, _ in sorted(shown)] == list(range(first, first + 100))
    assert dict(shown)[first + 99] == "resid_post:%d" % ((first + 99) % 4)
    # each planned step ran with its entry, producers as the gate said
    gates = daemon.wait_step("eng-a", first + 20)
    for s in range(first, first + 21):
        assert gates[s] == ("resid_post:%d" % (s % 4), "ok"), s
    assert gates[first - 1][0] == a.enabled  # the standing set around the plan
    c.clear_plan(a.agent_id)
    assert c.show_plan(a.agent_id) == {a.agent_id: []}
    assert daemon.ctl_json("plan", "show")["plans"][0]["entries"] == [] or all(
        p["entries"] == [] for p in daemon.ctl_json("plan", "show")["plans"]
        if p["agent_id"] == a.agent_id)


def test_plan_last_entry_wins(daemon, c):
    a = c.agent("eng-a")
    step = a.step + 150
    c.submit_plan({step: "attn_out:1", step + 1: "attn_out:3"}, target=a.agent_id)
    c.submit_plan({step: "attn_out:2"}, target=a.agent_id)
    gates = daemon.wait_step("eng-a", step + 1)
    assert gates[step] == ("attn_out:2", "ok")
    assert gates[step + 1] == ("attn_out:3", "ok")


def test_plan_relative(daemon, c):
    a = c.agent("eng-a")
    try:
        c.plan(200, 10, "mlp_out:*", target=a.agent_id, relative=True)
    except (errors.NotSupportedError, errors.InvalidArgumentError) as e:
        # a schema without PlanEntry.after, or a daemon that does not resolve it
        # (it refuses the entry's step -1 as negative); any other refusal fails
        if isinstance(e, errors.InvalidArgumentError) and "step -1 is negative" not in str(e):
            raise
        why = ("relative plan steps are not resolved by this daemon or schema (%s): the daemon "
               "change of issue 12 is not merged on this branch" % e)
        warnings.warn("SKIP test_plan_relative: " + why)  # shown in pytest -q's summary
        pytest.skip(why)
    shown = c.show_plan(a.agent_id)[a.agent_id]
    assert len(shown) == 10
    assert all(a.step + 200 <= s <= c.agent("eng-a").step + 209 for s, _ in shown)


def test_relative_steps_encoding(c):
    """A "+N" step travels as step -1, after N: what a daemon without relative
    steps refuses as negative rather than taking N for an absolute step."""
    sent = []
    real = c._call

    def spy(field, msg, want, timeout=None):
        sent.append(msg)
        return real(field, msg, want, timeout)
    c._call = spy
    try:
        for plan in ({"+10": "all"}, {500000: "none"}):
            try:
                c.submit_plan(plan)
            except (errors.InvalidArgumentError, errors.LatePlanError):
                pass  # the daemon's answer is test_plan_relative's business
    finally:
        c._call = real
    e = {x.spec: x for m in sent for x in m.entries}
    assert (e["all"].step, e["all"].after) == (-1, 10)
    assert (e["none"].step, e["none"].after) == (500000, 0)
    with pytest.raises(ValueError):
        c.submit_plan({"+x": "all"})


def test_watch_iterates_events(daemon, c):
    with c.watch({"group": "gc"}) as w:
        p = daemon.agent("eng-c", "gc")
        ev = w.next(15)
        assert ev is not None and ev.kind == "joined" and ev.agent_name == "eng-c"
        agent_id = ev.agent_id
        versions = c.set("mlp_out:2", target={"group": "gc"}, wait=10)
        for ev in w:
            if ev.kind == "set_applied" and ev.version == versions[agent_id]:
                break
        assert ev.agent_id == agent_id
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        while True:
            ev = w.next(15)
            assert ev is not None, "no 'left' event"
            if ev.kind == "left":
                break
        assert ev.agent_name == "eng-c"
        assert w.next(0.2) is None  # eng-a and eng-b are not in group gc


def test_orchestrator_example(daemon):
    """examples/orchestrator.py plans 30 steps of a group and sees them applied."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "examples", "orchestrator.py")
    r = subprocess.run([sys.executable, script, "--socket", daemon.sock, "--group", "ga",
                        "--steps", "30", "--lead", "30", "--timeout", "30"],
                       capture_output=True, text=True, timeout=60, env=PROG_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "planned eng-a steps" in r.stdout
    assert "with another set" in r.stdout and ", 0 with another set" in r.stdout
    assert "0 entries left" in r.stdout


# ---- issue 25 item 5: the client checks, reports and refuses as togglectl does ----

def test_trust_listed_is_peer_trusts_rule():
    """tgp_trust_listed's cases (tests/check_peer.c), in Python."""
    from graphtoggle.client.client import trust_listed
    assert trust_listed("65534", 65534) == 1
    assert trust_listed("1,2,65534", 65534) == 1
    assert trust_listed("0", 0) == 1
    assert trust_listed("4294967294", 4294967294) == 1
    assert trust_listed("65534", 6553) == 0
    assert trust_listed("6553", 65534) == 0
    assert trust_listed("", 65534) == 0 and trust_listed(None, 65534) == 0
    assert trust_listed(",".join(str(i) for i in range(1, 17)), 16) == 1
    for bad in ("x", ",", "1,", ",1", "1,,2", " 1", "1 ", "+1", "-1", "0x10", "4294967295",
                "00000000001", "1;2", ",".join(str(i) for i in range(1, 18)), "\u0661", "1" * 256):
        assert trust_listed(bad, 1) == -1, bad


SQUAT_UID = 65534
SQUATTER = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)
print("ready", flush=True)
while True:
    conn, _ = s.accept()
    conn.settimeout(2)
    try:
        data = conn.recv(65536)
    except OSError:
        data = b""
    print("got %d" % len(data), flush=True)
    conn.close()
"""


@pytest.fixture
def squatter(tmp_path):
    """A listener run by uid 65534 at a socket path: another local user's."""
    if os.geteuid() != 0:
        pytest.skip("needs root to listen as uid %d" % SQUAT_UID)
    d = tempfile.mkdtemp(prefix="tgsquat.")
    os.chmod(d, 0o777)
    path = os.path.join(d, "toggled.sock")
    p = None
    # This interpreter may sit where uid 65534 cannot reach it (a venv or pyenv under
    # a 0700 home); the system's python3 then, else a skip that says so.
    for exe in (sys.executable, "/usr/bin/python3"):
        try:
            p = subprocess.Popen([exe, "-c", SQUATTER, path], user=SQUAT_UID,
                                 stdout=subprocess.PIPE, text=True, env=PROG_ENV)
            break
        except PermissionError:
            continue
        except FileNotFoundError:
            continue
    if p is None:
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip("uid %d may run neither %s nor /usr/bin/python3"
                    % (SQUAT_UID, sys.executable))
    try:
        assert p.stdout.readline().strip() == "ready"
        yield path, p
    finally:
        p.kill()
        p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


def test_peer_check_refuses_another_users_listener(squatter, monkeypatch):
    """Before a byte is sent, the listener's SO_PEERCRED: not root, not us and not
    in TOGGLE_DAEMON_UID is refused with togglectl's words (tgclient.c)."""
    path, p = squatter
    monkeypatch.delenv("TOGGLE_DAEMON_UID", raising=False)
    with pytest.raises(errors.PermissionDeniedError) as e:
        Client(path, timeout=5)
    assert ("%s is served by uid %d" % (path, SQUAT_UID)) in str(e.value), str(e.value)
    assert ("set TOGGLE_DAEMON_UID=%d" % SQUAT_UID) in str(e.value)
    assert p.stdout.readline().strip() == "got 0"  # nothing was sent to it
    # togglectl refuses it the same way
    r = subprocess.run([TOGGLECTL, "-s", path, "status"], capture_output=True, text=True,
                       timeout=20, env={k: v for k, v in PROG_ENV.items()
                                        if k != "TOGGLE_DAEMON_UID"})
    assert r.returncode != 0 and ("set TOGGLE_DAEMON_UID=%d" % SQUAT_UID) in r.stderr, r.stderr
    assert p.stdout.readline().strip() == "got 0"
    # a malformed list trusts nobody, and says so
    monkeypatch.setenv("TOGGLE_DAEMON_UID", "%d " % SQUAT_UID)
    with pytest.raises(errors.PermissionDeniedError, match="TOGGLE_DAEMON_UID is malformed"):
        Client(path, timeout=5)
    assert p.stdout.readline().strip() == "got 0"
    # listed: the check passes and the hello goes out (the squatter then hangs up)
    monkeypatch.setenv("TOGGLE_DAEMON_UID", "1,%d" % SQUAT_UID)
    with pytest.raises(errors.GraphToggleError) as e:
        Client(path, timeout=5)
    assert not isinstance(e.value, errors.PermissionDeniedError), str(e.value)
    got = int(p.stdout.readline().split()[1])
    assert got > 0, "the trusted listener got no hello"


def _other_catalog_agent(daemon, name):
    """A Python agent (simulator) whose catalog has none of demo_agent's hook types."""
    from graphtoggle import Agent
    a = Agent(name, hooks={"only_here": 2}, backend="sim", socket=daemon.sock)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        if name in {x["name"] for x in daemon.ctl_json("agents")["agents"]}:
            return a
        time.sleep(0.02)
    a.close()
    raise AssertionError("%s did not register" % name)


def test_skipped_agents_are_returned(daemon, c):
    """A default target's agents whose catalog refuses the spec are left out and
    named: set() returns them in .skipped, submit_plan() and plan() return them
    (togglectl prints 'left out agent ...')."""
    a = _other_catalog_agent(daemon, "py-other")
    try:
        other = c.agent("py-other")
        res = c.set("resid_post:0-1")
        assert set(res) == {c.agent("eng-a").agent_id, c.agent("eng-b").agent_id}
        assert len(res.skipped) == 1 and "py-other" in res.skipped[0], res.skipped
        assert ("id %d" % other.agent_id) in res.skipped[0]
        assert c.agent("py-other").control_version == other.control_version
        r = daemon.ctl("set", "resid_post:0-1", check=False)
        assert "left out agent " + res.skipped[0] in r.stderr, r.stderr
        far = c.agent("eng-a").step + 1000000
        skipped = c.submit_plan({far: "resid_post:2"})
        assert len(skipped) == 1 and "py-other" in skipped[0], skipped
        assert c.plan(far + 1, 70, "resid_post:3") == skipped  # 2 requests, named once
        c.clear_plan()
    finally:
        a.close()


def test_wait_timeout_says_the_set_was_accepted(daemon, c):
    """A set whose wait ran out was accepted, saved and is in force: the error
    says so (.accepted True), as togglectl does (exit 4)."""
    a = _other_catalog_agent(daemon, "py-idle")  # registered, never replays
    try:
        target = c.agent("py-idle").agent_id
        with pytest.raises(errors.TimedOutError) as e:
            c.set("only_here:1", target=target, wait=0.3)
        assert e.value.accepted is True
        assert "set accepted and saved, but not yet applied everywhere" in str(e.value)
        assert e.value.agents == ["py-idle"] and e.value.agent_ids == [target]
        assert c.agent("py-idle").enabled == "only_here:1"  # in force
        r = daemon.ctl("-t", "agent:%d" % target, "set", "only_here:0", "--wait=300ms",
                       check=False)
        assert r.returncode == 4 and "set accepted and saved" in r.stdout + r.stderr, r
    finally:
        a.close()


def test_no_reply_says_acceptance_is_unknown(tmp_path):
    """A daemon that never answers a set: the timeout says whether it was accepted
    is unknown (.accepted None); a read-only request's timeout does not."""
    path = str(tmp_path / "mute.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    hello = pb.Envelope(id=1, hello_reply=pb.HelloReply(protocol_version=2)).SerializeToString()

    def serve():
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(struct.pack("!I", len(hello)) + hello)
        time.sleep(3)
        conn.close()
    import threading
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    cl = Client(path, timeout=0.3)
    with pytest.raises(errors.TimedOutError) as e:
        cl.set("all")
    assert e.value.accepted is None
    assert "whether toggled accepted it is unknown" in str(e.value), str(e.value)
    with pytest.raises(errors.TimedOutError) as e:
        cl.status()
    assert "accepted" not in str(e.value) and not hasattr(e.value, "accepted")
    cl.close()
    srv.close()


def test_mixed_plan_refused_as_togglectl_does(daemon, c):
    """A plan mixing absolute and "+N" steps, a step twice, or "+0": refused
    before anything is sent, as togglectl refuses the same plan."""
    a = c.agent("eng-a")
    far = a.step + 1000000
    cases = [([(far, "all"), ("+5", "none")], "not both"),
             ([("+5", "all"), (far, "none")], "not both"),
             ([(far, "all"), (far, "none")], "already planned by entry 0"),
             ([("+0", "all")], 'must be "+N" with N from 1'),
             ([("+1x", "all")], 'must be "+N" with N from 1')]
    for entries, why in cases:
        with pytest.raises(ValueError, match=re.escape(why)):
            c.submit_plan(entries, target=a.agent_id)
        plan = json.dumps([{"step": st, "hooks": sp} for st, sp in entries])
        r = subprocess.run([TOGGLECTL, "-s", daemon.sock, "-t", "agent:%d" % a.agent_id, "plan",
                            "submit", "-"], input=plan, capture_output=True, text=True,
                           timeout=20, env=PROG_ENV)
        assert r.returncode == 2 and why.split()[0] in r.stderr, (entries, r.stderr)
    assert c.show_plan(a.agent_id).get(a.agent_id, []) == []


# ---- issue 27: aligned sets ----

def test_aligned_set_one_step_for_the_group(daemon, c):
    """aligned=True: every agent of the group runs the new set from the one
    step the result names, and not before; togglectl --aligned the same."""
    daemon.agent("tp-0", "tp")
    daemon.agent("tp-1", "tp")
    daemon.wait_agents(["tp-0", "tp-1"])
    time.sleep(0.3)  # a step-rate sample for toggled's margin
    ids = {a.agent_id for a in c.list_agents({"group": "tp"})}
    r = c.set("resid_post:0-3", target={"group": "tp"}, aligned=True)
    at = r.aligned_step
    assert set(r) == ids and at > 0
    for name in ("tp-0", "tp-1"):
        g = daemon.wait_step(name, at + 2)
        assert g[at - 1][0] != "resid_post:0-3", (name, at, g[at - 1])
        assert [g[s][0] for s in (at, at + 1, at + 2)] == ["resid_post:0-3"] * 3, (name, at)
        assert all(g[s][1] == "ok" for s in (at - 1, at, at + 1, at + 2))
    out = daemon.ctl_json("-t", "group:tp", "set", "--aligned=+30", "attn_out:*")
    at2 = out["aligned_step"]
    assert at2 > at and sorted(a["agent_id"] for a in out["agents"]) == sorted(ids)
    for name in ("tp-0", "tp-1"):
        g = daemon.wait_step(name, at2)
        assert g[at2 - 1][0] == "resid_post:0-3" and g[at2][0] == "attn_out:*", (name, at2)


def test_aligned_bad_input_refused_before_sending(daemon, c):
    with pytest.raises(ValueError):
        c.set("all", target={"group": "ga"}, margin=5)
    for bad in (0, -1, 1000001, True, 2.5):
        with pytest.raises(ValueError):
            c.set("all", target={"group": "ga"}, aligned=True, margin=bad)
    with pytest.raises(errors.NoAgentError):
        c.set("all", target={"group": "nobody"}, aligned=True)
    # the etcd path does not align: togglectl says so (usage, exit 2)
    r = daemon.ctl("--etcd", "http://127.0.0.1:1", "--cluster", "c", "set", "--aligned", "all",
                   check=False)
    assert r.returncode == 2 and "--aligned is not supported with --etcd" in r.stdout
    r = daemon.ctl("-t", "group:ga", "set", "--aligned=7", "all", check=False)
    assert r.returncode == 2 and "expected +N" in r.stdout
