# libtoggle.mk - device mode's planner kernel (libtoggle/src/planner.cu) and
# the copy producer's kernel (libtoggle/src/copyout.cu), embedded in the
# library when nvcc exists.  Included by the top-level Makefile; uses its B,
# NVCC and ALL_CFLAGS.
#
# libtoggle itself is plain C built by $(CC) and needs no nvcc: with nvcc,
# planner.cu becomes a fatbin (sm_90 SASS + compute_90 PTX, which the driver
# JIT-compiles for newer parts), scripts/embed.sh turns it into a header of
# bytes, and planner_image.o is compiled with -DTG_HAVE_PLANNER_FATBIN.
# Without nvcc (or with TOGGLE_NO_PLANNER=1; then `make clean` first)
# planner_image.o holds no planner and device mode reports TOGGLE_ENOTSUP
# (strict) or runs lazy; copyout_image.o holds no copy kernel and
# toggle_copy_out reports TOGGLE_ENOTSUP on the cuda backend.  The CPU tests
# use the simulator's planner and copy kernel either way.

PLANNER_NVCC    := $(if $(filter 1,$(TOGGLE_NO_PLANNER)),,$(shell command -v '$(NVCC)' 2>/dev/null))
PLANNER_GEN     := $(B)/gen
PLANNER_FATBIN  := $(PLANNER_GEN)/tg_planner.fatbin
PLANNER_H       := $(PLANNER_GEN)/tg_planner_fatbin.h
PLANNER_GENCODE ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
PLANNER_OBJS    := $(B)/libtoggle/src/planner_image.o $(B)/san/libtoggle/src/planner_image.o

ifneq ($(PLANNER_NVCC),)
$(PLANNER_OBJS): $(PLANNER_H)
$(PLANNER_OBJS): ALL_CFLAGS += -DTG_HAVE_PLANNER_FATBIN -I$(PLANNER_GEN)

$(PLANNER_FATBIN): libtoggle/src/planner.cu libtoggle/src/planner.h
	@mkdir -p $(dir $@)
	'$(PLANNER_NVCC)' --fatbin -O3 $(PLANNER_GENCODE) -Ilibtoggle/src -o $@ $<

$(PLANNER_H): $(PLANNER_FATBIN) scripts/embed.sh
	scripts/embed.sh $< $@ tg_planner_fatbin_bytes
endif

COPYOUT_FATBIN  := $(PLANNER_GEN)/tg_copyout.fatbin
COPYOUT_H       := $(PLANNER_GEN)/tg_copyout_fatbin.h
COPYOUT_OBJS    := $(B)/libtoggle/src/copyout_image.o $(B)/san/libtoggle/src/copyout_image.o

ifneq ($(PLANNER_NVCC),)
$(COPYOUT_OBJS): $(COPYOUT_H)
$(COPYOUT_OBJS): ALL_CFLAGS += -DTG_HAVE_COPYOUT_FATBIN -I$(PLANNER_GEN)

$(COPYOUT_FATBIN): libtoggle/src/copyout.cu libtoggle/src/copyout.h
	@mkdir -p $(dir $@)
	'$(PLANNER_NVCC)' --fatbin -O3 $(PLANNER_GENCODE) -Ilibtoggle/src -o $@ $<

$(COPYOUT_H): $(COPYOUT_FATBIN) scripts/embed.sh
	scripts/embed.sh $< $@ tg_copyout_fatbin_bytes
endif

# The recorder's gather kernel (libtoggle/src/gather.cu), the same way: without
# nvcc gather_image.o holds no fatbin and the recorder copies record by record
# on the replay's stream (docs/recording.md, *Staging*).
GATHER_FATBIN   := $(PLANNER_GEN)/tg_gather.fatbin
GATHER_H        := $(PLANNER_GEN)/tg_gather_fatbin.h
GATHER_OBJS     := $(B)/libtoggle/src/gather_image.o $(B)/san/libtoggle/src/gather_image.o

ifneq ($(PLANNER_NVCC),)
$(GATHER_OBJS): $(GATHER_H)
$(GATHER_OBJS): ALL_CFLAGS += -DTG_HAVE_GATHER_FATBIN -I$(PLANNER_GEN)

$(GATHER_FATBIN): libtoggle/src/gather.cu libtoggle/src/gather.h
	@mkdir -p $(dir $@)
	'$(PLANNER_NVCC)' --fatbin -O3 $(PLANNER_GENCODE) -Ilibtoggle/src -o $@ $<

$(GATHER_H): $(GATHER_FATBIN) scripts/embed.sh
	scripts/embed.sh $< $@ tg_gather_fatbin_bytes
endif

# Headers older than CUDA 12.4 must still build the library and its simulator
# (device mode then reports TOGGLE_ENOTSUP).  make check compiles every
# libtoggle source against tests/oldcuda/cuda.h, which lowers CUDA_VERSION to
# 12.3 and poisons the 12.4 names: an unguarded use is a build error.
OLDCUDA_OBJS := $(LIB_SRC:libtoggle/src/%.c=$(B)/oldcuda/%.o)

$(B)/oldcuda/%.o: libtoggle/src/%.c tests/oldcuda/cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) -Itests/oldcuda $(INC) $(CFLAGS) -c $< -o $@

check-run: $(OLDCUDA_OBJS)

# The device-mode suites (tests/check_device_*.c) share fixture_device.c;
# check_device_taint also runs the real daemon (ASan build) and togglectl:
# device mode's tainted launches as toggled and an operator see them.
TG_DEVICE_SUITES := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/check_device_*.c))
TG_DEVICE_FIXTURES := $(B)/san/tests/fixture_device.o
$(TG_DEVICE_SUITES) $(TG_DEVICE_FIXTURES): EXTRA_CFLAGS = $(TGP_CFLAGS) \
	-DTOGGLED_BIN=\"$(B)/toggled-san\" -DTOGGLECTL_BIN=\"$(B)/togglectl\"
$(TG_DEVICE_SUITES): EXTRA_LIBS = $(B)/libtgproto-san.a $(TGP_LIBS) -lpthread
$(TG_DEVICE_SUITES): $(B)/toggled-san $(B)/togglectl $(B)/libtgproto-san.a
$(TG_DEVICE_SUITES): $(TG_DEVICE_FIXTURES) tests/fixture_device.h
$(TG_DEVICE_SUITES): TEST_FIXTURES = $(TG_DEVICE_FIXTURES)
$(TG_DEVICE_FIXTURES): tests/fixture_device.h $(B)/libtgproto-san.a
