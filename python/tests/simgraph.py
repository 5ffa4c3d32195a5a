"""Helpers for tests on the simulator: capture graphs whose producer kernels log what ran."""

import math


class Engine:
    """Graphs of n_layers "layers", each a layer kernel then producers per hook type; every
    producer appends its hook to self.ran when it runs (the ground truth)."""

    def __init__(self, agent, types=None, layers=None, kernels_per_producer=1):
        self.agent = agent
        self.sim = agent.sim
        self.stream = self.sim.stream()
        self.types = types if types is not None else list(agent.catalog.names)
        self.layers = layers if layers is not None else agent.catalog.n_layers
        self.kpp = kernels_per_producer
        self.ran = []
        self.layer_runs = 0

    def _layer(self):
        self.layer_runs += 1

    def capture(self, hooks=None):
        """Capture one graph; hooks: the (type, layer) producers to put in it (default all).
        Returns (graph, exec) with the graph bound through toggle_graph_instantiate."""
        a, sim, s = self.agent, self.sim, self.stream
        wanted = None if hooks is None else set(hooks)
        with a.capture():
            sim.begin_capture(s)
            a.capture_planner(s)
            for layer in range(self.layers):
                sim.kernel(s, self._layer)
                for t in self.types:
                    if wanted is not None and (t, layer) not in wanted:
                        continue
                    with a.producer((t, layer), stream=s) as r:
                        for _ in range(self.kpp):
                            sim.kernel(s, lambda h=(t, layer): self.ran.append(h))
                    assert r.recorded == self.kpp
            graph = sim.end_capture(s)
        return graph, a.instantiate(graph)

    def replay(self, graph, exec_):
        """One guarded replay; returns the set of hooks whose producers ran."""
        del self.ran[:]
        self.agent.launch(graph, exec_, self.stream)
        return set(self.ran)


class FakeTensor:
    """Enough of a tensor for copy_geometry: simulator memory with a shape and strides."""

    def __init__(self, sim, shape, stride=None, itemsize=4, ptr=None):
        self.shape, self._itemsize = tuple(shape), itemsize
        self._stride = stride or tuple(
            int(math.prod(shape[i + 1:])) for i in range(len(shape)))
        span = 1 + sum((n - 1) * st for n, st in zip(self.shape, self._stride))
        self.ptr = ptr if ptr is not None else sim.alloc(span * itemsize)
        self.device = "sim"

    def element_size(self):
        return self._itemsize

    def numel(self):
        return int(math.prod(self.shape))

    def stride(self):
        return self._stride

    def is_contiguous(self):
        exp = tuple(int(math.prod(self.shape[i + 1:]))
                    for i in range(len(self.shape)))
        return all(st == e for n, st, e in zip(self.shape, self._stride, exp) if n != 1)

    def data_ptr(self):
        return self.ptr
