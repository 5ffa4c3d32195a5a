"""graphtoggle.torch on the fake torch (tests/fake_torch: torch 2.11's CUDAGraph structure
over the simulator): agent.capture/replay without the patch, and the patch lifecycle:
owners, exact restore, graphs kept and bound while patched, unrelated graphs untouched,
sessions never adopting each other's graphs, forget on destroy."""

import gc

import pytest
import torch

import graphtoggle
import graphtoggle.torch as gtt
from graphtoggle import Agent

assert getattr(torch, "FAKE", False), "these tests run on tests/fake_torch"

HOOKS = {"resid_post": 3, "mlp_out": 3}
SIM = torch.cuda.sim()


@pytest.fixture
def agent():
    a = Agent("patch-test", hooks=HOOKS, backend="sim", sim=SIM)
    yield a
    gtt.unpatch()  # whatever a failing test left
    a.close()


class Model:
    """A "model" whose kernels and producers run on torch's current (fake) stream."""

    def __init__(self, agent):
        self.agent = agent
        self.ran = []
        self.layers = 0

    def forward(self, producers=True):
        for layer in range(3):
            SIM.kernel(torch.cuda.current_stream().cuda_stream, self._layer)
            if producers:
                for t in HOOKS:
                    with self.agent.producer((t, layer)):
                        SIM.kernel(torch.cuda.current_stream().cuda_stream,
                                   lambda h=(t, layer): self.ran.append(h))

    def _layer(self):
        self.layers += 1

    def replay(self, g):
        del self.ran[:]
        g.replay()
        return set(self.ran)


def _class_dict():
    return {k: torch.cuda.CUDAGraph.__dict__.get(k) for k in
            ("__new__", "__init__", "capture_begin", "capture_end", "instantiate", "replay",
             "reset")}


def test_capture_and_replay_without_patch(agent):
    m = Model(agent)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with agent.capture(g):
        m.forward()
    agent.set_enabled("mlp_out:1,resid_post:2")
    agent.step(0)
    del m.ran[:]
    agent.replay(g)
    assert set(m.ran) == {("mlp_out", 1), ("resid_post", 2)}
    assert agent.stats()["launches"] == 1
    g.instantiate()  # a new exec (the fake, like a driver, may reuse the old handle value)
    agent.set_enabled("resid_post:0")
    agent.step(1)
    del m.ran[:]
    agent.replay(g)
    assert set(m.ran) == {("resid_post", 0)}
    assert agent.graph_status(g.raw_cuda_graph())["exec"] == g.raw_cuda_graph_exec()


def test_capture_needs_keep_graph(agent):
    g = torch.cuda.CUDAGraph()
    with pytest.raises(graphtoggle.InvalidArgumentError, match="keep_graph=True"):
        with agent.capture(g):
            pytest.fail("must not capture")
    assert agent.graphs() == []


def test_patch_lifecycle(agent):
    torch_dict = _class_dict()
    m = Model(agent)
    # before: torch's own behaviour
    g0 = torch.cuda.CUDAGraph(keep_graph=False)
    with torch.cuda.graph(g0):
        m.forward(producers=False)
    with pytest.raises(RuntimeError, match="keep_graph"):
        g0.raw_cuda_graph()

    owner1 = gtt.patch(agent)
    owner2 = gtt.patch(agent)
    assert gtt.patched() is agent
    g = torch.cuda.CUDAGraph()  # keep_graph=False asked: kept anyway while patched
    with torch.cuda.graph(g):
        m.forward()
    assert g.raw_cuda_graph() != 0
    st = agent.graph_status(g.raw_cuda_graph())
    assert st["bound"] and st["exec"] == g.raw_cuda_graph_exec() and st["nodes"] == 6
    u = torch.cuda.CUDAGraph()  # no producers: unrelated, replays untouched
    with torch.cuda.graph(u):
        m.forward(producers=False)
    assert u.raw_cuda_graph_exec()  # instantiated at capture end, as torch would

    for step, spec in enumerate(["all", "none", "mlp_out:0-1", "resid_post:2"]):
        agent.set_enabled(spec)
        eff = agent.step(step)
        assert m.replay(g) == eff.to_set()
    launches = agent.stats()["launches"]
    layers = m.layers
    u.replay()
    g0.replay()  # captured before the patch: torch's own
    assert m.layers == layers + 6 and agent.stats()["launches"] == launches

    # re-instantiation rebinds
    g.instantiate()  # the new exec may reuse the old handle value: bound all the same
    assert agent.graph_status(g.raw_cuda_graph())["exec"] == g.raw_cuda_graph_exec()
    agent.set_enabled("mlp_out:2")
    assert m.replay(g) == {("resid_post", 2)}  # step 3's set until the next step begins
    agent.step(10)
    assert m.replay(g) == {("mlp_out", 2)}

    owner1.end()
    assert gtt.patched() is agent and _class_dict() != torch_dict  # one owner left
    with pytest.raises(graphtoggle.InvalidArgumentError, match="already ended"):
        owner1.end()
    with owner2:
        pass
    # restored exactly
    assert gtt.patched() is None
    assert _class_dict() == torch_dict
    n = torch.cuda.CUDAGraph(keep_graph=False)
    with torch.cuda.graph(n):
        m.forward(producers=False)
    with pytest.raises(RuntimeError, match="keep_graph"):
        n.raw_cuda_graph()
    # a graph of the ended session replays as torch's own (not through the agent)
    launches = agent.stats()["launches"]
    del m.ran[:]
    g.replay()
    assert agent.stats()["launches"] == launches
    assert set(m.ran) == {("mlp_out", 2)}  # the exec keeps its last state

    # a later session never adopts it
    with Agent("later", hooks=HOOKS, backend="sim", sim=SIM) as b:
        with gtt.patch(b):
            g.replay()
            assert b.stats()["launches"] == 0 and b.graphs() == []
        assert gtt.patched() is None


def test_patch_for_another_agent_is_refused(agent):
    with gtt.patch(agent):
        with Agent("other", hooks=HOOKS, backend="sim", sim=SIM) as b:
            with pytest.raises(graphtoggle.InvalidArgumentError, match="already patched"):
                gtt.patch(b)
    assert gtt.patched() is None


def test_graph_created_before_patch_is_refused_clearly(agent):
    m = Model(agent)
    g = torch.cuda.CUDAGraph()  # created (keep_graph=False) before the patch
    with gtt.patch(agent):
        with pytest.raises(graphtoggle.CaptureError, match="graphtoggle.torch.patch"):
            with torch.cuda.graph(g):
                m.forward()
    assert agent.graphs() == [] and m.ran == []


def test_destroyed_graphs_are_forgotten(agent):
    m = Model(agent)
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m.forward()
        raw = g.raw_cuda_graph()
        assert agent.graph_status(raw)["stale"] is False
        del g
        gc.collect()
        assert agent.graph_status(raw)["stale"] is True
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            m.forward()
        raw2 = g2.raw_cuda_graph()
        g2.reset()
        assert agent.graph_status(raw2)["stale"] is True
        assert agent.registry_check()["graphs"] == 0


def test_unbound_producer_graph_fails_closed(agent):
    m = Model(agent)
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m.forward()
        agent.bind(g.raw_cuda_graph(), None)  # unbind behind the patch's back
        g.__dict__["_graphtoggle"].exec = g.raw_cuda_graph_exec()
        agent.step(0)
        del m.ran[:]
        layers = m.layers
        # the patch's replay launches with the exec it knows: libtoggle rebinds it (a
        # different exec than bound); a graph whose template the agent forgot fails closed
        agent.forget(g.raw_cuda_graph())
        offset = torch._C.default_generator.offset
        with pytest.raises(graphtoggle.StaleError, match="prepare"):
            g.replay()
        assert m.ran == [] and m.layers == layers
        # refused before torch's replay: its generator prologue did not run either
        assert torch._C.default_generator.offset == offset


def _capture_random(m, producers):
    out = {}

    def forward():
        m.forward(producers=producers)
        out["a"] = torch.rand(6)
        m.forward(producers=False)
        out["b"] = torch.rand(3)
    return forward, out


@pytest.mark.parametrize("how", ["patch", "capture"])
def test_random_ops_advance_like_torch(agent, how):
    """torch.rand in a graph with producers draws new numbers at each replay, the very
    numbers torch's own replay draws from the same seed (issue 9 follow-up: the patch used
    to launch through toggle_graph_launch, skipping torch's generator prologue, so every
    replay repeated the first one's numbers)."""
    m = Model(agent)
    # torch's own: no patch, no producers, same random ops
    torch.manual_seed(1234)
    ref = torch.cuda.CUDAGraph(keep_graph=True)
    fwd, ref_out = _capture_random(m, producers=False)
    with torch.cuda.graph(ref):
        fwd()
    want = []
    for _ in range(4):
        ref.replay()
        want.append(tuple(ref_out["a"].data) + tuple(ref_out["b"].data))
    assert len(set(want)) == 4  # torch's replays draw new numbers

    torch.manual_seed(1234)
    fwd, out = _capture_random(m, producers=True)
    if how == "patch":
        owner = gtt.patch(agent)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fwd()
    else:
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with agent.capture(g):
            fwd()
    assert agent.graph_status(g.raw_cuda_graph())["nodes"] == 6
    got = []
    for step, spec in enumerate(["all", "none", "mlp_out:1", "all"]):
        agent.set_enabled(spec)
        eff = agent.step(step)
        del m.ran[:]
        if how == "patch":
            g.replay()
        elif step < 2:
            agent.replay(g)
        else:  # on a given stream: a Stream, then a raw handle (made current for torch)
            s = torch.cuda.Stream()
            agent.replay(g, stream=s if step == 2 else s.cuda_stream)
        assert set(m.ran) == eff.to_set()  # the producers still follow the step's set
        got.append(tuple(out["a"].data) + tuple(out["b"].data))
    assert got == want
    assert agent.stats()["launches"] == 4
    if how == "patch":
        owner.end()



def test_device_mode_reinstantiate_under_the_patch():
    """Device mode through the patch with copy_out producers: every torch re-instantiation
    (old exec destroyed, new one made: the allocator may hand back the same handle value)
    must be uploaded and fully set before its first launch."""
    from simgraph import FakeTensor
    with Agent("dev", hooks=HOOKS, backend="sim", sim=SIM, mode="device", strict=True) as a:
        assert a.mode == "device"
        src = [FakeTensor(SIM, (2, 4)) for _ in range(3)]
        dst = {(t, l): FakeTensor(SIM, (2, 4)) for t in HOOKS for l in range(3)}
        for i, s in enumerate(src):
            SIM.write(s.ptr, bytes([i + 1]) * 32, torch.cuda.current_stream().cuda_stream)
        with gtt.patch(a):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for l in range(3):
                    for t in HOOKS:
                        a.copy_out(src[l], dst[(t, l)], (t, l))
            assert a.graph_status(g.raw_cuda_graph())["mode"] == "device"
            specs = ["all", "none", "mlp_out:1", "resid_post:0-1", "*:2", "none", "all"]
            for step, spec in enumerate(specs * 3):
                if step % 2:
                    g.instantiate()
                for d in dst.values():
                    SIM.write(d.ptr, bytes(32), torch.cuda.current_stream().cuda_stream)
                eff = a.step(step)
                g.replay()
                ran = {h for h, d in dst.items() if SIM.read(d.ptr, 32) != bytes(32)}
                assert ran == eff.to_set(), "step %d (%s)" % (step, spec)
                for (t, l) in ran:
                    assert SIM.read(dst[(t, l)].ptr, 32) == bytes([l + 1]) * 32
        assert a.stats()["node_set_calls"] == 0


class _Block(torch.nn.Module):
    """y = x * (layer + 2), computed by a simulator kernel; hooks see y."""

    def __init__(self, layer):
        super().__init__()
        self.k = layer + 2

    def forward(self, x):
        y = torch.Tensor(x.shape)
        torch.mul(x, self.k, out=y)
        return y


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Block(l) for l in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_attach_forward_hooks(agent):
    net = _Net()
    x = torch.Tensor((2, 2), data=[1.0, 2.0, 3.0, 4.0])
    att = agent.attach({"resid_post": net.layers})
    net(x)  # warm-up outside the capture: makes the buffers, records nothing
    assert agent.graphs() == [] and len(att.buffers) == 3
    assert not any(b.made_capturing for b in att.buffers.values())
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with agent.capture(g):
        net(x)
    assert agent.graph_hooks(g.raw_cuda_graph()) == agent.hookset("resid_post:*")
    agent.set_enabled("resid_post:1")
    agent.step(0)
    for b in att.buffers.values():
        b.fill_(-1.0)
    agent.replay(g)
    assert att.buffer("resid_post", 1).data == [6.0, 12.0, 18.0, 24.0]  # x * 2 * 3
    assert att.buffer("resid_post", 0).data == [-1.0] * 4
    assert att.buffer("resid_post", 2).data == [-1.0] * 4
    # a batch shape the warm-up never saw: refused (a buffer made inside the capture would
    # come from the graph's private pool), and the capture records nothing of it
    g2 = torch.cuda.CUDAGraph(keep_graph=True)
    with pytest.raises(graphtoggle.InvalidArgumentError, match="warm-up"):
        with agent.capture(g2):
            net(torch.Tensor((4, 2)))
    att.detach()
    g3 = torch.cuda.CUDAGraph(keep_graph=True)
    with agent.capture(g3):
        net(x)
    assert not agent.has_producers(g3.raw_cuda_graph())  # detached: no producer
