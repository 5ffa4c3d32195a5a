/*
 * pbwire.h - the few protobuf messages libtoggle itself speaks (Hello,
 * RegisterAgent; HelloReply, RegisterReply, Error), encoded and decoded by
 * hand so that libtoggle needs only libc, pthreads and CUDA.  Wire-compatible
 * with proto/toggle.proto; the tests cross-check against protobuf-c.
 */
#ifndef TG_PBWIRE_H
#define TG_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

/* Envelope field numbers used here (toggle.proto). */
#define PBW_ENV_ID             1
#define PBW_ENV_HELLO          10
#define PBW_ENV_HELLO_REPLY    11
#define PBW_ENV_ERROR          12
#define PBW_ENV_REGISTER       20
#define PBW_ENV_REGISTER_REPLY 21

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
