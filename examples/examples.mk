# examples.mk - demo_agent's real-CUDA kernels.  Included by the top-level
# Makefile (-include examples/examples.mk); uses its B, NVCC and ALL_CFLAGS.
#
# demo_agent is plain C built by $(CC) and never linked with CUDA: its CUDA
# backend (examples/demo_cuda.c) loads libcuda.so.1 at run time, and its
# kernels (examples/demo_kernels.cu) are PTX embedded in the program.  When
# nvcc exists, the .cu file is compiled to PTX, the PTX becomes a C array in
# a generated header (od + awk: no xxd), and demo_cuda.o is compiled with
# -DDEMO_HAVE_PTX.  Without nvcc nothing here applies: demo_cuda.o has no
# kernels and demo_agent always runs on the simulator.

DEMO_PTX   := $(B)/examples/demo_kernels.ptx
DEMO_PTX_H := $(B)/examples/demo_kernels_ptx.h
DEMO_NVCC  := $(shell command -v '$(NVCC)' 2>/dev/null)
# The virtual architecture of the PTX: compute_70 where nvcc still has it
# (CUDA 12), else the oldest one it lists (compute_75 with CUDA 13).  The
# driver JIT-compiles PTX for any newer GPU.  Set it to override.
DEMO_PTX_ARCH ?=

ifneq ($(DEMO_NVCC),)
$(B)/examples/demo_cuda.o: $(DEMO_PTX_H)
$(B)/examples/demo_cuda.o: ALL_CFLAGS += -DDEMO_HAVE_PTX -I$(B)/examples

$(DEMO_PTX): examples/demo_kernels.cu
	@mkdir -p $(dir $@)
	@arch='$(DEMO_PTX_ARCH)'; \
	if [ -z "$$arch" ]; then \
	  archs=$$('$(DEMO_NVCC)' --list-gpu-arch 2>/dev/null); \
	  if printf '%s\n' "$$archs" | grep -qx compute_70; then arch=compute_70; \
	  else arch=$$(printf '%s\n' "$$archs" | awk '/^compute_/ { print; exit }'); fi; \
	fi; \
	echo "'$(DEMO_NVCC)' -ptx -arch=$${arch:-compute_70} -o $@ $<"; \
	'$(DEMO_NVCC)' -ptx -arch=$${arch:-compute_70} -o $@ $<

# The PTX as a NUL-terminated byte array: cuModuleLoadDataEx takes it as is.
$(DEMO_PTX_H): $(DEMO_PTX)
	{ echo '/* generated from examples/demo_kernels.cu by examples/examples.mk: do not edit */'; \
	  echo 'static const unsigned char demo_kernels_ptx[] = {'; \
	  od -An -v -tx1 $< | awk '{ s = ""; for (i = 1; i <= NF; i++) s = s "0x" $$i ","; print s }'; \
	  echo '0x00};'; } >$@.tmp && mv $@.tmp $@
endif
