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

if not getattr(torch, "FAKE", False):
    pytest.skip("these tests run on tests/fake_torch (GRAPHTOGGLE_TEST_TORCH=real gave the "
                "real torch)", allow_module_level=True)

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



def _copy_out_rig():
    """Layer l's source filled with bytes l + 1, one zeroed buffer per hook (2 x 4 bytes)."""
    from simgraph import FakeTensor
    src = [FakeTensor(SIM, (2, 4)) for _ in range(3)]
    dst = {(t, l): FakeTensor(SIM, (2, 4)) for t in HOOKS for l in range(3)}
    for i, s in enumerate(src):
        SIM.write(s.ptr, bytes([i + 1]) * 32, torch.cuda.current_stream().cuda_stream)
    return src, dst


def _capture_copy_outs(agent, src, dst):
    """A torch graph of one copy_out producer per hook (under the caller's patch)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for l in range(3):
            for t in HOOKS:
                agent.copy_out(src[l], dst[(t, l)], (t, l))
    return g


def _step_replay(agent, g, dst, step):
    """Buffers zeroed, step begun, g replayed: the step's effective set and the hooks whose
    buffers were written (what ran)."""
    for d in dst.values():
        SIM.write(d.ptr, bytes(32), torch.cuda.current_stream().cuda_stream)
    eff = agent.step(step)
    g.replay()
    return eff, {h for h, d in dst.items() if SIM.read(d.ptr, 32) != bytes(32)}


def test_device_mode_reinstantiate_under_the_patch():
    """Device mode through the patch with copy_out producers: every torch re-instantiation
    (old exec destroyed, new one made: the allocator may hand back the same handle value)
    must be uploaded and fully set before its first launch."""
    with Agent("dev", hooks=HOOKS, backend="sim", sim=SIM, mode="device", strict=True) as a:
        assert a.mode == "device"
        src, dst = _copy_out_rig()
        with gtt.patch(a):
            g = _capture_copy_outs(a, src, dst)
            assert a.graph_status(g.raw_cuda_graph())["mode"] == "device"
            specs = ["all", "none", "mlp_out:1", "resid_post:0-1", "*:2", "none", "all"]
            for step, spec in enumerate(specs * 3):
                if step % 2:
                    g.instantiate()
                eff, ran = _step_replay(a, g, dst, step)
                assert ran == eff.to_set(), "step %d (%s)" % (step, spec)
                for (t, l) in ran:
                    assert SIM.read(dst[(t, l)].ptr, 32) == bytes([l + 1]) * 32
        assert a.stats()["node_set_calls"] == 0


def test_device_mode_full_and_bare_execs_under_the_patch():
    """Device mode through the patch (default random_ops: automatic) with copy_out producers:
    after the first replay (torch's own, the random-ops check) all-on steps launch the full
    exec (no planner), all-off steps the producer-free one, mixed steps the device exec;
    every step's buffers are written for exactly its set."""
    with Agent("dev-full", hooks=HOOKS, backend="sim", sim=SIM, mode="device",
               strict=True) as a:
        src, dst = _copy_out_rig()
        try:
            with gtt.patch(a):
                g = _capture_copy_outs(a, src, dst)
                graph = g.raw_cuda_graph()
                st = a.graph_status(graph)
                assert st["mode"] == "device" and st["bare_exec"] and st["full_exec"]
                full = bare = 0
                specs = ["all", "all", "none", "mlp_out:1", "all", "none", "*:2", "all"]
                for step, spec in enumerate(specs):
                    a.set_enabled(spec)
                    eff, ran = _step_replay(a, g, dst, step)
                    assert ran == eff.to_set(), "step %d (%s)" % (step, spec)
                    st = a.graph_status(graph)
                    later = step > 0  # step 0 is torch's own replay (the check)
                    full += later and spec == "all"
                    bare += later and spec == "none"
                    assert st["full_running"] is (later and spec == "all"), (step, spec)
                    assert st["bare_running"] is (later and spec == "none"), (step, spec)
                    assert (st["full_replays"], st["bare_replays"]) == (full, bare), step
                assert (full, bare) == (3, 2)
        finally:
            gtt.unpatch()


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


# ---- random_ops=False: toggle_graph_launch, the producer-free exec --------------------------

WALK = ["none", "all", "none", "mlp_out:1", "none", "none", "resid_post:*", "none"]


def _capture_how(agent, m, how, random_ops, fwd=None):
    """A graph with m's producers (and fwd's ops), through the patch or agent.capture, with
    random_ops as given to patch()/capture(); None: the keyword left out."""
    kw = {} if random_ops is None else dict(random_ops=random_ops)
    fwd = fwd or m.forward
    if how == "patch":
        owner = gtt.patch(agent, **kw)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fwd()
        return g, owner
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with agent.capture(g, **kw):
        fwd()
    return g, None


def _replay_how(agent, g, how, random_ops=None):
    if how == "patch" and random_ops is None:
        g.replay()
    else:
        agent.replay(g, random_ops=random_ops)


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("how", ["patch", "capture"])
def test_random_ops_false_runs_the_bare_exec(how, mode):
    """random_ops=False: the bare exec is built at the bind, the first replay is torch's own
    (the check), then all-off steps launch the bare exec through toggle_graph_launch and
    every step's producers follow its set; torch's generator is never advanced."""
    with Agent("bare-patch", hooks=HOOKS, backend="sim", sim=SIM, mode=mode) as a:
        try:
            _runs_the_bare_exec(a, how)
        finally:
            gtt.unpatch()  # whatever a failure left


def _runs_the_bare_exec(a, how):
    m = Model(a)
    g, owner = _capture_how(a, m, how, False)
    graph = g.raw_cuda_graph()
    st = a.graph_status(graph)
    assert st["bare_exec"] and not st["bare_running"]
    assert a.stats()["bare_builds"] == 1
    offset = torch._C.default_generator.offset
    bare = 0
    for step, spec in enumerate(WALK):
        a.set_enabled(spec)
        eff = a.step(step)
        layers = m.layers
        del m.ran[:]
        _replay_how(a, g, how)
        assert set(m.ran) == eff.to_set(), (step, spec)
        assert m.layers == layers + 3  # the rest of the graph runs, whichever exec
        st = a.graph_status(graph)
        # step 0 is the check (torch's own replay, the main exec); later all-off steps
        # run the bare exec
        fits = spec == "none" and step > 0
        assert st["bare_running"] is fits, (step, spec)
        bare += fits
        assert st["bare_replays"] == bare
    assert bare == 4
    assert a.stats()["launches"] == len(WALK)
    assert torch._C.default_generator.offset == offset
    if owner:
        owner.end()


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("last", ["none", "resid_post:1", "all"])
def test_ended_session_replays_the_last_set(mode, last):
    """Launch-path replays (random_ops=False) run libtoggle's bare and full execs, never the
    application's; when the session ends, its graphs replay as torch's own, launching the
    application's exec, which must hold the set current at the end (not the capture's, every
    producer on, nor one older)."""
    with Agent("ended", hooks=HOOKS, backend="sim", sim=SIM, mode=mode) as a:
        try:
            m = Model(a)
            g, owner = _capture_how(a, m, "patch", False)
            for step, spec in enumerate(["mlp_out:2", "all", "resid_post:0,mlp_out:1", last]):
                a.set_enabled(spec)
                eff = a.step(step)
                assert m.replay(g) == eff.to_set(), (step, spec)
            st = a.graph_status(g.raw_cuda_graph())
            # not the application's exec: the bare, full, or all-on exec (all on after a set
            # in between set the full exec: reported as a set exec)
            assert st["bare_running"] or st["full_running"] or st["set_running"]
            owner.end()
            launches = a.stats()["launches"]
            assert m.replay(g) == a.hookset(last).to_set()  # torch's own replay
            assert m.replay(g) == a.hookset(last).to_set()
            assert a.stats()["launches"] == launches
        finally:
            gtt.unpatch()


@pytest.mark.parametrize("how", ["patch", "capture"])
def test_random_ops_true_builds_no_bare_exec(agent, how):
    """random_ops=True (prepare + torch's own replay at every replay) never runs a bare exec,
    so the default Agent (bare_exec=None) builds none for it; producers follow every set."""
    m = Model(agent)
    g, owner = _capture_how(agent, m, how, True)
    graph = g.raw_cuda_graph()
    assert not agent.graph_status(graph)["bare_exec"]
    assert agent.stats()["bare_builds"] == 0
    for step, spec in enumerate(WALK):
        agent.set_enabled(spec)
        eff = agent.step(step)
        del m.ran[:]
        _replay_how(agent, g, how)
        assert set(m.ran) == eff.to_set()
    st = agent.graph_status(graph)
    assert not st["bare_exec"] and st["bare_replays"] == 0
    assert agent.stats()["bare_builds"] == 0
    g.instantiate()  # a rebind keeps the decision
    assert agent.graph_status(graph)["bare_exec"] is False
    assert agent.stats()["bare_builds"] == 0
    if owner:
        owner.end()


@pytest.mark.parametrize("how", ["patch", "capture"])
def test_default_is_automatic(agent, how):
    """The default (random_ops=None): a graph without random ops gets its bare exec at the
    bind, its first replay is torch's own (the check), then all-off steps run the bare
    exec through toggle_graph_launch (issue 23, item 6: zero cost by default)."""
    m = Model(agent)
    g, owner = _capture_how(agent, m, how, None)
    graph = g.raw_cuda_graph()
    assert agent.graph_status(graph)["bare_exec"]
    offset = torch._C.default_generator.offset
    bare = 0
    for step, spec in enumerate(WALK):
        agent.set_enabled(spec)
        eff = agent.step(step)
        del m.ran[:]
        _replay_how(agent, g, how)
        assert set(m.ran) == eff.to_set(), (step, spec)
        fits = spec == "none" and step > 0
        assert agent.graph_status(graph)["bare_running"] is fits, (step, spec)
        bare += fits
    assert agent.graph_status(graph)["bare_replays"] == bare == 4
    assert torch._C.default_generator.offset == offset
    if owner:
        owner.end()


@pytest.mark.parametrize("how", ["patch", "capture"])
def test_default_keeps_torch_replay_for_random_graphs(agent, how):
    """The default with a graph that draws random numbers: the first replay (torch's own)
    sees the generator advance, raises nothing, drops the bare exec; every replay is then
    torch's own (new numbers each time, torch's own sequence) with the step's producers."""
    m = Model(agent)
    torch.manual_seed(7)
    ref = torch.cuda.CUDAGraph(keep_graph=True)
    fwd, ref_out = _capture_random(m, producers=False)
    with torch.cuda.graph(ref):
        fwd()
    want = []
    for _ in range(len(WALK)):
        ref.replay()
        want.append(tuple(ref_out["a"].data) + tuple(ref_out["b"].data))
    torch.manual_seed(7)
    fwd, out = _capture_random(m, producers=True)
    g, owner = _capture_how(agent, m, how, None, fwd)
    graph = g.raw_cuda_graph()
    got = []
    for step, spec in enumerate(WALK):
        agent.set_enabled(spec)
        eff = agent.step(step)
        del m.ran[:]
        _replay_how(agent, g, how)
        assert set(m.ran) == eff.to_set()
        got.append(tuple(out["a"].data) + tuple(out["b"].data))
    assert got == want
    st = agent.graph_status(graph)
    assert not st["bare_exec"] and st["bare_replays"] == 0
    if owner:
        owner.end()


def test_default_keeps_torch_replay_for_registered_generators(agent):
    """A capture that registered a generator (CUDA Graph Trees register the ones compiled
    code passes in): the default never takes the launch path for it (the offset check
    cannot see that generator)."""
    m = Model(agent)
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        g.register_generator_state(torch.Generator())
        with torch.cuda.graph(g):
            m.forward()
        graph = g.raw_cuda_graph()
        assert not agent.graph_status(graph)["bare_exec"]
        for step, spec in enumerate(WALK):
            agent.set_enabled(spec)
            eff = agent.step(step)
            del m.ran[:]
            g.replay()
            assert set(m.ran) == eff.to_set()
        assert agent.graph_status(graph)["bare_replays"] == 0
        assert agent.stats()["launches"] == len(WALK)


@pytest.mark.parametrize("bare_exec", [True, False])
def test_bare_exec_explicit_keyword_with_torch(bare_exec):
    """bare_exec=True builds one for default torch graphs too (never run by torch's replay);
    bare_exec=False builds none, even with random_ops=False (launches run the main exec)."""
    with Agent("bare-kw", hooks=HOOKS, backend="sim", sim=SIM, bare_exec=bare_exec) as a:
        m = Model(a)
        g, _ = _capture_how(a, m, "capture", True)
        assert a.graph_status(g.raw_cuda_graph())["bare_exec"] is bare_exec
        h, _ = _capture_how(a, m, "capture", False)
        assert a.graph_status(h.raw_cuda_graph())["bare_exec"] is bare_exec
        for step, spec in enumerate(WALK):
            a.set_enabled(spec)
            eff = a.step(step)
            for x in (g, h):
                del m.ran[:]
                a.replay(x)
                assert set(m.ran) == eff.to_set()
        assert a.graph_status(g.raw_cuda_graph())["bare_replays"] == 0
        assert a.graph_status(h.raw_cuda_graph())["bare_replays"] == (4 if bare_exec else 0)
        assert a.stats()["bare_builds"] == (2 if bare_exec else 0)


def test_random_ops_false_at_replay(agent):
    """random_ops=False given at replay to a graph captured with random_ops=True: the check
    replay, then the bare exec is built and runs at all-off steps; a later default replay
    goes back to prepare + torch's replay (the main exec) with the right producers."""
    m = Model(agent)
    g, _ = _capture_how(agent, m, "capture", True)
    graph = g.raw_cuda_graph()
    assert not agent.graph_status(graph)["bare_exec"]
    agent.set_enabled("none")
    agent.step(0)
    agent.replay(g, random_ops=False)  # the check: torch's own replay
    assert agent.graph_status(graph)["bare_exec"]
    assert not agent.graph_status(graph)["bare_running"]
    agent.step(1)
    del m.ran[:]
    agent.replay(g, random_ops=False)
    assert m.ran == [] and agent.graph_status(graph)["bare_running"]
    agent.replay(g)  # default: torch's own replay of the main exec, producers still off
    assert m.ran == [] and not agent.graph_status(graph)["bare_running"]
    agent.set_enabled("mlp_out:0")
    eff = agent.step(2)
    agent.replay(g, random_ops=False)
    assert set(m.ran) == eff.to_set()
    assert agent.graph_status(graph)["bare_replays"] == 1


@pytest.mark.parametrize("how", ["patch", "capture"])
def test_random_ops_false_refused_for_random_graph(agent, how):
    """A graph that draws random numbers, replayed with random_ops=False: the first replay
    (torch's own) draws torch's numbers, then raises; its bare exec is dropped; later
    replays with random_ops=False are refused before anything runs (layers, producers and
    the generator untouched); random_ops=True replays keep torch's numbers."""
    m = Model(agent)
    torch.manual_seed(99)
    ref = torch.cuda.CUDAGraph(keep_graph=True)
    fwd, ref_out = _capture_random(m, producers=False)
    with torch.cuda.graph(ref):
        fwd()
    want = []
    for _ in range(2):
        ref.replay()
        want.append(tuple(ref_out["a"].data) + tuple(ref_out["b"].data))

    torch.manual_seed(99)
    fwd, out = _capture_random(m, producers=True)
    g, owner = _capture_how(agent, m, how, False, fwd)
    graph = g.raw_cuda_graph()
    assert agent.graph_status(graph)["bare_exec"]  # built at the bind, on the promise
    agent.set_enabled("none")
    agent.step(0)
    del m.ran[:]
    with pytest.raises(graphtoggle.InvalidArgumentError, match="has random ops"):
        _replay_how(agent, g, how)
    assert tuple(out["a"].data) + tuple(out["b"].data) == want[0]  # ran, torch's numbers
    assert m.ran == []
    assert not agent.graph_status(graph)["bare_exec"]  # dropped: it would never run
    offset, layers = torch._C.default_generator.offset, m.layers
    launches = agent.stats()["launches"]
    with pytest.raises(graphtoggle.InvalidArgumentError, match="refused"):
        _replay_how(agent, g, how)
    with pytest.raises(graphtoggle.InvalidArgumentError, match="refused"):
        agent.replay(g, random_ops=False)
    assert torch._C.default_generator.offset == offset and m.layers == layers
    assert agent.stats()["launches"] == launches
    agent.set_enabled("mlp_out:2")
    eff = agent.step(1)
    agent.replay(g, random_ops=True)
    assert set(m.ran) == eff.to_set()
    assert tuple(out["a"].data) + tuple(out["b"].data) == want[1]
    if owner:
        owner.end()


def test_random_ops_keyword_checked(agent):
    m = Model(agent)
    with pytest.raises(graphtoggle.InvalidArgumentError, match="random_ops"):
        gtt.patch(agent, random_ops="no")
    assert gtt.patched() is None
    with pytest.raises(graphtoggle.InvalidArgumentError, match="random_ops"):
        with agent.capture(torch.cuda.CUDAGraph(keep_graph=True), random_ops=0):
            pytest.fail("must not capture")
    g, _ = _capture_how(agent, m, "capture", None)
    with pytest.raises(graphtoggle.InvalidArgumentError, match="random_ops"):
        agent.replay(g, random_ops=1)
    with gtt.patch(agent, random_ops=True):
        with pytest.raises(graphtoggle.InvalidArgumentError, match="must agree"):
            gtt.patch(agent)
    with gtt.patch(agent, random_ops=False):
        with pytest.raises(graphtoggle.InvalidArgumentError, match="must agree"):
            gtt.patch(agent)
        with gtt.patch(agent, random_ops=False):
            pass
        assert gtt.patched() is agent
    assert gtt.patched() is None


@pytest.mark.parametrize("how", ["patch", "capture"])
def test_random_ops_false_constant_all_off(agent, how):
    """The engine's usual case: every step all off from the first replay on (the set never
    changes).  The check replay (torch's own, after a prepare) must not leave the launches
    that follow on the main exec: from the second replay on, the bare exec runs."""
    m = Model(agent)
    g, owner = _capture_how(agent, m, how, False)
    graph = g.raw_cuda_graph()
    agent.set_enabled("none")
    for step in range(4):
        agent.step(step)
        del m.ran[:]
        _replay_how(agent, g, how)
        assert m.ran == []
        assert agent.graph_status(graph)["bare_running"] is (step > 0), step
    assert agent.graph_status(graph)["bare_replays"] == 3
    if owner:
        owner.end()
