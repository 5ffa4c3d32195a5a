/*
 * copyout.h - the built-in copy producer's kernel (copyout.cu) and its
 * launch shape, shared by the kernel, its simulator model and the host side
 * (copyout.c).  Plain C that nvcc also compiles.
 *
 * tg_copy_out(dst, src, row_bytes, rows, dst_pitch, src_pitch, width):
 * every parameter is 8 bytes but width (4); addresses are device addresses.
 * The host picks width, the widest access (16, 8, 4 or 1 bytes) that every
 * address, row length and pitch is a multiple of, and flattens a contiguous
 * copy into one row.  Threads stride over the rows x (row_bytes / width)
 * elements.  tg_copy_out_row16 takes the same parameters and does only the
 * commonest case, one row of 16-byte accesses (a contiguous, 16-byte
 * aligned tensor): its code is a few instructions, which the GPU fetches
 * at every replay.
 */
#ifndef TG_COPYOUT_H
#define TG_COPYOUT_H

#define TG_COPY_KERNEL       "tg_copy_out"
#define TG_COPY_KERNEL_ROW16 "tg_copy_out_row16"
#define TG_COPY_THREADS    256
#define TG_COPY_MAX_BLOCKS 1024 /* grid-stride beyond: about 8 blocks per SM of an H200 */
#define TG_COPY_PARAMS     7

#endif
