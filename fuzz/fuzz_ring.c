/*
 * fuzz_ring.c - libFuzzer target: what a hostile agent puts in its data
 * ring, read by toggled's reader (toggle_ring_reader_next, ring.c).
 * Input: 8 bytes where the reader stands (tail), 8 bytes the head the
 * agent publishes, then the data area's bytes from the tail's offset on
 * (wrapping).  The reader must never read outside the data area, never
 * hand out a record its checks would refuse, and stop: each call returns
 * a record, nothing, or a fault that stays.
 */
#include <stdlib.h>
#include <string.h>

#include "toggle_ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct toggle_ring_map ring;

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[128];
	if (!ring.base && toggle_ring_create(TOGGLE_RING_MIN_CAPACITY, &ring, err, sizeof(err)) != 0)
		abort();
	if (size < 16)
		return 0;
	uint64_t cap = ring.capacity;
	/* Positions near 0 and near a wrap of 64 bits alike. */
	uint64_t tail = le64(data) & ~(uint64_t)(TOGGLE_RING_ALIGN - 1);
	uint64_t head = le64(data + 8);
	memset(ring.data, 0, cap);
	for (size_t i = 16; i < size && i - 16 < cap; i++)
		ring.data[(tail + (i - 16)) & (cap - 1)] = data[i];
	__atomic_store_n(&ring.prod->head, head, __ATOMIC_RELEASE);
	struct toggle_ring_reader rd;
	memset(&rd, 0, sizeof(rd));
	rd.m = &ring;
	rd.tail = rd.head = tail; /* as if it had read up to there */
	uint64_t seen = 0;
	for (;;) {
		struct toggle_ring_record r;
		const void *pl = NULL;
		int rc = toggle_ring_reader_next(&rd, &r, &pl);
		if (rc == 0 || rc == TOGGLE_ESHM) {
			if (rc == TOGGLE_ESHM &&
			    (rd.fault == TOGGLE_RING_F_OK ||
			     toggle_ring_reader_next(&rd, &r, &pl) != TOGGLE_ESHM))
				abort(); /* a fault is named and stays */
			break;
		}
		const unsigned char *p = pl;
		if (rc != 1 || r.kind != TOGGLE_RING_REC_DATA || p < ring.data ||
		    p + r.payload_len > ring.data + cap || r.payload_len > r.length - sizeof(r) ||
		    toggle_dtype_size(r.dtype) == 0 || r.ndim > TOGGLE_RING_MAX_DIMS)
			abort();
		volatile unsigned char sink = 0;
		for (uint64_t i = 0; i < r.payload_len; i++)
			sink ^= p[i]; /* ASan sees a read outside the mapping */
		(void)sink;
		toggle_ring_reader_release(&rd, &r);
		if (++seen > cap / TOGGLE_RING_ALIGN)
			abort(); /* more records than the ring can hold: it never stops */
	}
	return 0;
}
