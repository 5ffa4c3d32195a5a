"""The recorder from Python on the simulator (graphtoggle.record): every record read
from the ring equals what the producer of its replay and hook wrote (the kernels stamp
the run into the buffers, simulator memory), none for a hook its step did not enable,
a full ring drops and counts and what it holds is exact, torch's way (prepare, its own
launch, after()) records the same."""

import ctypes
import struct

import pytest

import graphtoggle
from graphtoggle import record

ELEMS = 8


class Stamped:
    """One graph: a head kernel counts runs, then per hook a producer region whose kernel
    writes (run, hook, i) as floats into the hook's buffer."""

    def __init__(self, agent, elems=ELEMS):
        self.agent, self.sim = agent, agent.sim
        self.stream = self.sim.stream()
        self.elems = elems
        self.runs = 0
        self.hooks = [(t, l) for t in agent.catalog.names for l in range(agent.catalog.n_layers)]
        self.buf = {h: self.sim.alloc(4 * elems) for h in self.hooks}
        a, sim, s = agent, self.sim, self.stream
        with a.capture():
            sim.begin_capture(s)
            sim.kernel(s, self._head)
            for i, h in enumerate(self.hooks):
                with a.producer(h, stream=s):
                    sim.kernel(s, lambda i=i, h=h: self._write(i, h))
            self.graph = sim.end_capture(s)
        self.exec = a.instantiate(self.graph)

    def _head(self):
        self.runs += 1

    def expect(self, run, i):
        return [float(run * 1000 + i * 10 + k) for k in range(self.elems)]

    def _write(self, i, h):
        data = struct.pack("<%df" % self.elems, *self.expect(self.runs - 1, i))
        ctypes.memmove(self.buf[h], data, len(data))

    def declare(self, rec):
        for h in self.hooks:
            rec.buffer(h, ptr=self.buf[h], nbytes=4 * self.elems, dtype="F32",
                       shape=(2, self.elems // 2))


@pytest.fixture
def agent():
    a = graphtoggle.Agent("rec-py", hooks={"resid_post": 3, "mlp_out": 3}, backend="sim")
    yield a
    a.close()


def check(eng, r, sets):
    """r is exact: its payload names its run; that run's step enabled its hook."""
    vals = struct.unpack("<%df" % eng.elems, r.payload)
    run = int(vals[0] // 1000)
    name = eng.agent.catalog.names[r.hook[0]]
    h = (name, r.hook[1])
    i = eng.hooks.index(h)
    assert list(vals) == eng.expect(run, i)
    step, enabled = sets[run]
    assert r.step == step
    assert h in enabled, "hook %s recorded at step %d, which did not enable it" % (h, step)
    assert r.dtype == "F32" and r.shape == (2, eng.elems // 2)
    assert r.graph == eng.graph


def test_records_equal_the_buffers(agent):
    eng = Stamped(agent)
    rec = agent.recorder(1 << 20)
    assert agent.recorder() is rec
    eng.declare(rec)
    rd = rec.reader()
    rec.request(1)
    sets, want = [], 0
    for step in range(40):
        enabled = [h for k, h in enumerate(eng.hooks) if (step * 7 + k) % 3 == 0]
        agent.set_enabled(enabled)
        agent.step(step)
        sets.append((step, set(enabled)))
        agent.launch(eng.graph, eng.exec, eng.stream)
        want += len(enabled)
    rec.flush()
    got = 0
    for r in rd:
        check(eng, r, sets)
        got += 1
    assert got == want > 0
    st = rec.stats()
    assert st["records"] == want and st["dropped"] == 0 and st["errors"] == 0
    assert rd.counters()["records"] == want
    rd.close()


def test_request_and_session(agent):
    eng = Stamped(agent)
    rec = agent.recorder(1 << 20)
    eng.declare(rec)
    rd = rec.reader()
    agent.set_enabled("all")
    agent.step(0)
    agent.launch(eng.graph, eng.exec, eng.stream)  # no request: nothing
    rec.request(4, "mlp_out:1")
    agent.step(1)
    agent.launch(eng.graph, eng.exec, eng.stream)
    rec.flush()
    out = list(rd)
    assert [(r.hook, r.session, r.step) for r in out] == [((1, 1), 4, 1)]
    rd.close()


def test_full_ring_drops_and_holds_only_exact_records(agent):
    eng = Stamped(agent, elems=2048)  # 8 KiB buffers: 7 records fit in 64 KiB
    rec = agent.recorder(64 << 10)
    eng.declare(rec)
    rd = rec.reader()
    rec.request(1)
    agent.set_enabled("all")
    sets = []
    for step in range(10):
        agent.step(step)
        sets.append((step, set(eng.hooks)))
        agent.launch(eng.graph, eng.exec, eng.stream)
    rec.flush()
    st = rec.stats()
    assert st["records"] + st["dropped"] == 10 * len(eng.hooks)
    assert st["dropped"] > 0 and st["records"] == 7
    out = list(rd)
    assert len(out) == st["records"]
    for r in out:
        check(eng, r, sets)
    rd.close()


def test_prepare_own_launch_after(agent):
    eng = Stamped(agent)
    rec = agent.recorder(1 << 20)
    eng.declare(rec)
    rd = rec.reader()
    rec.request(1)
    agent.set_enabled([("resid_post", 2)])
    agent.step(0)
    agent.prepare(eng.graph, eng.exec, eng.stream)
    eng.sim.launch(eng.exec, eng.stream)  # what torch's own replay does
    rec.after(eng.graph, eng.stream)
    rec.flush()
    out = list(rd)
    assert len(out) == 1
    check(eng, out[0], [(0, {("resid_post", 2)})])
    rd.close()


def test_dtypes_and_refusals(agent):
    assert record.dtype_code("BF16") == 7
    assert record.dtype_code(8) == 8
    with pytest.raises(graphtoggle.InvalidArgumentError):
        record.dtype_code("complex64")
    assert record._shape4((2, 3, 4, 5, 6)) == [6, 4, 5, 6]
    rec = agent.recorder(1 << 16)
    p = agent.sim.alloc(64)
    with pytest.raises(graphtoggle.InvalidArgumentError):
        rec.buffer(("resid_post", 0), ptr=p, nbytes=64, dtype="F32", shape=(3,))
    with pytest.raises(graphtoggle.GraphToggleError):
        rec.buffer(("resid_post", 0), ptr=p, nbytes=1 << 20, dtype="U8", shape=(1 << 20,))
