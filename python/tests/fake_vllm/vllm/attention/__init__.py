"""vllm.attention: unified_attention_with_output, the op vLLM splits its graphs at (the
default splitting_ops): it writes into an output tensor the piece before it allocated.
Inside a piecewise or breakable capture it runs eagerly between two graphs (the "break");
anywhere else it launches its kernel on the current stream."""

import threading

import torch

_tls = threading.local()
CALLS = [0]


def current_breaker():
    return getattr(_tls, "breaker", None)


def set_breaker(b):
    _tls.breaker = b


def unified_attention_with_output(q, out):
    def run():
        CALLS[0] += 1

        def kernel():
            out.data[:] = [0.5 * v + 0.25 for v in q.data]
        torch.cuda.sim().kernel(torch.cuda.current_stream().cuda_stream, kernel)
    b = current_breaker()
    if b is not None and b.capturing:
        return b.add_eager(run)
    return run()
