"""vllm.v1.executor.uniproc_executor.UniProcExecutor: the one worker in the engine core's
own process, started in the same order as a WorkerProc."""

from vllm.v1.worker.worker_base import WorkerWrapperBase


class UniProcExecutor:
    def __init__(self, vllm_config):
        self.driver_worker = WorkerWrapperBase(rpc_rank=0)
        self.driver_worker.init_worker([{
            "vllm_config": vllm_config, "local_rank": 0, "rank": 0,
            "distributed_init_method": "tcp://127.0.0.1:0", "is_driver_worker": True}])
        self.driver_worker.init_device()
        self.driver_worker.load_model()

    def collective_rpc(self, method, args=(), kwargs=None):
        return [self.driver_worker.execute_method(method, *args, **(kwargs or {}))]

    def shutdown(self):
        pass
