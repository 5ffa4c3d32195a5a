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
 * parameters every driver takes.  To fit TG_GATHER_MAX records there, a
 * header is passed as the words the launch's records share (magic, kind
 * and header size; session, step, graph, launch; reserved: TG_GATHER_SHARED,
 * once) and the ten each record has of its own (length, seq, hook and
 * types, shape, payload_len, dropped, checksum).  Block (x, i) copies part
 * of record i: blocks of x 0 write its header, all of them stride over its
 * payload with the widest access (16, 8, 4 or 1 bytes) the source's address
 * allows, the last bytes one at a time.  The payload lands 128-byte aligned
 * (the ring's record alignment).
 */
#ifndef TG_GATHER_H
#define TG_GATHER_H

#define TG_GATHER_KERNEL     "tg_gather"
#define TG_GATHER_MAX        40  /* records per launch: the arguments stay under 4 KiB */
#define TG_GATHER_THREADS    256
#define TG_GATHER_MAX_BLOCKS 64  /* per record; grid-stride beyond */
#define TG_GATHER_HDR_WORDS  16  /* a 128-byte record header, as 8-byte words */
#define TG_GATHER_REC_WORDS  10  /* the words of a header a record has of its own */
#define TG_GATHER_SHARED     0x4079u /* header words 0, 3, 4, 5, 6, 14: shared by a launch */
#define TG_GATHER_PAYLOAD_WORD 12    /* payload_len (byte 96) */

#ifdef __CUDACC__
#define TG_GATHER_FN static inline __host__ __device__
#else
#define TG_GATHER_FN static inline
#endif

/* Where header word t (not shared) lies among a record's own words. */
TG_GATHER_FN unsigned tg_gather_slot(unsigned t)
{
	unsigned n = 0;
	for (unsigned k = 0; k < t; k++)
		n += !((TG_GATHER_SHARED >> k) & 1u);
	return n;
}

struct tg_gather_rec {
	unsigned long long src; /* device address of the monitor buffer */
	unsigned long long off; /* the record's offset in staging (= in the ring's data area) */
	unsigned long long w[TG_GATHER_REC_WORDS]; /* its header's own words, in order */
};

struct tg_gather_args {
	unsigned long long staging; /* device address of the staging area */
	unsigned long long n;       /* records in this launch, 1..TG_GATHER_MAX */
	unsigned long long shared[TG_GATHER_HDR_WORDS]; /* the shared words (others unused) */
	struct tg_gather_rec rec[TG_GATHER_MAX];
};

#endif
