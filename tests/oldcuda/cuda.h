/*
 * cuda.h stand-in for CUDA 12.3 headers (make check compiles libtoggle with
 * it, libtoggle/libtoggle.mk): the real header, CUDA_VERSION lowered to
 * 12030, and the names 12.4 added that libtoggle and its simulator use
 * poisoned, so any use outside a CUDA_VERSION >= 12040 guard fails to build.
 */
#include_next <cuda.h>
#undef CUDA_VERSION
#define CUDA_VERSION 12030
#pragma GCC poison CUgraphDeviceNode CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE
#pragma GCC poison deviceUpdatableKernelNode cudaGraphKernelNodeSetEnabled
