"""vllm.v1.worker.worker_base: WorkerBase (sets parallel_config.rank) and WorkerWrapperBase,
one per worker process: init_worker loads the general plugins, then resolves and imports
the worker class by its qualified name, then constructs the worker."""

import importlib

from vllm.config import set_current_vllm_config


def resolve_obj_by_qualname(qualname):
    mod, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(mod), name)


class WorkerBase:
    def __init__(self, vllm_config, local_rank, rank, distributed_init_method,
                 is_driver_worker=False):
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.parallel_config = vllm_config.parallel_config
        self.compilation_config = vllm_config.compilation_config
        self.parallel_config.rank = rank
        self.local_rank = local_rank
        self.rank = rank
        self.distributed_init_method = distributed_init_method
        self.is_driver_worker = is_driver_worker
        self.device = None
        self.model_runner = None


class WorkerWrapperBase:
    def __init__(self, rpc_rank=0, global_rank=None):
        self.rpc_rank = rpc_rank
        self.global_rank = rpc_rank if global_rank is None else global_rank
        self.worker = None
        self.vllm_config = None

    def init_worker(self, all_kwargs):
        kwargs = all_kwargs[self.rpc_rank]
        self.vllm_config = kwargs.get("vllm_config")
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        worker_class = resolve_obj_by_qualname(self.vllm_config.parallel_config.worker_cls)
        with set_current_vllm_config(self.vllm_config):
            self.worker = worker_class(**kwargs)

    def init_device(self):
        with set_current_vllm_config(self.vllm_config):
            self.worker.init_device()

    def execute_method(self, method, *args, **kwargs):
        if isinstance(method, str):
            return getattr(self, method)(*args, **kwargs)
        return method(self, *args, **kwargs)  # collective_rpc with a callable

    def __getattr__(self, attr):
        worker = self.__dict__.get("worker")
        if worker is None:
            raise AttributeError(attr)
        return getattr(worker, attr)

    def execute_model(self, scheduler_output):
        return self.worker.execute_model(scheduler_output)
