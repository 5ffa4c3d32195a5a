"""Session 12 experiment: where all-on time goes in the compiled Llama's graph (lazy, full
exec), from torch.profiler's kernel records (CUPTI): per replay, kernels, summed kernel
time and summed gaps; per producer kernel its duration, the gap before it and after it;
against the floor graph."""
import os
import statistics
import sys

sys.path.insert(0, "python/tests/gpu")
import llama_bench as lb  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import graphtoggle  # noqa: E402
import graphtoggle.torch as gtt  # noqa: E402

R = 12


def kernels(p):
    ev = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev = [e for e in ev if "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    ev.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.start, e.time_range.end) for e in ev]


def split(ks, n):
    per = len(ks) // R
    return [ks[i * per:(i + 1) * per] for i in range(R)], per


def summary(tag, ks, prod_names=()):
    if len(ks) < R * 2:
        print("prof: %s: only %d kernel records" % (tag, len(ks)), flush=True)
        return None
    reps, per = split(ks, R)
    span, busy, gaps = [], [], []
    pd, gb, ga, nxt = [], [], [], []
    for r in reps[2:]:
        span.append(r[-1][2] - r[0][1])
        busy.append(sum(e - s for _, s, e in r))
        gaps.append(sum(max(0.0, r[i][1] - r[i - 1][2]) for i in range(1, len(r))))
        for i, (nm, s, e) in enumerate(r):
            if nm in prod_names and 0 < i < len(r) - 1:
                pd.append(e - s)
                gb.append(r[i][1] - r[i - 1][2])
                ga.append(r[i + 1][1] - e)
                nxt.append(r[i + 1][2] - r[i + 1][1])
    m = statistics.median
    print("prof: %s: %d kernels a replay; span %.2f us, kernel time %.2f, gaps %.2f (medians "
          "of %d replays)" % (tag, per, m(span), m(busy), m(gaps), len(span)), flush=True)
    if pd:
        print("prof: %s: %d producer kernels a replay: duration %.2f us (median), gap before "
              "%.2f, gap after %.2f, the next kernel's duration %.2f" %
              (tag, len(pd) // len(span), m(pd), m(gb), m(ga), m(nxt)), flush=True)
    return reps[2]


def gaps_by_pos(tag, floor_rep, on_rep, prod_names):
    """The kernel after each producer: its duration in the on graph against the same
    kernel (by order, producers skipped) in the floor graph; and the gap from the
    producer's predecessor to the producer's successor, against the floor's gap there."""
    if floor_rep is None or on_rep is None:
        return
    plain_on = [k for k in on_rep if k[0] not in prod_names]
    if len(plain_on) != len(floor_rep):
        print("prof: %s: %d plain kernels against the floor's %d: not paired" %
              (tag, len(plain_on), len(floor_rep)))
        return
    idx, j = [], 0
    for i, k in enumerate(on_rep):
        if k[0] in prod_names:
            idx.append((i, j))
        else:
            j += 1
    extra, fl = [], []
    for i, j in idx:
        if i == 0 or i + 1 >= len(on_rep) or j == 0 or j >= len(floor_rep):
            continue
        if on_rep[i + 1][0] in prod_names or on_rep[i - 1][0] in prod_names:
            continue
        extra.append(on_rep[i + 1][1] - on_rep[i - 1][2])
        fl.append(floor_rep[j][1] - floor_rep[j - 1][2])
    m = statistics.median
    print("prof: %s: predecessor end -> successor start around a producer: %.2f us (median "
          "of %d), the floor's same pair %.2f us" % (tag, m(extra), len(extra), m(fl)))
    names = {}
    for i, j in idx:
        if 0 < i < len(on_rep) - 1:
            key = (on_rep[i - 1][0][:50], on_rep[i + 1][0][:50])
            names[key] = names.get(key, 0) + 1
    for (a, b), n in sorted(names.items(), key=lambda x: -x[1])[:4]:
        print("prof: %s: %dx between %s | %s" % (tag, n, a, b))


def main():
    bs = int(os.environ.get("BS", "8"))
    torch.manual_seed(0)
    dt = torch.bfloat16
    lb.raise_recompile_limits()
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                      max_position_embeddings=2048)
    cfg._attn_implementation = "sdpa"
    floor = LlamaForCausalLM(cfg).to(device="cuda", dtype=dt).eval()
    hooked = lb.hooked_copy(floor)
    ids = torch.randint(0, 32000, (bs, 1), device="cuda")
    method = os.environ.get("METHOD") or None
    with torch.no_grad(), graphtoggle.Agent("prof", hooks={t: 16 for t in lb.TYPES},
                                            mode="lazy") as agent:
        layers = hooked.model.layers
        agent.attach({"resid_post": layers, "mlp_out": [l.mlp for l in layers]},
                     max_tokens=bs, width=2048, dtype=dt, method=method)
        ff = torch.compile(lb.own_forward(floor), fullgraph=True, dynamic=False)
        fh = torch.compile(lb.own_forward(hooked), fullgraph=True, dynamic=False)
        sf, sh = lb.Step(cfg, bs, 1024, dt, ids), lb.Step(cfg, bs, 1024, dt, ids)
        for fn, model, st in ((ff, floor, sf), (fh, hooked, sh)):
            lb.own_forward(model)(*st.args())
            fn(*st.args())
            fn(*st.args())
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        gf = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gf, pool=pool):
            ff(*sf.args())
        agent.set_enabled("none")
        agent.step()
        with gtt.patch(agent):
            gh = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gh, pool=pool):
                fh(*sh.args())
            legs = {}
            for leg, spec in (("floor", None), ("on", "all"), ("off", "none"),
                              ("half", lb.HALF)):
                if spec:
                    agent.set_enabled(spec)
                for _ in range(3):
                    if spec:
                        agent.step()
                    (gf if spec is None else gh).replay()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as p:
                    for _ in range(R):
                        if spec:
                            agent.step()
                        (gf if spec is None else gh).replay()
                    torch.cuda.synchronize()
                legs[leg] = kernels(p)
            fnames = {k[0] for k in legs["floor"]}
            prod = {k[0] for k in legs["on"]} - fnames
            print("prof: bs %d: producer kernel names: %s" % (bs, sorted(n[:90] for n in prod)))
            reps = {}
            for leg in ("floor", "off", "on", "half"):
                reps[leg] = summary("bs %d %s" % (bs, leg), legs[leg], prod)
            gaps_by_pos("bs %d on" % bs, reps["floor"], reps["on"], prod)
            st = agent.graph_status(gh.raw_cuda_graph())
            print("prof: execs: bare %d, full %d replays" % (st["bare_replays"],
                                                           st["full_replays"]))


main()
