"""python/tests/gpu/record_daemon_proof.py on the simulator (--engine sim: no GPU, no
torch): the whole recording path through the real toggled and togglectl record, checked
against the simulator's buffers, passes in lazy, eager and device mode; and its checker
fails where it must: an engine whose ground truth disagrees with what was recorded (a
byte of one reference changed, a hook a step is said not to have enabled, a hook a step
is said to have run (an eager forward) that nobody recorded) makes the proof note it."""

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import BUILD, REPO

TOGGLED = os.path.join(BUILD, "toggled")
TOGGLECTL = os.path.join(BUILD, "togglectl")
SCRIPT = os.path.join(REPO, "python", "tests", "gpu", "record_daemon_proof.py")
PROG_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}

pytestmark = pytest.mark.skipif(
    not all(os.access(p, os.X_OK) for p in (TOGGLED, TOGGLECTL)),
    reason="build/toggled and build/togglectl are built by `make`")


def load():
    spec = importlib.util.spec_from_file_location("record_daemon_proof", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


class Args:
    record_steps = 40
    max_steps = 5000
    plan_every = 15
    capacity = 1
    seed = 3


def run_prove(m, engine_cls, mode="lazy"):
    """prove() with engine_cls (a SimEngine subclass): the notes it made."""
    d = m.Daemon(TOGGLED, TOGGLECTL, PROG_ENV)
    notes = []
    eng = None
    try:
        eng = engine_cls("proof-" + mode, mode, d.sock, Args.capacity)
        summary = m.prove(d, eng, "proof-" + mode, Args, notes.append)
    finally:
        if eng is not None:
            eng.close()
        assert d.close() == 0
    return notes, summary


def test_sim_proof_passes():
    # the script's own python as this one runs (LD_PRELOAD kept: libtoggle may be the
    # sanitized build); it hands toggled and togglectl an environment without it
    env = dict(os.environ, TOGGLED=TOGGLED, TOGGLECTL=TOGGLECTL)
    r = subprocess.run([sys.executable, SCRIPT, "--engine", "sim", "--modes",
                        "lazy,eager,device", "--record-steps", "60"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("record-daemon-proof: PASS"), r.stdout
    assert r.stdout.count("records exact") == 3, r.stdout


def test_checker_passes_the_plain_engine():
    m = load()
    notes, summary = run_prove(m, m.SimEngine)
    assert notes == [] and summary and "0 dropped" in summary, notes


def test_checker_sees_a_wrong_byte():
    m = load()

    class Lying(m.SimEngine):
        def step(self, eager):
            step, eff, refs = super().step(eager)
            for k, (data, shape, graph) in refs.items():
                if k[0] in self.spec_hooks and step % 5 == 0:
                    refs[k] = (data[:-1] + bytes([data[-1] ^ 1]), shape, graph)
                    break
            return step, eff, refs
    Lying.spec_hooks = {("mlp_out", 1), ("resid_post", 0)}
    notes, _ = run_prove(m, Lying)
    assert any("differ from the buffer" in n for n in notes), notes


def test_checker_sees_a_record_its_step_did_not_enable():
    m = load()

    class Hiding(m.SimEngine):
        def step(self, eager):
            step, eff, refs = super().step(eager)
            if step % 4 == 0 and ("mlp_out", 1) in eff:
                eff = eff - {("mlp_out", 1)}
                refs.pop((("mlp_out", 1), False), None)
            return step, eff, refs
    notes, _ = run_prove(m, Hiding)
    assert any("did not enable it" in n for n in notes), notes


def test_checker_sees_a_lost_record():
    m = load()

    class Claiming(m.SimEngine):
        def step(self, eager):
            step, eff, refs = super().step(eager)
            # an eager forward of a hook the step enabled, which nobody ran or recorded
            if step % 6 == 0 and ("resid_post", 1) in eff:
                refs[(("resid_post", 1), True)] = (b"\0" * 32, (2, 4), 0)
            return step, eff, refs
    notes, _ = run_prove(m, Claiming)
    assert any("lack records" in n for n in notes), notes
