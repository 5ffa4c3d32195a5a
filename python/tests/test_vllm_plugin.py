"""graphtoggle.vllm, the vLLM plugin, against a fake vLLM of the real one's shape
(tests/fake_vllm: module paths, plugin loading through the vllm.general_plugins entry
points, the executor's spawned worker processes and their start order, CUDAGraphWrapper,
piecewise and breakable capture) on the fake torch.  Real vLLM is not run here.

The engine runs in a child process (tests/fake_vllm/run_engine.py) with the package's
entry point installed as a distribution on its path (made from python/pyproject.toml), so
vLLM's loader finds the plugin as it would in a real installation; each worker process
checks every engine step against its monitor buffers."""

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

import graphtoggle.vllm as gv
from graphtoggle import InvalidArgumentError

from conftest import BUILD

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.dirname(HERE)
FAKE_VLLM = os.path.join(HERE, "fake_vllm")
FAKE_TORCH = os.path.join(HERE, "fake_torch")
TOGGLED = os.path.join(BUILD, "toggled")
TOGGLECTL = os.path.join(BUILD, "togglectl")
L = 3           # the fake model's layers (EngineArgs num_layers)
SIZES = (4, 2, 1)  # its capture sizes
TYPES = ["resid_post", "attn_out", "mlp_out"]


def _entry_point():
    import tomllib
    with open(os.path.join(PY, "pyproject.toml"), "rb") as f:
        proj = tomllib.load(f)["project"]
    return proj, proj["entry-points"]["vllm.general_plugins"]


@pytest.fixture(scope="module")
def dist_dir():
    """A directory holding graphtoggle's distribution metadata with the entry points that
    pyproject.toml declares (what pip install writes), for importlib.metadata to find."""
    proj, eps = _entry_point()
    d = tempfile.mkdtemp(prefix="graphtoggle-dist.")
    info = os.path.join(d, "graphtoggle-%s.dist-info" % proj["version"])
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: graphtoggle\nVersion: %s\n" % proj["version"])
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[vllm.general_plugins]\n")
        for name, target in eps.items():
            f.write("%s = %s\n" % (name, target))
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def run_engine(dist_dir, cfg, env=None, on=True, timeout=120):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHTOGGLE_", "VLLM_"))
         or k == "GRAPHTOGGLE_LIB"}
    e["PYTHONPATH"] = os.pathsep.join([FAKE_TORCH, FAKE_VLLM, PY, dist_dir])
    e["TOGGLE_SOCKET"] = "none"
    if on:
        e["GRAPHTOGGLE_VLLM"] = "1"
        e["GRAPHTOGGLE_VLLM_AGENT_FACTORY"] = "gt_vllm_helpers:sim_agent"
    e.update(env or {})
    r = subprocess.run([sys.executable, os.path.join(FAKE_VLLM, "run_engine.py"),
                        json.dumps(cfg)], capture_output=True, text=True, env=e,
                       timeout=timeout, cwd=HERE)
    out = {"rc": r.returncode, "stderr": r.stderr, "front": None, "workers": [], "steps": [],
           "done": None, "togglectl": None}
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if "front" in rec:
            out["front"] = rec["front"]
        elif "worker" in rec:
            out["workers"].append(rec["worker"])
        elif "step" in rec:
            out["steps"].append(rec["step"])
        elif "done" in rec:
            out["done"] = rec["done"]
        elif "togglectl" in rec:
            out["togglectl"] = rec["togglectl"]
    return out


def _pairs(x):
    return [tuple(p) for p in x]


# decode (uniform) and mixed batches of every captured size, one above the largest (no
# graph: an eager forward), with set changes
STEPS = [[1, True, "all"], [2, True, None], [4, False, None], [3, True, "attn_out:1,mlp_out:*"],
         [1, False, None], [6, True, None], [2, False, "resid_post:0-1"], [4, True, None],
         [1, True, "none"], [3, False, None], [2, True, "*:2"], [6, False, None],
         [4, True, "all"], [1, False, None]]


def _check_steps(res, n_ranks):
    assert len(res["steps"]) == len(STEPS)
    modes = set()
    residual_checks = [0]
    for i, recs in enumerate(res["steps"]):
        assert [r["rank"] for r in recs] == list(range(n_ranks))
        # every rank counts the same steps and runs the same set (a standing set, changed
        # between steps, lands on every rank at the same step without a daemon)
        assert len({r["step"] for r in recs}) == 1 and recs[0]["step"] == i
        assert len({json.dumps(r["set"]) for r in recs}) == 1
        for r in recs:
            modes.add(r["mode"])
            want = _pairs(r["set"])
            got = _pairs(r["wrote"])
            if r["mode"] == "NONE":
                # no graph: what attach()'s hooks do in an eager forward (today nothing; with
                # the registered producer op, the step's set); never anything else
                assert got in ([], want), (i, r)
            else:
                assert got == want, (i, r)
            # what resid_post holds is the residual stream (vLLM's layers return the MLP's
            # output and the residual apart: their sum is nowhere a module's output)
            checked, wrong = r["residual"]
            assert wrong == [], (i, r)
            residual_checks[0] += checked
    assert residual_checks[0] >= 4 * n_ranks  # the all-on steps checked every layer
    return modes


def _check_workers(res, n_ranks, kinds):
    front = res["front"]
    assert front["plugins"] == ["graphtoggle"]
    assert not front["state"] and front["agents_made"] == []  # no model, no agent
    assert front["compile_cache_env"] == "1"
    ws = sorted(res["workers"], key=lambda w: w["rank"])
    assert [w["rank"] for w in ws] == list(range(n_ranks))
    for w in ws:
        name = "vllm-rank%d" % w["rank"]
        assert w["plugins"] == ["graphtoggle"], w
        assert w["agents_made"] == [name], w           # one agent per process
        assert w["name"] == name and w["state_rank"] == w["rank"]
        assert w["patched"], w
        assert w["compile_cache_env"] == "1"
        assert w["layers"] == L and w["types"] == TYPES
        # attached after the model loaded, before its first forward (where vLLM compiles)
        assert w["hooks_at_compile"] == 3 * L, w
        assert w["attached"] == 3 * L
        for kind, (n_graphs, n_bound) in kinds.items():
            k = w["graphs"].get(kind)
            assert k is not None, (kind, w["graphs"])
            # every graph made under the patch (adopted: kept, capture window, guard)
            assert k["graphs"] == n_graphs and k["adopted"] == n_graphs, (kind, k)
            assert k["bound"] == n_bound, (kind, k)
        assert set(w["graphs"]) == set(kinds), w["graphs"]
    if n_ranks > 1:
        assert len({w["pid"] for w in ws} | {front["pid"]}) == n_ranks + 1


PIECES = (len(SIZES) * (L + 1), len(SIZES) * L)  # piece 0 (layer 0's q) has no producer
FULLG = (len(SIZES), len(SIZES))


@pytest.mark.parametrize("mode,env,kinds,want_modes,tp", [
    # vLLM's default: two spawned workers (tensor parallelism 2)
    ("FULL_AND_PIECEWISE", {}, {"piecewise": PIECES, "full": FULLG},
     {"FULL", "PIECEWISE", "NONE"}, 2),
    # the other modes with the worker in the engine core's process (UniProcExecutor)
    ("PIECEWISE", {}, {"piecewise": PIECES}, {"PIECEWISE", "NONE"}, 1),
    ("FULL", {}, {"full": FULLG}, {"FULL", "NONE"}, 1),
    # vLLM's breakable mode: one capture context per size, a new graph after each
    # attention op, each graph's *bound* replay kept (the patch must precede it)
    ("PIECEWISE", {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}, {"breakable": PIECES},
     {"PIECEWISE", "NONE"}, 1),
])
def test_engine(dist_dir, mode, env, kinds, want_modes, tp):
    res = run_engine(dist_dir, {"tp": tp, "backend": "mp" if tp > 1 else "uni",
                                "cudagraph_mode": mode, "layers": L, "steps": STEPS}, env=env)
    assert res["rc"] == 0, res["stderr"][-3000:]
    _check_workers(res, tp, kinds)
    assert _check_steps(res, tp) == want_modes
    for w in res["done"]["infos"]:
        assert w["steps"] == len(STEPS)  # step() once per engine iteration (execute_model)
    if tp == 1:
        # the worker lives in the engine core's process, which loaded the plugin first
        # (before any model: no agent then): still one agent, made when the model loads
        assert res["workers"][0]["pid"] == res["front"]["pid"]


def test_hooks_from_a_tuple_element(dist_dir):
    """GRAPHTOGGLE_HOOKS' path[N]: resid_mid=model.layers[1] copies element 1 of each
    decoder layer's output tuple (the residual after attention), checked at every step
    against resid_post[i - 1] + attn_out[i] from the buffers, under piecewise and FULL
    graphs and eager sizes."""
    hooks = gv.DEFAULT_HOOKS + ",resid_mid=model.layers[1]"
    res = run_engine(dist_dir, {"tp": 1, "backend": "uni", "cudagraph_mode":
                                "FULL_AND_PIECEWISE", "layers": L, "steps": STEPS},
                     env={"GRAPHTOGGLE_HOOKS": hooks})
    assert res["rc"] == 0, res["stderr"][-3000:]
    mids = 0
    for i, recs in enumerate(res["steps"]):
        r = recs[0]
        if r["mode"] != "NONE":
            assert _pairs(r["wrote"]) == _pairs(r["set"]), (i, r)
        assert r["residual"][1] == [], (i, r)
        mids += sum(1 for t, _ in _pairs(r["wrote"]) if t == "resid_mid")
    assert mids >= 4 * L  # the all-on steps wrote every layer's resid_mid


def test_plugin_off_unless_asked(dist_dir):
    res = run_engine(dist_dir, {"tp": 1, "backend": "uni", "steps": STEPS}, on=False)
    assert res["rc"] == 0, res["stderr"][-3000:]
    assert res["front"]["plugins"] == ["graphtoggle"]  # loaded, and did nothing
    assert res["front"]["compile_cache_env"] is None
    for w in res["workers"]:
        assert not w["state"] and w["agents_made"] == [] and w["compile_cache_env"] is None


def test_names_rank_and_compile_cache_from_the_environment(dist_dir):
    res = run_engine(dist_dir, {"tp": 1, "backend": "uni", "steps": STEPS[:2]},
                     env={"GRAPHTOGGLE_NAME": "eng-{rank}-of-{local_rank}",
                          "GRAPHTOGGLE_RANK": "5", "GRAPHTOGGLE_GROUP": "blue",
                          "GRAPHTOGGLE_VLLM_COMPILE_CACHE": "keep"})
    assert res["rc"] == 0, res["stderr"][-3000:]
    assert [w["name"] for w in res["workers"]] == ["eng-5-of-0"]
    assert all(w["compile_cache_env"] is None for w in res["workers"])


@pytest.mark.parametrize("env,words", [
    ({"GRAPHTOGGLE_MODE": "fast"}, "GRAPHTOGGLE_MODE='fast'"),
    ({"GRAPHTOGGLE_HOOKS": "attn_out"}, "GRAPHTOGGLE_HOOKS"),
    ({"GRAPHTOGGLE_RANK": "-1"}, "GRAPHTOGGLE_RANK"),
    ({"GRAPHTOGGLE_NAME": "x-{node}"}, "GRAPHTOGGLE_NAME"),
])
def test_bad_configuration_stops_the_front_end(dist_dir, env, words):
    res = run_engine(dist_dir, {"tp": 1, "backend": "uni"}, env=env)
    assert res["rc"] != 0 and res["front"] is None  # EngineArgs raised: vLLM does not start
    assert words in res["stderr"]


def test_a_hook_path_the_model_lacks_stops_the_worker(dist_dir):
    res = run_engine(dist_dir, {"tp": 1, "backend": "uni"},
                     env={"GRAPHTOGGLE_HOOKS": "mlp_out=model.layers.*.ffn"})
    assert res["rc"] != 0
    assert "GRAPHTOGGLE_HOOKS: model.layers[0] (LlamaDecoderLayer) has no ffn" in res["stderr"]


@pytest.mark.parametrize("mode,tp", [("FULL_AND_PIECEWISE", 1), ("FULL", 1), ("PIECEWISE", 2)])
def test_captures_without_producers_fail_the_start_up(dist_dir, mode, tp):
    """Graphs captured from code that runs none of the hooks (the fake's stand-in for an
    artifact compiled without them) fail the engine at compile_or_warm_up_model, the last
    start-up RPC: no worker reaches the first engine step (before, the first
    execute_model raised, so a serving engine died at its first request)."""
    res = run_engine(dist_dir, {"tp": tp, "backend": "mp" if tp > 1 else "uni",
                                "cudagraph_mode": mode, "layers": L, "steps": STEPS[:3]},
                     env={"FAKE_VLLM_CAPTURE_WITHOUT_HOOKS": "1"})
    assert res["rc"] != 0
    assert res["workers"] == [] and res["steps"] == []  # start-up failed: no engine step
    assert "CaptureError" in res["stderr"]
    assert "none recorded a producer" in res["stderr"]
    assert "raised by Attachment.verify_captures()" in res["stderr"]
    assert "compile_or_warm_up_model" in res["stderr"]


def test_captures_with_producers_start_as_before(dist_dir):
    """The same engine with the hooks in its captures: compile_or_warm_up_model's check
    passes and every step runs its set (test_engine checks the sets in every mode)."""
    res = run_engine(dist_dir, {"tp": 1, "backend": "uni", "cudagraph_mode": "FULL",
                                "layers": L, "steps": STEPS[:3]},
                     env={"FAKE_VLLM_CAPTURE_WITHOUT_HOOKS": "0"})
    assert res["rc"] == 0, res["stderr"][-3000:]
    assert len(res["workers"]) == 1 and len(res["steps"]) == 3


@pytest.mark.skipif(not (os.access(TOGGLED, os.X_OK) and os.access(TOGGLECTL, os.X_OK)),
                    reason="build/toggled and build/togglectl are built by `make`")
def test_daemon_drives_every_rank_through_the_group(dist_dir):
    prog_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    d = tempfile.mkdtemp(prefix="graphtoggle-vllm.")
    sock = os.path.join(d, "toggled.sock")
    log = open(os.path.join(d, "toggled.log"), "w")
    p = subprocess.Popen([TOGGLED, "--socket", sock, "--state-dir", os.path.join(d, "state")],
                         stdout=log, stderr=log, env=prog_env)
    try:
        for _ in range(400):
            if subprocess.run([TOGGLECTL, "--socket", sock, "status"], capture_output=True,
                              env=prog_env).returncode == 0:
                break
            time.sleep(0.025)
        spec = "attn_out:0,mlp_out:2"
        want = [["attn_out", 0], ["mlp_out", 2]]
        res = run_engine(dist_dir, {"tp": 2, "steps": [], "daemon": {
            "togglectl": TOGGLECTL, "socket": sock, "target": "group:vllm", "spec": spec,
            "want": want, "env": prog_env}}, env={"GRAPHTOGGLE_SOCKET": sock}, timeout=180)
        assert res["rc"] == 0, res["stderr"][-3000:]
        assert res["togglectl"]["rc"] == 0, res["togglectl"]
        assert len(res["steps"]) < 2000, "the daemon's set never reached every rank"
        last = res["steps"][-1]
        assert all(r["set"] == want and _pairs(r["wrote"]) == _pairs(want) for r in last), last
        for recs in res["steps"]:  # before and after the set arrived: exact every step
            for r in recs:
                assert _pairs(r["wrote"]) == _pairs(r["set"]), r
    finally:
        p.terminate()
        p.wait(timeout=10)
        log.close()
        import shutil
        shutil.rmtree(d, ignore_errors=True)


# ---- in this process: configuration, paths, the import hook -------------------------------


def test_pyproject_declares_the_entry_point():
    _, eps = _entry_point()
    assert eps == {"graphtoggle": gv.ENTRY_POINT}


def test_parse_hooks():
    assert gv.parse_hooks(gv.DEFAULT_HOOKS) == [
        ("resid_post", "@residual"), ("attn_out", "model.layers.*.self_attn"),
        ("mlp_out", "model.layers.*.mlp")]
    assert gv.parse_hooks("a=model.layers.*.input_layernorm[1], b=model.layers") == [
        ("a", "model.layers.*.input_layernorm[1]"), ("b", "model.layers")]
    for bad in ("", "x", "a=", "=b", "a=b..c", "a=b.*.*", "a=b,a=c", "a=b[", "a=b[x]",
                "a=b[1]c", "a=b[-1]", "a=[1]", "a=b[1][2]", "a=@other"):
        with pytest.raises(InvalidArgumentError, match="GRAPHTOGGLE_HOOKS"):
            gv.parse_hooks(bad)


def test_config_from_environment():
    c = gv.Config({"GRAPHTOGGLE_SOCKET": "/s", "GRAPHTOGGLE_RANK": "3", "GRAPHTOGGLE_MODE":
                   "device", "GRAPHTOGGLE_RANDOM_OPS": "false", "GRAPHTOGGLE_STRICT": "1"})
    assert (c.socket, c.rank, c.mode, c.random_ops, c.strict, c.group) == (
        "/s", 3, "device", False, True, "vllm")
    assert c.agent_name(3, 1, 0, 1) == "vllm-rank3"
    assert c.agent_name(3, 1, 2, 4) == "vllm-dp2-rank3"
    assert gv.Config({"TOGGLE_SOCKET": "/t"}).socket == "/t"
    assert gv.Config({"GRAPHTOGGLE_SOCKET": "none", "TOGGLE_SOCKET": "/t"}).socket is None
    assert gv.Config({}).random_ops is None
    assert gv.Config({}).full_exec is True
    assert gv.Config({"GRAPHTOGGLE_FULL_EXEC": "0"}).full_exec is False
    assert gv.Config({}).set_exec is True
    assert gv.Config({"GRAPHTOGGLE_SET_EXEC": "0"}).set_exec is False
    for env in ({"GRAPHTOGGLE_STRICT": "maybe"}, {"GRAPHTOGGLE_RANDOM_OPS": "sometimes"},
                {"GRAPHTOGGLE_FULL_EXEC": "some"}, {"GRAPHTOGGLE_SET_EXEC": "perhaps"},
                {"GRAPHTOGGLE_LAYERS": "x"}, {"GRAPHTOGGLE_VLLM_COMPILE_CACHE": "on"},
                {"GRAPHTOGGLE_VLLM_AGENT_FACTORY": "nocolon"}):
        with pytest.raises(InvalidArgumentError, match=list(env)[0]):
            gv.Config(env)


def test_resolve_and_unwrap():
    import torch
    from torch import nn

    class Attn(nn.Module):
        def forward(self, x):
            return x

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = Attn()

    class Missing(nn.Module):  # pipeline parallelism's PPMissingLayer
        pass

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Missing(), Layer(), Layer()])

    class Top(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Inner()

    class Wrapper:  # vLLM's wrappers forward attributes to what they wrap
        def __init__(self, r):
            self.runnable = r

        def __getattr__(self, k):
            return getattr(self.__dict__["runnable"], k)

        def unwrap(self):
            return self.runnable

    top = Top()
    assert gv.unwrap(Wrapper(Wrapper(top))) is top
    assert gv.unwrap(top) is top
    layers = gv.resolve(top, "model.layers")
    assert layers == list(top.model.layers)
    attn = gv.resolve(top, "model.layers.*.self_attn")
    assert attn[1] is top.model.layers[1].self_attn and attn[2] is top.model.layers[2].self_attn
    assert isinstance(attn[0], torch.nn.Module) and attn[0] is not top.model.layers[0]
    with pytest.raises(InvalidArgumentError, match="has no model.blocks"):
        gv.resolve(top, "model.blocks")
    top.model.layers[2] = Attn()
    with pytest.raises(InvalidArgumentError, match=r"model.layers\[2\] \(Attn\) has no self_attn"):
        gv.resolve(top, "model.layers.*.self_attn")


def test_sources_residual_stream_and_tuple_elements():
    """@residual: element 1 of the next layer's input_layernorm (the final norm's after the
    last layer), a placeholder where another pipeline stage holds the layer; path[N]:
    element N; a module that returns no such tuple is refused when it runs."""
    import torch
    from torch import nn

    class Norm(nn.Module):
        def forward(self, x):
            return x

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = Norm()

    class PPMissingLayer(nn.Module):
        pass

    class Inner(nn.Module):
        def __init__(self, layers, norm=True):
            super().__init__()
            self.layers = nn.ModuleList(layers)
            if norm:
                self.norm = Norm()

    class Top(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

    top = Top(Inner([Layer(), Layer(), Layer()]))
    mods, sel = gv.source(top, gv.RESIDUAL)
    L = top.model.layers
    assert mods == [L[1].input_layernorm, L[2].input_layernorm, top.model.norm]
    a, b = object(), object()
    assert sel((a, b)) is b
    with pytest.raises(InvalidArgumentError, match="not a tuple of more than 1"):
        sel(a)
    mods, sel = gv.source(top, "model.layers.*.input_layernorm[0]")
    assert mods == [l.input_layernorm for l in L] and sel((a, b)) is a
    mods, sel = gv.source(top, "model.layers.*.input_layernorm")
    assert sel is None
    pp = Top(Inner([Layer(), PPMissingLayer(), Layer()]))
    mods, _ = gv.source(pp, gv.RESIDUAL)
    assert isinstance(mods[0], torch.nn.Module) and mods[0] is not pp.model.layers[1]
    assert mods[1] is pp.model.layers[2].input_layernorm and mods[2] is pp.model.norm
    with pytest.raises(InvalidArgumentError, match="has no model.norm"):
        gv.source(Top(Inner([Layer()], norm=False)), gv.RESIDUAL)
    odd = Top(Inner([Layer(), Norm()]))
    with pytest.raises(InvalidArgumentError, match=r"model.layers\[1\] \(Norm\) has no "
                       "input_layernorm"):
        gv.source(odd, gv.RESIDUAL)


def _child(code, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHTOGGLE_VLLM")}
    e["PYTHONPATH"] = os.pathsep.join([FAKE_TORCH, FAKE_VLLM, PY])
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_worker_patched_whether_imported_before_or_after_register():
    code = """
import sys, graphtoggle.vllm as gv
%s
gv.register(); gv.register()  # twice: harmless
import vllm.v1.worker.gpu_worker as w
W = w.Worker
print(getattr(W, "_graphtoggle_patched", False),
      getattr(W.load_model, "__wrapped__", W.load_model).__qualname__,
      sum(isinstance(f, gv._Finder) for f in sys.meta_path))
"""
    for pre in ("", "import vllm.v1.worker.gpu_worker"):
        out = _child(code % pre, {"GRAPHTOGGLE_VLLM": "1"})
        assert out.split() == ["True", "Worker.load_model", "0"], (pre, out)
    out = _child(code % "", {})  # off: nothing patched, no finder
    assert out.split()[0] == "False"
