"""torch._C's graph class and stream helpers, modelled on the simulator."""

_sim = None
_current = []  # stack of fake Stream objects (torch.cuda.stream contexts)


def sim():
    global _sim
    if _sim is None:
        from graphtoggle.sim import Sim
        _sim = Sim()
    return _sim


def _cuda_getCurrentRawStream(device):  # noqa: N802  (torch's own name)
    from .cuda import current_stream
    return current_stream().cuda_stream


class Generator:
    """The default CUDA generator's Philox state as torch 2.11 keeps it: a seed, and an
    offset that eager random ops advance by their increment, and each graph replay by its
    graph's whole increment (in CUDAGraph::replay's prologue, before the launch)."""

    def __init__(self, seed=67280421310721):
        self.seed = seed
        self.offset = 0

    def manual_seed(self, seed):
        self.seed = int(seed)
        self.offset = 0
        return self

    def get_offset(self):
        """torch.Generator.get_offset: the Philox offset (philox_offset_per_thread)."""
        return self.offset


default_generator = Generator()


class _CaptureRng:
    """A captured graph's generator state (torch's graph-safe state): the seed and base
    offset its random kernels read when they run, written by each replay's prologue, and the
    whole-graph increment that capture summed over its random ops."""

    def __init__(self, gen):
        self.seed = gen.seed
        self.base = gen.offset
        self.increment = 0

    def prologue(self, gen):
        # at::CUDAGeneratorState::replay_prologue: the graph's offset for this replay is the
        # generator's offset, which then moves past everything this replay draws
        self.seed = gen.seed
        self.base = gen.offset
        gen.offset += self.increment


class _CUDAGraph:
    """The C++ CUDAGraph (at::cuda::CUDAGraph) of torch 2.11, as far as it is observable."""

    # pybind11: __new__ ignores its arguments; __init__ builds the C++ object
    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, keep_graph=False):
        self._keep = bool(keep_graph)
        self._graph = None
        self._exec = None
        self._stream = None
        self._capturing = False
        self._rng = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        from .cuda import current_stream
        if self._graph is not None or self._exec is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. To "
                               "capture a new graph, create a new instance.")
        s = current_stream()
        sim().begin_capture(s.cuda_stream)
        s._capturing = True
        self._stream = s
        self._capturing = True
        # the default generator registers its state with the capture (torch.rand reads it)
        self._rng = s._rng = _CaptureRng(default_generator)

    def capture_end(self):
        from .cuda import current_stream
        s = current_stream()
        if s is not self._stream:
            raise RuntimeError("Capture must end on the same stream it began on.")
        self._graph = sim().end_capture(s.cuda_stream)
        s._capturing = False
        s._rng = None
        self._capturing = False
        if not self._keep:
            self._exec = sim().instantiate(self._graph)
            sim().destroy_graph(self._graph)
            self._graph = None

    def instantiate(self):
        if self._graph is None:
            raise RuntimeError("instantiate() needs a captured graph (keep_graph=True)")
        if self._exec is not None:
            sim().destroy_exec(self._exec)
        self._exec = sim().instantiate(self._graph)

    def replay(self):
        from .cuda import current_stream
        if self._exec is None:
            self.instantiate()
        if self._rng is not None:
            self._rng.prologue(default_generator)  # before the launch, as torch's replay
        sim().launch(self._exec, current_stream().cuda_stream)

    def reset(self):
        if self._exec is not None:
            sim().destroy_exec(self._exec)
            self._exec = None
        if self._graph is not None:
            sim().destroy_graph(self._graph)
            self._graph = None

    def __del__(self):
        try:
            if _sim is not None and _sim.handle:
                self.reset()
        except Exception:
            pass

    def raw_cuda_graph(self):
        if not self._keep:
            raise RuntimeError("You cannot access the raw cudaGraph_t instance unless "
                               "CUDAGraph was initialized with keep_graph=true")
        return self._graph or 0

    def raw_cuda_graph_exec(self):
        if self._exec is None:
            raise RuntimeError("You cannot access the raw cudaGraphExec_t instance until "
                               "instantiate() has been called")
        return self._exec

    def enable_debug_mode(self):
        pass

    def register_generator_state(self, generator):
        """torch 2.11: register another generator's state with this capture (CUDA Graph
        Trees pass those compiled code takes); the fake only remembers it."""
        self.__dict__.setdefault("_registered", []).append(generator)

    def pool(self):
        return (0, id(self))


def _cuda_isCurrentStreamCapturing():  # noqa: N802
    from .cuda import current_stream
    return current_stream()._capturing
