/*
 * tests/nocuda/cuda_runtime.h - stands first on the include path of make check-nocuda
 * (daemon/daemon.mk): toggled, togglectl and the wire protocol must build
 * without CUDA's headers, so reaching this one is a build error, whether or
 * not CUDA is installed where the check runs.
 */
#error "cuda_runtime.h included: toggled, togglectl and proto/ must build without CUDA headers (include toggle_hooks.h or toggle_shm.h, not toggle.h)"
