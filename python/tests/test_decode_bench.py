"""python/tests/gpu/torch_decode_bench.py's harness (graphs, legs, checks, timings) on the
fake torch with a small stand-in model: every check passes when graphtoggle does what it
should, and the harness reports mismatches when the random_ops=False path is broken (so its
PASS line can fail).  The figures themselves need the GPU (TORCH_DECODE_BENCH=1
scripts/gpu-check.sh)."""

import importlib.util
import os

import pytest
import torch

import graphtoggle.torch as gtt
from graphtoggle import Agent

if not getattr(torch, "FAKE", False):
    pytest.skip("runs on tests/fake_torch (GRAPHTOGGLE_TEST_TORCH=real gave the real torch)",
                allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
SIM = torch.cuda.sim()
L = 3


def _load():
    spec = importlib.util.spec_from_file_location(
        "torch_decode_bench", os.path.join(HERE, "gpu", "torch_decode_bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _load()


class FakeDecode:
    """The Decode interface over the simulator: per layer two elementwise "kernels" and the
    two hook points; monitor buffers per (type, layer, batch)."""

    def __init__(self, layers=L, width=4):
        self.L, self.W = layers, width
        self.sentinel = -1.0e30
        self.mon = {}
        self.inp = [0.5 + i for i in range(8 * width)]

    def forward(self, bs, produce=None):
        x = torch.Tensor((bs, self.W), data=list(self.inp[: bs * self.W]))
        for l in range(self.L):
            attn = torch.mul(x, 0.5, out=torch.Tensor(x.shape))
            if produce:
                produce(0, l, attn)
            x = torch.mul(attn, 3.0, out=torch.Tensor(x.shape))
            if produce:
                produce(1, l, x)
        return x

    def random_forward(self, bs, produce):
        x = torch.rand(bs, self.W)
        produce(0, 0, x)
        return x

    def to_monitor(self, t, l, x):
        key = (t, l, x.shape[0])
        if key not in self.mon:
            self.mon[key] = torch.Tensor(x.shape).fill_(self.sentinel)
        torch.mul(x, 1, out=self.mon[key])

    def reset_monitors(self):
        for b in self.mon.values():
            b.fill_(self.sentinel)

    def monitors_written(self):
        return [any(v != self.sentinel for (tt, ll, _), b in self.mon.items()
                    if (tt, ll) == (t, l) for v in b.data)
                for t in range(len(bench.TYPES)) for l in range(self.L)]

    @staticmethod
    def compare(a, b):
        diff = max(abs(x - y) for x, y in zip(a.data, b.data))
        return diff, a.data == b.data, diff <= 0.02

    def warmup(self, bs):
        pass


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_decode_bench_harness_passes(mode):
    log = []
    with Agent("decode", hooks={t: L for t in bench.TYPES}, backend="sim", sim=SIM,
               mode=mode) as a:
        b = bench.Bench(a, FakeDecode(), log=log.append)
        table = b.run([1, 4], reps=3, n=4)
        assert b.fails == [], b.fails
        assert sorted(table) == [1, 4] and all(sorted(t) == sorted(bench.LEGS)
                                               for t in table.values())
        assert all(v > 0 for t in table.values() for v in t.values())
        assert sum("x floor" in line for line in log) == 2 * len(bench.LEGS)
        assert any("random_ops=False refused" in line for line in log)
        assert all(s["stale"] for s in a.graphs())  # every graph reset: forgotten


def test_decode_bench_harness_can_fail(monkeypatch):
    """With random_ops=False ignored (the guarded replay always prepare + torch's replay,
    as before this option), the bench reports the bare exec never running and the random
    graph not refused."""
    real = gtt._replay
    monkeypatch.setattr(gtt, "_replay", lambda st, g, random_ops: real(st, g, True))
    with Agent("decode", hooks={t: L for t in bench.TYPES}, backend="sim", sim=SIM) as a:
        b = bench.Bench(a, FakeDecode(), log=lambda s: None)
        b.run([2], reps=2, n=3)
        assert any("bare_running" in f for f in b.fails)
        assert any("bare exec" in f for f in b.fails)
        assert any("not refused" in f for f in b.fails)
