"""vllm.config: the fields graphtoggle.vllm and the fake engine read."""

import contextlib
import enum


class CompilationMode(enum.IntEnum):
    NONE = 0
    STOCK_TORCH_COMPILE = 1
    DYNAMO_TRACE_ONCE = 2
    VLLM_COMPILE = 3


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (2, 0)
    FULL_AND_PIECEWISE = (2, 1)

    def separate_routine(self):
        return isinstance(self.value, tuple)

    def decode_mode(self):
        return CUDAGraphMode(self.value[0]) if self.separate_routine() else self

    def mixed_mode(self):
        return CUDAGraphMode(self.value[1]) if self.separate_routine() else self

    def has_mode(self, mode):
        return mode.value in self.value if self.separate_routine() else self == mode

    def has_full_cudagraphs(self):
        return self.decode_mode() == CUDAGraphMode.FULL or self == CUDAGraphMode.FULL

    def has_piecewise_cudagraphs(self):
        return self.has_mode(CUDAGraphMode.PIECEWISE)


class CompilationConfig:
    def __init__(self, mode=CompilationMode.VLLM_COMPILE,
                 cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                 cudagraph_capture_sizes=(4, 2, 1), cudagraph_num_of_warmups=1,
                 splitting_ops=("vllm::unified_attention_with_output",)):
        self.mode = mode
        self.cudagraph_mode = cudagraph_mode
        self.cudagraph_capture_sizes = sorted(cudagraph_capture_sizes, reverse=True)
        self.max_cudagraph_capture_size = max(cudagraph_capture_sizes)
        self.cudagraph_num_of_warmups = cudagraph_num_of_warmups
        self.splitting_ops = list(splitting_ops)


class ParallelConfig:
    def __init__(self, tensor_parallel_size=1, data_parallel_size=1, data_parallel_rank=0,
                 distributed_executor_backend="mp"):
        self.tensor_parallel_size = tensor_parallel_size
        self.pipeline_parallel_size = 1
        self.world_size = tensor_parallel_size
        self.data_parallel_size = data_parallel_size
        self.data_parallel_rank = data_parallel_rank
        self.distributed_executor_backend = distributed_executor_backend
        self.rank = 0  # set by WorkerBase.__init__
        self.worker_cls = "vllm.v1.worker.gpu_worker.Worker"


class HFConfig:
    def __init__(self, num_hidden_layers, hidden_size):
        self.num_hidden_layers = num_hidden_layers
        self.hidden_size = hidden_size
        self.architectures = ["LlamaForCausalLM"]


class ModelConfig:
    def __init__(self, num_hidden_layers=3, hidden_size=4, max_num_batched_tokens=8):
        self.hf_config = HFConfig(num_hidden_layers, hidden_size)
        self.hf_text_config = self.hf_config
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enforce_eager = False


class VllmConfig:
    def __init__(self, model_config, parallel_config, compilation_config):
        self.model_config = model_config
        self.parallel_config = parallel_config
        self.compilation_config = compilation_config


_current = None


@contextlib.contextmanager
def set_current_vllm_config(cfg):
    global _current
    old, _current = _current, cfg
    try:
        yield
    finally:
        _current = old
