"""vllm.forward_context: the runtime cudagraph mode and batch descriptor of a forward."""

import collections
import contextlib

BatchDescriptor = collections.namedtuple("BatchDescriptor", "num_tokens uniform_decode")


class ForwardContext:
    def __init__(self, cudagraph_runtime_mode, batch_descriptor):
        self.cudagraph_runtime_mode = cudagraph_runtime_mode
        self.batch_descriptor = batch_descriptor


_ctx = None


def get_forward_context():
    return _ctx


def is_forward_context_available():
    return _ctx is not None


@contextlib.contextmanager
def set_forward_context(vllm_config, cudagraph_runtime_mode, batch_descriptor):
    global _ctx
    old, _ctx = _ctx, ForwardContext(cudagraph_runtime_mode, batch_descriptor)
    try:
        yield
    finally:
        _ctx = old
