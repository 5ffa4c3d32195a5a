# daemon.mk - toggled.  Included by the top-level Makefile after proto.mk.
# $(B)/toggled is the daemon; $(B)/toggled-san its ASan/UBSan build that the
# integration tests run; $(B)/libtoggled-san.a every module but main.c, for
# unit tests (tests/check_store_*.c).

TD_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
TD_OBJ := $(TD_SRC:%.c=$(B)/%.o)
TD_SAN_OBJ := $(TD_SRC:%.c=$(B)/san/%.o)
TD_CFLAGS = $(TGP_CFLAGS) -Idaemon $$(pkg-config --cflags libuv jansson libmicrohttpd libcurl zlib)
TD_LIBS = $$(pkg-config --libs libuv jansson libmicrohttpd libcurl zlib) $(TGP_LIBS) -lpthread

all: $(B)/toggled

$(TD_OBJ) $(B)/daemon/main.o: $(B)/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(TD_CFLAGS) -c $< -o $@

$(TD_SAN_OBJ) $(B)/san/daemon/main.o: $(B)/san/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(SAN) $(TD_CFLAGS) -c $< -o $@

$(B)/toggled: $(B)/daemon/main.o $(TD_OBJ) $(B)/libtgproto.a $(B)/libtoggle.a $(B)/libtgutil.a
	$(CC) $(CFLAGS) -o $@ $^ $(TD_LIBS) $(LIB_LIBS)

$(B)/toggled-san: $(B)/san/daemon/main.o $(TD_SAN_OBJ) $(B)/libtgproto-san.a $(B)/libtoggle-san.a \
		$(B)/libtgutil-san.a
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(TD_LIBS) $(LIB_LIBS)

$(B)/libtoggled-san.a: $(TD_SAN_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The store's suites (check_store_*.c but the end-to-end one, check_auth.c)
# share fixture_store.c: the state directory, file helpers, stderr captured.
TD_STORE_SUITES := $(B)/tests/check_store_save $(B)/tests/check_store_journal \
	$(B)/tests/check_store_load $(B)/tests/check_store_entries $(B)/tests/check_store_faults \
	$(B)/tests/check_auth
TD_STORE_FIXTURES := $(B)/san/tests/fixture_store.o
TD_UNIT_TESTS := $(TD_STORE_SUITES) $(B)/tests/check_cluster $(B)/tests/check_gzipenc \
	$(B)/tests/check_report
$(TD_UNIT_TESTS): $(B)/libtoggled-san.a $(B)/libtgproto-san.a
$(TD_UNIT_TESTS) $(TD_STORE_FIXTURES): EXTRA_CFLAGS = $(TD_CFLAGS)
$(TD_UNIT_TESTS): EXTRA_LIBS = $(B)/libtoggled-san.a $(B)/libtgproto-san.a $(TD_LIBS)
$(TD_STORE_FIXTURES): tests/fixture_store.h $(TGP_GEN_H)
$(TD_STORE_SUITES): $(TD_STORE_FIXTURES) tests/fixture_store.h
$(TD_STORE_SUITES): TEST_FIXTURES = $(TD_STORE_FIXTURES)

# End-to-end tests run the real daemon (ASan build) and agents on the simulator.
# The check_daemon_*.c suites (one per concern) share fixture_daemon.h: the
# environment and agent children (fixture_daemon.c), the RPCs (fixture_rpc.c).
TD_DAEMON_SUITES := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/check_daemon_*.c))
TD_DAEMON_FIXTURES := $(B)/san/tests/fixture_daemon.o $(B)/san/tests/fixture_rpc.o
TD_E2E_TESTS := $(TD_DAEMON_SUITES) $(B)/tests/check_store_daemon $(B)/tests/check_record_daemon \
	$(B)/tests/check_record_drops $(B)/tests/check_record_owed
$(TD_E2E_TESTS): $(B)/toggled-san $(B)/libtgproto-san.a
$(TD_E2E_TESTS) $(TD_DAEMON_FIXTURES): EXTRA_CFLAGS = $(TGP_CFLAGS) -DTOGGLED_BIN=\"$(B)/toggled-san\"
$(TD_E2E_TESTS): EXTRA_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS) -lpthread
$(TD_DAEMON_FIXTURES): tests/fixture_daemon.h $(TGP_GEN_H)
$(TD_DAEMON_SUITES): $(TD_DAEMON_FIXTURES) tests/fixture_daemon.h
$(TD_DAEMON_SUITES): TEST_FIXTURES = $(TD_DAEMON_FIXTURES)
# The store's end-to-end suite talks through the client library too (client.mk's TGC_TESTS).
$(B)/tests/check_store_daemon: $(B)/libtgclient-san.a
$(B)/tests/check_store_daemon: TGC_TEST_LIBS = $(B)/libtgclient-san.a
# Recordings end to end (record.c): fake agents write their data rings by hand.
$(B)/tests/check_record_daemon: $(B)/libtgclient-san.a
$(B)/tests/check_record_daemon: TGC_TEST_LIBS = $(B)/libtgclient-san.a
# A data ring's counters in ListAgents and /metrics, under a hostile agent (record.c's fold).
$(B)/tests/check_record_drops: $(B)/libtgclient-san.a
$(B)/tests/check_record_drops: TGC_TEST_LIBS = $(B)/libtgclient-san.a
# What a recording added, removed though it could not end (record_owed.c): toggled killed, the agent left.
$(B)/tests/check_record_owed: $(B)/libtgclient-san.a
$(B)/tests/check_record_owed: TGC_TEST_LIBS = $(B)/libtgclient-san.a

# A stand-in agent that writes its data ring by hand (tests/cli/record.sh, pytest).
all: $(B)/tests/record_ring_agent
$(B)/tests/record_ring_agent: tests/record/ring_agent.c $(B)/libtgproto.a $(B)/libtoggle.a \
		$(B)/libtgutil.a $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(TGP_CFLAGS) -o $@ $< $(B)/libtgproto.a $(B)/libtoggle.a \
	    $(B)/libtgutil.a $(TGP_LIBS) $(LIB_LIBS)

# libtoggle's hand-written protobuf, cross-checked against protobuf-c.
$(B)/tests/check_pbwire: $(B)/libtgproto-san.a
$(B)/tests/check_pbwire: EXTRA_CFLAGS = $(TGP_CFLAGS)
$(B)/tests/check_pbwire: EXTRA_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS)

# Process-level behaviour (socket activation, signals, configuration).
.PHONY: check-daemon-proc
check-daemon-proc: $(B)/toggled $(B)/togglectl
	@B=$(B) tests/daemon/run.sh
check-run: check-daemon-proc

# --metrics end to end: scraped with prometheus_client's parser, checked
# against togglectl --json.
.PHONY: check-metrics
check-metrics: $(B)/toggled-san $(B)/togglectl $(B)/examples/demo_agent $(B)/tests/record_ring_agent
	@B=$(B) tests/metrics/run.sh
check-run: check-metrics
# The cluster layer end to end: a real etcd, three toggled, simulator agents
# (tests/cluster/run.sh; fails, never skips, without etcd).
.PHONY: check-cluster
check-cluster: $(B)/toggled-san $(B)/togglectl $(B)/examples/demo_agent
	@B=$(B) tests/cluster/run.sh
check-run: check-cluster

# The calls between daemon/'s files run one way, down: the levels are the
# table in docs/architecture.md ("The daemon's layers"), the calls the
# objects' symbols (nm).  Fails on a call upward and on a cycle.
.PHONY: check-layers
check-layers: $(TD_OBJ) $(B)/daemon/main.o
	@scripts/layer-check.sh $(B)/daemon docs/architecture.md daemon >$(B)/layer-check.log || \
	  { cat $(B)/layer-check.log; exit 1; }; tail -n 1 $(B)/layer-check.log
	@tests/layers/run.sh
check-run: check-layers

# toggled, togglectl and the wire protocol build without CUDA's headers: every
# source of theirs compiled with the real build's flags (HOST_CFLAGS: no CUDA
# include directory) behind tests/nocuda/, whose cuda.h is an #error.  So the
# check fails on any include of cuda.h, also where CUDA is installed.
NOCUDA_SRC = $(TD_SRC) daemon/main.c $(CTL_SRC) $(TGP_SRC) client/tgclient.c util/util.c
.PHONY: check-nocuda
check-nocuda: $(TGP_GEN_H)
	@for src in $(NOCUDA_SRC); do \
	  $(CC) -Itests/nocuda $(filter-out -MMD -MP,$(HOST_CFLAGS)) $(TD_CFLAGS) -Iclient \
	    -fsyntax-only $$src || exit 1; \
	done; echo "check-nocuda: $(words $(NOCUDA_SRC)) sources build without CUDA headers"
check-run: check-nocuda
