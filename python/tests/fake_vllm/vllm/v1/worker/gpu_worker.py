"""vllm.v1.worker.gpu_worker.Worker: init_device (the device, then the model runner),
load_model, determine_available_memory (profile_run: the model's first forward, where
torch.compile traces it), initialize_from_config, compile_or_warm_up_model
(capture_model), execute_model once per engine step."""

import torch

from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.worker_base import WorkerBase

INIT_DEVICE_DONE = []  # test aid: set when init_device ran


class Worker(WorkerBase):
    def init_device(self):
        self.device = "cuda:%d" % self.local_rank
        torch.cuda.current_device()
        INIT_DEVICE_DONE.append(self.local_rank)
        self.model_runner = GPUModelRunner(self.vllm_config, self.device)

    def load_model(self):
        self.model_runner.load_model()

    def determine_available_memory(self):
        self.model_runner.profile_run()
        return 1 << 30

    def initialize_from_config(self, kv_cache_config):
        self.model_runner.initialize_kv_cache(kv_cache_config)

    def compile_or_warm_up_model(self):
        if not self.model_config.enforce_eager:
            self.model_runner.capture_model()

    def get_model(self):
        return self.model_runner.get_model()

    def execute_model(self, scheduler_output):
        out = self.model_runner.execute_model(scheduler_output)
        return out if self.is_driver_worker else None

    def execute_dummy_batch(self):
        self.model_runner._dummy_run(1)
