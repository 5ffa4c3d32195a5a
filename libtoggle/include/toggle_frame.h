/*
 * toggle_frame.h - the frame header of the wire protocol: a 4-byte length
 * in network byte order, then that many envelope bytes.  One helper for
 * every writer and reader of frames: proto/frame.c (toggled, the client
 * library), libtoggle's own encoder (pbwire.c) and reply reader (conn.c).
 * Header only, libc only, beside toggle_proto.h for the same reason.
 */
#ifndef TOGGLE_FRAME_H
#define TOGGLE_FRAME_H

#include <stdint.h>

#include "toggle_error.h"
#include "toggle_proto.h"

static inline void tgp_frame_header_put(uint8_t *h, uint32_t len)
{
	h[0] = (uint8_t)(len >> 24);
	h[1] = (uint8_t)(len >> 16);
	h[2] = (uint8_t)(len >> 8);
	h[3] = (uint8_t)len;
}

static inline uint32_t tgp_frame_header_get(const uint8_t *h)
{
	return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
}

/*
 * May a frame announce len envelope bytes?  0; TOGGLE_EPROTO for 0 (an
 * envelope always has a body); TOGGLE_ELIMIT over TGP_MAX_FRAME.  Every
 * reader checks this from the header alone, before it buffers the body.
 */
static inline int tgp_frame_len_check(uint64_t len)
{
	if (len == 0)
		return TOGGLE_EPROTO;
	return len > TGP_MAX_FRAME ? TOGGLE_ELIMIT : 0;
}

#endif /* TOGGLE_FRAME_H */
