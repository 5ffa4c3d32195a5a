"""Agent on the simulator backend: construction, hook sets, errors, capture with producer
regions, guarded replay, steps, plans, modes, copy_out.  Ground truth: what the producer
kernels themselves logged when the simulator ran them."""

import random

import pytest

import graphtoggle
from graphtoggle import Agent, HookSet

from simgraph import Engine, FakeTensor

HOOKS = {"resid_post": 4, "attn_out": 4, "mlp_out": 4}


@pytest.fixture
def agent():
    with Agent("py-test", hooks=HOOKS, backend="sim") as a:
        yield a


# ---- construction ------------------------------------------------------------------------

def test_open_close():
    a = Agent("x", hooks=HOOKS, backend="sim", group="decode")
    assert a.mode == "lazy" and not a.closed and a.catalog.names == tuple(HOOKS)
    a.close()
    assert a.closed
    with pytest.raises(graphtoggle.InvalidArgumentError, match="closed"):
        a.step()
    a.close()  # twice is fine


@pytest.mark.parametrize("kwargs, err, text", [
    (dict(hooks={"a": 4, "b": 8}), graphtoggle.InvalidArgumentError, "same layer count"),
    (dict(mode="fast"), graphtoggle.InvalidArgumentError, "lazy, eager, device"),
    (dict(backend="gpu"), graphtoggle.InvalidArgumentError, "'cuda' or 'sim'"),
    (dict(name=""), graphtoggle.InvalidArgumentError, "non-empty"),
    (dict(name="n" * 64), graphtoggle.InvalidArgumentError, "shorter than 64"),
    (dict(hooks={"all": 4}), graphtoggle.InvalidArgumentError, "toggle_agent_open"),
    (dict(hooks={"bad name": 4}), graphtoggle.InvalidArgumentError, "toggle_agent_open"),
    (dict(hooks={"a": 0}), graphtoggle.InvalidArgumentError, "toggle_agent_open"),
])
def test_open_refused(kwargs, err, text):
    args = dict(name="x", hooks=HOOKS, backend="sim")
    args.update(kwargs)
    with pytest.raises(err, match=text):
        Agent(**args)


def test_cuda_backend_without_driver_is_clear():
    # this machine has no NVIDIA driver: the error says so (ENODRIVER), not a crash
    try:
        a = Agent("x", hooks=HOOKS, backend="cuda")
    except graphtoggle.NoDriverError as e:
        assert e.code == -3 and "toggle_agent_open" in str(e)
    else:  # a machine with a driver
        a.close()


def test_strict_device_mode_without_planner_image_or_fallback():
    # device mode on the simulator is modelled (its planner is a host function)
    with Agent("d", hooks=HOOKS, backend="sim", mode="device") as a:
        assert a.mode in ("device", "lazy")


# ---- hook sets -----------------------------------------------------------------------------

def test_hooksets(agent):
    s = agent.hookset("resid_post:0-1,mlp_out:3")
    assert isinstance(s, HookSet)
    assert s == {("resid_post", 0), ("resid_post", 1), ("mlp_out", 3)}
    assert ("resid_post", 1) in s and ("attn_out", 1) not in s and ("nope", 1) not in s
    assert len(s) == 3 and str(s) == "resid_post:0-1,mlp_out:3"
    assert agent.hookset({("resid_post", 0), ("resid_post", 1), ("mlp_out", 3)}) == s
    assert agent.hookset([(0, 0), (0, 1), (2, 3)]) == s  # type indices
    assert agent.hookset(["resid_post:0-1", ("mlp_out", 3)]) == s  # specs and pairs mixed
    assert agent.hookset(None) == set() and str(agent.hookset("none")) == "none"
    assert str(agent.hookset("all")) == "all" and len(agent.hookset("all")) == 12
    assert agent.hookset("all") - s == agent.hookset("all").to_set() - s.to_set()
    assert s | {("attn_out", 2)} == s.to_set() | {("attn_out", 2)}
    assert list(agent.hookset("mlp_out:1,resid_post:2")) == [("resid_post", 2), ("mlp_out", 1)]


@pytest.mark.parametrize("bad, err, text", [
    ("resid_pots:1", graphtoggle.SpecError, "unknown hook type 'resid_pots'"),
    ("resid_post:9", graphtoggle.SpecError, "bad hook spec"),
    ({("resid_pots", 1)}, graphtoggle.SpecError, "known: resid_post, attn_out, mlp_out"),
    ({("resid_post", 4)}, graphtoggle.OutOfCatalogError, "layer 4 of resid_post outside"),
    ({("resid_post", -1)}, graphtoggle.OutOfCatalogError, "outside the catalog"),
    ({(7, 0)}, graphtoggle.OutOfCatalogError, "hook type 7 outside"),
    ({"resid_post"}, graphtoggle.SpecError, None),  # a spec string item: every layer: fine
    ([("resid_post",)], graphtoggle.SpecError, "a hook is a \\(type, layer\\) pair"),
    ([("resid_post", "1")], graphtoggle.SpecError, "layer must be an int"),
    (42, graphtoggle.SpecError, "spec string, a HookSet or an iterable"),
])
def test_bad_hooks_change_nothing(agent, bad, err, text):
    agent.set_enabled("attn_out:2")
    before = agent.current_set()
    if text is None:
        agent.hookset(bad)
        return
    with pytest.raises(err, match=text):
        agent.set_enabled(bad)
    with pytest.raises(err):
        agent.plan(5, bad)
    assert agent.current_set() == before


def test_hookset_of_other_catalog(agent):
    with Agent("other", hooks={"x": 2}, backend="sim") as b:
        with pytest.raises(graphtoggle.OutOfCatalogError):
            agent.set_enabled(b.hookset("all"))


# ---- steps and plans ------------------------------------------------------------------------

def test_steps_and_plans(agent):
    agent.set_enabled("resid_post:*")
    assert agent.step(0) == agent.hookset("resid_post:*")
    agent.plan(2, "mlp_out:1")
    agent.plan_submit({4: "attn_out:0", 5: [("attn_out", 1)]})
    agent.plan_submit([(7, "all")])
    got = {n: agent.step(n) for n in range(1, 9)}
    assert got[1] == agent.hookset("resid_post:*")
    assert got[2] == {("mlp_out", 1)}
    assert got[3] == agent.hookset("resid_post:*")
    assert got[4] == {("attn_out", 0)} and got[5] == {("attn_out", 1)}
    assert got[7] == agent.hookset("all") and got[8] == agent.hookset("resid_post:*")
    assert agent.step() == agent.hookset("resid_post:*") and agent.current_step == 9
    assert agent.current_set() == agent.hookset("resid_post:*")


def test_step_order_and_late_plans(agent):
    agent.step(10)
    with pytest.raises(graphtoggle.StepOrderError, match="step 10"):
        agent.step(10)
    with pytest.raises(graphtoggle.LatePlanError) as e:
        agent.plan(10, "all")
    assert e.value.code == -9 and "10" in str(e.value)
    assert agent.anomalies()["late_plans"] == 1
    # all or nothing: one late entry refuses the batch, the good entry is not kept
    with pytest.raises(graphtoggle.LatePlanError):
        agent.plan_submit({12: "all", 9: "all"})
    assert agent.step(12) == set()
    with pytest.raises(graphtoggle.LimitError):
        agent.plan_submit({100 + i: "all" for i in range(257)})
    agent.plan(20, "all")
    agent.plan_clear()
    assert agent.step(20) == set()


def test_step_returns_the_same_object_while_unchanged(agent):
    agent.set_enabled("mlp_out:0")
    a, b = agent.step(), agent.step()
    assert a is b
    agent.set_enabled("mlp_out:1")
    c = agent.step()
    assert c is not a and c == {("mlp_out", 1)} and a == {("mlp_out", 0)}


# ---- capture, producers, replay ----------------------------------------------------------------

@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_replays_run_exactly_the_step_set(mode):
    with Agent("r", hooks=HOOKS, backend="sim", mode=mode) as a:
        eng = Engine(a, kernels_per_producer=3)
        graphs = [eng.capture() for _ in range(3)]
        everything = a.hookset("all").to_set()
        rng = random.Random(9)
        for step in range(300):
            if rng.random() < 0.3:
                a.set_enabled(rng.sample(sorted(everything), rng.randrange(0, 13)))
            if rng.random() < 0.1:
                a.plan(step + 1, rng.sample(sorted(everything), rng.randrange(0, 13)))
            eff = a.step(step)
            g, e = graphs[rng.randrange(3)]
            ran = eng.replay(g, e)
            assert ran == eff.to_set(), "step %d" % step
            assert len(eng.ran) == 3 * len(eff)  # every kernel of each region ran, once
        assert a.anomalies()["driver_errors"] == 0


def test_region_records_every_kernel_and_refuses_copies(agent):
    sim, s = agent.sim, agent.sim.stream()
    with agent.capture():
        sim.begin_capture(s)
        with agent.producer(("resid_post", 0), stream=s) as r:
            for _ in range(4):
                sim.kernel(s, lambda: None)
        assert r.recorded == 4
        with pytest.raises(graphtoggle.NotKernelError) as e:
            with agent.producer(("resid_post", 1), stream=s):
                sim.kernel(s, lambda: None)
                sim.memcpy(s)
        assert "copy_out" in str(e.value) or "torch.mul" in str(e.value)
        with pytest.raises(graphtoggle.NotKernelError):
            with agent.producer(("resid_post", 2), stream=s):
                pass  # nothing at all
        with pytest.raises(graphtoggle.InvalidArgumentError):
            with agent.producer(("resid_post", 2), stream=s):
                with agent.producer(("resid_post", 3), stream=s):
                    sim.kernel(s, lambda: None)
        # an exception in the body drops the region: nothing recorded, next region works
        with pytest.raises(KeyError):
            with agent.producer(("attn_out", 0), stream=s):
                sim.kernel(s, lambda: None)
                raise KeyError("body failed")
        with agent.producer(("attn_out", 1), stream=s) as r2:
            sim.kernel(s, lambda: None)
        assert r2.recorded == 1
        g = sim.end_capture(s)
    assert agent.graph_hooks(g) == {("resid_post", 0), ("attn_out", 1)}
    assert agent.graph_status(g)["nodes"] == 5


def test_producer_outside_capture_names_the_fix(agent):
    sim, s = agent.sim, agent.sim.stream()
    with pytest.raises(graphtoggle.CaptureError, match="agent.capture"):
        with agent.producer(("resid_post", 0), stream=s):
            sim.kernel(s, lambda: None)
    with agent.capture():  # window open, stream not capturing
        with pytest.raises(graphtoggle.CaptureError):
            with agent.producer(("resid_post", 0), stream=s):
                pass
    assert agent.graphs() == []
    with pytest.raises(graphtoggle.SpecError):  # bad hook: refused before anything
        with agent.producer(("nope", 0), stream=s):
            pytest.fail("body must not run")


def test_unbound_unrelated_stale(agent):
    eng = Engine(agent)
    sim, s = agent.sim, eng.stream
    with agent.capture():
        sim.begin_capture(s)
        with agent.producer(("mlp_out", 2), stream=s):
            sim.kernel(s, lambda: eng.ran.append(("mlp_out", 2)))
        g = sim.end_capture(s)
    e = sim.instantiate(g)  # not through the agent: unbound
    agent.set_enabled("all")
    agent.step(0)
    with pytest.raises(graphtoggle.UnboundError):
        eng.replay(g, e)
    assert eng.ran == [] and agent.anomalies()["launch_unbound"] == 1
    agent.bind(g, e)
    assert eng.replay(g, e) == {("mlp_out", 2)}
    # unrelated graph: launched untouched
    sim.begin_capture(s)
    sim.kernel(s, eng._layer)
    u = sim.end_capture(s)
    ue = sim.instantiate(u)
    before = eng.layer_runs
    agent.launch(u, ue, s)
    assert eng.layer_runs == before + 1 and agent.stats()["launches_unrelated"] == 1
    with pytest.raises(graphtoggle.UnknownGraphError):
        agent.bind(u, ue)
    # forgotten: fails closed
    agent.forget(g)
    with pytest.raises(graphtoggle.StaleError):
        eng.replay(g, e)
    assert eng.ran == []


def test_reinstantiate_rebinds(agent):
    eng = Engine(agent)
    g, e1 = eng.capture()
    agent.set_enabled("resid_post:1")
    agent.step(0)
    assert eng.replay(g, e1) == {("resid_post", 1)}
    e2 = agent.sim.instantiate(g)  # a new exec starts with every producer on
    agent.set_enabled("attn_out:3")
    agent.step(1)
    assert eng.replay(g, e2) == {("attn_out", 3)}  # launching with it rebinds
    st = agent.graph_status(g)
    assert st["exec"] == e2 and st["bound"] and agent.stats()["rebinds"] >= 1
    reg = agent.registry_check()
    assert reg["graphs"] == 1 and reg["complete"]


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("full", [True, False])
def test_full_exec_keyword(mode, full):
    """full_exec=True (the default) builds the full exec next to the producer-free one and
    every step the producer-free one does not fit (all on, or a set in between) runs it;
    full_exec=False builds none and they run the main exec.  Ground truth: the producers'
    own logs."""
    kwargs = {} if full else dict(full_exec=False)
    with Agent("f", hooks=HOOKS, backend="sim", mode=mode, **kwargs) as a:
        eng = Engine(a)
        g, e = eng.capture()
        st = a.graph_status(g)
        assert st["bare_exec"] and st["full_exec"] is full
        assert a.stats()["full_builds"] == (1 if full else 0)
        a.set_enabled("all")
        a.step(0)
        every = {(t, l) for t in HOOKS for l in range(4)}
        assert eng.replay(g, e) == every
        st = a.graph_status(g)
        assert st["full_running"] is full and st["full_replays"] == (1 if full else 0)
        a.set_enabled("attn_out:2")
        a.step(1)
        assert eng.replay(g, e) == {("attn_out", 2)}
        st = a.graph_status(g)
        assert st["full_running"] is full and st["full_replays"] == (2 if full else 0)
        a.set_enabled("none")
        a.step(2)
        assert eng.replay(g, e) == set()
        st = a.graph_status(g)
        assert st["bare_running"] and not st["full_running"]
    with pytest.raises(graphtoggle.InvalidArgumentError, match="full_exec"):
        Agent("f", hooks=HOOKS, backend="sim", full_exec=None)


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("bare", [True, False])
def test_bare_exec_keyword(mode, bare):
    """bare_exec=None (the default: graphs bound through instantiate/bind are launched
    with launch(), which can run it) builds the producer-free exec at bind and its launches
    run it while the set enables none of the graph's hooks; bare_exec=False never builds
    one.  Ground truth: the producers' and layers' own logs; graph_status says which exec
    ran."""
    kwargs = {} if bare else dict(bare_exec=False)
    with Agent("b", hooks=HOOKS, backend="sim", mode=mode, **kwargs) as a:
        eng = Engine(a)
        g, e = eng.capture()
        st = a.graph_status(g)
        assert st["bare_exec"] is bare and not st["bare_running"] and st["bare_replays"] == 0
        assert a.stats()["bare_builds"] == (1 if bare else 0)
        assert a.stats()["bare_build_failures"] == 0
        layers = eng.layer_runs
        a.set_enabled(None)
        a.step(0)
        assert eng.replay(g, e) == set()
        assert eng.layer_runs == layers + 4  # every non-producer kernel ran, once
        st = a.graph_status(g)
        assert st["bare_running"] is bare and st["bare_replays"] == (1 if bare else 0)
        a.set_enabled("attn_out:2")
        a.step(1)
        assert eng.replay(g, e) == {("attn_out", 2)}
        st = a.graph_status(g)
        assert not st["bare_running"] and st["bare_replays"] == (1 if bare else 0)
        assert st["replays"] == 2
        a.set_enabled(None)
        a.step(2)
        assert eng.replay(g, e) == set()
        st = a.graph_status(g)
        assert st["bare_running"] is bare and st["bare_replays"] == (2 if bare else 0)
        assert a.stats()["bare_switches"] == (3 if bare else 0)


def test_bare_exec_keyword_refused():
    with pytest.raises(graphtoggle.InvalidArgumentError, match="bare_exec"):
        Agent("b", hooks=HOOKS, backend="sim", bare_exec="no")


def test_status(agent):
    eng = Engine(agent, types=["resid_post"])
    g, e = eng.capture()
    agent.step(0)
    eng.replay(g, e)
    st = agent.graph_status(g)
    assert st["graph"] == g and st["nodes"] == 4 and st["hooks_covered"] == 4
    assert st["replays"] == 1 and st["last_step"] == 0 and st["mode"] == "lazy"
    assert [x["graph"] for x in agent.graphs()] == [g]
    assert agent.stats()["launches"] == 1 and agent.stats()["step"] == 0
    reg = agent.registry_check()
    assert reg["graphs"] == 1 and not reg["complete"] and reg["hooks_uncovered"] == 8
    with pytest.raises(graphtoggle.UnknownGraphError):
        agent.graph_status(12345)


# ---- copy_out on the simulator -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["lazy", "device"])
def test_copy_out_contiguous_and_strided(mode):
    with Agent("c", hooks=HOOKS, backend="sim", mode=mode) as a:
        sim, s = a.sim, a.sim.stream()
        src = FakeTensor(sim, (4, 8))  # 4 rows of 8 floats
        cols = FakeTensor(sim, (4, 3), stride=(8, 1), ptr=src.ptr + 2 * 4)  # src[:, 2:5]
        dst1, dst2 = FakeTensor(sim, (4, 8)), FakeTensor(sim, (4, 3))
        data = bytes(range(128))
        sim.write(src.ptr, data, s)
        with a.capture():
            sim.begin_capture(s)
            a.capture_planner(s)
            a.copy_out(src, dst1, ("resid_post", 0), stream=s)
            a.copy_out(cols, dst2, ("mlp_out", 1), stream=s)
            g = sim.end_capture(s)
        e = a.instantiate(g)
        a.set_enabled("mlp_out:1")
        a.step(0)
        a.launch(g, e, s)
        assert sim.read(dst1.ptr, 128) == bytes(128)  # disabled: not written
        want = b"".join(data[r * 32 + 8: r * 32 + 20] for r in range(4))
        assert sim.read(dst2.ptr, 48) == want
        a.set_enabled("all")
        a.step(1)
        a.launch(g, e, s)
        assert sim.read(dst1.ptr, 128) == data
        assert a.graph_status(g)["mode"] == a.mode


def test_copy_out_bad_geometry(agent):
    sim = agent.sim
    src = FakeTensor(sim, (4, 8))
    with pytest.raises(graphtoggle.InvalidArgumentError, match="empty_like"):
        agent.copy_out(src, FakeTensor(sim, (4, 7)), ("resid_post", 0), stream=sim.stream())
    col = FakeTensor(sim, (4, 1), stride=(8, 2), ptr=src.ptr)
    odd = FakeTensor(sim, (2, 2, 2), stride=(16, 4, 2), ptr=src.ptr)  # inner stride 2
    with pytest.raises(graphtoggle.InvalidArgumentError, match="neither contiguous"):
        agent.copy_out(odd, FakeTensor(sim, (2, 2, 2)), ("resid_post", 0), stream=sim.stream())
    assert col.numel() == 4


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_set_exec_through_the_binding(mode):
    """A set in between held for 8 steps gets its set exec at the next step_begin; the
    binding reports it (graph_status set_exec/set_running/set_replays, stats set_builds)
    and every replay runs exactly the step's producers (their own logs)."""
    with Agent("s", hooks=HOOKS, backend="sim", mode=mode) as a:
        eng = Engine(a)
        g, e = eng.capture()
        held = {("resid_post", 1), ("mlp_out", 3)}
        a.set_enabled(sorted(held))
        for step in range(9):
            a.step(step)
            assert eng.replay(g, e) == held
            st = a.graph_status(g)
            assert st["full_running"] and not st["set_exec"], step
        a.step(9)
        assert eng.replay(g, e) == held
        st = a.graph_status(g)
        assert st["set_exec"] and st["set_running"] and st["set_replays"] == 1
        assert a.stats()["set_builds"] == 1 and a.stats()["set_build_failures"] == 0
        a.set_enabled("attn_out:0,resid_post:2")
        a.step(10)
        assert eng.replay(g, e) == {("attn_out", 0), ("resid_post", 2)}
        assert a.graph_status(g)["full_running"]
        a.set_enabled(sorted(held))
        a.step(11)
        assert eng.replay(g, e) == held
        assert a.graph_status(g)["set_running"] and a.stats()["set_builds"] == 1


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("assemble", [True, False])
def test_all_on_set_exec_after_a_set_in_between(mode, assemble):
    """All on on a full exec that a set in between ran on (its producers disabled and
    enabled again by node sets, slower all on on the GPU) gets an all-on exec of its own
    at the next step, held or not: all on alternating with a set in between (a per-step
    plan) then runs it, the other set the full exec, with no node set.  On a full exec no
    node set touched, none.  Every replay runs exactly its step's producers (their own
    logs)."""
    kwargs = {} if assemble else dict(assemble_execs=False)
    with Agent("s", hooks=HOOKS, backend="sim", mode=mode, **kwargs) as a:
        eng = Engine(a)
        g, e = eng.capture()
        every = {(t, l) for t in HOOKS for l in range(4)}

        def hold_all(first, steps):
            a.set_enabled("all")
            for n in range(first, first + steps):
                a.step(n)
                assert eng.replay(g, e) == every, n
        hold_all(0, 12)
        st = a.graph_status(g)
        assert st["full_running"] and not st["set_exec"]
        a.set_enabled("mlp_out:1")
        a.step(12)
        assert eng.replay(g, e) == {("mlp_out", 1)}
        hold_all(13, 1)
        assert a.graph_status(g)["full_running"] and a.stats()["set_builds"] == 0
        hold_all(14, 1)
        st = a.graph_status(g)
        assert st["set_exec"] and st["set_running"] and st["set_replays"] == 1
        assert a.stats()["set_builds"] == 1
        for n in range(15, 25):
            if n % 2:
                a.set_enabled("mlp_out:1")
                a.step(n)
                assert eng.replay(g, e) == {("mlp_out", 1)}
                assert a.graph_status(g)["full_running"]
            else:
                hold_all(n, 1)
                assert a.graph_status(g)["set_running"]
        st = a.graph_status(g)
        assert st["set_replays"] == 6 and a.stats()["set_builds"] == 1


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("assemble", [True, False])
def test_assemble_execs_keyword(mode, assemble):
    """assemble_execs (the default): the producer-free and full execs are assembled node
    by node (stats: assembled_builds), not cloned; False: cloned.  Either way every set
    runs exactly its producers on them, a held set in between gets its set exec.
    Ground truth: the producers' own logs."""
    kwargs = {} if assemble else dict(assemble_execs=False)
    with Agent("a", hooks=HOOKS, backend="sim", mode=mode, **kwargs) as a:
        eng = Engine(a)
        g, e = eng.capture()
        st = a.stats()
        assert st["assembled_builds"] == (2 if assemble else 0)
        assert st["assemble_fallbacks"] == 0
        every = {(t, l) for t in HOOKS for l in range(4)}
        for n, (spec, want) in enumerate([("all", every), ("none", set()),
                                          ("attn_out:2", {("attn_out", 2)}), ("all", every)]):
            a.set_enabled(spec)
            a.step(n)
            assert eng.replay(g, e) == want, spec
        a.set_enabled("resid_post:0-1")
        for n in range(4, 4 + 12):
            a.step(n)
            assert eng.replay(g, e) == {("resid_post", 0), ("resid_post", 1)}
        assert a.graph_status(g)["set_running"]
    with pytest.raises(graphtoggle.InvalidArgumentError, match="assemble_execs"):
        Agent("a", hooks=HOOKS, backend="sim", assemble_execs="yes")


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_set_exec_keyword(mode):
    """set_exec=False: a held set in between keeps running on the full exec, exactly;
    anything but a bool is refused."""
    with Agent("s", hooks=HOOKS, backend="sim", mode=mode, set_exec=False) as a:
        eng = Engine(a)
        g, e = eng.capture()
        a.set_enabled("resid_post:0-1")
        for step in range(3 * 9):
            a.step(step)
            assert eng.replay(g, e) == {("resid_post", 0), ("resid_post", 1)}
        st = a.graph_status(g)
        assert not st["set_exec"] and st["full_running"] and a.stats()["set_builds"] == 0
    with pytest.raises(graphtoggle.InvalidArgumentError, match="set_exec"):
        Agent("s", hooks=HOOKS, backend="sim", set_exec=1)
