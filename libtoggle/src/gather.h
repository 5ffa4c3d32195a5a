/*
 * gather.h - the recorder's gather kernel (gather.cu): after a replay, one
 * launch on the replay's stream copies every record of the launch (its
 * 128-byte header, from the parameters, and its payload, from the monitor
 * buffer) into the recorder's device staging area, a mirror of the ring's
 * data area: a record's staging offset is its ring offset.  The copy to the
 * host then runs on the recorder's own stream, one cuMemcpyDtoHAsync per
 * contiguous ring range (record.c).  Shared by the kernel, its simulator
 * model (gather_image.c) and the host side; plain C that nvcc also compiles.
 *
 * tg_gather(struct tg_gather_args a): by value, under the 4 KiB of kernel
 * parameters every driver takes.  Block (x, i) copies part of record i:
 * blocks of x 0 write its header, all of them stride over its payload with
 * the widest access (16, 8, 4 or 1 bytes) the source's address allows, the
 * last bytes one at a time.  The payload lands 128-byte aligned (the
 * ring's record alignment).
 */
#ifndef TG_GATHER_H
#define TG_GATHER_H

#define TG_GATHER_KERNEL     "tg_gather"
#define TG_GATHER_MAX        24  /* records per launch: the arguments stay under 4 KiB */
#define TG_GATHER_THREADS    256
#define TG_GATHER_MAX_BLOCKS 64  /* per record; grid-stride beyond */
#define TG_GATHER_HDR_WORDS  16  /* 128-byte record header, as 8-byte words */

struct tg_gather_rec {
	unsigned long long src;   /* device address of the monitor buffer */
	unsigned long long off;   /* the record's offset in staging (= in the ring's data area) */
	unsigned long long bytes; /* payload bytes, at off + 128 */
};

struct tg_gather_args {
	unsigned long long staging; /* device address of the staging area */
	unsigned long long n;       /* records in this launch, 1..TG_GATHER_MAX */
	struct tg_gather_rec rec[TG_GATHER_MAX];
	unsigned long long hdr[TG_GATHER_MAX][TG_GATHER_HDR_WORDS]; /* each record's header */
};

#endif
