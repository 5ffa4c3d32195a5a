/*
 * toggle_proto.h - the constants of the wire contract, shared by toggled,
 * the client library, togglectl and libtoggle's agent connection.
 * Messages: proto/graphtoggle/v1/toggle.proto.  Error codes: toggle_error.h (one enum, one
 * string table, carried as Error.code).  The frame header: toggle_frame.h.
 *
 * Beside libtoggle's headers, not in proto/: libtoggle is the lowest layer
 * and includes nothing of proto/ (docs/architecture.md).  Header only,
 * libc only; not installed.
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
 *       changed: the head of toggle.proto).  Added compatibly since:
 *       RecordRequest and its stream (RecordReply, RecordData, RecordEnd),
 *       docs/recording.md; a daemon without them answers UNIMPLEMENTED.
 *       GraphInfo.full_exec, GraphInfo.full_running (the full exec, every
 *       producer on: device mode's since issue 31, every mode's since
 *       issue 23; the status lane's TOGGLE_SHM_GRAPH_FULL, _FULL_RUNNING).
 */
#ifndef TOGGLE_PROTO_H
#define TOGGLE_PROTO_H

#include "toggle_error.h"
#include "toggle_hooks.h"
#include "toggle_shm.h"

#define TGP_PROTOCOL_VERSION 2
#define TGP_FRAME_HEADER     4            /* length, network byte order */
#define TGP_MAX_FRAME        (1u << 20)   /* envelope bytes; larger is refused */
#define TGP_MAX_SPEC         8192         /* bytes of one hook spec */
#define TGP_MAX_PLAN_ENTRIES TOGGLE_SHM_PLAN_RING /* entries of one SubmitPlan: the agent's plan ring */
#define TGP_MAX_PLAN_AFTER   (1ll << 40)  /* largest relative step (PlanEntry.after) */
#define TGP_MAX_WAIT_MS      600000u      /* longest SetEnabled wait */
#define TGP_MAX_ALIGN_MARGIN 1000000u     /* largest SetEnabledRequest.aligned_margin */
#define TGP_MAX_NAME         TOGGLE_MAX_NAME /* agent, group, hook type names (NUL included) */
#define TGP_MAX_RECORD_STEPS 1000000000ull /* RecordRequest.steps */
#define TGP_RECORD_CHUNK     (256u << 10) /* RecordData.data bytes at most */
#define TGP_RECORD_MAX_DIMS  8            /* RecordData.shape entries at most */

#endif /* TOGGLE_PROTO_H */
