"""The producer op torch.ops.graphtoggle.tap (graphtoggle.ops) and attach() built on it, on
the fake torch over the simulator (issue 23): inside a capture it records a producer, in
eager runs it copies exactly when the current step enables its hook; declared buffers;
bad input refused before anything runs or is bound; a capture under the patch whose
attached hooks recorded nothing is refused at the next step; random_ops automatic; and
`import graphtoggle` reaching graphtoggle.torch without importing torch.  torch.compile
itself (dynamo, inductor) is test_torch_compile.py's, on the real torch."""

import gc
import os
import subprocess
import sys
import warnings
import weakref

import pytest
import torch

import graphtoggle
import graphtoggle.torch as gtt
from graphtoggle import Agent

if not getattr(torch, "FAKE", False):
    pytest.skip("runs on tests/fake_torch (GRAPHTOGGLE_TEST_TORCH=real gave the real torch)",
                allow_module_level=True)

HOOKS = {"resid_post": 3, "mlp_out": 3}
SIM = torch.cuda.sim()
NAN = float("nan")


@pytest.fixture
def agent():
    a = Agent("op-test", hooks=HOOKS, backend="sim", sim=SIM)
    yield a
    gtt.unpatch()
    a.close()


class Block(torch.nn.Module):
    """y = x * (layer + 2) (a simulator kernel); its mlp child: z = y * 1 (hooked too)."""

    def __init__(self, layer):
        super().__init__()
        self.k = layer + 2
        self.mlp = Mlp()

    def forward(self, x):
        y = torch.Tensor(x.shape)
        torch.mul(x, self.k, out=y)
        return self.mlp(y)


class Mlp(torch.nn.Module):
    def forward(self, x):
        return torch.mul(x, 1.0, out=torch.Tensor(x.shape))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(l) for l in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def modules_of(net):
    return {"resid_post": net.layers, "mlp_out": [l.mlp for l in net.layers]}


def written(att):
    """Hooks whose (declared) buffer holds anything but NaN."""
    out = set()
    for (t, l, _, _), b in att.buffers.items():
        if any(v == v for v in b.data):
            out.add((t, l))
    return out


def reset(att):
    for b in att.buffers.values():
        b.fill_(NAN)


X = [1.0, 2.0, 3.0, 4.0]


def x22():
    return torch.Tensor((2, 2), data=list(X))


def test_eager_forward_follows_the_step_set(agent):
    """No graph: the op copies exactly the hooks the current step enables (before the first
    step: the set replays run now, toggle_current_set), the right values, first rows."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    assert len(att.buffers) == 6
    assert all(s == (4, 2) for (_, _, s, _) in att.buffers)
    reset(att)
    net(x22())
    assert written(att) == set()  # nothing enabled
    agent.set_enabled("mlp_out:1")  # no step yet: applies at once
    reset(att)
    net(x22())
    assert written(att) == {("mlp_out", 1)}
    b = att.buffer("mlp_out", 1)
    assert b.data[:4] == [v * 2 * 3 for v in X] and all(v != v for v in b.data[4:])
    agent.plan(5, "resid_post:0,mlp_out:2")
    for step, spec in [(1, "all"), (2, "none"), (5, None), (6, "resid_post:*")]:
        if spec is not None:
            agent.set_enabled(spec)
        eff = agent.step(step)
        reset(att)
        net(x22())
        assert written(att) == eff.to_set(), (step, spec)
    assert agent.graphs() == []  # nothing captured, nothing bound


def test_capture_records_the_op_and_replays_follow_the_set(agent):
    """Under the patch (an engine's own torch.cuda.graph): each hook records one producer;
    every replay writes exactly the step's set; eager forwards between replays too."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    x = x22()
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x)
        graph = g.raw_cuda_graph()
        st = agent.graph_status(graph)
        assert st["bound"] and st["nodes"] == 6
        assert agent.graph_hooks(graph) == agent.hookset("all")
        for step, spec in enumerate(["none", "all", "mlp_out:0-1", "none", "resid_post:2",
                                     "none", "*:1"]):
            agent.set_enabled(spec)
            eff = agent.step(step)
            reset(att)
            g.replay()
            assert written(att) == eff.to_set(), ("replay", step, spec)
            reset(att)
            net(x)  # an eager forward at the same step: the same set
            assert written(att) == eff.to_set(), ("eager", step, spec)
        assert att.buffer("resid_post", 1).data[:4] == [v * 2 * 3 for v in X]
        assert agent.graph_status(graph)["bare_replays"] >= 1  # automatic random_ops
        assert att.captures() == {"graphs": 1, "with_producers": 1, "silent": 0}


def test_direct_op_call(agent):
    """torch.ops.graphtoggle.tap(x, buf, hook_id) without attach: the other integrations'
    way (a piecewise backend, a model's own code)."""
    hid = gtt.hook_id(agent, ("mlp_out", 2))
    assert gtt.register_op() is torch.ops.graphtoggle.tap.default
    buf = torch.empty((8,))
    x = torch.Tensor((2, 2), data=list(X))
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with agent.capture(g):
        torch.ops.graphtoggle.tap(x, buf, hid)
    assert agent.graph_hooks(g.raw_cuda_graph()) == agent.hookset("mlp_out:2")
    for step, spec in enumerate(["none", "mlp_out:2", "mlp_out:1"]):
        agent.set_enabled(spec)
        agent.step(step)
        buf.fill_(NAN)
        agent.replay(g)
        assert (buf.data[:4] == X) is (spec == "mlp_out:2")
        buf.fill_(NAN)
        torch.ops.graphtoggle.tap.default(x, buf, hid)  # eager
        assert (buf.data[:4] == X) is (spec == "mlp_out:2")


def _bufs_alive(refs):
    gc.collect()
    return [r() is not None for r in refs]


def test_a_graph_holds_the_buffers_its_producers_write(agent):
    """A CUDA graph holds no reference to the memory its kernels write.  A monitor buffer
    dropped by detach() while a graph that writes it lives would go back to torch's
    allocator, and a replay enabling its hook would write into whatever tensor got that
    memory next.  So the graph holds the buffers its producers write (patched capture and
    agent.capture(g)) until it is reset or collected."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    refs = [weakref.ref(b) for b in att.buffers.values()]
    mlp1 = att.buffer("mlp_out", 1)
    x = x22()
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x)
        g2 = torch.cuda.CUDAGraph()  # a second graph of the same buffers, reset below
        with torch.cuda.graph(g2):
            net(x)
        att.detach()
        del att
        assert all(_bufs_alive(refs)), "a buffer went while graphs that write it live"
        agent.set_enabled("mlp_out:1")
        agent.step(1)
        mlp1.fill_(NAN)
        g.replay()
        assert mlp1.data[:4] == [v * 2 * 3 for v in X]  # it still writes there
        g2.reset()
        assert all(_bufs_alive(refs))  # g still holds them
        del g
        del mlp1
        assert not any(_bufs_alive(refs)), "the graphs are gone: so are the buffers"
    # agent.capture(g) (no patch): the same
    hid = gtt.hook_id(agent, ("resid_post", 0))
    buf = torch.empty((8,))
    ref = weakref.ref(buf)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with agent.capture(g):
        torch.ops.graphtoggle.tap(x, buf, hid)
    del buf
    assert _bufs_alive([ref]) == [True]
    g.reset()
    assert _bufs_alive([ref]) == [False]
    with agent.capture():  # a window alone lets go of what it kept at its end
        pass
    assert agent._capture_keep == []


def test_declared_buffers_hold_any_leading_shape(agent):
    """max_tokens rows of width: outputs of any token count up to it, any leading dims."""
    mods = [torch.nn.Module() for _ in range(3)]
    att = agent.attach({"resid_post": mods}, max_tokens=6, width=(2,))
    hid = att.hook_ids[("resid_post", 0)]
    agent.set_enabled("resid_post:0")
    agent.step(0)
    buf = att.buffer("resid_post", 0)
    for shape in [(1, 2), (3, 2), (1, 3, 2), (6, 2)]:
        buf.fill_(NAN)
        n = shape[0] * (shape[1] if len(shape) == 3 else 1)
        gtt._ops().tap(torch.Tensor(shape, data=[float(i) for i in range(2 * n)]), buf, hid)
        assert buf.data[:2 * n] == [float(i) for i in range(2 * n)]
        assert all(v != v for v in buf.data[2 * n:])


# ---- bad input: a clear exception naming the fix, nothing launched, nothing bound -----------

def _no_hooks(net):
    return all(not m._forward_hooks for m in [net] + list(net.layers) +
               [l.mlp for l in net.layers])


def test_hook_outside_the_catalog(agent):
    net = Net()
    with pytest.raises(graphtoggle.SpecError, match="unknown hook type 'attn_oot'"):
        agent.attach({"resid_post": net.layers, "attn_oot": net.layers})
    assert _no_hooks(net)  # the valid type before it was not attached either
    with pytest.raises(graphtoggle.InvalidArgumentError, match="catalog has 3 layers"):
        agent.attach({"mlp_out": [l.mlp for l in net.layers] + [Mlp()]})
    assert _no_hooks(net)
    with pytest.raises(graphtoggle.OutOfCatalogError, match="layer 3 of mlp_out"):
        gtt.hook_id(agent, ("mlp_out", 3))
    with pytest.raises(graphtoggle.SpecError, match="unknown hook type"):
        gtt.hook_id(agent, ("nope", 0))
    buf = torch.empty((8,))
    bad = (gtt.hook_id(agent, ("mlp_out", 0)) & ~0x1FFF) | (31 * 256)  # type 31: none
    with pytest.raises(graphtoggle.InvalidArgumentError, match="outside agent 'op-test'"):
        torch.ops.graphtoggle.tap(x22(), buf, bad)
    with pytest.raises(graphtoggle.InvalidArgumentError, match="hook_id"):
        torch.ops.graphtoggle.tap(x22(), buf, 12345 << 14)
    assert all(v != v for v in buf.data)


def test_attach_arguments_checked_first(agent):
    net = Net()
    for kw, msg in [(dict(max_tokens=4), "width"), (dict(width=2), "max_tokens"),
                    (dict(max_tokens=0, width=2), "positive int"),
                    (dict(max_tokens=4, width=(2, 0)), "positive int"),
                    (dict(max_tokens=4, width={"resid_post": 2}), "no entry for mlp_out"),
                    (dict(max_tokens=4, width=2, buffers={}), "cannot be given too"),
                    (dict(buffers={("resid_post", 0): torch.empty((4,))}), "no tensor for"),
                    (dict(buffers=3), "dict"), (dict(method="memcpy"), "method"),
                    (dict(select={"attn_out": None}), "select= names attn_out"),
                    (dict(select={"mlp_out": 3}), "select for mlp_out must be callable"),
                    (dict(select="x"), "select for resid_post must be callable")]:
        with pytest.raises(graphtoggle.InvalidArgumentError, match=msg):
            agent.attach(modules_of(net), **kw)
        assert _no_hooks(net), kw
    with pytest.raises(graphtoggle.InvalidArgumentError, match="not an nn.Module"):
        agent.attach({"resid_post": [object()]})


def test_attach_refuses_hook_ids_past_the_buffer_key():
    """A declared buffer's key is serial << 32 | hook id: an agent whose slot makes hook
    ids that do not fit (a process that made 2**18 agents) is refused by attach() before
    any buffer or hook is made, naming what happened."""
    from graphtoggle import ops
    saved = ops._next_slot[0]
    ops._next_slot[0] = 1 << (gtt._TAP_KEY_SHIFT - ops.SLOT_SHIFT)
    try:
        with Agent("op-test-big-slot", hooks=HOOKS, backend="sim", sim=SIM) as a:
            net = Net()
            with pytest.raises(graphtoggle.InvalidArgumentError,
                               match="does not fit the buffer table's 32-bit key"):
                a.attach(modules_of(net), max_tokens=4, width=2)
            assert _no_hooks(net)
    finally:
        ops._next_slot[0] = saved


def test_shape_with_no_buffer(agent):
    """More tokens than declared, or another dtype: refused in eager runs (even disabled:
    the same run would be refused at capture) and in a capture, where nothing is
    recorded and the graph is not bound."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=1, width=2)
    reset(att)
    with pytest.raises(graphtoggle.InvalidArgumentError, match=r"shape \(2, 2\).*max_tokens"):
        net(x22())
    assert written(att) == set()
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with pytest.raises(graphtoggle.InvalidArgumentError, match="no monitor buffer"):
            with torch.cuda.graph(g):
                net(x22())
        assert agent.graphs() == []
        assert gtt._owner_of(g).graph is None  # not bound
    buf = torch.empty((8,), dtype="bfloat16")
    with pytest.raises(graphtoggle.InvalidArgumentError, match="bfloat16"):
        torch.ops.graphtoggle.tap(x22(), buf, gtt.hook_id(agent, ("mlp_out", 0)))


def test_another_width_is_refused(agent):
    """Declared rows of width 3, outputs (2, 2): 4 elements fit in 12, but their values
    would straddle rows; refused in an eager run (the hooks disabled) and at capture,
    where the graph is not bound.  A width per hook type: only the wrong one is."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=3)
    reset(att)
    with pytest.raises(graphtoggle.InvalidArgumentError,
                       match=r"mlp_out:0.*shape \(2, 2\).*rows of width \(3,\)"):
        net(x22())
    assert written(att) == set()
    agent.set_enabled("all")
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with pytest.raises(graphtoggle.InvalidArgumentError, match="width"):
            with torch.cuda.graph(g):
                net(x22())
        assert gtt._owner_of(g).graph is None
    att.detach()
    att = agent.attach(modules_of(net), max_tokens=4, width={"resid_post": 2, "mlp_out": (4,)})
    with pytest.raises(graphtoggle.InvalidArgumentError, match=r"mlp_out:0.*width \(4,\)"):
        net(x22())
    att.detach()
    flat = {(t, l): torch.empty((4,)) for t in HOOKS for l in range(3)}
    att = agent.attach(modules_of(net), buffers=flat)  # 1-D: any shape that fits
    reset(att)
    net(x22())
    assert written(att) == {(t, l) for t in HOOKS for l in range(3)}


def test_disabled_hooks_check_device_and_layout(agent):
    """A buffer on another device: refused in an eager run even while its hook is disabled
    (the same run would be refused at capture), also for a hook whose earlier buffer
    passed (the check is remembered per buffer, shape, dtype and device, not skipped)."""
    net = Net()
    bufs = {(t, l): torch.empty((8,)) for t in HOOKS for l in range(3)}
    bufs[("mlp_out", 2)].device = "cuda:1"
    att = agent.attach(modules_of(net), buffers=bufs)
    with pytest.raises(graphtoggle.InvalidArgumentError, match=r"mlp_out:2.*cuda:1"):
        net(x22())
    att.detach()
    bufs[("mlp_out", 2)] = torch.empty((8,))
    att = agent.attach(modules_of(net), buffers=bufs)
    net(x22())  # all disabled, every check passed
    att.detach()
    other = {(t, l): torch.empty((8,)) for t in HOOKS for l in range(3)}
    other[("resid_post", 1)].device = "cuda:1"
    agent.attach(modules_of(net), buffers=other)  # a new buffer for the same hook id
    with pytest.raises(graphtoggle.InvalidArgumentError, match=r"resid_post:1.*cuda:1"):
        net(x22())


def test_a_later_producer_refused_leaves_the_graph_unbound(agent):
    """The first hooks of a capture record their producers, a later one is refused (its
    buffer has another dtype): torch.cuda.graph's __exit__ still ends the capture, and the
    graph, holding only some producers, is neither bound nor replayed; the next capture
    (the error fixed) binds."""
    net = Net()
    bufs = {(t, l): torch.empty((8,)) for t in HOOKS for l in range(3)}
    bufs[("mlp_out", 1)] = torch.empty((8,), dtype="bfloat16")
    att = agent.attach(modules_of(net), buffers=bufs)
    agent.set_enabled("all")
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with pytest.raises(graphtoggle.InvalidArgumentError, match=r"mlp_out:1.*bfloat16"):
            with torch.cuda.graph(g):
                net(x22())
        # its record forgotten: resid_post:0, mlp_out:0, resid_post:1 are not kept either
        assert [r for r in agent.graphs() if r["bound"] or not r["stale"]] == []
        assert gtt._owner_of(g).graph is None
        reset(att)
        with pytest.raises(graphtoggle.CaptureError, match=r"capture was refused.*mlp_out:1"):
            g.replay()
        assert written(att) == set()  # its producers did not run
        agent.step(0)  # the refusal does not linger into the next window
        att.detach()
        bufs[("mlp_out", 1)] = torch.empty((8,))
        att = agent.attach(modules_of(net), buffers=bufs)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            net(x22())
        _bound_and_replays_every_producer(agent, att, g2)


def _bound_and_replays_every_producer(agent, att, g):
    """g is bound, and its replay (every hook enabled) writes every buffer of att."""
    assert agent.graph_status(g.raw_cuda_graph())["bound"]
    reset(att)
    g.replay()
    assert written(att) == {(t, l) for t in HOOKS for l in range(3)}


class Boom(Exception):
    pass


def test_a_capture_the_model_aborts_is_not_bound(agent):
    """The captured code raises midway (after some producers were recorded):
    torch.cuda.graph's __exit__ still ends the capture under the patch; the graph is not
    bound and its replays are refused.  A capture begun inside an except clause (the
    exception already being handled) and one whose block catches its own exception bind
    as usual."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    agent.set_enabled("all")
    agent.step(0)

    def boom(module, args, out):
        raise Boom("layer 1 failed")
    h = net.layers[1].mlp.register_forward_hook(boom)  # after mlp_out:1's own hook
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with pytest.raises(Boom):
            with torch.cuda.graph(g):
                net(x22())
        assert gtt._owner_of(g).graph is None
        assert [r for r in agent.graphs() if r["bound"] or not r["stale"]] == []
        reset(att)
        with pytest.raises(graphtoggle.CaptureError, match=r"captured code raised Boom"):
            g.replay()
        assert written(att) == set()
        h.remove()
        try:
            raise Boom("handled before the capture")
        except Boom:
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2):
                net(x22())
        _bound_and_replays_every_producer(agent, att, g2)
        g3 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g3):
            try:
                raise Boom("caught inside")
            except Boom:
                pass
            net(x22())
        _bound_and_replays_every_producer(agent, att, g3)


def test_agent_capture_with_a_refused_producer_is_not_bound(agent):
    """agent.capture(g) (no patch): a producer refused after others were recorded, whether
    the error leaves the block or is caught inside it: the graph is not bound, its record
    is forgotten, agent.replay(g) refuses it; nothing of it runs."""
    net = Net()
    bufs = {(t, l): torch.empty((8,)) for t in HOOKS for l in range(3)}
    bufs[("mlp_out", 1)] = torch.empty((8,), dtype="bfloat16")
    att = agent.attach(modules_of(net), buffers=bufs)
    agent.set_enabled("all")
    agent.step(0)
    for caught in (False, True):
        g = torch.cuda.CUDAGraph(keep_graph=True)
        if caught:
            with pytest.raises(graphtoggle.CaptureError, match=r"agent.capture\(g\).*refused"
                               r".*mlp_out:1"):
                with agent.capture(g):
                    with pytest.raises(graphtoggle.InvalidArgumentError):
                        net(x22())
        else:
            with pytest.raises(graphtoggle.InvalidArgumentError, match=r"mlp_out:1.*bfloat16"):
                with agent.capture(g):
                    net(x22())
        assert [r for r in agent.graphs() if r["bound"] or not r["stale"]] == []
        reset(att)
        with pytest.raises(graphtoggle.CaptureError, match=r"capture was refused.*mlp_out:1"):
            agent.replay(g)
        assert written(att) == set()


def test_capture_outside_the_window_is_refused(agent):
    """The op in a capture no patch or agent.capture(g) covers (torch.compile's CUDA Graph
    Trees without the patch, say): CaptureError naming the patch, nothing recorded."""
    net = Net()
    agent.attach(modules_of(net), max_tokens=4, width=2)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with pytest.raises(graphtoggle.CaptureError, match=r"mlp_out:0.*graphtoggle.torch.patch"):
        with torch.cuda.graph(g):
            net(x22())
    assert agent.graphs() == []


def test_graph_recorded_while_the_agent_is_closed():
    a = Agent("closed", hooks=HOOKS, backend="sim", sim=SIM)
    net = Net()
    att = a.attach(modules_of(net), max_tokens=4, width=2)
    owner = gtt.patch(a)
    try:
        g_early = torch.cuda.CUDAGraph()  # made while open, captured after close
        a.close()
        with pytest.raises(graphtoggle.InvalidArgumentError, match=r"closed.*End the patch"):
            torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            with pytest.raises(graphtoggle.InvalidArgumentError, match="End the patch"):
                g_early.capture_begin()
        assert not stream._capturing  # nothing began
        assert gtt._owner_of(g_early).graph is None
        reset(att)
        with pytest.raises(graphtoggle.InvalidArgumentError, match=r"closed.*detach"):
            net(x22())  # an eager forward with the closed agent's hooks
        assert written(att) == set()
    finally:
        owner.end()
    with pytest.raises(graphtoggle.InvalidArgumentError, match="closed"):
        gtt.patch(a)
    assert gtt.patched() is None


def test_second_patch_with_another_agent(agent):
    pristine = dict(torch.cuda.CUDAGraph.__dict__)
    net = Net()
    agent.attach(modules_of(net), max_tokens=4, width=2)
    with gtt.patch(agent) as owner:
        patched_dict = dict(torch.cuda.CUDAGraph.__dict__)
        with Agent("other", hooks=HOOKS, backend="sim", sim=SIM) as b:
            with pytest.raises(graphtoggle.InvalidArgumentError,
                               match=r"already patched for agent 'op-test'.*owner.end\(\)"):
                gtt.patch(b)
        assert dict(torch.cuda.CUDAGraph.__dict__) == patched_dict
        assert gtt.patched() is agent and owner.active
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x22())
        assert agent.graph_status(g.raw_cuda_graph())["bound"]  # the first patch still works
        # hooks of another agent captured under this patch: the error names both agents
        with Agent("third", hooks=HOOKS, backend="sim", sim=SIM) as c:
            net3 = Net()
            c.attach(modules_of(net3), max_tokens=4, width=2)
            g3 = torch.cuda.CUDAGraph()
            with pytest.raises(graphtoggle.CaptureError,
                               match=r"patch is active for agent 'op-test', not for this "
                                     r"hook's agent 'third'"):
                with torch.cuda.graph(g3):
                    net(x22())  # the patched agent's producers first: not bound either
                    net3(x22())
            assert gtt._owner_of(g3).graph is None
            with pytest.raises(graphtoggle.CaptureError, match="capture was refused"):
                g3.replay()
    assert dict(torch.cuda.CUDAGraph.__dict__) == pristine


# ---- never a silent loss -------------------------------------------------------------------

def _plain_kernels():
    """What a model compiled without the hooks captures: its kernels, no producer."""
    for _ in range(3):
        SIM.kernel(torch.cuda.current_stream().cuda_stream, lambda: None)


def test_capture_without_the_hooks_is_refused_at_the_next_step(agent):
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    with gtt.patch(agent):
        empty = torch.cuda.CUDAGraph()  # CUDA Graph Trees' pool keeper: nothing in it
        with torch.cuda.graph(empty):
            pass
        agent.step(0)  # an empty capture is not a loss
        gs = []
        for _ in range(2):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                _plain_kernels()  # the hooks did not run: compiled before attach()
            gs.append(g)
        assert att.captures() == {"graphs": 3, "with_producers": 0, "silent": 2}
        with pytest.raises(graphtoggle.CaptureError,
                           match=r"2 CUDA graph\(s\).*none recorded a producer.*attach"):
            agent.step(1)
        assert agent.current_step == 0  # the step did not begin
        agent.step(1)  # once: the engine may go on, loudly told
        # a graph with producers (pieces without hooks beside it are fine)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x22())
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            _plain_kernels()
        agent.step(2)
        assert att.captures()["with_producers"] == 1


def test_verify_captures_raises_what_the_next_step_would_once(agent):
    """Attachment.verify_captures(): an engine's end of start-up captures.  Nothing owed:
    captures() back.  Owed: the same CaptureError as step()'s, now, and step() does not
    raise it again."""
    net = Net()
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            net(x22())
        assert att.verify_captures() == {"graphs": 1, "with_producers": 1, "silent": 0}
        agent.step(0)
    att.detach()
    agent.step(1)
    att = agent.attach(modules_of(net), max_tokens=4, width=2)
    with gtt.patch(agent):
        gs = []
        for _ in range(2):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                _plain_kernels()
            gs.append(g)
        with pytest.raises(graphtoggle.CaptureError,
                           match=r"2 CUDA graph\(s\).*none recorded a producer.*"
                                 r"raised by Attachment.verify_captures\(\)"):
            att.verify_captures()
        assert att.verify_captures()["silent"] == 2  # once: not owed any more
        agent.step(2)  # and not raised by step()
        assert agent.current_step == 2


class _FakeNode:
    """A node of dynamo's guard tree (torch._C._dynamo.guards.GuardManager) as attach()
    reads it: the type of the value it guards, its children; pairs: those of a dict's
    (DictGuardManager.get_key_value_managers: index -> (key node, value node))."""

    def __init__(self, typ, children=(), pairs=None):
        self.typ, self.children = typ, list(children)
        if pairs is not None:
            self.get_key_value_managers = lambda: dict(enumerate(pairs))

    def get_type_of_guarded_value(self):
        return self.typ

    def get_child_managers(self):
        return self.children


class _FakeDynamo:
    """torch._dynamo as attach() reads it: a count of graphs compiled, the code objects
    dynamo converted (convert_frame.input_codes.seen: weak references) and each one's cache
    entries (eval_frame._debug_get_cache_entry_list: .code, the code dynamo generated;
    .guard_manager: .root, the guard tree, and .global_scope), config.inline_inbuilt_nn_modules
    (torch 2.11's default, True).  compile(): a new entry; reset(): torch.compiler.reset(),
    every entry dropped."""

    def __init__(self, monkeypatch):
        import collections
        import types
        d = types.ModuleType("torch._dynamo")
        d.utils = types.SimpleNamespace(counters=collections.defaultdict(collections.Counter))
        d.config = types.SimpleNamespace(inline_inbuilt_nn_modules=True)
        cf = types.ModuleType("torch._dynamo.convert_frame")
        cf.input_codes = types.SimpleNamespace(seen=[])
        ef = types.ModuleType("torch._dynamo.eval_frame")
        ef._debug_get_cache_entry_list = lambda code: list(self.entries.get(code, []))
        for name, m in (("", d), (".convert_frame", cf), (".eval_frame", ef)):
            monkeypatch.setitem(sys.modules, "torch._dynamo" + name, m)
        self.d, self.seen, self.entries = d, cf.input_codes.seen, {}

    def compile(self, fn, traced=(), guards=True):
        """traced: the nn.Modules the trace met, guarded (by type) under a dict's pair as
        dynamo guards a module's children; guards=False: an entry without a guard tree."""
        import types
        code = fn.__code__
        if code not in self.entries:
            self.seen.append(weakref.ref(code))
        gen = code.replace()  # a new code object: what dynamo generated for this compile
        root = _FakeNode(None, [_FakeNode(torch.Tensor), _FakeNode(dict, pairs=[
            (_FakeNode(str), _FakeNode(type(m))) for m in traced])])
        gm = types.SimpleNamespace(root=root, global_scope={"G": fn.__globals__})
        e = types.SimpleNamespace(code=gen, **({"guard_manager": gm} if guards else {}))
        self.entries.setdefault(code, []).append(e)
        self.d.utils.counters["stats"]["unique_graphs"] += 1

    def reset(self):
        self.seen.clear()
        self.entries.clear()


def _producers_then_silent(net):
    """A graph the hooks recorded in, then one without producers (a piece, or a size
    compiled before attach())."""
    gs = [torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()]
    with torch.cuda.graph(gs[0]):
        net(x22())
    with torch.cuda.graph(gs[1]):
        _plain_kernels()
    return gs


def test_code_compiled_before_attach_makes_every_silent_graph_refused(agent, monkeypatch):
    """Code torch.compile compiled before attach() (one batch size, say) runs no hooks, and
    its graphs cannot be told from pieces without hooks: while that code is still compiled,
    a graph without producers is refused at the next step whatever other graphs recorded,
    in either order; after torch.compiler.reset() (dynamo's code caches cleared), such
    graphs are pieces again."""
    def forward():
        pass
    dyn = _FakeDynamo(monkeypatch)
    net = Net()
    dyn.compile(forward, traced=[net])  # one size compiled before attach()
    with pytest.warns(UserWarning, match="already compiled code"):
        att = agent.attach(modules_of(net), max_tokens=4, width=2)
    with gtt.patch(agent):
        for first_silent in (False, True):
            gs = [torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()]
            for i, g in enumerate(gs):
                with torch.cuda.graph(g):
                    if (i == 0) == first_silent:
                        _plain_kernels()  # the size compiled before attach()
                    else:
                        net(x22())
            with pytest.raises(graphtoggle.CaptureError,
                               match=r"1 CUDA graph\(s\).*compiled before hooks were attached"
                                     r".*%d graph\(s\) with producers" % (1 + first_silent)):
                agent.step()
            agent.step()  # once: the engine may go on, loudly told
        dyn.reset()  # torch.compiler.reset(): what was compiled before attach() is gone
        dyn.compile(forward, traced=[net])  # compiled again, now with the hooks
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            _plain_kernels()  # a piece without hooks
        agent.step()
        assert att.captures()["silent"] == 3
    att.detach()
    with pytest.warns(UserWarning):  # forward's new entry was compiled before this attach
        att = agent.attach(modules_of(net), max_tokens=4, width=2, check_captures=False)
    with gtt.patch(agent):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            _plain_kernels()
        agent.step()  # opted out


def test_only_code_that_may_run_modules_arms_the_refusal(agent, monkeypatch):
    """Cached code whose entry shows no way to an nn.Module (no module in its guard tree,
    no method, no closure, no module global, none of a module's stores read) cannot run
    the attached ones: compiled before attach(), it neither warns nor makes pieces without
    hooks refused.  Any sign of a module arms it, whatever module; so does an entry whose
    guards cannot be read (fail-closed)."""
    def unrelated():
        pass
    net = Net()

    def closure():
        return net

    def reads_stores(m):
        return m._parameters
    cases = [(unrelated, (), True, False),
             (unrelated, (Mlp(),), True, True),  # another model's module: types, not ids
             (unrelated, (), False, True),
             (closure, (), True, True),
             (reads_stores, (), True, True)]
    for fn, traced, guards, arms in cases:
        dyn = _FakeDynamo(monkeypatch)
        dyn.compile(fn, traced=traced, guards=guards)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            att = agent.attach(modules_of(net), max_tokens=4, width=2)
        case = (fn.__name__, traced, guards)
        assert any("already compiled code" in str(x.message) for x in w) == arms, case
        with gtt.patch(agent):
            gs = _producers_then_silent(net)
            if arms:
                with pytest.raises(graphtoggle.CaptureError,
                                   match="compiled before hooks were attached"):
                    agent.step()
            agent.step()  # the piece beside a graph with producers is fine
        att.detach()
        del gs


def test_capture_check_order_and_opt_out(agent):
    net = Net()
    with gtt.patch(agent):
        att = agent.attach(modules_of(net), max_tokens=4, width=2)
        g0 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g0):  # a piece without hooks, captured first
            _plain_kernels()
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            net(x22())
        agent.step(0)  # the producer graph cleared it
        att.detach()
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            _plain_kernels()
        agent.step(1)  # no attachment: nothing watched
        att2 = agent.attach(modules_of(net), max_tokens=4, width=2, check_captures=False)
        g3 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g3):
            _plain_kernels()
        agent.step(2)
        att2.detach()


# ---- import graphtoggle: graphtoggle.torch without torch -------------------------------------

def test_import_graphtoggle_gives_graphtoggle_torch_lazily():
    """Issue 23 item 5: `import graphtoggle; graphtoggle.torch.patch` works without a prior
    `import graphtoggle.torch`, and imports no torch (none is on this interpreter's path)."""
    py = os.path.dirname(os.path.dirname(os.path.abspath(graphtoggle.__file__)))
    code = ("import sys; sys.path.insert(0, %r); import graphtoggle; "
            "assert 'graphtoggle.torch' not in sys.modules; "
            "m = graphtoggle.torch; assert callable(m.patch) and callable(m.attach); "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert graphtoggle.torch is m; print('ok')" % py)
    env = dict(os.environ, PYTHONPATH="")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        graphtoggle.nope  # noqa: B018


def test_device_mode_graphs_without_producers():
    """Device mode captures the planner into every graph under the patch, so graphs without
    a producer are known to the agent too: one holding only the planner counts as empty
    for the silent-loss check (CUDA Graph Trees' pool keeper), and each is forgotten
    when torch destroys it (freed graphs do not fill the registry)."""
    import gc
    with Agent("dev-op", hooks=HOOKS, backend="sim", sim=SIM, mode="device",
               strict=True) as a:
        assert a.mode == "device"
        net = Net()
        att = a.attach(modules_of(net), max_tokens=4, width=2, method="copy_out")
        with gtt.patch(a):
            keeper = torch.cuda.CUDAGraph()
            with torch.cuda.graph(keeper):
                pass
            raw = keeper.raw_cuda_graph()
            assert a.graph_status(raw)["nodes"] == 0 and not a.graph_status(raw)["stale"]
            a.step(0)  # the planner alone: no loss
            assert att.captures()["silent"] == 0
            del keeper
            gc.collect()
            assert a.graph_status(raw)["stale"]  # forgotten with the graph
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                _plain_kernels()
            raw = g.raw_cuda_graph()
            with pytest.raises(graphtoggle.CaptureError, match="none recorded a producer"):
                a.step(1)
            g.reset()
            assert a.graph_status(raw)["stale"]


@pytest.mark.parametrize("script", ["torch_compile_proof.py", "torch_compile_bench.py"])
def test_gpu_scripts_skip_cleanly_without_torch_compile(script):
    """The GPU legs parse and skip (exit 0, a SKIPPED line) where torch.compile is missing:
    here, the fake torch."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "fake_torch"))
    r = subprocess.run([sys.executable, os.path.join(here, "gpu", script)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and ": SKIPPED: " in r.stdout, (r.stdout, r.stderr)
