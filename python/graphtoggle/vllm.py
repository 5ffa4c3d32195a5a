"""graphtoggle.vllm: the vLLM plugin.  The package declares it as a `vllm.general_plugins`
entry point (python/pyproject.toml):

    [project.entry-points."vllm.general_plugins"]
    graphtoggle = "graphtoggle.vllm:register"

vLLM calls register() in every process it starts (front end, engine core, each worker;
vllm.plugins.load_general_plugins), in a worker from WorkerWrapperBase.init_worker before
the worker class is even imported.  The plugin is off unless GRAPHTOGGLE_VLLM=1: an
installed package changes nothing in vLLM until asked.  When on, register():

 * reads its configuration from the environment (below) and refuses a bad value at once,
   naming the variable, so vLLM fails at start-up rather than later;
 * turns vLLM's torch.compile cache off in this process and the processes it starts
   (VLLM_DISABLE_COMPILE_CACHE=1, unless that variable is already set or
   GRAPHTOGGLE_VLLM_COMPILE_CACHE=keep): vLLM finds its cached artifacts by a hash of its
   configuration and of the traced source files, not of the graph, so an artifact compiled
   without these producers (or with others) would be loaded and the producers would be
   silently absent;
 * arranges, through an import hook on vllm.v1.worker.gpu_worker (or at once if it is
   imported), that each GPU worker
     - at the start of Worker.load_model, the first point where the worker's rank and
       device are set, makes the process's one agent and installs
       graphtoggle.torch.patch(agent), before the model exists and so before any
       torch.cuda.CUDAGraph is created or captured (vLLM's breakable mode keeps each
       graph's bound `replay`, so a patch installed after a capture would miss it);
     - after the model is loaded, attaches the producers (graphtoggle.torch.attach) to its
       modules, before the first forward, which is where vLLM compiles it;
     - after Worker.compile_or_warm_up_model, where vLLM captures every CUDA graph it
       will replay, checks that the captures recorded producers
       (Attachment.verify_captures()): graphs captured from code compiled without the
       hooks (an artifact from a compile cache, say) fail the engine's start-up with a
       CaptureError naming the fix, rather than its first engine step;
     - calls agent.step() once per engine iteration, at the start of Worker.execute_model,
       before the iteration's replays.
   Processes that never load a model (the front end, an engine core whose workers are
   other processes) make no agent.

Environment (read by register()):
  GRAPHTOGGLE_VLLM       1 to turn the plugin on (default off)
  GRAPHTOGGLE_NAME       the agent's name, a template with {rank}, {local_rank}, {dp_rank}
                         and {pid}; default "vllm-rank{rank}", "vllm-dp{dp_rank}-rank{rank}"
                         with data parallelism
  GRAPHTOGGLE_GROUP      the agent's group (default "vllm"): operators address the engine
                         with it (togglectl set --group vllm ...)
  GRAPHTOGGLE_SOCKET     toggled's socket (default $TOGGLE_SOCKET; none: no daemon)
  GRAPHTOGGLE_RANK       the rank to name the agent with (default: the worker's rank)
  GRAPHTOGGLE_MODE       lazy (default), eager or device
  GRAPHTOGGLE_STRICT     1: device mode refuses instead of falling back to lazy
  GRAPHTOGGLE_FULL_EXEC  0: no full exec per graph (Agent(full_exec=False): the steps it
                         runs run the graph's own exec; saves one exec's memory per graph)
  GRAPHTOGGLE_SET_EXEC   0: no set or all-on execs (Agent(set_exec=False)): a set in
                         between that holds, and all on after one, keep running on the
                         full exec
  GRAPHTOGGLE_HOOKS      type=source,...: what each hook type copies.  A source is a path
                         of modules from the model, "*" for every element of a list (the
                         element's index is the layer): the module's output (a tuple's
                         first element); path[N]: element N of the module's output tuple;
                         @residual: the residual stream after each decoder layer (vLLM's
                         layers return their MLP's output and the residual apart, and the
                         sum is made inside the next fused add+norm: element 1 of
                         model.layers[i + 1].input_layernorm's output, of model.norm's
                         after the last layer).  Default
                         "resid_post=@residual,attn_out=model.layers.*.self_attn,
                         mlp_out=model.layers.*.mlp" (vLLM's Llama-style models)
  GRAPHTOGGLE_LAYERS     the catalog's layer count (default: the model config's
                         num_hidden_layers)
  GRAPHTOGGLE_RANDOM_OPS false: patch(agent, random_ops=False) (default: patch's default)
  GRAPHTOGGLE_VLLM_COMPILE_CACHE  keep: leave vLLM's compile cache as configured
  GRAPHTOGGLE_VLLM_AGENT_FACTORY  module:callable making the agent (called with name=,
                         hooks=, mode=, socket=, group=, strict=); for tests and unusual
                         set-ups

current() gives this process's State (agent, attachment, last step's set) or None.

Written against vLLM's source as read (docs/python.md, "torch.compile piecewise and
vLLM", says which files at which commits); tested against a fake vLLM package of the same
shape (python/tests/fake_vllm); real vLLM has not been run with it.
"""

import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading

from .errors import InvalidArgumentError

ENTRY_POINT = "graphtoggle.vllm:register"
GROUP = "vllm.general_plugins"
DEFAULT_HOOKS = "resid_post=@residual,attn_out=model.layers.*.self_attn,mlp_out=model.layers.*.mlp"
RESIDUAL = "@residual"
WORKER_MODULE = "vllm.v1.worker.gpu_worker"
_MODES = ("lazy", "eager", "device")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

_lock = threading.RLock()
_config = None     # Config, once register() ran with the plugin on
_state = None      # State, once this process made its agent
_hooked = False    # the import hook or the worker patch is in place


class Config:
    """The plugin's configuration, read from the environment once."""

    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.name = env.get("GRAPHTOGGLE_NAME") or None
        self.group = env.get("GRAPHTOGGLE_GROUP", "vllm") or None
        sock = env.get("GRAPHTOGGLE_SOCKET", env.get("TOGGLE_SOCKET", ""))
        self.socket = None if sock.lower() in ("", "none") else sock
        self.rank = _int(env, "GRAPHTOGGLE_RANK")
        self.layers = _int(env, "GRAPHTOGGLE_LAYERS")
        self.mode = env.get("GRAPHTOGGLE_MODE", "lazy")
        if self.mode not in _MODES:
            raise InvalidArgumentError("GRAPHTOGGLE_MODE=%r: one of %s"
                                       % (self.mode, ", ".join(_MODES)))
        self.strict = _bool(env, "GRAPHTOGGLE_STRICT", False)
        self.full_exec = _bool(env, "GRAPHTOGGLE_FULL_EXEC", True)
        self.set_exec = _bool(env, "GRAPHTOGGLE_SET_EXEC", True)
        ro = env.get("GRAPHTOGGLE_RANDOM_OPS")
        if ro is None or ro == "":
            self.random_ops = None
        elif ro.lower() in _FALSE:
            self.random_ops = False
        elif ro.lower() in _TRUE:
            self.random_ops = True
        else:
            raise InvalidArgumentError("GRAPHTOGGLE_RANDOM_OPS=%r: true or false" % (ro,))
        self.hooks = parse_hooks(env.get("GRAPHTOGGLE_HOOKS") or DEFAULT_HOOKS)
        cache = env.get("GRAPHTOGGLE_VLLM_COMPILE_CACHE", "off")
        if cache not in ("off", "keep"):
            raise InvalidArgumentError("GRAPHTOGGLE_VLLM_COMPILE_CACHE=%r: off or keep"
                                       % (cache,))
        self.compile_cache = cache
        self.factory = env.get("GRAPHTOGGLE_VLLM_AGENT_FACTORY") or None
        if self.factory is not None and ":" not in self.factory:
            raise InvalidArgumentError("GRAPHTOGGLE_VLLM_AGENT_FACTORY=%r: module:callable"
                                       % (self.factory,))
        if self.name is not None:
            try:
                self.name.format(rank=0, local_rank=0, dp_rank=0, pid=0)
            except (KeyError, IndexError, ValueError) as e:
                raise InvalidArgumentError(
                    "GRAPHTOGGLE_NAME=%r: a template with {rank}, {local_rank}, {dp_rank}, "
                    "{pid} (%s)" % (self.name, e)) from None

    def agent_name(self, rank, local_rank, dp_rank, dp_size):
        tpl = self.name or ("vllm-dp{dp_rank}-rank{rank}" if dp_size > 1 else "vllm-rank{rank}")
        return tpl.format(rank=rank, local_rank=local_rank, dp_rank=dp_rank, pid=os.getpid())


def _int(env, name):
    v = env.get(name)
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise InvalidArgumentError("%s=%r: a non-negative integer" % (name, v))
    return n


def _bool(env, name, default):
    v = env.get(name)
    if v is None:
        return default
    if v.lower() in _TRUE:
        return True
    if v.lower() in _FALSE:
        return False
    raise InvalidArgumentError("%s=%r: 1 or 0" % (name, v))


def parse_hooks(spec):
    """"type=source,type=source" -> [(type, source)]: a source is a path dotted with "*" for
    a list's elements, optionally ending in [N] (element N of the output tuple), or
    @residual."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        t, eq, path = part.partition("=")
        t, path = t.strip(), path.strip()
        if eq and t and path == RESIDUAL:
            out.append((t, path))
            continue
        dotted, index = _split_index(path)
        if not eq or not t or not dotted or index == -1 or any(
                not (p == "*" or p.isidentifier()) for p in dotted.split(".")):
            raise InvalidArgumentError(
                "GRAPHTOGGLE_HOOKS: %r is not type=path, type=path[N] or type=@residual (e.g. "
                "attn_out=model.layers.*.self_attn)" % (part,))
        if dotted.split(".").count("*") > 1:
            raise InvalidArgumentError("GRAPHTOGGLE_HOOKS: %r has more than one '*'" % (part,))
        out.append((t, path))
    if not out:
        raise InvalidArgumentError("GRAPHTOGGLE_HOOKS is empty")
    if len({t for t, _ in out}) != len(out):
        raise InvalidArgumentError("GRAPHTOGGLE_HOOKS names a hook type twice: %r" % (spec,))
    return out


def _split_index(path):
    """"a.b[2]" -> ("a.b", 2); "a.b" -> ("a.b", None); a malformed index -> (path, -1)."""
    if not path.endswith("]"):
        return path, (None if "[" not in path else -1)
    head, br, num = path[:-1].partition("[")
    if not br or not num.isdigit() or "[" in num or len(num) > 3:
        return path, -1
    return head, int(num)


class State:
    """This process's agent and what the plugin made for it."""

    def __init__(self, config, agent, owner, rank, local_rank, name):
        self.config = config
        self.agent = agent
        self.owner = owner          # the graphtoggle.torch.patch owner
        self.rank = rank
        self.local_rank = local_rank
        self.name = name
        self.attachment = None
        self.last_set = None        # what the last step() returned
        self.steps = 0

    def __repr__(self):
        return "<graphtoggle.vllm.State %s rank %d, %d steps>" % (self.name, self.rank,
                                                                  self.steps)


def current():
    """This process's State (None until a worker made its agent)."""
    return _state


# ---- the entry point ----------------------------------------------------------------------


def register():
    """The vllm.general_plugins entry point.  Safe to call more than once per process."""
    global _config
    with _lock:
        if not _bool(os.environ, "GRAPHTOGGLE_VLLM", False):
            return
        if _config is None:
            _config = Config()
            if (_config.compile_cache == "off"
                    and "VLLM_DISABLE_COMPILE_CACHE" not in os.environ):
                os.environ["VLLM_DISABLE_COMPILE_CACHE"] = "1"
        _install_hook()


def _install_hook():
    global _hooked
    if _hooked:
        return
    _hooked = True
    mod = sys.modules.get(WORKER_MODULE)
    if mod is not None:
        _patch_worker(mod)
    else:
        sys.meta_path.insert(0, _Finder())


class _Finder(importlib.abc.MetaPathFinder):
    """Patches vllm.v1.worker.gpu_worker's Worker right after the module is executed (the
    worker imports it after the plugins are loaded)."""

    def find_spec(self, name, path=None, target=None):
        if name != WORKER_MODULE:
            return None
        # once: take the finder out, find the module as the import would, wrap its loader
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch_worker(module)


def _patch_worker(mod):
    cls = getattr(mod, "Worker", None)
    if cls is None or getattr(cls, "_graphtoggle_patched", False):
        return
    o_load, o_exec = cls.load_model, cls.execute_model
    o_warm = getattr(cls, "compile_or_warm_up_model", None)

    def load_model(self, *args, **kwargs):
        st = _ensure_agent(self)
        out = o_load(self, *args, **kwargs)
        if st is not None:
            _attach(st, self)
        return out

    def execute_model(self, *args, **kwargs):
        st = _state
        if st is not None and st.agent is not None:
            st.last_set = st.agent.step()
            st.steps += 1
        return o_exec(self, *args, **kwargs)

    def compile_or_warm_up_model(self, *args, **kwargs):
        out = o_warm(self, *args, **kwargs)
        st = _state
        if st is not None and st.attachment is not None:
            # the engine's captures are done: graphs captured without a producer fail the
            # start-up here, not the first engine step of a serving engine
            st.attachment.verify_captures()
        return out

    load_model.__wrapped__ = o_load
    execute_model.__wrapped__ = o_exec
    load_model.__doc__, execute_model.__doc__ = o_load.__doc__, o_exec.__doc__
    cls.load_model, cls.execute_model = load_model, execute_model
    if o_warm is not None:
        compile_or_warm_up_model.__wrapped__ = o_warm
        compile_or_warm_up_model.__doc__ = o_warm.__doc__
        cls.compile_or_warm_up_model = compile_or_warm_up_model
    cls._graphtoggle_patched = True


# ---- the agent, the patch, the producers --------------------------------------------------


def _ensure_agent(worker):
    """The process's agent and patch, made once (a second load_model reuses them)."""
    global _state
    with _lock:
        if _state is not None:
            return _state
        cfg = _config
        if cfg is None:
            return None
        vc = getattr(worker, "vllm_config", None)
        pc = getattr(vc, "parallel_config", None)
        rank = cfg.rank if cfg.rank is not None else int(getattr(worker, "rank", 0) or 0)
        local_rank = int(getattr(worker, "local_rank", 0) or 0)
        dp_rank = int(getattr(pc, "data_parallel_rank", 0) or 0)
        dp_size = int(getattr(pc, "data_parallel_size", 1) or 1)
        name = cfg.agent_name(rank, local_rank, dp_rank, dp_size)
        layers = cfg.layers if cfg.layers is not None else _num_layers(vc)
        hooks = {t: layers for t, _ in cfg.hooks}
        # full_exec and set_exec only when off: an agent factory of the user's need not
        # know the keywords
        more = {} if cfg.full_exec else {"full_exec": False}
        if not cfg.set_exec:
            more["set_exec"] = False
        agent = _make_agent(cfg, name=name, hooks=hooks, mode=cfg.mode, socket=cfg.socket,
                            group=cfg.group, strict=cfg.strict, **more)
        from . import torch as gtt
        try:
            kw = {} if cfg.random_ops is None else {"random_ops": cfg.random_ops}
            owner = gtt.patch(agent, **kw)
        except BaseException:
            agent.close()
            raise
        _state = State(cfg, agent, owner, rank, local_rank, name)
        return _state


def _num_layers(vc):
    mc = getattr(vc, "model_config", None)
    for holder in (getattr(mc, "hf_text_config", None), getattr(mc, "hf_config", None)):
        n = getattr(holder, "num_hidden_layers", None)
        if isinstance(n, int) and n > 0:
            return n
    raise InvalidArgumentError(
        "graphtoggle.vllm: the model config has no num_hidden_layers; set GRAPHTOGGLE_LAYERS "
        "to the catalog's layer count")


def _make_agent(cfg, **kwargs):
    if cfg.factory is None:
        from .agent import Agent
        return Agent(**kwargs)
    mod, _, fn = cfg.factory.partition(":")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise InvalidArgumentError("GRAPHTOGGLE_VLLM_AGENT_FACTORY=%r: %s"
                                   % (cfg.factory, e)) from None
    return f(**kwargs)


def unwrap(model):
    """The nn.Module under vLLM's wrappers (CUDAGraphWrapper, BreakableCUDAGraphWrapper,
    UBatchWrapper: each has unwrap(); their __getattr__ forwards everything else, so the
    class is asked, not the instance)."""
    seen = 0
    while hasattr(type(model), "unwrap") and seen < 8:
        model = model.unwrap()
        seen += 1
    return model


def resolve(model, path):
    """The modules path names in model: "model.layers" -> its elements (a list's elements are
    layers 0, 1, ...); "model.layers.*.mlp" -> each element's mlp.  A layer vLLM does not
    hold on this rank (pipeline parallelism's PPMissingLayer) gets a placeholder module
    that never runs; any other missing name raises, naming the path."""
    parts = path.split(".")
    star = parts.index("*") if "*" in parts else len(parts)
    head, tail = parts[:star], parts[star + 1:]
    obj = model
    for i, p in enumerate(head):
        if not hasattr(obj, p):
            raise InvalidArgumentError(
                "GRAPHTOGGLE_HOOKS: the model (%s) has no %s" % (type(model).__name__,
                                                                ".".join(head[:i + 1])))
        obj = getattr(obj, p)
    items = list(obj)
    if star == len(parts):
        return items
    out = []
    for n, item in enumerate(items):
        m = item
        for p in tail:
            if not hasattr(m, p):
                if _held_elsewhere(item):
                    m = _placeholder()
                    break
                raise InvalidArgumentError(
                    "GRAPHTOGGLE_HOOKS: %s[%d] (%s) has no %s" % (
                        ".".join(head), n, type(item).__name__, ".".join(tail)))
            m = getattr(m, p)
        out.append(m)
    return out


def _held_elsewhere(module):
    """True for a module another pipeline stage holds (vLLM's PPMissingLayer)."""
    return "Missing" in type(module).__name__


def _placeholder():
    import torch
    return torch.nn.Module()


def _attach(st, worker):
    runner = getattr(worker, "model_runner", None)
    model = getattr(runner, "model", None)
    if model is None:
        raise InvalidArgumentError("graphtoggle.vllm: the worker has no model_runner.model "
                                   "after load_model")
    model = unwrap(model)
    if st.attachment is not None:
        st.attachment.detach()  # the model was loaded again: attach to the new one
    modules, select = {}, {}
    for t, path in st.config.hooks:
        modules[t], select[t] = source(model, path)
    # vLLM compiles the model before any eager forward meets a shape, so the monitor
    # buffers are declared now: one per hook, rows for the most tokens a step can carry
    # (the runner's max_num_tokens, scheduler_config.max_num_batched_tokens), the model's
    # hidden size wide, in its dtype (docs/python.md, Declared buffers)
    st.attachment = st.agent.attach(modules, select=select, **_declared_buffers(runner))
    return st.attachment


def source(model, path):
    """(modules per layer, select or None) for a GRAPHTOGGLE_HOOKS source of model."""
    if path == RESIDUAL:
        return _residual_stream(model), _element(1, RESIDUAL)
    dotted, index = _split_index(path)
    return resolve(model, dotted), (None if index is None else _element(index, path))


def _residual_stream(model):
    """The modules whose output's element 1 is the residual stream after layer 0, 1, ...:
    each next layer's input_layernorm, then the final norm (vLLM sums the MLP's output and
    the residual there, in place or not: the copy follows the sum in stream order)."""
    layers = resolve(model, "model.layers")
    if not hasattr(model.model, "norm"):
        raise InvalidArgumentError(
            "GRAPHTOGGLE_HOOKS: %s: the model (%s) has no model.norm (the fused add+norm after "
            "its last layer); name the hook's source as a path"
            % (RESIDUAL, type(model).__name__))
    out = []
    for i in range(len(layers)):
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        m = model.model.norm if nxt is None else getattr(nxt, "input_layernorm", None)
        if (nxt is not None and _held_elsewhere(nxt)) or _held_elsewhere(m):
            m = _placeholder()  # another pipeline stage sums it: never runs here
        elif m is None:
            raise InvalidArgumentError(
                "GRAPHTOGGLE_HOOKS: %s: model.layers[%d] (%s) has no input_layernorm (the "
                "fused add+norm that makes the residual stream); name the hook's source as "
                "a path" % (RESIDUAL, i + 1, type(nxt).__name__))
        out.append(m)
    return out


def _element(n, what):
    """The select taking element n of a module's output tuple (traceable: torch.compile runs
    it in the hook)."""
    def select(output):
        if not isinstance(output, (tuple, list)) or len(output) <= n:
            raise InvalidArgumentError(
                "GRAPHTOGGLE_HOOKS: %s: the module returned %s, not a tuple of more than %d "
                "elements" % (what, type(output).__name__, n))
        return output[n]
    return select


def _declared_buffers(runner):
    tokens = getattr(runner, "max_num_tokens", None)
    mc = getattr(runner, "model_config", None)
    hf = getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)
    width = getattr(hf, "hidden_size", None)
    if not isinstance(tokens, int) or not isinstance(width, int):
        raise InvalidArgumentError(
            "graphtoggle.vllm: the model runner gives no max_num_tokens (%r) or hidden size "
            "(%r) to declare the monitor buffers with" % (tokens, width))
    out = {"max_tokens": tokens, "width": width}
    dtype = getattr(mc, "dtype", None)
    if dtype is not None and not isinstance(dtype, str):
        out["dtype"] = dtype  # a torch.dtype (vLLM resolves "auto" before the runner exists)
    return out


__all__ = ["register", "current", "Config", "State", "parse_hooks", "resolve", "source", "unwrap",
           "ENTRY_POINT", "GROUP", "DEFAULT_HOOKS"]
