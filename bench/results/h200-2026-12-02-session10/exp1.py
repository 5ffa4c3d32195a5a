"""Session 10 experiments (not a test): A) mul vs copy_out producers in one lazy process,
mode a; B) torch's forward-hook path vs an instance forward wrapper, eager; C) mode c with
wrappers instead of forward hooks: host per call and correctness."""
import copy, os, statistics, sys, time, traceback
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests", "gpu"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import torch
import graphtoggle, graphtoggle.torch as gtt
import torch_compile_bench as tcb
from tc_model import Model, modules_of
P = "exp1: "
TYPES = tcb.TYPES
L, H, I, BS = 8, 2048, 5632, 8
dt = torch.bfloat16
tcb.raise_recompile_limits()


def kn(g):
    return tcb.kernel_nodes(g.raw_cuda_graph())


def part_a():
    torch.manual_seed(0)
    floor = Model(L, H, I).cuda().to(dt).eval()
    hm, hc = copy.deepcopy(floor), copy.deepcopy(floor)
    x = torch.randn(BS, H, device="cuda", dtype=dt)
    with graphtoggle.Agent("exp-a", hooks={t: L for t in TYPES}, mode="lazy") as agent:
        am = agent.attach(modules_of(hm), max_tokens=BS, width=H, dtype=dt, method="mul")
        ac = agent.attach(modules_of(hc), max_tokens=BS, width=H, dtype=dt, method="copy_out")
        fns = {k: torch.compile(tcb._own_forward(m), fullgraph=True, dynamic=False)
               for k, m in (("floor", floor), ("mul", hm), ("co", hc))}
        for f in fns.values():
            f(x); f(x)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        gs = {}
        gs["floor"] = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(gs["floor"], pool=pool):
            fns["floor"](x)
        agent.set_enabled("none"); agent.step()
        with gtt.patch(agent):
            for k in ("mul", "co"):
                gs[k] = torch.cuda.CUDAGraph(keep_graph=True)
                with torch.cuda.graph(gs[k], pool=pool):
                    fns[k](x)
            for k, att in (("mul", am), ("co", ac)):
                tcb.check_sets(agent, att, gs[k].replay, BS, "exp a " + k)

            def st(g):
                def f():
                    agent.step(); g.replay()
                return f
            legs = {"floor": gs["floor"].replay, "mul_on": st(gs["mul"]), "co_on": st(gs["co"]),
                    "mul_off": st(gs["mul"]), "co_off": st(gs["co"])}
            sets = {"mul_on": "all", "co_on": "all", "mul_off": "none", "co_off": "none"}
            for rnd in range(2):
                t = tcb.time_legs(legs, sets, agent, 15, 20)
                f = t["floor"][0]
                print(P + "A round %d: " % rnd + "  ".join(
                    "%s %.4f ms (%.4fx, %+.2f us)" % (k, v[0], v[0] / f, (v[0] - f) * 1e3)
                    for k, v in t.items()), flush=True)
            for k in ("mul", "co"):
                s = agent.graph_status(gs[k].raw_cuda_graph())
                print(P + "A %s: kernel nodes %s (floor %s), bare %s (%d), full %s (%d)" % (
                    k, kn(gs[k]), kn(gs["floor"]), s["bare_exec"], s["bare_replays"],
                    s["full_exec"], s["full_replays"]), flush=True)
        for g in gs.values():
            g.reset()
        am.detach(); ac.detach()
    torch._dynamo.reset()


def wrap_hooks(model):
    """Replace each forward hook of model's submodules by an instance forward wrapper that
    calls the same hook function (no torch hook left)."""
    n = 0
    for m in model.modules():
        hooks = list(m._forward_hooks.values())
        if not hooks:
            continue
        assert len(hooks) == 1
        fn = hooks[0]
        m._forward_hooks.clear()
        orig = type(m).forward

        def forward(*args, _orig=orig, _m=m, _fn=fn, **kw):
            out = _orig(_m, *args, **kw)
            _fn(_m, args, out)
            return out
        m.forward = forward
        n += 1
    return n


def make_wrapper_noop(model):
    for mods in modules_of(model).values():
        for m in mods:
            orig = type(m).forward

            def forward(*args, _orig=orig, _m=m, **kw):
                out = _orig(_m, *args, **kw)
                return out
            m.forward = forward


def part_b():
    torch.manual_seed(0)
    floor = Model(L, H, I).cuda().to(dt).eval()
    hk, wr = copy.deepcopy(floor), copy.deepcopy(floor)
    for mods in modules_of(hk).values():
        for m in mods:
            m.register_forward_hook(lambda mod, inp, out: None)
    make_wrapper_noop(wr)
    x = torch.randn(BS, H, device="cuda", dtype=dt)
    dh, dw = [], []
    with torch.no_grad():
        for _ in range(21):
            a = tcb.host_us(lambda: floor(x), n=50, rounds=1)
            b = tcb.host_us(lambda: hk(x), n=50, rounds=1)
            c = tcb.host_us(lambda: wr(x), n=50, rounds=1)
            dh.append((b - a) / 24); dw.append((c - a) / 24)
    print(P + "B per hooked module, eager: torch forward hook (no-op) %+.2f us, forward "
          "wrapper (no-op) %+.2f us (medians of 21 rounds)" % (statistics.median(dh),
                                                               statistics.median(dw)), flush=True)


def part_c():
    torch.manual_seed(0)
    floor = Model(L, H, I).cuda().to(dt).eval()
    hk, wr = copy.deepcopy(floor), copy.deepcopy(floor)
    with graphtoggle.Agent("exp-c", hooks={t: L for t in TYPES}, mode="lazy") as agent:
        ah = agent.attach(modules_of(hk), max_tokens=BS, width=H, dtype=dt)
        aw = agent.attach(modules_of(wr), max_tokens=BS, width=H, dtype=dt)
        print(P + "C wrapped %d modules" % wrap_hooks(wr), flush=True)
        mark = torch.compiler.cudagraph_mark_step_begin
        x = torch.randn(BS, H, device="cuda", dtype=dt)
        fns = {k: torch.compile(tcb._own_forward(m), mode="reduce-overhead", fullgraph=True,
                                dynamic=False) for k, m in (("floor", floor), ("hooks", hk),
                                                            ("wrap", wr))}
        for _ in range(3):
            mark(); fns["floor"](x)
        agent.set_enabled("none"); agent.step()
        with gtt.patch(agent):
            for k in ("hooks", "wrap"):
                for _ in range(3):
                    agent.step(); mark(); fns[k](x)
            torch.cuda.synchronize()
            for k, att in (("hooks", ah), ("wrap", aw)):
                def run(k=k):
                    mark(); fns[k](x)
                tcb.check_sets(agent, att, run, BS, "exp c " + k)

            def step(k):
                def f():
                    if k != "floor":
                        agent.step()
                    mark(); fns[k](x)
                return f
            legs = {"floor": step("floor"), "hooks_off": step("hooks"), "wrap_off": step("wrap")}
            t = tcb.time_legs(legs, {"hooks_off": "none", "wrap_off": "none"}, agent, 15, 20)
            f = t["floor"]
            print(P + "C: " + "  ".join("%s %.4f ms (%.4fx) host %.2f us (%+.2f)" % (
                k, v[0], v[0] / f[0], v[1], v[1] - f[1]) for k, v in t.items()), flush=True)
        ah.detach(); aw.detach()
    torch._dynamo.reset()


for name, fn in (("A", part_a), ("B", part_b), ("C", part_c)):
    if name not in os.environ.get("EXP_PARTS", "ABC"):
        continue
    try:
        fn()
    except Exception:
        traceback.print_exc()
        print(P + "part %s FAILED" % name, flush=True)
    torch.cuda.synchronize()
print(P + "done", flush=True)
