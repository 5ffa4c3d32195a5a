"""A fake of vLLM for graphtoggle's tests: the parts graphtoggle.vllm meets, with real
vLLM's module paths, class and method names and call order, written for these tests (no
vLLM code).  Shaped after vLLM's source at the commits docs/python.md names ("torch.compile
piecewise and vLLM"): vllm.plugins (load_general_plugins over the vllm.general_plugins
entry points, VLLM_PLUGINS, once per process), vllm.engine.arg_utils.EngineArgs (loads the
plugins in the front end), vllm.v1.executor.multiproc_executor (one spawned process per
rank), vllm.v1.worker.worker_base.WorkerWrapperBase.init_worker (plugins, then the worker
class, then the worker), vllm.v1.worker.gpu_worker.Worker (init_device, load_model,
determine_available_memory, initialize_from_config, compile_or_warm_up_model,
execute_model), GPUModelRunner (the model wrapped in CUDAGraphWrapper or
BreakableCUDAGraphWrapper by load_model, piecewise graphs made at the first forward,
capture_model largest size first, a dispatch per step), CUDAGraphWrapper and
BreakableCUDAGraphCapture (torch.cuda.CUDAGraph per batch descriptor, one global pool;
breakable mode keeps each graph's bound replay).

It runs on the fake torch (tests/fake_torch): the model's kernels are simulator kernels,
the producers graphtoggle.torch.attach's.
"""

__version__ = "0.11.1+fake"
FAKE = True
