/*
 * fuzz_frame.c - libFuzzer target: arbitrary bytes from a peer, fed to the
 * frame reader in arbitrary chunks, every complete envelope decoded and freed.
 * Must never crash, leak or buffer more than one frame.
 */
#include <stdlib.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tgp_reader r;
	tgp_reader_init(&r);
	size_t off = 0;
	/* The first byte picks the chunk size, so splits get explored too. */
	size_t chunk = size ? (size_t)data[0] % 64 + 1 : 1;
	while (off < size) {
		size_t n = size - off < chunk ? size - off : chunk;
		int rc = tgp_reader_feed(&r, data + off, n);
		if (rc && rc != TOGGLE_EBUSY)
			break;
		off += rc == TOGGLE_EBUSY ? 0 : n;
		Toggle__Envelope *env;
		int got;
		while ((got = tgp_reader_next(&r, &env)) == 1)
			toggle__envelope__free_unpacked(env, NULL);
		if (got < 0 || (rc == TOGGLE_EBUSY && got == 0))
			break;
		if (r.cap > TGP_READER_MAX)
			abort();
	}
	tgp_reader_free(&r);
	return 0;
}
