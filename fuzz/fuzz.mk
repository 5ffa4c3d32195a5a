# fuzz.mk - libFuzzer targets for every decoder of outside input (clang).
#   make fuzz            build them and run each for FUZZ_SECONDS (default 20)
#   make check-fuzz      replay fuzz/corpus/<target>/ through each target,
#                        built by $(CC) with ASan+UBSan (fuzz/replay.c; no
#                        clang needed); part of `make check`
# A fuzz run is a search, not a test: its corpus and crashes go under
# $(B)/fuzz/.  An input worth keeping (a crash it found, once fixed, or a
# case a test covers) is copied into fuzz/corpus/<target>/.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 20
FUZZ_FLAGS = -std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-Ilibtoggle/include -Ilibtoggle/src -Iproto -Iclient -Iutil -I$(B)/gen \
	-isystem $(CUDA_HOME)/include
FUZZ_NAMES := fuzz_frame fuzz_spec fuzz_pbwire fuzz_shm fuzz_cluster fuzz_store fuzz_config \
	      fuzz_plan fuzz_hosts fuzz_gzip fuzz_cluster_stream fuzz_ring fuzz_owed
FUZZ_TARGETS := $(FUZZ_NAMES:%=$(B)/fuzz/%)

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

# An agent's data ring as toggled reads it (libtoggle/src/ring.c).
$(B)/fuzz/fuzz_ring: fuzz/fuzz_ring.c libtoggle/src/ring.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^

# What a toggled in a cluster reads from etcd (keys, selectors, values, base64).
$(B)/fuzz/fuzz_cluster: fuzz/fuzz_cluster.c daemon/cluster_key.c daemon/etcd.c daemon/log.c util/util.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon -Iutil $$(pkg-config --cflags libuv libcurl jansson) -o $@ $^ \
	    $$(pkg-config --libs libuv libcurl jansson) -lpthread

# A whole watch stream and the host's judgement of each key in it.
$(B)/fuzz/fuzz_cluster_stream: fuzz/fuzz_cluster_stream.c daemon/cluster_key.c daemon/etcd.c \
		daemon/log.c util/util.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon -Iutil $$(pkg-config --cflags libuv libcurl jansson) -o $@ $^ \
	    $$(pkg-config --libs libuv libcurl jansson) -lpthread

# The state directory's files and journal (daemon/store.c).  Only the
# decoders are instrumented; the rest of the daemon is linked as built.
$(B)/fuzz/fuzz_store: fuzz/fuzz_store.c daemon/store.c $(filter-out $(B)/daemon/store.o,$(TD_OBJ)) \
		$(B)/libtgproto.a $(B)/libtoggle.a $(B)/libtgutil.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon $$(pkg-config --cflags libuv jansson) -o $@ $^ \
	    $(TD_LIBS) $(LIB_LIBS)

# A recording's note as toggled reads it at an agent's join (daemon/record_owed.c).
$(B)/fuzz/fuzz_owed: fuzz/fuzz_owed.c daemon/record_owed.c \
		$(filter-out $(B)/daemon/record_owed.o,$(TD_OBJ)) $(B)/libtgproto.a $(B)/libtoggle.a \
		$(B)/libtgutil.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon $$(pkg-config --cflags libuv jansson) -o $@ $^ \
	    $(TD_LIBS) $(LIB_LIBS)

# toggled.conf, at start and as SIGHUP reloads it (daemon/config.c).
$(B)/fuzz/fuzz_config: fuzz/fuzz_config.c daemon/config.c util/util.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon $$(pkg-config --cflags libuv) -o $@ $^

# togglectl's plan files (client/ctl_cmds.c).
$(B)/fuzz/fuzz_plan: fuzz/fuzz_plan.c client/ctl_cmds.c \
		$(filter-out $(B)/client/ctl_cmds.o $(B)/client/togglectl.o,$(CTL_OBJ)) \
		$(CTL_DAEMON_OBJ) $(B)/libtgclient.a $(B)/libtgproto.a $(B)/libtoggle.a $(B)/libtgutil.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon $$(pkg-config --cflags jansson libcurl libuv) -o $@ $^ \
	    $(CTL_LIBS) $(LIB_LIBS)

# A host's published status, as togglectl --etcd reads it (client/ctl_host.c).
$(B)/fuzz/fuzz_hosts: fuzz/fuzz_hosts.c client/ctl_host.c \
		$(filter-out $(B)/client/ctl_host.o $(B)/client/togglectl.o,$(CTL_OBJ)) \
		$(CTL_DAEMON_OBJ) $(B)/libtgclient.a $(B)/libtgproto.a $(B)/libtoggle.a $(B)/libtgutil.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon $$(pkg-config --cflags jansson libcurl libuv) -o $@ $^ \
	    $(CTL_LIBS) $(LIB_LIBS)

# /metrics' Accept-Encoding header and its gzip (daemon/gzipenc.c).
$(B)/fuzz/fuzz_gzip: fuzz/fuzz_gzip.c daemon/gzipenc.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Idaemon -o $@ $^ $$(pkg-config --libs zlib)

# Seeds: a target's run starts from its checked-in corpus.
.PHONY: fuzz
fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $$t.corpus; \
	  echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -artifact_prefix=$$t- $$t.corpus \
	    fuzz/corpus/$$(basename $$t) 2>&1 | tail -n 3 || exit 1; \
	done

# ---- the corpora as regression tests (gcc or clang, ASan+UBSan) -----------
FUZZ_REPLAYS := $(FUZZ_NAMES:%=$(B)/fuzz/replay/%)
FUZZ_REPLAY_CFLAGS = $(ALL_CFLAGS) $(SAN) -Ilibtoggle/src $(TGP_CFLAGS)
FZ_CTL_SAN_OBJ := $(filter-out $(B)/san/client/togglectl.o,$(CTL_SRC:%.c=$(B)/san/%.o))

$(FZ_CTL_SAN_OBJ): $(B)/san/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(SAN) $(CTL_CFLAGS) -c $< -o $@

$(B)/fuzz/replay/fuzz_frame: $(B)/libtgproto-san.a
$(B)/fuzz/replay/fuzz_frame: FZ_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS)
$(B)/fuzz/replay/fuzz_gzip: $(B)/libtoggled-san.a
$(B)/fuzz/replay/fuzz_gzip: FZ_CFLAGS = -Idaemon
$(B)/fuzz/replay/fuzz_gzip: FZ_LIBS = $(B)/libtoggled-san.a $$(pkg-config --libs zlib)
$(B)/fuzz/replay/fuzz_spec $(B)/fuzz/replay/fuzz_pbwire: FZ_LIBS =
$(B)/fuzz/replay/fuzz_shm: FZ_LIBS = -pthread
$(B)/fuzz/replay/fuzz_ring: FZ_LIBS =
FZ_TD_REPLAYS := $(B)/fuzz/replay/fuzz_cluster $(B)/fuzz/replay/fuzz_cluster_stream \
	$(B)/fuzz/replay/fuzz_store $(B)/fuzz/replay/fuzz_config $(B)/fuzz/replay/fuzz_owed
$(FZ_TD_REPLAYS): $(B)/libtoggled-san.a $(B)/libtgproto-san.a
$(FZ_TD_REPLAYS): FZ_CFLAGS = $(TD_CFLAGS)
$(FZ_TD_REPLAYS): FZ_LIBS = $(B)/libtoggled-san.a $(B)/libtgproto-san.a $(TD_LIBS)
$(B)/fuzz/replay/fuzz_plan: $(FZ_CTL_SAN_OBJ) $(B)/libtoggled-san.a $(B)/libtgproto-san.a
$(B)/fuzz/replay/fuzz_plan: FZ_CFLAGS = $(CTL_CFLAGS)
$(B)/fuzz/replay/fuzz_plan: $(B)/libtgclient-san.a
$(B)/fuzz/replay/fuzz_plan: FZ_LIBS = $(FZ_CTL_SAN_OBJ) $(B)/libtoggled-san.a $(B)/libtgclient-san.a \
	$(B)/libtgproto-san.a $(CTL_LIBS)
$(B)/fuzz/replay/fuzz_hosts: $(FZ_CTL_SAN_OBJ) $(B)/libtoggled-san.a $(B)/libtgproto-san.a \
	$(B)/libtgclient-san.a
$(B)/fuzz/replay/fuzz_hosts: FZ_CFLAGS = $(CTL_CFLAGS)
$(B)/fuzz/replay/fuzz_hosts: FZ_LIBS = $(FZ_CTL_SAN_OBJ) $(B)/libtoggled-san.a $(B)/libtgclient-san.a \
	$(B)/libtgproto-san.a $(CTL_LIBS)

$(FUZZ_REPLAYS): $(B)/fuzz/replay/%: fuzz/%.c fuzz/replay.c $(B)/libtoggle-san.a $(B)/libtgutil-san.a \
		$(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_REPLAY_CFLAGS) $(FZ_CFLAGS) -o $@ fuzz/$*.c fuzz/replay.c $(FZ_LIBS) \
	    $(B)/libtoggle-san.a $(B)/libtgutil-san.a $(LIB_LIBS)

.PHONY: check-fuzz
check-fuzz: $(FUZZ_REPLAYS)
	@for t in $(FUZZ_NAMES); do \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    $(B)/fuzz/replay/$$t fuzz/corpus/$$t || exit 1; \
	done
check-run: check-fuzz
