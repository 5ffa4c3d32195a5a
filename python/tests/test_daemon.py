"""An Agent(socket=...) against a real toggled on a temporary socket, driven by the real
togglectl: registration, standing sets and plans reaching agent.step(), status."""

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from graphtoggle import Agent

from conftest import BUILD
from simgraph import Engine

TOGGLED = os.path.join(BUILD, "toggled")
TOGGLECTL = os.path.join(BUILD, "togglectl")
HOOKS = {"resid_post": 4, "mlp_out": 4}

pytestmark = pytest.mark.skipif(
    not (os.access(TOGGLED, os.X_OK) and os.access(TOGGLECTL, os.X_OK)),
    reason="build/toggled and build/togglectl are built by `make` (needs the -dev packages)")


# toggled and togglectl are not the library under test: run them without the
# sanitizer runtimes scripts/pytest.sh preloads into Python.  Preloaded into
# these uninstrumented programs, which link libcurl (the cluster's etcd
# client) and through it libp11-kit, ASan makes p11-kit's destructor
# deadlock on glibc's locale lock at exit: togglectl hung after "cannot
# connect" until the 20 s timeout.
PROG_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


@pytest.fixture
def daemon():
    d = tempfile.mkdtemp(prefix="graphtoggle-py.")
    sock = os.path.join(d, "toggled.sock")
    log = open(os.path.join(d, "toggled.log"), "w")
    p = subprocess.Popen([TOGGLED, "--socket", sock, "--state-dir", os.path.join(d, "state")],
                         stdout=log, stderr=log, env=PROG_ENV)
    try:
        for _ in range(200):
            if ctl(sock, "status", check=False).returncode == 0:
                break
            time.sleep(0.025)
        else:
            pytest.fail("toggled did not come up: %s" % open(log.name).read())
        yield sock
    finally:
        p.terminate()
        p.wait(timeout=10)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


def ctl(sock, *args, check=True, stdin=None):
    r = subprocess.run([TOGGLECTL, "--socket", sock] + list(args), capture_output=True,
                       text=True, input=stdin, timeout=20, env=PROG_ENV)
    if check and r.returncode != 0:
        raise AssertionError("togglectl %s: %s%s" % (args, r.stdout, r.stderr))
    return r


def wait_for(pred, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    pytest.fail("timed out waiting for " + what)


def test_daemon_drives_the_agent(daemon):
    with Agent("py-engine", hooks=HOOKS, backend="sim", socket=daemon, group="decode") as a:
        eng = Engine(a)
        g, e = eng.capture()
        # the agent registers in the background (libtoggle never blocks on the daemon)
        wait_for(lambda: [x["name"] for x in json.loads(
            ctl(daemon, "--json", "agents").stdout)["agents"]] == ["py-engine"],
            "the agent's registration")
        conn = wait_for(lambda: (lambda c: c if c["state"] == "connected" else None)(
            a.connection()), "the agent's connection state")
        assert conn["agent_id"] > 0 and conn["sessions"] == 1
        assert a.taint()["launches"] == 0

        ctl(daemon, "set", "resid_post:0-1,mlp_out:3")
        step = iter(range(10 ** 6))
        want = a.hookset("resid_post:0-1,mlp_out:3")
        got = wait_for(lambda: (a.step(next(step)) == want), "the daemon's set")
        assert got
        assert eng.replay(g, e) == want.to_set()  # the replay runs what step() returned

        # a plan for a future step: exactly that step runs it
        target = a.current_step + 50
        plan = json.dumps([{"step": target, "hooks": "mlp_out:*"}])
        ctl(daemon, "plan", "submit", "-", stdin=plan)
        seen = None
        while a.current_step < target:
            eff = a.step(a.current_step + 1)
            if a.current_step == target:
                seen = eff
            time.sleep(0.002)
        assert seen == a.hookset("mlp_out:*")
        assert eng.replay(g, e) == seen.to_set()
        assert a.step() == want  # back to the standing set

        # the daemon sees the agent's graphs and step
        graphs = json.loads(ctl(daemon, "--json", "graphs").stdout)
        assert "py-engine" in json.dumps(graphs)


def test_agent_runs_on_without_a_daemon(tmp_path):
    # libtoggle never blocks on the daemon: with none listening the agent keeps its own
    # state (and reconnects in the background)
    with Agent("x", hooks=HOOKS, backend="sim", socket=str(tmp_path / "none.sock")) as a:
        a.set_enabled("mlp_out:1")
        assert a.step(0) == {("mlp_out", 1)}
        c = a.connection()
        assert c["state"] in ("connecting", "reconnecting") and c["agent_id"] == 0
