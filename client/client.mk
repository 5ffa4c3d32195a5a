# client.mk - the client library (client/tgclient.c, tgclient.h) in
# $(B)/libtgclient.a (ASan/UBSan for the tests: $(B)/libtgclient-san.a),
# togglectl, the CLI (client/togglectl.c, ctl_cmds.c, ctl_output.c), and
# its end-to-end test (tests/cli/run.sh).  Included by the top-level
# Makefile after daemon.mk; uses its B, CC, HOST_CFLAGS and LIB_LIBS, and
# proto.mk's TGP_CFLAGS, TGP_LIBS and TGP_GEN_H.  Link order for users of
# the library: $(B)/libtgclient.a $(B)/libtgproto.a $(B)/libtgutil.a $(TGP_LIBS).

TGC_OBJ := $(B)/client/tgclient.o
TGC_SAN_OBJ := $(B)/san/client/tgclient.o

all: $(B)/libtgclient.a

$(TGC_OBJ): $(B)/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(TGP_CFLAGS) -c $< -o $@

$(TGC_SAN_OBJ): $(B)/san/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(SAN) $(TGP_CFLAGS) -c $< -o $@

$(B)/libtgclient.a: $(TGC_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libtgclient-san.a: $(TGC_SAN_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The tests that talk to toggled through the library: the generic test rule
# links $(TGC_TEST_LIBS) first, ahead of libtgproto-san.a in their EXTRA_LIBS.
TGC_TESTS := $(B)/tests/check_client $(B)/tests/check_peer $(B)/tests/check_proto \
	$(TD_DAEMON_SUITES) $(TG_DEVICE_SUITES)
$(TGC_TESTS): $(B)/libtgclient-san.a
$(TGC_TESTS): TGC_TEST_LIBS = $(B)/libtgclient-san.a

CTL_SRC := client/togglectl.c client/ctl_cmds.c client/ctl_output.c client/ctl_cluster.c \
	client/ctl_record.c client/safetensors.c \
	client/ctl_host.c
CTL_OBJ := $(CTL_SRC:%.c=$(B)/%.o)
# --etcd (ctl_cluster.c) uses the daemon's etcd client and key layout.
CTL_DAEMON_OBJ := $(B)/daemon/etcd.o $(B)/daemon/cluster_key.o $(B)/daemon/log.o
CTL_CFLAGS = $(TGP_CFLAGS) -Idaemon $$(pkg-config --cflags jansson libcurl libuv)
CTL_LIBS = $$(pkg-config --libs jansson libcurl libuv) $(TGP_LIBS) -lpthread

all: $(B)/togglectl

$(CTL_OBJ): $(B)/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(CTL_CFLAGS) -c $< -o $@

# libtoggle.a brings toggle_strerror and the hook-spec parser (no CUDA).
$(B)/togglectl: $(CTL_OBJ) $(CTL_DAEMON_OBJ) $(B)/libtgclient.a $(B)/libtgproto.a $(B)/libtoggle.a \
		$(B)/libtgutil.a
	$(CC) $(CFLAGS) -o $@ $^ $(CTL_LIBS) $(LIB_LIBS)

# End to end: the real toggled, demo_agent and togglectl on a private socket.
.PHONY: check-cli
check-cli: $(B)/togglectl $(B)/toggled $(B)/examples/demo_agent
	B=$(B) tests/cli/run.sh

check-run: check-cli

# togglectl record end to end: toggled, an agent that writes its data ring by
# hand (tests/record/ring_agent.c), the files read back with graphtoggle.recording.
.PHONY: check-record
check-record: $(B)/togglectl $(B)/toggled $(B)/tests/record_ring_agent $(B)/examples/demo_agent
	@B=$(B) tests/cli/record.sh
	@B=$(B) tests/cli/record_agents.sh
check-run: check-record

# The man pages render without a groff warning (needs groff; not in check).
.PHONY: check-man
check-man:
	@for m in man/*.[138]; do \
	  out=$$(groff -man -Tutf8 -ww "$$m" 2>&1 >/dev/null); \
	  if [ -n "$$out" ]; then echo "$$m: $$out"; exit 1; fi; \
	done; echo "man pages: no groff warnings"

# The agent, tgclient and togglectl refuse a listener of another uid
# (tests/check_peer.c: a squatter as uid 65534; runs togglectl).
$(B)/tests/check_peer: $(B)/libtgproto-san.a $(B)/togglectl $(TGP_GEN_H)
$(B)/tests/check_peer: EXTRA_CFLAGS = $(TGP_CFLAGS) -DTOGGLECTL_BIN=\"$(B)/togglectl\"
$(B)/tests/check_peer: EXTRA_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS) -lpthread

# The bash completion (client/togglectl.bash) against a real toggled.
.PHONY: check-completion
check-completion: $(B)/togglectl $(B)/toggled $(B)/examples/demo_agent
	@B=$(B) tests/cli/completion.sh
check-run: check-completion
