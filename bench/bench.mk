# bench.mk - benchmarks (make bench).  Figures only: nothing here asserts speed.
BENCH_CFLAGS = -Ilibtoggle/src

$(B)/bench/bench_host: bench/bench_host.c $(B)/libtoggle.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(BENCH_CFLAGS) -o $@ $< $(B)/libtoggle.a $(LIB_LIBS)

$(B)/bench/bench_daemon: bench/bench_daemon.c $(B)/libtoggle.a $(B)/libtgclient.a $(B)/libtgproto.a \
		$(B)/libtgutil.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(BENCH_CFLAGS) $(TGP_CFLAGS) -o $@ $< $(B)/libtgclient.a $(B)/libtgproto.a \
	    $(B)/libtoggle.a $(B)/libtgutil.a $(TGP_LIBS) $(LIB_LIBS)

.PHONY: bench
bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(B)/bench/bench_host $(B)/bench/bench_daemon $(B)/toggled
	@B=$(B) bench/run.sh

# GPU figures (issue #5): libc, pthreads and CUDA only; skips cleanly without a GPU.
.PHONY: gpu-bench
gpu-bench:
	@scripts/gpu-bench.sh

# The cluster layer (docs/cluster.md): needs etcd; bench/cluster.sh starts one.
$(B)/bench/bench_cluster: bench/bench_cluster.c $(B)/libtoggle.a $(B)/libtgclient.a $(B)/libtgproto.a \
		$(B)/libtgutil.a $(B)/daemon/etcd.o $(B)/daemon/log.o
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(BENCH_CFLAGS) $(TGP_CFLAGS) -Idaemon $$(pkg-config --cflags libuv) -o $@ $< \
	    $(B)/daemon/etcd.o $(B)/daemon/log.o $(B)/libtgclient.a $(B)/libtgproto.a $(B)/libtoggle.a \
	    $(B)/libtgutil.a \
	    $$(pkg-config --libs libcurl jansson libuv) $(TGP_LIBS) $(LIB_LIBS)

.PHONY: bench-cluster
bench-cluster:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(B)/bench/bench_cluster $(B)/toggled
	@B=$(B) bench/cluster.sh
