"""vllm.v1.executor.multiproc_executor: one process per rank (multiprocessing, spawn), each
a WorkerProc: WorkerWrapperBase(rpc_rank=rank).init_worker (plugins, worker class, worker),
init_device, load_model, then READY; afterwards it serves collective_rpc calls (a method
name or a callable run with the worker wrapper) until shut down."""

import multiprocessing
import traceback

from vllm.v1.worker.worker_base import WorkerWrapperBase


class WorkerProc:
    def __init__(self, vllm_config, local_rank, rank, distributed_init_method):
        self.rank = rank
        wrapper = WorkerWrapperBase(rpc_rank=rank)
        all_kwargs = [{} for _ in range(vllm_config.parallel_config.world_size)]
        all_kwargs[rank] = {
            "vllm_config": vllm_config, "local_rank": local_rank, "rank": rank,
            "distributed_init_method": distributed_init_method,
            "is_driver_worker": rank % vllm_config.parallel_config.tensor_parallel_size == 0}
        wrapper.init_worker(all_kwargs)
        self.worker = wrapper
        self.worker.init_device()
        self.worker.load_model()

    @staticmethod
    def worker_main(vllm_config, rank, conn):
        try:
            proc = WorkerProc(vllm_config, rank, rank, "tcp://127.0.0.1:0")
        except BaseException:
            conn.send(("FAILED", traceback.format_exc()))
            return
        conn.send(("READY", None))
        while True:
            msg = conn.recv()
            if msg is None:
                break
            method, args, kwargs = msg
            try:
                conn.send(("OK", proc.worker.execute_method(method, *args, **kwargs)))
            except BaseException:
                conn.send(("FAILED", traceback.format_exc()))


class MultiprocExecutor:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for rank in range(vllm_config.parallel_config.world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=WorkerProc.worker_main, args=(vllm_config, rank, child),
                            name="VllmWorker-%d" % rank, daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        for rank, c in enumerate(self.conns):
            status, detail = c.recv()
            if status != "READY":
                self.shutdown()
                raise RuntimeError("worker %d failed to start:\n%s" % (rank, detail))

    def collective_rpc(self, method, args=(), kwargs=None):
        for c in self.conns:
            c.send((method, args, kwargs or {}))
        out = []
        for rank, c in enumerate(self.conns):
            status, result = c.recv()
            if status != "OK":
                raise RuntimeError("worker %d: %s" % (rank, result))
            out.append(result)
        return out

    def shutdown(self):
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        self.conns, self.procs = [], []
