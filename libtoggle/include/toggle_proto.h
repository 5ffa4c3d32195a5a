/*
 * toggle_proto.h - the constants of the wire contract and its frame header,
 * shared by toggled, the client library, togglectl and libtoggle's agent
 * connection.  Messages: proto/toggle.proto.  Error codes: toggle_error.h
 * (one enum, one string table, carried as Error.code).
 *
 * It lives beside libtoggle's headers, not in proto/, because libtoggle is
 * the lowest layer: proto/, the client and the daemon include libtoggle's
 * headers, libtoggle never includes theirs (docs/architecture.md).  Header
 * only, libc only: libtoggle builds on the GPU machine without protobuf-c.
 * Not installed.
 *
 * Protocol versions:
 *   1 - first version (see toggle.proto).  Added compatibly since (optional
 *       fields, old peers ignore them): PlanEntry.after (relative steps);
 *       SetEnabledReply.skipped and Ack.skipped, the agents a default-target
 *       command left out because their catalog refused it; StatusReply's save
 *       errors; GraphInfo.tainted, GraphInfo.blocked (device mode's taint),
 *       GraphInfo.bare_exec, GraphInfo.bare_running (the producer-free exec).
 *   2 - contract v1: package graphtoggle.v1, proto3, *_UNSPECIFIED enum
 *       zero values, ErrorCode enum, version range in Hello,
 *       ERROR_CODE_UNIMPLEMENTED for unknown requests (what each version
 *       changed: the head of toggle.proto).
 */
#ifndef TOGGLE_PROTO_H
#define TOGGLE_PROTO_H

#include <stdint.h>

#include "toggle_error.h"
#include "toggle_hooks.h"
#include "toggle_shm.h"

#define TGP_PROTOCOL_VERSION 2
#define TGP_FRAME_HEADER     4            /* length, network byte order */
#define TGP_MAX_FRAME        (1u << 20)   /* envelope bytes; larger is refused (every reader) */
#define TGP_MAX_SPEC         8192         /* bytes of one hook spec */
/* Entries of one SubmitPlan: a batch is published whole in the agent's plan ring. */
#define TGP_MAX_PLAN_ENTRIES TOGGLE_SHM_PLAN_RING
#define TGP_MAX_PLAN_AFTER   (1ll << 40)  /* largest relative step (PlanEntry.after) */
#define TGP_MAX_WAIT_MS      600000u      /* longest SetEnabled wait */
#define TGP_MAX_NAME         TOGGLE_MAX_NAME /* agent, group, hook type names (NUL included) */

/* ---- the frame header: a 4-byte length, then that many envelope bytes ---- */

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

#endif /* TOGGLE_PROTO_H */
