"""vllm.platforms: the one graph memory pool every CUDA graph of the process shares."""


class _Cuda:
    _pool = None
    pools_given = 0

    def get_global_graph_pool(self):
        if self._pool is None:
            self._pool = (0, 1)  # the fake torch ignores pool handles; one token
        _Cuda.pools_given += 1
        return self._pool


current_platform = _Cuda()
