"""llama_bench.py - issues 23 and 31 on the model they were written against: transformers'
Llama (a config, random weights, nothing downloaded; default 16 layers, hidden 2048, MLP
5632, bf16) decoding one token per sequence through a static KV cache, one CUDA graph per
batch size (default 32, 8, 1, largest first) captured by this script into one shared
pool, as vLLM and SGLang do.  Run by scripts/gpu-check.sh when LLAMA_BENCH=1; skipped
cleanly without torch, a GPU or transformers.

Hooks: resid_post (each decoder layer's output) and mlp_out (each MLP's), attached with
attach() and declared buffers (2 x layers producers).  Two models of the same weights (the
same tensors unless --own-weights: torch_compile_bench.hooked_copy): "floor" without hooks,
captured and replayed by torch alone, and "hooked", captured under
graphtoggle.torch.patch(agent) (the default random_ops: automatic).

 kind eager     the model's own forward captured as is (issue 31's table: the eager engine)
 kind compiled  torch.compile(fullgraph=True, dynamic=False) of the forward, the graphs
                captured by the script (vLLM's FULL graphs: issue 23's mode a)
 kind trees     torch.compile(mode="reduce-overhead", fullgraph=True, dynamic=False): CUDA
                Graph Trees record and replay the graphs (issue 23's mode c).  The forward
                runs without a KV cache (use_cache=False: transformers' StaticCache does not
                run under CUDA Graph Trees), one token per sequence, the same layers and
                hooks; the floor's trees are recorded before the patch, the hooked model's
                under it, agent.step() before each call.  Checked at off, on and off again:
                which buffers were written (none, all), and the logits: equal at every step
                when the floor's own calls agree, else within 4x their difference.

Per mode (lazy, device) x kind x batch size: floor, off (every hook off) and on (every
hook on), legs interleaved, medians over --reps rounds of --n back-to-back steps timed with
CUDA events (ms per step, x floor), and the host time per step (agent.step() + replay
against the floor's replay).  Correctness, judged on what ran: at off steps no monitor
buffer was written, at on steps every one (NaN sentinels); once both graphs settle (replays
until two in a row agree), the hooked graph's logits equal at off and on steps (the
producers only read) and, in the eager kind, the floor graph's bit for bit.  The compiled
kind's floor graph never settles on the H200 (its own replays differ, with or without
--deterministic): its logits are then bound by 4x the floor's replay-to-replay difference
and the buffers are the exact check.  The execs the timed steps ran: the producer-free
one at all-off steps, in device mode the full one at all-on steps where the graph has one
(judge_execs).  One line "llama-bench: PASS" or "... FAIL"
judges correctness only, never speed.  Exit 0 on PASS and SKIPPED, 1 on FAIL.
"""

import argparse
import inspect
import os
import sys
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

PREFIX = "llama-bench: "

try:
    import torch
except ImportError:
    print(PREFIX + "SKIPPED: python3 cannot import torch")
    sys.exit(0)
if getattr(torch, "FAKE", False) or not torch.cuda.is_available():
    print(PREFIX + "SKIPPED: torch sees no CUDA device")
    sys.exit(0)
try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache
except ImportError as e:
    print(PREFIX + "SKIPPED: python3 cannot import transformers' Llama (%s)" % e)
    sys.exit(0)

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402

sys.path.insert(0, HERE)
from torch_compile_bench import (_replays_by_graph, _timed_graphs, check_sets,  # noqa: E402
                                 hooked_copy, judge_execs, kernel_nodes, profile_steps,
                                 raise_recompile_limits, run_and_judge, time_legs,
                                 warm_trees)

TYPES = ("resid_post", "mlp_out")
HALF = "resid_post:*"  # --half's set: half the hooks on, a set in between
HALF_OTHER = "mlp_out:*"  # the other half: --half's alternating leg
warnings.filterwarnings("ignore", message="graphtoggle.torch.attach")
FAILS = []


def fail(msg):
    FAILS.append(msg)
    print(PREFIX + "mismatch: " + msg, flush=True)


def make_cache(cfg, bs, ctx, dt):
    """A StaticCache for bs sequences of ctx tokens, whichever constructor this transformers
    has (5.x: config and max_cache_len, the layers made at the first update; 4.x: the batch
    size, device and dtype up front)."""
    params = inspect.signature(StaticCache.__init__).parameters
    kw = {"config": cfg, "max_cache_len": ctx}
    for name, val in (("max_batch_size", bs), ("batch_size", bs), ("device", "cuda"),
                      ("dtype", dt)):
        if name in params:
            kw[name] = val
    return StaticCache(**kw)


def own_forward(model, cache=True):
    """A function with a code object of its own calling model's decode step (torch.compile
    keeps compiled code per code object: see torch_compile_bench._own_forward): through a
    KV cache, f(ids, pos, cpos, cache); cache=False without one, f(ids, pos) (kind trees)."""
    ns = {"model": model}
    if cache:
        exec("def decode_%d(ids, pos, cpos, cache):\n"
             "    return model(input_ids=ids, position_ids=pos, cache_position=cpos,\n"
             "                 past_key_values=cache, use_cache=True).logits\n" % id(model), ns)
    else:
        exec("def decode_%d(ids, pos):\n"
             "    return model(input_ids=ids, position_ids=pos, use_cache=False).logits\n"
             % id(model), ns)
    return ns["decode_%d" % id(model)]


class Step:
    """One batch size's static inputs and cache for one model copy."""

    def __init__(self, cfg, bs, ctx, dt, ids):
        self.ids = ids[:bs].clone()
        self.cpos = torch.tensor([ctx // 2], device="cuda")
        self.pos = self.cpos.expand(bs, 1).contiguous()
        self.cache = make_cache(cfg, bs, ctx, dt)

    def args(self):
        return self.ids, self.pos, self.cpos, self.cache


def _diff(a, b):
    if torch.equal(a, b):
        return "equal"
    d = (a.float() - b.float()).abs()
    return "differ (max %g, %d of %d elements, NaN %d/%d)" % (
        float(d.nan_to_num(0).max()), int((a != b).sum()), a.numel(), int(a.isnan().sum()),
        int(b.isnan().sum()))


def settle(replay, out, most=64):
    """Replays until two in a row give the same out (a graph whose step read what its last
    replay wrote would need several): the count, or "never" after most (the compiled
    Llama's floor graph on the H200, whose own replays differ)."""
    replay()
    torch.cuda.synchronize()
    last = out.clone()
    for i in range(2, most + 1):
        replay()
        torch.cuda.synchronize()
        if torch.equal(out, last):
            return str(i)
        last = out.clone()
    return "never (%d replays)" % most


def check_graph(agent, att, g, out, bs, floor_graph, floor_out, exact_floor, what):
    """Off steps write no buffer, on steps every one; the logits are the same at every step
    whatever the set (the producers only read), and, exact_floor, the floor graph's, once
    both graphs have settled (settle(); where the floor graph never does, the hooked
    graph's logits must stay within 4x the floor's own replay-to-replay difference).  On a
    mismatch, which replays agree says where it comes from (the floor graph replayed twice:
    the model's own determinism; off twice, on twice; off through the main exec's disabled
    nodes instead of the producer-free exec)."""
    settled_floor = settle(floor_graph.replay, floor_out)
    agent.set_enabled("none")

    def off_replay():
        agent.step()
        g.replay()
    settled = settle(off_replay, out)
    print(PREFIX + "%s: replays until two in a row give the same logits: floor graph %s, "
          "hooked graph (off) %s" % (what, settled_floor, settled), flush=True)
    half = {h for h in att.hook_ids if h[0] == "resid_post"}
    every = set(att.hook_ids)
    steps = (("none", set()), ("none", set()), ("all", every), ("all", every), (HALF, half),
             ("none", set()))

    def replay():
        g.replay()
        return out
    logits = list(zip((spec for spec, _ in steps),
                      check_sets(agent, att, replay, bs, what, fail, steps)))
    floor_graph.replay()
    torch.cuda.synchronize()
    f1 = floor_out.clone()
    floor_graph.replay()
    torch.cuda.synchronize()
    f2 = floor_out.clone()
    ref = logits[0][1]
    bad = [i for i, (_, l) in enumerate(logits) if not torch.equal(l, ref)]
    vs_floor = _diff(ref, f1)
    if settled_floor.startswith("never"):
        # the model's own replays differ without graphtoggle: no logits to compare with;
        # the buffers' checks above are the ground truth
        print(PREFIX + "%s: the floor graph's own replays differ (twice in a row: %s), so the "
              "logits are not compared; off, off, on, on, off against the first: %s"
              % (what, _diff(f1, f2), ", ".join(_diff(l, ref) for _, l in logits[1:])),
              flush=True)
        # but no further from the floor's than the floor's replays are from each other
        # (4x their largest difference): a producer writing into the model's memory would
        # show as more
        noise = float((f1.float() - f2.float()).abs().max())
        worst = max(float((l.float() - f1.float()).abs().max()) for _, l in logits)
        if not worst <= 4 * noise:
            fail("%s: the hooked graph's logits are %g from the floor graph's, its own replays "
                 "%g from each other" % (what, worst, noise))
    elif bad or (exact_floor and vs_floor != "equal"):
        fail("%s: the logits are not the same at every step (replays off, off, on, on, off: "
             "%s); the floor graph twice: %s; the hooked graph against the floor's: %s"
             % (what, ", ".join("%s %s" % (sp, _diff(l, ref)) for sp, l in logits[1:]),
                _diff(f1, f2), vs_floor))
        if agent.mode != "device":  # off through the main exec: is it the producer-free one?
            agent.set_bare(g.raw_cuda_graph(), False)
            agent.set_enabled("none")
            agent.step()
            g.replay()
            torch.cuda.synchronize()
            print(PREFIX + "%s: off through the main exec's disabled nodes against off "
                  "through the producer-free exec: %s" % (what, _diff(out.clone(), ref)),
                  flush=True)
            agent.set_bare(g.raw_cuda_graph(), True)
    else:
        print(PREFIX + "%s: logits the same at every step; against the floor graph's: %s"
              % (what, vs_floor), flush=True)


def report(tag, bs, t):
    f = t["floor"][0]
    for leg in t:
        print(PREFIX + "%s bs %d %-8s %.4f ms/step  %.4fx floor  host %.2f us/step"
              % (tag, bs, leg, t[leg][0], t[leg][0] / f, t[leg][1]), flush=True)
    return "%s bs %d: off %.4fx, on %.4fx%s; host +%.2f us/step off, +%.2f on" % (
        tag, bs, t["off"][0] / f, t["on"][0] / f,
        ", half %.4fx (alternating halves %.4fx), all on alternating with half %.4fx"
        % (t["half"][0] / f, t["half-alt"][0] / f, t["on-alt"][0] / f) if "half" in t else "",
        t["off"][1] - t["floor"][1], t["on"][1] - t["floor"][1])


def bench_trees(args, agent, floor, hooked, att, ids):
    """Kind trees (mode c): see the module's docstring."""
    out = []
    cf = torch.compile(own_forward(floor, cache=False), mode="reduce-overhead",
                       fullgraph=True, dynamic=False)
    ch = torch.compile(own_forward(hooked, cache=False), mode="reduce-overhead",
                       fullgraph=True, dynamic=False)
    mark = torch.compiler.cudagraph_mark_step_begin
    inputs = {bs: (ids[:bs].clone(), torch.full((bs, 1), args.ctx // 2, device="cuda"))
              for bs in args.batches}
    warm_trees((cf,), inputs)  # before any patch
    agent.set_enabled("none")
    agent.step()
    with gtt.patch(agent):
        warm_trees((ch,), inputs, agent, fail, "trees")
        for bs in args.batches:
            tag = "%s trees" % agent.mode

            def floor_step(a=inputs[bs]):
                mark()
                return cf(*a)

            def hooked_step(a=inputs[bs]):
                agent.step()
                mark()
                return ch(*a)
            f1 = floor_step().clone()
            f2 = floor_step().clone()

            def hooked_call(a=inputs[bs]):  # hooked_step without its agent.step()
                mark()
                return ch(*a)
            every = set(att.hook_ids)
            logits = check_sets(agent, att, hooked_call, bs, "%s bs %d" % (tag, bs), fail,
                                (("none", set()), ("all", every), ("none", set())))
            noise = float((f1.float() - f2.float()).abs().max())
            worst = max(float((l.float() - f1.float()).abs().max()) for l in logits)
            print(PREFIX + "%s bs %d: the floor's two calls %s; the hooked calls (off, on, off) "
                  "against the floor's: %s" % (tag, bs, _diff(f1, f2),
                                               ", ".join(_diff(l, f1) for l in logits)),
                  flush=True)
            if noise == 0:
                if any(not torch.equal(l, logits[0]) for l in logits):
                    fail("%s bs %d: the hooked logits differ between off and on steps (the "
                         "producers only read)" % (tag, bs))
            elif not worst <= 4 * noise:
                fail("%s bs %d: the hooked logits are %g from the floor's, its own calls %g "
                     "from each other" % (tag, bs, worst, noise))
            before = _replays_by_graph(agent)
            t = time_legs({"floor": floor_step, "off": hooked_step, "on": hooked_step},
                          {"off": "none", "on": "all"}, agent, args.reps, args.n)
            judge_execs(_timed_graphs(agent, before, fail), "%s bs %d" % (tag, bs), fail,
                        PREFIX)
            out.append(report(tag, bs, t))
            if args.profile_trees:
                agent.set_enabled("none")
                profile_steps("%s bs %d floor" % (tag, bs), floor_step, prefix=PREFIX)
                profile_steps("%s bs %d off" % (tag, bs), hooked_step, prefix=PREFIX)
    return out


def bench_kind(args, agent, kind, floor, hooked, att, cfg, dt, ids):
    if kind == "trees":
        return bench_trees(args, agent, floor, hooked, att, ids)
    out = []
    if kind == "compiled":
        ff = torch.compile(own_forward(floor), fullgraph=True, dynamic=False)
        fh = torch.compile(own_forward(hooked), fullgraph=True, dynamic=False)
    else:
        ff, fh = own_forward(floor), own_forward(hooked)
    pool = torch.cuda.graph_pool_handle()
    graphs, outs, steps = {}, {}, {}
    order = sorted(args.batches, reverse=True)
    for bs in order:
        steps[("floor", bs)] = Step(cfg, bs, args.ctx, dt, ids)
        steps[("hooked", bs)] = Step(cfg, bs, args.ctx, dt, ids)
        for who, fn, model in (("floor", ff, floor), ("hooked", fh, hooked)):
            # an eager call first: a StaticCache of transformers 5 makes its layers at the
            # first update, which must not happen inside compiled code or a capture
            own_forward(model)(*steps[(who, bs)].args())
            for _ in range(2):  # warm-up: compile, the hooks' checks
                fn(*steps[(who, bs)].args())
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph(keep_graph=True)  # kept: its kernel nodes are counted
        with torch.cuda.graph(g, pool=pool):
            outs[("floor", bs)] = ff(*steps[("floor", bs)].args())
        graphs[("floor", bs)] = g
    agent.set_enabled("none")
    agent.step()
    with gtt.patch(agent):
        for bs in order:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                outs[("hooked", bs)] = fh(*steps[("hooked", bs)].args())
            graphs[("hooked", bs)] = g
            st = agent.graph_status(g.raw_cuda_graph())
            if st["nodes"] != len(att.hook_ids):
                fail("%s bs %d: %d producers recorded of %d" % (kind, bs, st["nodes"],
                                                                len(att.hook_ids)))
        for bs in args.batches:
            gf, gh = graphs[("floor", bs)], graphs[("hooked", bs)]
            tag = "%s %s" % (agent.mode, kind)
            check_graph(agent, att, gh, outs[("hooked", bs)], bs, gf, outs[("floor", bs)],
                        kind == "eager", "%s bs %d" % (tag, bs))
            if args.fresh_execs and agent.mode != "device":
                # the check ran a half set on the full exec (producers disabled, then
                # enabled again): rebuild both so the timed one never had a node set
                agent.set_bare(gh.raw_cuda_graph(), False)
                agent.set_bare(gh.raw_cuda_graph(), True)

            def hooked_step(g=gh):
                agent.step()
                g.replay()
            fns = {"floor": gf.replay, "off": hooked_step, "on": hooked_step}
            if args.half:
                # held: the set exec once it has held (lazy, eager); alternating with the
                # other half at every step: the full exec, half its producers disabled
                fns["half"] = hooked_step
                flip = [False]

                def alt_step(g=gh):
                    flip[0] = not flip[0]
                    agent.set_enabled(HALF_OTHER if flip[0] else HALF)
                    agent.step()
                    g.replay()
                fns["half-alt"] = alt_step
                flip_on = [False]

                def on_alt_step(g=gh):
                    # all on at every other step, a set in between at the rest (a per-step
                    # plan): after the first round the all-on steps run the all-on exec, the
                    # others the full exec, no node set; with --no-set-exec, the all-on steps
                    # run the full exec whose nodes the step before set.  Against "on" and
                    # "half-alt"
                    flip_on[0] = not flip_on[0]
                    agent.set_enabled("all" if flip_on[0] else HALF)
                    agent.step()
                    g.replay()
                fns["on-alt"] = on_alt_step
            t = time_legs(fns, {"off": "none", "on": "all", "half": HALF}, agent, args.reps,
                          args.n)
            st = agent.graph_status(gh.raw_cuda_graph())
            judge_execs(st, "%s bs %d" % (tag, bs), fail, PREFIX)
            out.append(report(tag, bs, t))
            nf, nhk = kernel_nodes(gf.raw_cuda_graph()), kernel_nodes(gh.raw_cuda_graph())
            print(PREFIX + "%s bs %d: kernel nodes: floor graph %s, hooked graph %s (%d "
                  "producers)" % (tag, bs, nf, nhk, len(att.hook_ids)), flush=True)
    for g in graphs.values():
        g.reset()
    return out


def run_mode(args, mode):
    torch.manual_seed(0)
    dt = torch.bfloat16
    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.inter,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                      max_position_embeddings=max(2048, args.ctx))
    cfg._attn_implementation = "sdpa"
    floor = LlamaForCausalLM(cfg).to(device="cuda", dtype=dt).eval()
    hooked = hooked_copy(floor, args.own_weights)
    ids = torch.randint(0, args.vocab, (max(args.batches), 1), device="cuda")
    out = []
    with graphtoggle.Agent("llama-bench-" + mode, hooks={t: args.layers for t in TYPES},
                           mode=mode, strict=(mode == "device"),
                           full_exec=not args.no_full_exec,
                           assemble_execs=not args.clone_execs,
                           set_exec=not args.no_set_exec) as agent:
        layers = hooked.model.layers
        att = agent.attach({"resid_post": layers, "mlp_out": [l.mlp for l in layers]},
                           max_tokens=max(args.batches), width=args.hidden, dtype=dt,
                           method=args.method)
        for kind in args.kinds:
            try:  # each kind on its own: one that breaks leaves the others' figures
                out += bench_kind(args, agent, kind, floor, hooked, att, cfg, dt, ids)
            except Exception as e:
                traceback.print_exc()
                fail("%s %s: exception %s: %s" % (mode, kind, type(e).__name__, e))
                gtt.unpatch()
            torch.cuda.synchronize()
            torch._dynamo.reset()
        if mode != "device":  # ground for a comparison: which execs the figures are of
            st = agent.stats()
            print(PREFIX + "%s: execs assembled %d, cloned after a failed assembly %d"
                  % (mode, st["assembled_builds"], st["assemble_fallbacks"]))
        att.detach()
        torch.cuda.synchronize()
    del floor, hooked
    torch.cuda.empty_cache()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="lazy,device")
    ap.add_argument("--kinds", default="eager,compiled")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ctx", type=int, default=1024, help="the static cache's length")
    ap.add_argument("--batches", default="32,8,1")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("-n", type=int, default=20, help="back-to-back steps per timing")
    ap.add_argument("--own-weights", action="store_true",
                    help="the hooked model with a copy of the weights of its own (before "
                    "session 11; the default shares the floor's)")
    ap.add_argument("--method", choices=("mul", "copy_out"), default=None,
                    help="the producers' kernel (attach()'s method; default by mode)")
    ap.add_argument("--half", action="store_true",
                    help="legs with half the hooks on: %s held, alternating with %s at "
                    "every step, and all on alternating with %s (on-alt: the all-on exec; "
                    "with --no-set-exec, a full exec whose nodes were set)"
                    % (HALF, HALF_OTHER, HALF))
    ap.add_argument("--no-full-exec", action="store_true",
                    help="Agent(full_exec=False): sets other than all off run the main exec")
    ap.add_argument("--no-set-exec", action="store_true",
                    help="Agent(set_exec=False): held sets run on the full exec, all on too "
                    "after the check's half step set nodes of it (before session 21)")
    ap.add_argument("--clone-execs", action="store_true",
                    help="Agent(assemble_execs=False): lazy and eager, the producer-free and "
                    "full execs cloned from the captured graph, not assembled node by node "
                    "(the default, as device mode's)")
    ap.add_argument("--fresh-execs", action="store_true",
                    help="kinds eager and compiled, lazy and eager mode: after the "
                    "correctness check (whose half step disables producers of the full exec "
                    "and its next all-on step enables them again), rebuild the producer-free "
                    "and full execs, so the timed full exec never had a node set")
    ap.add_argument("--profile-trees", action="store_true",
                    help="kind trees: where the host time of 300 calls goes, floor and hooked "
                    "at all off (cProfile)")
    ap.add_argument("--deterministic", action="store_true",
                    help="torch.use_deterministic_algorithms(True) (inductor's deterministic "
                    "mode)")
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    args.kinds = args.kinds.split(",")
    bad = [k for k in args.kinds if k not in ("eager", "compiled", "trees")]
    if bad:
        ap.error("--kinds: unknown %s (eager, compiled, trees)" % ", ".join(bad))
    raise_recompile_limits()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    print(PREFIX + "torch %s, transformers %s, %s, graphtoggle %s; Llama %d layers, hidden %d, "
          "MLP %d, %d heads, bf16, cache %d, %d hooks; batches %s; medians of %d x %d steps"
          % (torch.__version__, transformers.__version__, torch.cuda.get_device_name(),
             graphtoggle.__version__, args.layers, args.hidden, args.inter, args.heads,
             args.ctx, len(TYPES) * args.layers, args.batches, args.reps, args.n), flush=True)
    return run_and_judge(PREFIX, args, run_mode, FAILS,
                         "correctness only: off steps wrote no buffer, on steps every one, the "
                         "logits unchanged by the producers; figures above")

if __name__ == "__main__":
    sys.exit(main())
