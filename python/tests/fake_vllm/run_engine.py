"""run_engine.py - the fake vLLM started as `vllm serve` would start the real one, for
test_vllm_plugin.py: the front end (EngineArgs loads the plugins), the executor's worker
processes (multiprocessing, spawn) or one in-process worker, the engine core's start-up
RPCs (determine_available_memory, initialize_from_config, compile_or_warm_up_model), then
engine steps (execute_model on every worker), each checked on every worker against the
monitor buffers.  Prints JSON lines: {"front": ...}, {"worker": ...} per rank,
{"step": [...]} per step, {"done": ...}.

Usage: python run_engine.py '<json>' with keys tp, backend ("mp" or "uni"),
cudagraph_mode, layers, steps ([[num_tokens, uniform_decode, spec or null], ...]),
daemon ({"togglectl": path, "socket": path, "target": selector, "spec": spec}: set
through toggled after the listed steps and run steps until every rank runs it).
"""

import json
import os
import subprocess
import sys
import time


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    cfg = json.loads(sys.argv[1])
    import gt_vllm_helpers as h
    import vllm.plugins
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.gpu_model_runner import SchedulerOutput

    args = EngineArgs(tensor_parallel_size=cfg.get("tp", 1),
                      cudagraph_mode=cfg.get("cudagraph_mode", "FULL_AND_PIECEWISE"),
                      num_layers=cfg.get("layers", 3),
                      distributed_executor_backend=cfg.get("backend", "mp"))
    import graphtoggle.vllm as gv
    emit(front={"pid": os.getpid(), "plugins": list(vllm.plugins.LOADED),
                "state": gv.current() is not None, "agents_made": list(h.MADE),
                "compile_cache_env": os.environ.get("VLLM_DISABLE_COMPILE_CACHE")})
    vc = args.create_engine_config()
    if cfg.get("backend", "mp") == "uni":
        from vllm.v1.executor.uniproc_executor import UniProcExecutor
        ex = UniProcExecutor(vc)
    else:
        from vllm.v1.executor.multiproc_executor import MultiprocExecutor
        ex = MultiprocExecutor(vc)
    try:
        ex.collective_rpc("determine_available_memory")
        ex.collective_rpc("initialize_from_config", args=({"blocks": 16},))
        ex.collective_rpc("compile_or_warm_up_model")
        for rec in ex.collective_rpc(h.info):
            emit(worker=rec)
        if not all(r["state"] for r in ex.collective_rpc(h.info)):
            return 0  # the plugin is off: nothing to check
        for n, uniform, spec in cfg.get("steps", []):
            if spec is not None:
                ex.collective_rpc(h.set_enabled, args=(spec,))
            ex.collective_rpc(h.reset_buffers)
            ex.collective_rpc("execute_model", args=(SchedulerOutput(n, uniform),))
            emit(step=ex.collective_rpc(h.check))
        d = cfg.get("daemon")
        if d:
            r = subprocess.run([d["togglectl"], "--socket", d["socket"], "--target", d["target"],
                                "set", d["spec"]], capture_output=True, text=True, timeout=20,
                               env=d.get("env"))
            emit(togglectl={"rc": r.returncode, "out": r.stdout + r.stderr})
            seen = 0
            for _ in range(2000):
                ex.collective_rpc(h.reset_buffers)
                ex.collective_rpc("execute_model", args=(SchedulerOutput(2, True),))
                recs = ex.collective_rpc(h.check)
                emit(step=recs)
                if all([list(p) for p in rr["set"]] == d["want"] for rr in recs):
                    seen += 1
                    if seen >= 3:
                        break
                time.sleep(0.002)
        emit(done={"infos": ex.collective_rpc(h.info)})
    finally:
        ex.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
