"""vllm.envs: environment variables read when asked (as vLLM's module __getattr__ does)."""

import os


def __getattr__(name):
    if name == "VLLM_PLUGINS":
        v = os.environ.get(name)
        return None if v is None else v.split(",")
    if name in ("VLLM_DISABLE_COMPILE_CACHE", "VLLM_USE_BREAKABLE_CUDAGRAPH"):
        return bool(int(os.environ.get(name, "0")))
    raise AttributeError(name)
