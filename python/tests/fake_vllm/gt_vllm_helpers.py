"""What test_vllm_plugin.py runs inside the fake vLLM's processes: the agent factory
(GRAPHTOGGLE_VLLM_AGENT_FACTORY=gt_vllm_helpers:sim_agent: agents on the fake torch's
simulator) and the functions the engine sends its workers through collective_rpc (each
called with the worker wrapper)."""

import os

SENT = -1.0e30
MADE = []  # names of the agents the factory made in this process


def sim_agent(**kwargs):
    import torch
    from graphtoggle import Agent
    MADE.append(kwargs["name"])
    return Agent(backend="sim", sim=torch.cuda.sim(), **kwargs)


def _state():
    import graphtoggle.vllm as gv
    return gv.current()


def _graphs(runner):
    from vllm.compilation.breakable_cudagraph import BreakableCUDAGraphWrapper
    from vllm.compilation.cuda_graph import CUDAGraphWrapper
    from vllm.compilation.piecewise_backend import MADE as BACKENDS
    out = []
    m = runner.model
    if isinstance(m, CUDAGraphWrapper):
        out += [("full", e.cudagraph) for e in m.concrete_cudagraph_entries.values()
                if e.cudagraph is not None]
    if isinstance(m, BreakableCUDAGraphWrapper):
        out += [("breakable", g) for cap, _ in m.entries.values() for g in cap.graphs]
    for b in BACKENDS:
        out += [("piecewise", g) for g in b.graphs()]
    return out


def info(w):
    import graphtoggle.torch as gtt
    import vllm.plugins
    st = _state()
    runner = w.worker.model_runner
    graphs = _graphs(runner)
    rec = {"rank": w.worker.rank, "pid": os.getpid(), "agents_made": list(MADE),
           "plugins": list(vllm.plugins.LOADED),
           "compile_cache_env": os.environ.get("VLLM_DISABLE_COMPILE_CACHE"),
           "state": st is not None}
    if st is None:
        return rec
    a = st.agent
    lm = runner.model
    while hasattr(type(lm), "unwrap"):
        lm = lm.unwrap()
    kinds = {}
    for kind, g in graphs:
        k = kinds.setdefault(kind, {"graphs": 0, "adopted": 0, "bound": 0})
        k["graphs"] += 1
        k["adopted"] += "_graphtoggle" in g.__dict__
        raw = g.raw_cuda_graph() if "_graphtoggle" in g.__dict__ else 0
        if raw and a.has_producers(raw) and a.graph_status(raw)["bound"]:
            k["bound"] += 1
    rec.update(name=st.name, state_rank=st.rank, mode=a.mode, patched=gtt.patched() is a,
               hooks_at_compile=lm.model.first_forward_hooks,
               attached=len(st.attachment._handles) if st.attachment else 0,
               graphs=kinds, steps=st.steps, layers=a.catalog.n_layers,
               types=list(a.catalog.names))
    return rec


_RESET = set()


def reset_buffers(w):
    """Fill every monitor buffer with the sentinel; check() then counts a buffer as written
    by a producer only if it was one of these (attach() makes a buffer for a shape it had
    not seen in an eager forward: a new buffer, not a producer's write)."""
    _RESET.clear()
    for k, b in _state().attachment.buffers.items():
        b.fill_(SENT)
        _RESET.add(k)


def set_enabled(w, spec):
    _state().agent.set_enabled(spec)


def check(w):
    st = _state()
    wrote = sorted({(k[0], k[1]) for k, b in st.attachment.buffers.items()
                    if k in _RESET and any(v != SENT for v in b.data)})
    runner = w.worker.model_runner
    last = runner.last
    return {"rank": w.worker.rank, "step": st.agent.current_step,
            "set": sorted(st.last_set), "wrote": wrote, "mode": last.runtime_mode,
            "padded": last.padded, "output": last.output[:4],
            "residual": _residual_checks(st, wrote, runner, last)}


def _residual_checks(st, wrote, runner, last):
    """resid_post against the residual stream, from what ran: after layer i it is
    resid_post[i - 1] (the model's input for layer 0) + attn_out[i] + mlp_out[i], summed as
    the model sums it, and after the last layer the model's output (the fake norm copies).
    [checked, wrong]: the layers whose sources this step wrote, and those that disagree."""
    if "resid_post" not in st.agent.catalog.names:
        return [0, []]
    n = last.padded * runner.H
    bufs = {(k[0], k[1]): b.data[:n] for k, b in st.attachment.buffers.items()}
    on = set(wrote)
    checked, wrong = 0, []
    prev = runner.inputs[last.padded].data[:n]
    for i in range(st.agent.catalog.n_layers):
        r = bufs.get(("resid_post", i)) if ("resid_post", i) in on else None
        if r is not None and prev is not None and ("attn_out", i) in on and (
                "mlp_out", i) in on:
            a, m = bufs[("attn_out", i)], bufs[("mlp_out", i)]
            checked += 1
            if list(r) != [mv + (av + pv) for mv, av, pv in zip(m, a, prev)]:
                wrong.append(i)
        prev = r
    # resid_mid (GRAPHTOGGLE_HOOKS=resid_mid=model.layers[1]: element 1 of each layer's
    # output, the residual after attention) is resid_post[i - 1] + attn_out[i]
    if "resid_mid" in st.agent.catalog.names:
        prev = runner.inputs[last.padded].data[:n]
        for i in range(st.agent.catalog.n_layers):
            mid = ("resid_mid", i)
            if mid in on and prev is not None and ("attn_out", i) in on:
                checked += 1
                if list(bufs[mid]) != [av + pv for av, pv in zip(bufs[("attn_out", i)], prev)]:
                    wrong.append("mid%d" % i)
            prev = bufs.get(("resid_post", i)) if ("resid_post", i) in on else None
    last_layer = st.agent.catalog.n_layers - 1
    if ("resid_post", last_layer) in on:
        checked += 1
        if list(bufs[("resid_post", last_layer)]) != list(last.output[:n]):
            wrong.append("output")
    return [checked, wrong]
