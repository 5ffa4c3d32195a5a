"""torch_proof.py - the Python leg of `make gpu-check`: graphtoggle from PyTorch on a real
GPU, with torch.cuda.CUDAGraph graphs per batch size.

Proves, with ground truth read from the monitor buffers (every buffer is filled with a
sentinel before each replay; a producer that ran overwrote its buffer with activations,
which are bounded by tanh and never equal the sentinel), never from libtoggle's
counters:

 1. lazy mode through graphtoggle.torch.patch (the engine pattern: the engine creates
    torch.cuda.CUDAGraph() itself and captures with torch.cuda.graph), eager mode through
    agent.capture(g) / agent.replay(g), device mode (strict) through the patch with
    agent.copy_out producers (contiguous and strided rows): each STEPS steps with random
    standing sets, per-step plans, a random batch size per step (graphs for 1..32) and
    re-instantiation of a random graph every 500 steps; the producers that ran at each
    replay must be exactly the step's effective set; regions of two kernels run both or
    none; copy_out copies the right bytes.
 2. an unrelated graph (no producers) captured while patched replays untouched and right;
    a producer graph whose exec is not bound fails closed (nothing runs).
 3. the patch lifecycle on torch 2.11: two owners, exact restore of the class, keep_graph
    respected after the last owner, graphs of an ended session replay as torch's own and
    are never adopted by a later session; a destroyed graph is forgotten.
 4. random ops (torch.rand, dropout, torch.randn) in a graph with producers draw new
    numbers at each replay, the same sequence as torch's own replay from the same seed,
    through the patch (lazy, device) and agent.capture / agent.replay (eager): the guarded
    replay is toggle_graph_prepare + torch's own replay, whose generator prologue runs.
    Prints the patched replay's host time against torch's own replay.
 5. figures (with --bench): host time of agent.step() + guarded replay against
    g.replay(); a change of k hooks against the C calls alone; GPU time per replay
    without producers, producers off, all on; torch recapture of the same model.

Prints one line "torch-proof: PASS" or "torch-proof: FAIL (...)"; exit 0 on PASS and on
SKIPPED (no torch or no GPU), 1 on FAIL.
"""

import argparse
import os
import random
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

try:
    import torch
except ImportError:
    print("torch-proof: SKIPPED: python3 cannot import torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch-proof: SKIPPED: torch sees no CUDA device")
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402
from graphtoggle import Agent  # noqa: E402

TYPES = ["resid_post", "attn_out", "mlp_out"]
SIZES = [1, 2, 4, 8, 16, 32]
SENT = 1.0e30
FAILS = []
RNG_MODES = ("lazy", "eager", "device")  # rng_check's agents


def fail(msg):
    FAILS.append(msg)
    print("torch-proof: mismatch: " + msg, flush=True)


class Model:
    """A transformer-like stack with random weights: per layer an attention-like block whose
    output is the first half of a [bs, 2H] projection (a strided view: copy_out's strided
    rows), an MLP, and the residual stream.  Activations are bounded by tanh."""

    def __init__(self, layers, hidden, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        H = hidden
        self.L, self.H = layers, hidden
        self.wa = [torch.randn(H, 2 * H, device="cuda", generator=g) / H ** 0.5
                   for _ in range(layers)]
        self.wm = [torch.randn(H, H, device="cuda", generator=g) / H ** 0.5
                   for _ in range(layers)]

    def forward(self, x, produce=None):
        """produce(type index, layer, tensor) is called at each hook point."""
        for l in range(self.L):
            qa = torch.tanh(x @ self.wa[l])        # [bs, 2H]
            attn = qa[:, : self.H]                 # strided rows
            if produce:
                produce(1, l, attn)
            h = x + attn
            mlp = torch.tanh(h @ self.wm[l])
            if produce:
                produce(2, l, mlp)
            x = torch.tanh(h + mlp)
            if produce:
                produce(0, l, x)
        return x


class Rig:
    """Static inputs, monitor buffers and graphs per batch size for one agent."""

    def __init__(self, agent, model, method):
        self.agent, self.model, self.method = agent, model, method
        L, H = model.L, model.H
        self.n_hooks = len(TYPES) * L
        self.inp = torch.rand(max(SIZES), H, device="cuda") * 2 - 1
        # mon[hook][bs]: one monitor buffer per (hook, batch size); mon2: the second kernel
        # of mlp_out's two-kernel region
        self.mon = torch.full((self.n_hooks, max(SIZES), H), SENT, device="cuda")
        self.mon2 = torch.full((L, max(SIZES), H), SENT, device="cuda")
        self.out = {}
        self.graphs = {}

    def hook_index(self, t, l):
        return t * self.model.L + l

    def produce_for(self, bs):
        agent, rig = self.agent, self

        def produce(t, l, x):
            buf = rig.mon[rig.hook_index(t, l), :bs]
            hook = (TYPES[t], l)
            if rig.method == "copy_out":
                agent.copy_out(x, buf, hook)
            elif t == 2:  # a region of two kernels
                with agent.producer(hook) as r:
                    torch.mul(x, 1.0, out=buf)
                    torch.add(x, 0.0, out=rig.mon2[l, :bs])
                assert r.recorded == 2, r.recorded
            else:
                with agent.producer(hook) as r:
                    torch.mul(x, 1.0, out=buf)
                assert r.recorded == 1, r.recorded
        return produce

    def capture(self, bs, via):
        x = self.inp[:bs]
        # warm up on a side stream (torch's rule for capture)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.model.forward(x)
        torch.cuda.current_stream().wait_stream(s)
        if via == "patch":
            g = torch.cuda.CUDAGraph()  # the engine's own call, patched
            with torch.cuda.graph(g):
                self.out[bs] = self.model.forward(x, self.produce_for(bs))
        else:
            g = torch.cuda.CUDAGraph(keep_graph=True)
            with self.agent.capture(g):
                self.out[bs] = self.model.forward(x, self.produce_for(bs))
        self.graphs[bs] = g
        return g

    def ran(self):
        """Which hooks' producers wrote their buffers since the last reset: per hook, all
        batch sizes' first element (only the replayed graph's buffer can change)."""
        first = self.mon[:, :, 0]                       # [hooks, 32]
        wrote = (first != SENT).any(dim=1)
        wrote2 = (self.mon2[:, :, 0] != SENT).any(dim=1)
        return wrote.cpu().tolist(), wrote2.cpu().tolist()

    def reset(self):
        self.mon.fill_(SENT)
        self.mon2.fill_(SENT)


def effective_bits(agent, eff, n_layers):
    want = [False] * (len(TYPES) * n_layers)
    for t, l in eff:
        want[TYPES.index(t) * n_layers + l] = True
    return want


def run_phase(name, agent, rig, steps, replay, rng, check_copy=True):
    L = rig.model.L
    all_hooks = [(t, l) for t in TYPES for l in range(L)]
    mism = 0
    replays = 0
    reinst = 0
    plans = 0
    t0 = time.perf_counter()
    for step in range(steps):
        r = rng.random()
        if r < 0.25:
            agent.set_enabled(rng.sample(all_hooks, rng.randrange(0, len(all_hooks) + 1)))
        elif r < 0.30:
            agent.set_enabled(rng.choice(["all", "none", "resid_post:*", "*:0-1"]))
        if rng.random() < 0.08:
            ahead = agent.current_step + 1 + rng.randrange(3)
            try:
                agent.plan(ahead, rng.sample(all_hooks, rng.randrange(0, 8)))
                plans += 1
            except graphtoggle.LimitError:
                pass
        if step and step % 500 == 0:
            g = rig.graphs[rng.choice(SIZES)]
            g.instantiate()  # a new exec: bound by the patch / agent.capture's wrapper
            reinst += 1
        eff = agent.step()
        bs = rng.choice(SIZES)
        rig.reset()
        replay(rig.graphs[bs])
        replays += 1
        got, got2 = rig.ran()
        want = effective_bits(agent, eff, L)
        if got != want:
            mism += 1
            if mism <= 5:
                fail("%s step %d bs %d: ran %s, step set %s" % (
                    name, agent.current_step, bs,
                    [all_hooks[i] for i, v in enumerate(got) if v], eff))
        if rig.method != "copy_out":
            want2 = [want[rig.hook_index(2, l)] for l in range(L)]
            if got2 != want2:
                mism += 1
                fail("%s step %d: second kernel of mlp_out regions ran %s, first %s"
                     % (name, agent.current_step, got2, want2))
        if check_copy and step % 997 == 0 and eff:
            # the producers copied the right bytes: recompute eagerly and compare
            acts = {}
            rig.model.forward(rig.inp[:bs], lambda t, l, x: acts.__setitem__(
                (t, l), x.clone()))
            torch.cuda.synchronize()
            for (tn, l) in eff:
                t = TYPES.index(tn)
                got_t = rig.mon[rig.hook_index(t, l), :bs]
                if not torch.allclose(got_t, acts[(t, l)], rtol=1e-3, atol=1e-4):
                    mism += 1
                    fail("%s step %d: buffer of %s:%d differs from the activation"
                         % (name, agent.current_step, tn, l))
                    break
    dt = time.perf_counter() - t0
    an = agent.anomalies()
    st = agent.stats()
    print("torch-proof: %-6s %d steps, %d replays over %d graphs (bs %s), %d plans, "
          "%d re-instantiations, %d mismatches, %.1f s; mode %s; node_set_calls %d, "
          "mask_writes %d, driver_errors %d"
          % (name, steps, replays, len(rig.graphs), ",".join(map(str, SIZES)), plans, reinst,
             mism, dt, agent.mode, st["node_set_calls"], st["mask_writes"],
             an["driver_errors"]), flush=True)
    if an["driver_errors"]:
        fail("%s: %d driver errors" % (name, an["driver_errors"]))
    return mism


def class_snapshot():
    C = torch.cuda.graphs.CUDAGraph
    return {k: C.__dict__.get(k) for k in ("__new__", "__init__", "capture_begin",
                                            "capture_end", "instantiate", "replay", "reset")}


def prove(args):
    rng = random.Random(args.seed)
    model = Model(args.layers, args.hidden, args.seed)
    hooks = {t: args.layers for t in TYPES}
    pristine = class_snapshot()

    # ---- lazy, through the patch (the engine pattern) ----
    lazy = Agent("torch-lazy", hooks=hooks, mode="lazy")
    owner_a = gtt.patch(lazy)
    owner_b = gtt.patch(lazy)  # a second owner (e.g. a plugin and the engine)
    rig = Rig(lazy, model, "mul")
    for bs in SIZES:
        rig.capture(bs, "patch")
    # an unrelated graph captured while patched
    ug = torch.cuda.CUDAGraph()
    uy = torch.empty(4, args.hidden, device="cuda")
    ux = torch.rand(4, args.hidden, device="cuda")
    with torch.cuda.graph(ug):
        torch.mul(ux, 3.0, out=uy)
    mism = run_phase("lazy", lazy, rig, args.steps, lambda g: g.replay(), rng)
    launches = lazy.stats()["launches"]
    uy.zero_()
    ug.replay()
    torch.cuda.synchronize()
    if not torch.equal(uy, ux * 3.0) or lazy.stats()["launches"] != launches:
        fail("unrelated graph: not replayed untouched")
    # an unbound producer graph fails closed
    g1 = rig.graphs[1]
    raw = g1.raw_cuda_graph()
    lazy.bind(raw, None)
    rig.reset()
    out_before = rig.out[1].clone()
    rig.out[1].fill_(7.0)
    try:
        g1.replay()
        fail("unbound producer graph: replay was not refused")
    except graphtoggle.GraphToggleError as e:
        refused = e
    torch.cuda.synchronize()
    got, _ = rig.ran()
    if any(got) or not bool((rig.out[1] == 7.0).all()):
        fail("unbound producer graph: something ran")
    print("torch-proof: unbound producer graph refused (%s); nothing ran" % type(refused).__name__)
    g1.instantiate()  # binds again
    rig.out[1].copy_(out_before)
    # patch lifecycle
    owner_a.end()
    if gtt.patched() is not lazy:
        fail("patch: ended with an owner left")
    owner_b.end()
    if gtt.patched() is not None or class_snapshot() != pristine:
        fail("patch: torch.cuda.CUDAGraph not restored exactly")
    n = torch.cuda.CUDAGraph(keep_graph=False)
    with torch.cuda.graph(n):
        torch.mul(ux, 2.0, out=uy)
    try:
        n.raw_cuda_graph()
        fail("patch: keep_graph=False not respected after the last owner ended")
    except RuntimeError:
        pass
    launches = lazy.stats()["launches"]
    rig.graphs[4].replay()  # a graph of the ended session: torch's own replay
    torch.cuda.synchronize()
    if lazy.stats()["launches"] != launches:
        fail("patch: a graph of the ended session still replays through the agent")
    print("torch-proof: patch lifecycle: 2 owners, class restored exactly, keep_graph "
          "respected after, ended-session graphs replay as torch's own", flush=True)

    # ---- eager, through agent.capture / agent.replay (no patch) ----
    eager = Agent("torch-eager", hooks=hooks, mode="eager")
    rig_e = Rig(eager, model, "mul")
    for bs in SIZES:
        rig_e.capture(bs, "capture")
    mism += run_phase("eager", eager, rig_e, args.steps, eager.replay, rng)

    # ---- device, through a new patch session with copy_out ----
    dev = Agent("torch-device", hooks=hooks, mode="device", strict=True)
    with gtt.patch(dev):
        rig_d = Rig(dev, model, "copy_out")
        for bs in SIZES:
            rig_d.capture(bs, "patch")
        modes = {dev.graph_status(g.raw_cuda_graph())["mode"] for g in rig_d.graphs.values()}
        if modes != {"device"}:
            fail("device: graphs run in %s" % modes)
        # the earlier session's graphs are not adopted by this one
        rig.graphs[8].replay()
        if dev.graphs() and any(s["graph"] == rig.graphs[8].raw_cuda_graph()
                                for s in dev.graphs()):
            fail("device session adopted a graph of the lazy session")
        mism += run_phase("device", dev, rig_d, args.steps, lambda g: g.replay(), rng)
        dc = [dev.device_counters(g.raw_cuda_graph()) for g in rig_d.graphs.values()]
        fails = sum(d["device_failures"] for d in dc)
        print("torch-proof: device planner runs %d, device calls %d, failures %d; host "
              "node_set_calls %d" % (sum(d["planner_runs"] for d in dc),
                                     sum(d["device_calls"] for d in dc), fails,
                                     dev.stats()["node_set_calls"]), flush=True)
        if dev.stats()["node_set_calls"]:
            fail("device: the host made cuGraphNodeSetEnabled calls")
        # forgotten when destroyed
        g = rig_d.graphs.pop(32)
        raw = g.raw_cuda_graph()
        del g
        import gc
        gc.collect()
        if not dev.graph_status(raw)["stale"]:
            fail("device: a destroyed graph was not forgotten")
    torch.cuda.synchronize()
    for a in (lazy, eager, dev):
        a.close()
    return mism


# ---- figures -----------------------------------------------------------------------------

def host_us(fn, n=256, rounds=40):
    """Median host time per call of fn over bursts of n calls (synchronised between bursts
    so the launch queue never fills: host time, not GPU time)."""
    res = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        res.append((time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(res)


def host_us_pair(fa, fb, n=256, rounds=40):
    """host_us of fa and fb measured in alternating bursts (drift of the machine hits both)."""
    ra, rb = [], []
    for _ in range(rounds):
        for fn, res in ((fa, ra), (fb, rb)):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            res.append((time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(ra), statistics.median(rb)


def gpu_us(fn, n=200, rounds=10):
    res = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        res.append(a.elapsed_time(b) * 1000 / n)
    return statistics.median(res)


def bench(args):
    model = Model(args.layers, args.hidden, args.seed)
    hooks = {t: args.layers for t in TYPES}
    L = args.layers
    nh = 3 * L
    x = torch.rand(1, args.hidden, device="cuda")
    print("torch-proof: figures: %d layers, hidden %d, batch 1, %d producers" % (L, args.hidden, nh))

    plain = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(plain):
        model.forward(x)
    plain.instantiate()
    # the same model with torch.mul producers, no graphtoggle (always on)
    mon = torch.empty(nh, 1, args.hidden, device="cuda")
    always = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(always):
        model.forward(x, lambda t, l, a: torch.mul(a, 1.0, out=mon[t * L + l]))
    always.instantiate()

    rows = []
    for mode in ("lazy", "device"):
        agent = Agent("bench-" + mode, hooks=hooks, mode=mode, strict=(mode == "device"))
        with gtt.patch(agent):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                model.forward(x, (lambda t, l, a: agent.copy_out(a, mon[t * L + l], (TYPES[t], l)))
                              if mode == "device" else
                              (lambda t, l, a: _mul_producer(agent, a, mon[t * L + l], (TYPES[t], l))))
            agent.set_enabled("all")
            agent.step()
            for _ in range(50):
                g.replay()

            def step_replay():
                agent.step()
                g.replay()
            h_torch, h_gt = host_us_pair(plain.replay, step_replay)
            h_step = host_us(agent.step)
            # a change of k hooks at every step (two sets alternating), against the same C
            # calls made through ctypes with prebuilt arguments (the C path)
            changes = {}
            for k in (1, 8, nh):
                sa = agent.hookset("none")
                sb = agent.hookset([(t, l) for t in TYPES for l in range(L)][:k])
                flip = [sa, sb]
                i = [0]

                def change():
                    i[0] ^= 1
                    agent.set_enabled(flip[i[0]])
                    agent.step()
                    g.replay()
                py = None
                lib = agent._lib
                ca = agent.catalog.to_c(sa.bits)
                cb = agent.catalog.to_c(sb.bits)
                cflip = [ca, cb]
                st = gtt._owner_of(g)
                h = agent._h
                stream = torch.cuda.current_stream().cuda_stream
                out = graphtoggle._lib.Set()
                j = [0, agent.current_step]
                import ctypes as _c

                c_replay = torch._C._CUDAGraph.replay  # torch's C++ replay, no Python layer

                def change_c():
                    j[0] ^= 1
                    j[1] += 1
                    lib.toggle_set_enabled(h, _c.byref(cflip[j[0]]))
                    lib.toggle_step_begin(h, j[1], _c.byref(out))
                    lib.toggle_graph_prepare(h, st.graph, st.exec, stream)
                    c_replay(g)
                # alternating bursts; the C calls keep their own step counter ahead
                def change_py():
                    agent._step = j[1]
                    change()
                    j[1] = agent.current_step
                py, c = host_us_pair(change_py, change_c, n=64, rounds=20)
                agent._step = j[1]
                changes[k] = (py, c)
            agent.set_enabled("none")
            agent.step()
            g_off = gpu_us(g.replay)
            agent.set_enabled("all")
            agent.step()
            g_on = gpu_us(g.replay)
        rows.append((mode, h_torch, h_gt, h_step, changes, g_off, g_on))
        agent.close()
    g_plain = gpu_us(plain.replay)
    g_always = gpu_us(always.replay)
    # what a user does today to change the set: capture and instantiate the graph again
    rec = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        gg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gg):
            model.forward(x, lambda t_, l, a: torch.mul(a, 1.0, out=mon[t_ * L + l]))
        gg.replay()
        torch.cuda.synchronize()
        rec.append((time.perf_counter() - t) * 1e3)
        del gg
    for mode, h_torch, h_gt, h_step, changes, g_off, g_on in rows:
        print("torch-proof: %-6s host: agent.step()+g.replay() %.2f us (+%.2f over g.replay() "
              "%.2f); agent.step() alone %.2f us" % (mode, h_gt, h_gt - h_torch, h_torch, h_step))
        for k, (py, c) in changes.items():
            print("torch-proof: %-6s change of %3d hooks per step: Python %.2f us, C calls via "
                  "ctypes and torch's C++ replay %.2f us (+%.2f)" % (mode, k, py, c, py - c))
        print("torch-proof: %-6s GPU us/replay: producers off %.2f, all on %.2f"
              % (mode, g_off, g_on))
    print("torch-proof: GPU us/replay: torch graph without producers %.2f, torch graph with "
          "%d always-on producers %.2f" % (g_plain, nh, g_always))
    print("torch-proof: torch recapture + instantiate + first replay: median %.2f ms "
          "(min %.2f)" % (statistics.median(rec), min(rec)))


def _draws(replay, r1, r2, n):
    seen = []
    for _ in range(n):
        replay()
        torch.cuda.synchronize()
        seen.append((r1.clone(), r2.clone()))
    return seen


def rng_check(args):
    """Random ops in a graph with producers (torch.rand, as dropout and sampling draw) must
    give new numbers at each replay, exactly torch's own: same seed, same sequence as the
    same random ops in a graph replayed by unpatched torch.  Through the patch (lazy,
    device) and agent.capture / agent.replay (eager).  The patched replay calls
    toggle_graph_prepare and then torch's own replay, whose generator prologue advances the
    Philox offset (issue 9 follow-up: launching through toggle_graph_launch skipped it and
    the numbers repeated).  Also prints the patched replay's host time."""
    n = 5
    x = torch.ones(64, device="cuda")
    r1 = torch.empty(8, device="cuda")
    r2 = torch.empty(3, 5, device="cuda")
    buf = torch.empty(64, device="cuda")

    def body(produce):
        torch.rand(8, device="cuda", out=r1)
        y = torch.tanh(x * 0.5)
        if produce:
            produce(y)
        torch.nn.functional.dropout(y, p=0.5, training=True)
        torch.randn(3, 5, device="cuda", out=r2)

    # torch's own: no patch, no agent
    torch.manual_seed(args.seed + 99)
    ref = torch.cuda.CUDAGraph()
    with torch.cuda.graph(ref):
        body(None)
    want = _draws(ref.replay, r1, r2, n)
    for i in range(1, n):
        if torch.equal(want[i][0], want[i - 1][0]):
            fail("rng: torch's own replay repeated its numbers (the reference is broken)")

    results = {}
    for how in RNG_MODES:
        agent = Agent("rng-" + how, hooks={"h": 1}, mode=how, strict=(how == "device"))
        if how == "device":
            produce = (lambda y, a=agent: a.copy_out(y, buf, ("h", 0)))
        else:
            produce = (lambda y, a=agent: _mul_producer(a, y, buf, ("h", 0)))
        owner = gtt.patch(agent) if how != "eager" else None
        try:
            torch.manual_seed(args.seed + 99)
            if owner is not None:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    body(produce)
                replay = g.replay
            else:
                g = torch.cuda.CUDAGraph(keep_graph=True)
                with agent.capture(g):
                    body(produce)
                replay = (lambda a=agent, gg=g: a.replay(gg))
            if not agent.graph_status(g.raw_cuda_graph())["bound"]:
                fail("rng %s: the graph has no bound producers" % how)
            agent.set_enabled("all")
            agent.step()
            got = _draws(replay, r1, r2, n)
            same = all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                       for a, b in zip(got, want))
            fresh = all(not torch.equal(got[i][0], got[i - 1][0]) for i in range(1, n))
            if not fresh:
                fail("rng %s: torch.rand in a graph with producers repeats its numbers "
                     "between replays" % how)
            if not same:
                fail("rng %s: random ops in a graph with producers differ from torch's own "
                     "replay with the same seed" % how)
            if agent.stats()["launches"] != n:
                fail("rng %s: %d launches accounted for %d replays"
                     % (how, agent.stats()["launches"], n))
            results[how] = fresh and same
            if how == "lazy":
                # the patched replay's host time (unchanged set: prepare's fast path +
                # torch's own replay) against torch's own replay of the reference graph
                for _ in range(50):
                    g.replay()
                h_ref, h_patched = host_us_pair(ref.replay, g.replay)
                print("torch-proof: host time per replay: patched g.replay() %.2f us, "
                      "torch's own %.2f us (+%.2f: toggle_graph_prepare and the patch)"
                      % (h_patched, h_ref, h_patched - h_ref), flush=True)
        finally:
            if owner is not None:
                owner.end()
            torch.cuda.synchronize()
            agent.close()
    print("torch-proof: random ops in graphs with producers: %s"
          % ", ".join("%s %s" % (k, "new numbers each replay, torch's own sequence" if v
                                 else "WRONG") for k, v in results.items()), flush=True)


def _mul_producer(agent, a, buf, hook):
    with agent.producer(hook):
        torch.mul(a, 1.0, out=buf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10000, help="steps per mode")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bench", action="store_true", help="print figures too")
    args = ap.parse_args()
    print("torch-proof: torch %s, %s, graphtoggle %s (%s)" % (
        torch.__version__, torch.cuda.get_device_name(), graphtoggle.__version__,
        graphtoggle.library_path()), flush=True)
    try:
        mism = prove(args)
        rng_check(args)
        if args.bench:
            bench(args)
    except Exception:
        traceback.print_exc()
        print("torch-proof: FAIL (exception)")
        return 1
    if FAILS or mism:
        print("torch-proof: FAIL (%d mismatches, %d failures)" % (mism, len(FAILS)))
        return 1
    print("torch-proof: PASS (lazy, eager and device: %d steps each, 0 mismatches)" % args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
