/* error.c - the one string table of libtoggle's error codes. */
#include "toggle_error.h"

const char *toggle_strerror(int err)
{
	switch (err) {
	case TOGGLE_OK: return "success";
	case TOGGLE_EINVAL: return "invalid argument";
	case TOGGLE_ENOMEM: return "out of memory";
	case TOGGLE_ENODRIVER: return "CUDA driver missing or too old";
	case TOGGLE_ECUDA: return "CUDA driver call failed";
	case TOGGLE_ECAPTURE: return "no capture in progress";
	case TOGGLE_ENOTKERNEL: return "node is not a kernel node";
	case TOGGLE_EUNBOUND: return "graph has producers but is not bound to an exec";
	case TOGGLE_ESTALE: return "graph was forgotten by this agent";
	case TOGGLE_ELATE: return "plan for a step that has already begun";
	case TOGGLE_ESPEC: return "bad hook spec";
	case TOGGLE_ERANGE: return "hook outside the catalog";
	case TOGGLE_ELIMIT: return "limit reached";
	case TOGGLE_ENOTSUP: return "not supported";
	case TOGGLE_ENOENT: return "unknown graph";
	case TOGGLE_ESTEP: return "steps must strictly increase";
	case TOGGLE_EPERM: return "permission denied";
	case TOGGLE_EVERSION: return "protocol version mismatch";
	case TOGGLE_EPROTO: return "malformed or unexpected message";
	case TOGGLE_ETIMEDOUT: return "timed out";
	case TOGGLE_ENOAGENT: return "no agent matches the target";
	case TOGGLE_EBUSY: return "queue full";
	case TOGGLE_ECONNECT: return "cannot connect to the daemon";
	case TOGGLE_EIO: return "I/O error";
	case TOGGLE_ESHM: return "bad shared-memory region";
	case TOGGLE_EUNIMPLEMENTED: return "request not implemented by this daemon";
	default: return "unknown error";
	}
}
