/*
 * toggle_error.h - the one error enum of graphtoggle, shared by libtoggle,
 * the daemon, the client library and togglectl, with one string table
 * (toggle_strerror).  Codes are negative; 0 is success.  The wire protocol
 * carries these numbers in Error.code (the ErrorCode enum of toggle.proto,
 * which tests/check_proto.c keeps equal to this one).
 */
#ifndef TOGGLE_ERROR_H
#define TOGGLE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum toggle_error {
	TOGGLE_OK = 0,
	TOGGLE_EINVAL = -1,     /* invalid argument */
	TOGGLE_ENOMEM = -2,     /* out of memory */
	TOGGLE_ENODRIVER = -3,  /* CUDA driver missing or too old */
	TOGGLE_ECUDA = -4,      /* a CUDA driver call failed */
	TOGGLE_ECAPTURE = -5,   /* no capture window open, or stream not capturing */
	TOGGLE_ENOTKERNEL = -6, /* recorded node is not a kernel node */
	TOGGLE_EUNBOUND = -7,   /* graph has producers but no bound exec */
	TOGGLE_ESTALE = -8,     /* graph was forgotten by this agent */
	TOGGLE_ELATE = -9,      /* plan for a step that has already begun */
	TOGGLE_ESPEC = -10,     /* bad hook spec */
	TOGGLE_ERANGE = -11,    /* hook outside the catalog */
	TOGGLE_ELIMIT = -12,    /* a bounded table is full */
	TOGGLE_ENOTSUP = -13,   /* not supported (mode, backend, driver) */
	TOGGLE_ENOENT = -14,    /* unknown graph */
	TOGGLE_ESTEP = -15,     /* steps must strictly increase */
	/* Control plane (daemon, clients, agent connection). */
	TOGGLE_EPERM = -16,     /* permission denied */
	TOGGLE_EVERSION = -17,  /* protocol version mismatch */
	TOGGLE_EPROTO = -18,    /* malformed or unexpected message */
	TOGGLE_ETIMEDOUT = -19, /* timed out */
	TOGGLE_ENOAGENT = -20,  /* the selector matched no agent */
	TOGGLE_EBUSY = -21,     /* a bounded queue or ring is full */
	TOGGLE_ECONNECT = -22,  /* cannot connect to the daemon */
	TOGGLE_EIO = -23,       /* I/O error */
	TOGGLE_ESHM = -24,      /* bad shared-memory region */
	TOGGLE_EUNIMPLEMENTED = -25, /* request type the daemon does not serve */
	TOGGLE_ERROR_MIN = -25,
};

/* Static description of an error code ("unknown error" for others). */
const char *toggle_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_ERROR_H */
