"""vllm.engine.arg_utils.EngineArgs: the front end loads the plugins when it parses its
arguments, before anything else."""

from vllm.config import (CompilationConfig, CUDAGraphMode, ModelConfig, ParallelConfig,
                         VllmConfig)
from vllm.plugins import load_general_plugins


class EngineArgs:
    def __init__(self, tensor_parallel_size=1, cudagraph_mode="FULL_AND_PIECEWISE",
                 capture_sizes=(4, 2, 1), num_layers=3, hidden_size=4,
                 max_num_batched_tokens=8, data_parallel_size=1, data_parallel_rank=0,
                 distributed_executor_backend="mp"):
        self.tensor_parallel_size = tensor_parallel_size
        self.cudagraph_mode = CUDAGraphMode[cudagraph_mode]
        self.capture_sizes = capture_sizes
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.data_parallel_size = data_parallel_size
        self.data_parallel_rank = data_parallel_rank
        self.distributed_executor_backend = distributed_executor_backend
        self.__post_init__()

    def __post_init__(self):
        load_general_plugins()

    def create_engine_config(self):
        return VllmConfig(
            ModelConfig(self.num_layers, self.hidden_size, self.max_num_batched_tokens),
            ParallelConfig(self.tensor_parallel_size, self.data_parallel_size,
                           self.data_parallel_rank, self.distributed_executor_backend),
            CompilationConfig(cudagraph_mode=self.cudagraph_mode,
                              cudagraph_capture_sizes=self.capture_sizes))
