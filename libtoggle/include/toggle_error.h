/*
 * toggle_error.h - the one error list of graphtoggle, shared by libtoggle,
 * the daemon, the client library and togglectl.  Codes are negative; 0 is
 * success.  The wire protocol carries these numbers in Error.code (the
 * ErrorCode enum of toggle.proto, which tests/check_proto.c checks against
 * this list both ways; python/graphtoggle/errors.py is checked by
 * python/tests/test_binding.py).
 */
#ifndef TOGGLE_ERROR_H
#define TOGGLE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * XX(code, NAME, description) for each TOGGLE_E<NAME>, as libuv's
 * UV_ERRNO_MAP: it generates enum toggle_error, toggle_strerror()'s
 * descriptions and toggle_err_name()'s names, and the names togglectl and
 * the daemon's metrics print.  The codes are ABI and on the wire: they run
 * -1, -2, ... without a gap (error.c asserts it), and a new code is appended
 * with the next number, in the .proto and in python/graphtoggle/errors.py too.
 */
#define TOGGLE_ERROR_MAP(XX)                                                            \
	XX(-1, INVAL, "invalid argument")                                                \
	XX(-2, NOMEM, "out of memory")                                                   \
	XX(-3, NODRIVER, "CUDA driver missing or too old")                               \
	XX(-4, CUDA, "CUDA driver call failed")                                          \
	/* no capture window open, or the stream is not capturing */                    \
	XX(-5, CAPTURE, "no capture in progress")                                        \
	XX(-6, NOTKERNEL, "node is not a kernel node")                                   \
	XX(-7, UNBOUND, "graph has producers but is not bound to an exec")               \
	XX(-8, STALE, "graph was forgotten by this agent")                               \
	XX(-9, LATE, "plan for a step that has already begun")                           \
	XX(-10, SPEC, "bad hook spec")                                                   \
	XX(-11, RANGE, "hook outside the catalog")                                       \
	XX(-12, LIMIT, "limit reached")              /* a bounded table is full */       \
	XX(-13, NOTSUP, "not supported")             /* mode, backend, driver */         \
	XX(-14, NOENT, "unknown graph")                                                  \
	XX(-15, STEP, "steps must strictly increase")                                    \
	/* Control plane (daemon, clients, agent connection). */                        \
	XX(-16, PERM, "permission denied")                                               \
	XX(-17, VERSION, "protocol version mismatch")                                    \
	XX(-18, PROTO, "malformed or unexpected message")                                \
	XX(-19, TIMEDOUT, "timed out")                                                   \
	XX(-20, NOAGENT, "no agent matches the target")                                  \
	XX(-21, BUSY, "queue full")                  /* a bounded queue or ring */       \
	XX(-22, CONNECT, "cannot connect to the daemon")                                 \
	XX(-23, IO, "I/O error")                                                         \
	XX(-24, SHM, "bad shared-memory region")                                         \
	/* a request type the daemon does not serve (an older daemon) */                \
	XX(-25, UNIMPLEMENTED, "request not implemented by this daemon")

#define TOGGLE_ERROR_ENUM_(code, name, desc) TOGGLE_E##name = (code),
#define TOGGLE_ERROR_COUNT_(code, name, desc) -1
enum toggle_error {
	TOGGLE_OK = 0,
	TOGGLE_ERROR_MAP(TOGGLE_ERROR_ENUM_)
	/* The lowest code: minus the number of codes, the list having no gap. */
	TOGGLE_ERROR_MIN = 0 TOGGLE_ERROR_MAP(TOGGLE_ERROR_COUNT_),
};
#undef TOGGLE_ERROR_ENUM_
#undef TOGGLE_ERROR_COUNT_

/* Static description of an error code: "success" for TOGGLE_OK, "unknown
 * error" for a code not in the list. */
const char *toggle_strerror(int err);
/* The code's symbol: "TOGGLE_OK", "TOGGLE_EINVAL", ...; NULL for a code not
 * in the list. */
const char *toggle_err_name(int err);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_ERROR_H */
