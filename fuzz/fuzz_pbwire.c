/*
 * fuzz_pbwire.c - libFuzzer target: arbitrary bytes as a daemon reply to
 * libtoggle's hand-written protobuf decoder.  Must never crash or read out
 * of bounds; the error text is always terminated.
 */
#include <stdlib.h>
#include <string.h>

#include "pbwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pbw_reply r;
	/* A copy of exactly size bytes, so ASan sees any read past the end. */
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	(void)pbw_decode_reply(copy, size, &r);
	if (memchr(r.error_message, '\0', sizeof(r.error_message)) == NULL)
		abort();
	free(copy);
	return 0;
}
