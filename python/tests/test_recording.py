"""graphtoggle.recording and graphtoggle.client's Subscription (docs/recording.md):
files written by the real togglectl record from a real toggled, whose agent is
tests/record/ring_agent (it writes its data ring by hand, with values that say what
they are: element 0 of hook (type t, layer l) at step s is s*1000 + t*100 + l,
element i > 0 is i), and safetensors files made by hand to check the parser's
bounds."""

import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, REAL_TORCH

from graphtoggle import recording

TOGGLED = os.path.join(BUILD, "toggled")
TOGGLECTL = os.path.join(BUILD, "togglectl")
AGENT = os.path.join(BUILD, "tests", "record_ring_agent")
PROG_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
TYPES = {"resid_post": 0, "attn_out": 1}

need_progs = pytest.mark.skipif(
    not all(os.access(p, os.X_OK) for p in (TOGGLED, TOGGLECTL, AGENT)),
    reason="build/toggled, build/togglectl and build/tests/record_ring_agent are built by `make`")


def values_ok(step, hook, flat):
    t, l = hook.split(":")
    return flat[0] == step * 1000 + TYPES[t] * 100 + int(l) and all(
        flat[i] == i for i in range(1, len(flat)))


def floats(b):
    return struct.unpack("<%df" % (len(b) // 4), b)


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="graphtoggle-rec.")
        self.sock = os.path.join(self.dir, "t.sock")
        self.log = open(os.path.join(self.dir, "toggled.log"), "w")
        self.procs = []
        self.daemon = subprocess.Popen([TOGGLED, "--socket", self.sock, "--state-dir",
                                        os.path.join(self.dir, "state")],
                                       stdout=self.log, stderr=self.log, env=PROG_ENV)
        self.wait(lambda: self.ctl("status", check=False).returncode == 0, "toggled")
        self.agent = subprocess.Popen([AGENT, "--socket", self.sock, "--name", "eng",
                                       "--period-ms", "5"], stdout=self.log, stderr=self.log,
                                      env=PROG_ENV)
        self.wait(lambda: self.agents(), "the agent")

    def wait(self, cond, what, secs=10):
        end = time.monotonic() + secs
        while not cond():
            assert time.monotonic() < end, "%s not there: %s" % (what, self.logtext())
            time.sleep(0.02)

    def logtext(self):
        self.log.flush()
        return open(self.log.name).read()

    def ctl(self, *args, check=True):
        r = subprocess.run([TOGGLECTL, "-s", self.sock, "--json"] + list(args),
                           capture_output=True, text=True, env=PROG_ENV, timeout=60)
        if check:
            assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def agents(self):
        r = self.ctl("agents", check=False)
        return json.loads(r.stdout)["agents"] if r.returncode == 0 else []

    def enabled(self):
        return self.agents()[0]["enabled"]

    def close(self):
        for p in (self.agent, self.daemon):
            p.send_signal(signal.SIGTERM)
        for p in (self.agent, self.daemon):
            p.wait(20)
        assert self.daemon.returncode == 0, self.logtext()
        self.log.close()
        shutil.rmtree(self.dir)


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


@need_progs
def test_open_files_of_togglectl(env):
    out = os.path.join(env.dir, "rec")
    env.ctl("record", "resid_post:0,attn_out:3", "--steps", "5", "-o", out)
    r = recording.open(out, as_="bytes")
    assert r.complete and len(r.agents) == 1 and r.agents[0]["name"] == "eng"
    recs = list(r)
    assert len(recs) == 10 and len(r.steps()) == 5
    steps = [x.step for x in recs]
    assert steps == sorted(steps) and r.steps() == list(range(steps[0], steps[0] + 5))
    for x in recs:
        step, hook, tensor = x                      # unpacks as (step, hook, tensor)
        assert hook in ("resid_post:0", "attn_out:3")
        assert x.dtype == "F32" and x.shape == (2, 8) and x.batch == 2 and x.agent == "eng"
        assert x.graph == 0x7002 and x.file.startswith("eng-")
        assert values_ok(step, hook, floats(tensor))
    only = list(recording.open(out, as_="bytes", hooks="attn_out:3"))
    assert [x.hook for x in only] == ["attn_out:3"] * 5
    assert list(recording.open(out, as_="bytes", agents="nobody")) == []
    # The same with the index gone (a recording cut before its end): files found by name.
    os.unlink(os.path.join(out, "index.json"))
    again = recording.open(out, as_="bytes")
    assert again.index is None and [(x.step, x.hook) for x in again] == [
        (x.step, x.hook) for x in recs]
    assert env.enabled() == "none"  # what the recording added is gone


@need_progs
def test_numpy_and_torch(env):
    out = os.path.join(env.dir, "rec")
    env.ctl("record", "resid_post:1", "--steps", "2", "-o", out)
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        for x in recording.open(out, as_="numpy"):
            assert x.tensor.dtype == np.float32 and x.tensor.shape == (2, 8)
            assert values_ok(x.step, x.hook, list(x.tensor.ravel()))
    if REAL_TORCH:
        import torch
        for x in recording.open(out, as_="torch"):
            assert x.tensor.dtype == torch.float32 and tuple(x.tensor.shape) == (2, 8)
            assert values_ok(x.step, x.hook, x.tensor.flatten().tolist())
    if np is None and not REAL_TORCH:
        pytest.skip("neither numpy nor the real torch here: only bytes were checked")


@need_progs
def test_subscription(env):
    client = pytest.importorskip("graphtoggle.client",
                                 reason="make python-client generates its messages")
    with client.Client(env.sock) as c:
        with c.record("attn_out:1,attn_out:2", target=env.agents()[0]["agent_id"],
                      as_="bytes") as sub:
            assert list(sub.agents) == [env.agents()[0]["agent_id"]]
            got = []
            for r in sub:
                got.append(r)
                assert values_ok(r.step, r.hook, floats(r.tensor)) and r.shape == (2, 8)
                if len(got) == 20:
                    break
            assert env.enabled() == "attn_out:1-2"
            steps = sorted(set(r.step for r in got))
            assert len(steps) == 10 and steps == list(range(steps[0], steps[0] + 10))
        env.wait(lambda: env.enabled() == "none", "the hooks removed after close")
        # steps=: the subscription ends by itself, every agent's part with code 0.
        with c.record("resid_post:3", steps=3, as_="bytes") as sub:
            recs = list(sub)
            assert len(recs) == 3 and len(set(r.step for r in recs)) == 3
            assert [code for code, _ in sub.ended.values()] == [0]
        with pytest.raises(Exception) as ei:
            c.record("resid_post:9")
        assert "out of range" in str(ei.value)


def write_st(path, header, data=b""):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def test_load_file_by_hand(tmp_path):
    p = str(tmp_path / "a.safetensors")
    write_st(p, {"__metadata__": {"k": "v"},
                 "x": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},
                 "y": {"dtype": "BF16", "shape": [1], "data_offsets": [8, 10]}},
             struct.pack("<2i", 7, -3) + struct.pack("<H", 0x3f80))
    meta, t = recording.load_file(p, as_="bytes")
    assert meta == {"k": "v"} and struct.unpack("<2i", t["x"]) == (7, -3)
    try:
        import numpy  # noqa: F401
    except ImportError:
        return
    meta, t = recording.load_file(p, as_="numpy")
    assert list(t["x"]) == [7, -3] and float(t["y"][0]) == 1.0  # BF16 widened to float32


@pytest.mark.parametrize("header,data,what", [
    ({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "offsets"),
    ({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, b"\0" * 16, "bytes for"),
    ({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "dtype"),
    ({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "shape"),
    ({"x": {"dtype": "F32", "shape": [2 ** 40, 2 ** 40], "data_offsets": [0, 4]}}, b"\0" * 4,
     "bytes for"),
    ([1, 2], b"", "not an object"),
])
def test_load_file_refuses(tmp_path, header, data, what):
    p = str(tmp_path / "bad.safetensors")
    write_st(p, header, data)
    with pytest.raises(recording.RecordingError) as ei:
        recording.load_file(p, as_="bytes")
    assert what in str(ei.value) and "bad.safetensors" in str(ei.value)


def test_header_length_forged(tmp_path):
    p = str(tmp_path / "huge.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", 1 << 60) + b"{}")
    with pytest.raises(recording.RecordingError, match="header of"):
        recording.load_file(p)


def test_index_outside(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps(
        {"format": recording.FORMAT, "files": [{"file": "../../etc/passwd", "step": 0}]}))
    with pytest.raises(recording.RecordingError, match="outside"):
        recording.open(str(tmp_path))
    (tmp_path / "index.json").write_text("{}")
    with pytest.raises(recording.RecordingError, match="not an index"):
        recording.open(str(tmp_path))
