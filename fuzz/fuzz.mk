# fuzz.mk - libFuzzer targets for every decoder of outside input (clang).
#   make fuzz            build them and run each for FUZZ_SECONDS (default 20)
# Corpora and crashes go under $(B)/fuzz/.  Not part of `make check`: a run
# is a search, not a test; a crash it finds becomes a regression test.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 20
FUZZ_FLAGS = -std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-Ilibtoggle/include -Ilibtoggle/src -Iproto -Iclient -I$(B)/gen \
	-isystem $(CUDA_HOME)/include
FUZZ_TARGETS := $(B)/fuzz/fuzz_frame $(B)/fuzz/fuzz_spec $(B)/fuzz/fuzz_pbwire $(B)/fuzz/fuzz_shm \
		$(B)/fuzz/fuzz_cluster

$(B)/fuzz/fuzz_frame: fuzz/fuzz_frame.c proto/frame.c $(TGP_GEN_C) $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ fuzz/fuzz_frame.c proto/frame.c $(TGP_GEN_C) $(TGP_LIBS)

$(B)/fuzz/fuzz_spec: fuzz/fuzz_spec.c libtoggle/src/hookset.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^

$(B)/fuzz/fuzz_pbwire: fuzz/fuzz_pbwire.c libtoggle/src/pbwire.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^

# The daemon's attach and reads of an agent region that the agent keeps rewriting.
$(B)/fuzz/fuzz_shm: fuzz/fuzz_shm.c libtoggle/src/shm.c libtoggle/src/hookset.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -pthread -o $@ $^

# What a toggled in a cluster reads from etcd (keys, selectors, values, base64).
$(B)/fuzz/fuzz_cluster: fuzz/fuzz_cluster.c daemon/cluster_key.c daemon/etcd.c daemon/log.c util/util.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon -Iutil $$(pkg-config --cflags libuv libcurl jansson) -o $@ $^ \
	    $$(pkg-config --libs libuv libcurl jansson) -lpthread

.PHONY: fuzz
fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $$t.corpus; \
	  echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -artifact_prefix=$$t- $$t.corpus \
	    2>&1 | tail -n 3 || exit 1; \
	done
