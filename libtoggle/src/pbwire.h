/*
 * pbwire.h - the few protobuf messages libtoggle itself speaks (Hello,
 * RegisterAgent; HelloReply, RegisterReply, Error), encoded and decoded by
 * hand so that libtoggle needs only libc, pthreads and CUDA.  Wire-compatible
 * with proto/graphtoggle/v1/toggle.proto; the tests cross-check against protobuf-c.
 */
#ifndef TG_PBWIRE_H
#define TG_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Every field number of toggle.proto used here, written once:
 * X(constant, message, field, protobuf-c type, number).  message and field
 * are protobuf-c's C names, so tests/check_pbwire.c looks each one up in the
 * descriptors protoc-c generates from toggle.proto and checks its number and
 * type: the two cannot drift apart.  Generating them here instead would need
 * protoc (or a parser of .proto) on the GPU machine, which has only libc,
 * pthreads, CUDA and python3.
 */
#define PBW_FIELDS(X)                                                          \
	X(ENV_ID, envelope, id, UINT64, 1)                                     \
	X(ENV_HELLO, envelope, hello, MESSAGE, 10)                             \
	X(ENV_HELLO_REPLY, envelope, hello_reply, MESSAGE, 11)                 \
	X(ENV_ERROR, envelope, error, MESSAGE, 12)                             \
	X(ENV_REGISTER, envelope, register_agent, MESSAGE, 20)                 \
	X(ENV_REGISTER_REPLY, envelope, register_reply, MESSAGE, 21)           \
	X(ENV_REGISTER_RING, envelope, register_ring, MESSAGE, 22)             \
	X(ENV_REGISTER_RING_REPLY, envelope, register_ring_reply, MESSAGE, 23) \
	X(HELLO_PROTOCOL_VERSION, hello_request, protocol_version, UINT32, 1)  \
	X(HELLO_CLIENT, hello_request, client, STRING, 2)                      \
	X(HELLO_REPLY_PROTOCOL_VERSION, hello_reply, protocol_version, UINT32, 1) \
	X(ERROR_CODE, error, code, ENUM, 1)                                    \
	X(ERROR_MESSAGE, error, message, STRING, 2)                            \
	X(REGISTER_NAME, register_agent_request, name, STRING, 1)              \
	X(REGISTER_GROUP, register_agent_request, group, STRING, 2)            \
	X(REGISTER_HOOK_TYPES, register_agent_request, hook_types, STRING, 3)  \
	X(REGISTER_N_LAYERS, register_agent_request, n_layers, UINT32, 4)      \
	X(REGISTER_MODE, register_agent_request, mode, UINT32, 5)              \
	X(REGISTER_DRIVER_VERSION, register_agent_request, driver_version, INT32, 6) \
	X(REGISTER_SHM_SIZE, register_agent_request, shm_size, UINT64, 7)      \
	X(REGISTER_REPLY_AGENT_ID, register_agent_reply, agent_id, UINT64, 1)  \
	X(REGISTER_RING_SIZE, register_ring_request, ring_size, UINT64, 1)

/* PBW_ENV_HELLO, PBW_REGISTER_NAME, ... */
enum pbw_field {
#define PBW_FIELD_ENUM(name, msg, field, type, number) PBW_##name = number,
	PBW_FIELDS(PBW_FIELD_ENUM)
#undef PBW_FIELD_ENUM
};

struct pbw_buf {
	uint8_t *p;
	size_t len, cap;
	int overflow; /* set when a write did not fit */
};

void pbw_varint(struct pbw_buf *b, uint32_t field, uint64_t v);
void pbw_bytes(struct pbw_buf *b, uint32_t field, const void *data, size_t n);
void pbw_string(struct pbw_buf *b, uint32_t field, const char *s);

struct pbw_register {
	const char *name, *group;
	const char *const *hook_types;
	unsigned n_types;
	uint32_t n_layers, mode;
	int32_t driver_version;
	uint64_t shm_size;
};

/* A whole frame (4-byte length + Envelope) into buf; returns its length or -1. */
long pbw_frame_hello(uint8_t *buf, size_t cap, uint64_t id, uint32_t version, const char *client);
long pbw_frame_register(uint8_t *buf, size_t cap, uint64_t id, const struct pbw_register *r);
/* RegisterRingRequest (toggle_ring.h): the data ring's size; its fd goes with the frame. */
long pbw_frame_register_ring(uint8_t *buf, size_t cap, uint64_t id, uint64_t ring_size);

/* What libtoggle needs from a reply Envelope. */
struct pbw_reply {
	uint64_t id;
	uint32_t body;          /* envelope field number of the body, 0 = none */
	uint32_t protocol_version; /* HelloReply */
	uint64_t agent_id;      /* RegisterReply */
	int32_t error_code;     /* Error */
	char error_message[256];
};

/* Decode one Envelope body (no length prefix).  0, or -1 if malformed. */
int pbw_decode_reply(const uint8_t *p, size_t n, struct pbw_reply *out);

#endif
