# proto.mk - the wire protocol (protoc-c output + frame.c), built into
# $(B)/libtgproto.a and, for the tests, the ASan/UBSan $(B)/libtgproto-san.a
# (the client library on top of it: client/client.mk).  Included by the
# top-level Makefile after the libtoggle rules; uses its B, CC, HOST_CFLAGS and SAN.

TGP_GEN_C := $(B)/gen/proto/toggle.pb-c.c
TGP_GEN_H := $(B)/gen/proto/toggle.pb-c.h
# The generated header's include is "proto/toggle.pb-c.h", hence -I$(B)/gen.
# Both are for recipes only: $$(...) runs pkg-config when the recipe runs, so
# parsing the Makefile never needs the packages.  Link order for users:
# $(B)/libtgproto.a $(TGP_LIBS).
TGP_CFLAGS = -Iproto -Iclient -I$(B)/gen $$(pkg-config --cflags libprotobuf-c)
TGP_LIBS = $$(pkg-config --libs libprotobuf-c)

TGP_SRC := proto/frame.c
TGP_OBJ := $(TGP_SRC:%.c=$(B)/%.o)
TGP_SAN_OBJ := $(TGP_SRC:%.c=$(B)/san/%.o)
TGP_GEN_OBJ := $(B)/gen/proto/toggle.pb-c.o
TGP_GEN_SAN_OBJ := $(B)/san/gen/proto/toggle.pb-c.o

# Tests that need the protocol library (the generic test rule adds
# $(EXTRA_CFLAGS) and $(EXTRA_LIBS)).
TGP_TESTS := $(B)/tests/check_frame $(B)/tests/check_client

all: $(B)/libtgproto.a

# The public contract: no imports, no language options (docs/protocol.md).
TGP_PROTO := proto/graphtoggle/v1/toggle.proto
# protoc-c's copy: the same schema with protoc-c's option that keeps the C
# identifiers of protocol 1 (Toggle__Envelope, TOGGLE__...), written beside
# a proto/ directory so that the generated files include
# "proto/toggle.pb-c.h" as they always did.
TGP_PBC_PROTO := $(B)/gen/protoc-c/proto/toggle.proto

$(TGP_PBC_PROTO): $(TGP_PROTO)
	@mkdir -p $(dir $@)
	sed -e '/^package graphtoggle\.v1;$$/a import "protobuf-c/protobuf-c.proto";\noption (pb_c_file).c_package = "toggle";' \
	    $< >$@.tmp
	@grep -q '^option (pb_c_file).c_package = "toggle";$$' $@.tmp || \
	    { echo "proto.mk: no 'package graphtoggle.v1;' line in $<" >&2; exit 1; }
	mv $@.tmp $@

# One protoc-c run writes both files (grouped target).  This is the first
# step that needs the -dev packages, so it makes sure they are there (plain
# `make` and `make demo` do not go through the deps target).
$(TGP_GEN_C) $(TGP_GEN_H) &: $(TGP_PBC_PROTO)
	@scripts/deps.sh build
	@mkdir -p $(B)/gen
	protoc-c -I$(B)/gen/protoc-c --c_out=$(B)/gen $<
	@# proto3 INIT macros cast protobuf_c_empty_string's const away, which
	@# -Wcast-qual flags wherever they are used: the same cast through uintptr_t.
	sed -i 's/(char \*)protobuf_c_empty_string/(char *)(uintptr_t)protobuf_c_empty_string/g' \
	    $(TGP_GEN_H)

# protobuf-c 1.4's output (with the sed above) passes our whole WARN set under
# gcc and clang, so it gets the same flags; add -Wno-* here only if a newer
# protoc-c needs it.
$(TGP_GEN_OBJ): $(TGP_GEN_C) $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(TGP_CFLAGS) -c $< -o $@

$(TGP_GEN_SAN_OBJ): $(TGP_GEN_C) $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(SAN) $(TGP_CFLAGS) -c $< -o $@

# Our objects include the generated header: it must exist before they compile.
$(TGP_OBJ): $(B)/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(TGP_CFLAGS) -c $< -o $@

$(TGP_SAN_OBJ): $(B)/san/%.o: %.c $(TGP_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(SAN) $(TGP_CFLAGS) -c $< -o $@

$(B)/libtgproto.a: $(TGP_GEN_OBJ) $(TGP_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libtgproto-san.a: $(TGP_GEN_SAN_OBJ) $(TGP_SAN_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(TGP_TESTS): $(B)/libtgproto-san.a $(TGP_GEN_H)
$(TGP_TESTS): EXTRA_CFLAGS = $(TGP_CFLAGS)
$(TGP_TESTS): EXTRA_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS) -lpthread

# The contract: ErrorCode against toggle_error.h, forward compatibility
# against the real daemon (ASan build) with a simulator demo_agent.
$(B)/tests/check_proto: $(B)/libtgproto-san.a $(TGP_GEN_H) $(B)/toggled-san $(B)/examples/demo_agent
$(B)/tests/check_proto: EXTRA_CFLAGS = $(TGP_CFLAGS) -DTOGGLED_BIN=\"$(B)/toggled-san\" \
	-DDEMO_AGENT_BIN=\"$(B)/examples/demo_agent\"
$(B)/tests/check_proto: EXTRA_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS) -lpthread

# graphtoggle.client's messages: protoc's Python output of the public file
# as it is, generated at build time (python/graphtoggle/client/_wire.py says
# why), not committed.
PY_PB2 := python/graphtoggle/client/toggle_pb2.py
.PHONY: python-client
python-client: $(PY_PB2)
all: $(PY_PB2)
check-python: $(PY_PB2) $(B)/examples/demo_agent  # python/tests/test_client*.py
$(PY_PB2): $(TGP_PROTO)
	@scripts/deps.sh build
	@mkdir -p $(B)/gen/py
	protoc -Iproto --python_out=$(B)/gen/py $<
	cp $(B)/gen/py/graphtoggle/v1/toggle_pb2.py $@

# The public file with plain protoc (Python against a real toggled, C++),
# protoc-gen-go and buf lint where they exist (tests/proto/run.sh).
.PHONY: check-proto-plain
check-proto-plain: $(B)/toggled-san $(B)/togglectl $(B)/examples/demo_agent
	@B=$(B) tests/proto/run.sh
check-run: check-proto-plain
