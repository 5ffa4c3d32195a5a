# graphtoggle top-level Makefile.
#   make            build everything that exists (libtoggle, examples)
#   make check      build and run every Check test under ASan + UBSan
#   make demo       the demo (see README)
#   make gpu-check  build and run the GPU suite (skips cleanly without a GPU)
#   make python     python/graphtoggle usable in place (libtoggle.so beside it)
#   make wheel      the Python package's wheel and sdist in build/dist
#   make bench      host benchmarks
#   make install    PREFIX=/usr/local DESTDIR= (layout: docs/libtoggle.md, Installing)

CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
CC        ?= cc
NVCC      ?= $(CUDA_HOME)/bin/nvcc
B         := build
# The version is written once, in libtoggle/include/toggle_version.h.
TOGGLE_VERSION_OF = $(shell sed -n 's/^\#define TOGGLE_VERSION_$(1)  *\([0-9][0-9]*\)$$/\1/p' \
	libtoggle/include/toggle_version.h)
TOGGLE_VERSION_MAJOR := $(call TOGGLE_VERSION_OF,MAJOR)
TOGGLE_VERSION_MINOR := $(call TOGGLE_VERSION_OF,MINOR)

WARN   := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
          -Wpointer-arith -Wcast-qual -Wformat=2 -Wundef -Wvla
CSTD   := -std=c17 -D_GNU_SOURCE
# libtoggle is the lowest layer: its headers are on every path, proto/'s only
# where proto.mk's TGP_CFLAGS add them (libtoggle never includes proto/).
INC    := -Ilibtoggle/include -isystem $(CUDA_HOME)/include
CFLAGS ?= -O2 -g
ALL_CFLAGS := $(CSTD) $(WARN) $(INC) -fPIC -MMD -MP $(CFLAGS)
# The wire protocol, the daemon and the CLI: no CUDA include directory
# (check-nocuda in daemon.mk proves they need none).
HOST_CFLAGS := $(CSTD) $(WARN) -Ilibtoggle/include -fPIC -MMD -MP $(CFLAGS)
SAN    := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

LIB_SRC := $(wildcard libtoggle/src/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
LIB_SAN_OBJ := $(LIB_SRC:%.c=$(B)/san/%.o)
LIB_LIBS := -ldl -lpthread

TEST_SRC := $(wildcard tests/check_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)

.PHONY: all lib check demo gpu-check bench install clean deps python check-python
all: lib $(B)/examples/demo_agent

lib: $(B)/libtoggle.a $(B)/libtoggle.so

deps:
	@scripts/deps.sh build

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) -c $< -o $@

$(B)/libtoggle.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libtoggle.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libtoggle.so.0 -o $@ $^ $(LIB_LIBS)

$(B)/libtoggle-san.a: $(LIB_SAN_OBJ)
	@rm -f $@
	ar rcs $@ $^

# ---- examples ------------------------------------------------------------
# demo_cuda.o: the CUDA backend; it has kernels when examples.mk found nvcc.
$(B)/examples/demo_agent: $(B)/examples/demo_agent.o $(B)/examples/demo_cuda.o $(B)/libtoggle.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIB_LIBS)

# The build's compiler lines go to $(B)/demo-build.log (its tail shown if the
# build fails), so the demo's own lines come first; V=1 shows them all.
demo: deps
	@if [ "$(V)" = 1 ]; then $(MAKE) --no-print-directory all; else \
	  mkdir -p $(B); echo "demo: building (compiler lines in $(B)/demo-build.log; V=1 shows them)"; \
	  $(MAKE) --no-print-directory all >$(B)/demo-build.log 2>&1 || \
	  { tail -n 40 $(B)/demo-build.log; echo "demo: the build failed (log: $(B)/demo-build.log)"; exit 1; }; fi
	@B=$(B) scripts/demo.sh
	@B=$(B) scripts/demo-torch.sh

# ---- tests ---------------------------------------------------------------
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)

$(B)/tests/%: tests/%.c tests/testutil.h $(B)/libtoggle-san.a $(B)/libtgutil-san.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) $(CHECK_CFLAGS) $(EXTRA_CFLAGS) -Itests -Ilibtoggle/src -o $@ $< \
	    $(TGC_TEST_LIBS) $(EXTRA_LIBS) $(B)/libtoggle-san.a $(B)/libtgutil-san.a $(CHECK_LIBS) $(LIB_LIBS)

# Every skipped test appends "test: reason" to $(SKIP_LOG) (tests/testutil.h,
# tests/skip.sh); check lists them with a count at the end.
SKIP_LOG := $(abspath $(B))/check-skipped.log
check: deps
	@mkdir -p $(B) && rm -f $(SKIP_LOG)
	@TG_SKIP_LOG=$(SKIP_LOG) $(MAKE) --no-print-directory check-run; rc=$$?; \
	n=$$(cat $(SKIP_LOG) 2>/dev/null | wc -l); \
	echo "== make check: $$n test(s) skipped"; \
	[ "$$n" -eq 0 ] || sed 's/^/   SKIPPED /' $(SKIP_LOG); \
	exit $$rc

.PHONY: check-run
check-run: $(TEST_BIN)
	@fail=0; for t in $(TEST_BIN); do \
	  echo "== $$t"; \
	  CK_DEFAULT_TIMEOUT=60 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    $$t || fail=1; \
	done; exit $$fail

# ---- Python package (python/) ----------------------------------------------
# `pip install ./python` (in a venv) builds libtoggle.so and the client's
# messages itself (python/setup.py); make wheel: tests/pypkg/pypkg.mk.
# make python is for using the checkout in place (PYTHONPATH=python).
python: $(B)/libtoggle.so
	cp $(B)/libtoggle.so python/graphtoggle/libtoggle.so
	@echo "python: python/graphtoggle is ready for PYTHONPATH=python (pip install ./python builds its own)"

$(B)/libtoggle-san.so: $(LIB_SAN_OBJ)
	$(CC) -shared $(SAN) -o $@ $^ $(LIB_LIBS)

# pytest on the simulator backend, the fake torch and a real toggled (needs both
# programs: built by daemon.mk and client.mk)
check-python: $(B)/libtoggle-san.so $(B)/libtoggle.so $(B)/toggled $(B)/togglectl
	@B=$(B) CC=$(CC) scripts/pytest.sh
check-run: check-python

# ---- device mode's planner, embedded when nvcc exists
-include libtoggle/libtoggle.mk

# ---- demo_agent's CUDA kernels, embedded when nvcc exists
-include examples/examples.mk

# ---- the shared helpers (libc only): util/util.mk
-include util/util.mk

# ---- wire protocol, client library, daemon, CLI (need the Debian -dev packages)
-include proto/proto.mk
-include daemon/daemon.mk
-include client/client.mk
-include bench/bench.mk
-include fuzz/fuzz.mk
-include tests/docs/docs.mk
-include tests/install/install.mk
-include tests/systemd/systemd.mk
-include tests/pypkg/pypkg.mk
-include tests/alerts/alerts.mk

# ---- GPU suite (libc, pthreads and CUDA only: runs on the GPU machine) -----
gpu-check:
	@scripts/gpu-check.sh

# ---- install ---------------------------------------------------------------
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/graphtoggle
DATADIR    ?= $(PREFIX)/share/graphtoggle
PKGLIBDIR  ?= $(PREFIX)/lib/graphtoggle
TOGGLE_VERSION := $(TOGGLE_VERSION_MAJOR).$(TOGGLE_VERSION_MINOR)
# The man pages name docs/, proto/graphtoggle/v1/toggle.proto and demo_agent as they are in
# the source tree; installed, they name where make install put them.
MAN_SED := -e 's|docs/|$(DOCDIR)/|g' -e 's|examples/demo_agent\.c|$(DOCDIR)/examples/demo_agent.c|g' \
           -e 's|proto/graphtoggle/v1/toggle\.proto|$(DATADIR)/proto/graphtoggle/v1/toggle.proto|g' -e 's|^\$$ demo_agent |$$ $(PKGLIBDIR)/demo_agent |' \
           -e 's|systemd/toggled\.service\.d/|$(DATADIR)/systemd/toggled.service.d/|g'

install: deps
	@$(MAKE) --no-print-directory all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/lib/sysusers.d $(DESTDIR)$(PREFIX)/lib/tmpfiles.d \
	    $(DESTDIR)$(SYSCONFDIR)/toggle $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8
	install -m 644 $(B)/libtoggle.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/libtoggle.so $(DESTDIR)$(PREFIX)/lib/libtoggle.so.0
	ln -sf libtoggle.so.0 $(DESTDIR)$(PREFIX)/lib/libtoggle.so
	install -m 644 libtoggle/include/toggle.h libtoggle/include/toggle_error.h \
	    libtoggle/include/toggle_hooks.h libtoggle/include/toggle_sim.h \
	    libtoggle/include/toggle_shm.h libtoggle/include/toggle_version.h \
	    libtoggle/include/toggle_ring.h libtoggle/include/toggle_record.h \
	    $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(TOGGLE_VERSION)|' \
	    -e 's|@CUDA_INCLUDEDIR@|$(CUDA_HOME)/include|' libtoggle/libtoggle.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/libtoggle.pc
	install -m 755 $(B)/toggled $(DESTDIR)$(PREFIX)/bin/
	if [ -x $(B)/togglectl ]; then install -m 755 $(B)/togglectl $(DESTDIR)$(PREFIX)/bin/; fi
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 client/togglectl.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/togglectl
	sed -e 's|/usr/bin/toggled|$(PREFIX)/bin/toggled|' -e 's|/etc/toggle|$(SYSCONFDIR)/toggle|' \
	    systemd/toggled.service > $(DESTDIR)$(UNITDIR)/toggled.service
	install -m 644 systemd/toggled.socket $(DESTDIR)$(UNITDIR)/
	@# drop-ins for the modes that need more than AF_UNIX: examples to copy
	@# into /etc/systemd/system/toggled.service.d/ (toggled(8), SYSTEMD)
	install -d $(DESTDIR)$(DATADIR)/systemd/toggled.service.d
	for f in systemd/toggled.service.d/*.conf; do \
	  sed -e 's|/usr/bin/toggled|$(PREFIX)/bin/toggled|' -e 's|/etc/toggle|$(SYSCONFDIR)/toggle|' \
	    "$$f" > $(DESTDIR)$(DATADIR)/systemd/toggled.service.d/$${f##*/} || exit 1; \
	done
	install -m 644 systemd/toggle.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/toggle.conf
	install -m 644 systemd/toggle.tmpfiles $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/toggle.conf
	[ -e $(DESTDIR)$(SYSCONFDIR)/toggle/toggled.conf ] || \
	    install -m 644 systemd/toggled.conf $(DESTDIR)$(SYSCONFDIR)/toggle/
	for m in man/*.[138]; do \
	  sed $(MAN_SED) "$$m" > $(DESTDIR)$(MANDIR)/man$${m##*.}/$${m##*/} || exit 1; \
	done
	install -d $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DATADIR) $(DESTDIR)$(PKGLIBDIR)
	install -m 644 README.md CHANGES docs/*.md docs/*.png $(DESTDIR)$(DOCDIR)/
	install -m 644 examples/demo_agent.c $(DESTDIR)$(DOCDIR)/examples/
	install -d $(DESTDIR)$(DATADIR)/proto/graphtoggle/v1
	install -m 644 proto/graphtoggle/v1/toggle.proto $(DESTDIR)$(DATADIR)/proto/graphtoggle/v1/
	install -m 755 $(B)/examples/demo_agent $(DESTDIR)$(PKGLIBDIR)/
	@# the new libtoggle.so.0 in the linker's cache (docs/libtoggle.md, Installing)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null; then \
	  echo ldconfig; ldconfig; fi

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
