# gpu-lib.sh - shared by scripts/gpu-check.sh and scripts/gpu-bench.sh (sourced).
# Builds libtoggle for the GPU machine with libc, pthreads and CUDA only:
# device mode's planner, the copy producer's kernel and the recorder's gather
# kernel (planner.cu, copyout.cu and gather.cu -> fatbin -> bytes in a header,
# as libtoggle/libtoggle.mk does),
# every libtoggle/src/*.c, a static archive.
# Needs: TAG (message prefix), B (build dir), CC, NVCC, CUDA_HOME; fail().

gpu_describe() {
	if command -v nvidia-smi >/dev/null 2>&1; then
		gpus=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1) ||
			gpus="nvidia-smi failed: $gpus"
		printf '%s\n' "$gpus" | sed "s/^/$TAG: gpu: /"
	else
		echo "$TAG: gpu: nvidia-smi not available"
	fi
	echo "$TAG: nvcc: $("$NVCC" --version | grep -i 'release' | tail -n 1)"
}

# Leaves $B/libtoggle.a and $B/libtoggle.so (for the Python package).
gpu_build_libtoggle() {
	mkdir -p "$B/obj" "$B/gen"
	rm -f "$B"/obj/*.o "$B"/gen/*
	"$NVCC" --fatbin -O3 \
		-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
		-Ilibtoggle/src -o "$B/gen/tg_planner.fatbin" libtoggle/src/planner.cu ||
		fail "build: $NVCC could not build libtoggle/src/planner.cu"
	scripts/embed.sh "$B/gen/tg_planner.fatbin" "$B/gen/tg_planner_fatbin.h" \
		tg_planner_fatbin_bytes || fail "build: could not embed the planner"
	# the copy producer's kernel (toggle_copy_out), embedded the same way
	"$NVCC" --fatbin -O3 \
		-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
		-Ilibtoggle/src -o "$B/gen/tg_copyout.fatbin" libtoggle/src/copyout.cu ||
		fail "build: $NVCC could not build libtoggle/src/copyout.cu"
	scripts/embed.sh "$B/gen/tg_copyout.fatbin" "$B/gen/tg_copyout_fatbin.h" \
		tg_copyout_fatbin_bytes || fail "build: could not embed the copy kernel"
	# the recorder's gather kernel (staged recording, docs/recording.md), the same way
	"$NVCC" --fatbin -O3 \
		-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
		-Ilibtoggle/src -o "$B/gen/tg_gather.fatbin" libtoggle/src/gather.cu ||
		fail "build: $NVCC could not build libtoggle/src/gather.cu"
	scripts/embed.sh "$B/gen/tg_gather.fatbin" "$B/gen/tg_gather_fatbin.h" \
		tg_gather_fatbin_bytes || fail "build: could not embed the gather kernel"
	# No -Iproto: libtoggle includes only its own headers (the wire constants
	# are libtoggle/include/toggle_proto.h; it encodes protobuf itself).
	objs=""
	for src in libtoggle/src/*.c; do
		obj="$B/obj/$(basename "$src" .c).o"
		extra=""
		[ "$src" = libtoggle/src/planner_image.c ] && extra="-DTG_HAVE_PLANNER_FATBIN -I$B/gen"
		[ "$src" = libtoggle/src/copyout_image.c ] && extra="-DTG_HAVE_COPYOUT_FATBIN -I$B/gen"
		[ "$src" = libtoggle/src/gather_image.c ] && extra="-DTG_HAVE_GATHER_FATBIN -I$B/gen"
		# -fPIC: the same objects make libtoggle.so for the Python package
		# shellcheck disable=SC2086 # $extra is empty or two flags without spaces
		"$CC" -std=c17 -D_GNU_SOURCE -O2 -g -fPIC -Wall -Wextra -Werror $extra \
			-Ilibtoggle/include -isystem "$CUDA_HOME/include" -c "$src" -o "$obj" ||
			fail "build: $CC could not compile $src"
		objs="$objs $obj"
	done
	[ -n "$objs" ] || fail "build: no libtoggle sources in libtoggle/src"
	rm -f "$B/libtoggle.a"
	# shellcheck disable=SC2086 # $objs is a list of paths without spaces
	ar rcs "$B/libtoggle.a" $objs || fail "build: ar could not make $B/libtoggle.a"
	# shellcheck disable=SC2086
	"$CC" -shared -Wl,-soname,libtoggle.so.0 -o "$B/libtoggle.so" $objs -ldl -lpthread ||
		fail "build: $CC could not link $B/libtoggle.so"
}
