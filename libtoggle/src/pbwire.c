/*
 * pbwire.c - hand-written protobuf encoding of the agent's registration and
 * decoding of the daemon's replies.  Input is untrusted: every length is
 * checked against what remains, unknown fields are skipped by wire type.
 * Encoding is proto3's canonical one (toggle.proto is proto3): a scalar
 * that is 0 and an empty string are left out, as protobuf-c packs them, so
 * a frame re-packs to its own size (a daemon may check that).
 */
#include <string.h>

#include "pbwire.h"
#include "toggle_frame.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static void pbw_raw(struct pbw_buf *b, const void *data, size_t n)
{
	if (b->overflow || n > b->cap - b->len) {
		b->overflow = 1;
		return;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void pbw_uvarint(struct pbw_buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	do {
		tmp[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	pbw_raw(b, tmp, n);
}

void pbw_varint(struct pbw_buf *b, uint32_t field, uint64_t v)
{
	pbw_uvarint(b, (uint64_t)field << 3 | WT_VARINT);
	pbw_uvarint(b, v);
}

void pbw_bytes(struct pbw_buf *b, uint32_t field, const void *data, size_t n)
{
	pbw_uvarint(b, (uint64_t)field << 3 | WT_LEN);
	pbw_uvarint(b, n);
	pbw_raw(b, data, n);
}

void pbw_string(struct pbw_buf *b, uint32_t field, const char *s)
{
	pbw_bytes(b, field, s, strlen(s));
}

/* Wrap an encoded body as Envelope{id, body} behind a 4-byte length. */
static long pbw_frame(uint8_t *buf, size_t cap, uint64_t id, uint32_t field,
		      const struct pbw_buf *body)
{
	if (cap < TGP_FRAME_HEADER)
		return -1;
	struct pbw_buf env = {.p = buf + TGP_FRAME_HEADER, .cap = cap - TGP_FRAME_HEADER};
	pbw_varint(&env, PBW_ENV_ID, id);
	pbw_bytes(&env, field, body->p, body->len);
	if (env.overflow || body->overflow || tgp_frame_len_check(env.len) != 0)
		return -1;
	tgp_frame_header_put(buf, (uint32_t)env.len);
	return (long)(env.len + TGP_FRAME_HEADER);
}

/* proto3 leaves out what equals the default. */
static void pbw_varint_nz(struct pbw_buf *b, uint32_t field, uint64_t v)
{
	if (v)
		pbw_varint(b, field, v);
}

static void pbw_string_nz(struct pbw_buf *b, uint32_t field, const char *s)
{
	if (s && s[0])
		pbw_string(b, field, s);
}

long pbw_frame_hello(uint8_t *buf, size_t cap, uint64_t id, uint32_t version, const char *client)
{
	uint8_t tmp[256];
	struct pbw_buf b = {.p = tmp, .cap = sizeof(tmp)};
	pbw_varint_nz(&b, PBW_HELLO_PROTOCOL_VERSION, version);
	pbw_string_nz(&b, PBW_HELLO_CLIENT, client);
	return pbw_frame(buf, cap, id, PBW_ENV_HELLO, &b);
}

long pbw_frame_register(uint8_t *buf, size_t cap, uint64_t id, const struct pbw_register *r)
{
	uint8_t tmp[4096];
	struct pbw_buf b = {.p = tmp, .cap = sizeof(tmp)};
	pbw_string_nz(&b, PBW_REGISTER_NAME, r->name);
	pbw_string_nz(&b, PBW_REGISTER_GROUP, r->group);
	for (unsigned i = 0; i < r->n_types; i++)
		pbw_string(&b, PBW_REGISTER_HOOK_TYPES, r->hook_types[i]); /* repeated: every element, "" too */
	pbw_varint_nz(&b, PBW_REGISTER_N_LAYERS, r->n_layers);
	pbw_varint_nz(&b, PBW_REGISTER_MODE, r->mode);
	/* int32 on the wire: negative values sign-extend to 10 bytes. */
	pbw_varint_nz(&b, PBW_REGISTER_DRIVER_VERSION, (uint64_t)(int64_t)r->driver_version);
	pbw_varint_nz(&b, PBW_REGISTER_SHM_SIZE, r->shm_size);
	return pbw_frame(buf, cap, id, PBW_ENV_REGISTER, &b);
}

long pbw_frame_register_ring(uint8_t *buf, size_t cap, uint64_t id, uint64_t ring_size)
{
	uint8_t tmp[16];
	struct pbw_buf b = {.p = tmp, .cap = sizeof(tmp)};
	pbw_varint_nz(&b, PBW_REGISTER_RING_SIZE, ring_size);
	return pbw_frame(buf, cap, id, PBW_ENV_REGISTER_RING, &b);
}

/* ---- decoding ---- */

struct pbw_in {
	const uint8_t *p;
	size_t n;
};

static int pbw_get_varint(struct pbw_in *in, uint64_t *v)
{
	*v = 0;
	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (!in->n)
			return -1;
		uint8_t c = *in->p++;
		in->n--;
		*v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return 0;
	}
	return -1;
}

/* Next field: its number, wire type, and for varints the value, for LEN the bytes. */
static int pbw_next(struct pbw_in *in, uint32_t *field, uint64_t *v, struct pbw_in *sub)
{
	uint64_t key;
	if (pbw_get_varint(in, &key) || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
		return -1;
	*field = (uint32_t)(key >> 3);
	switch (key & 7) {
	case WT_VARINT:
		return pbw_get_varint(in, v);
	case WT_I64:
	case WT_I32: {
		size_t w = (key & 7) == WT_I64 ? 8 : 4;
		if (in->n < w)
			return -1;
		in->p += w;
		in->n -= w;
		*v = 0;
		return 0;
	}
	case WT_LEN:
		if (pbw_get_varint(in, v) || *v > in->n)
			return -1;
		sub->p = in->p;
		sub->n = (size_t)*v;
		in->p += *v;
		in->n -= (size_t)*v;
		return 0;
	default:
		return -1; /* groups are not used by toggle.proto */
	}
}

static int pbw_decode_body(struct pbw_in in, uint32_t body, struct pbw_reply *out)
{
	while (in.n) {
		uint32_t f;
		uint64_t v = 0;
		struct pbw_in sub = {0};
		if (pbw_next(&in, &f, &v, &sub))
			return -1;
		if (body == PBW_ENV_HELLO_REPLY && f == PBW_HELLO_REPLY_PROTOCOL_VERSION)
			out->protocol_version = (uint32_t)v;
		else if (body == PBW_ENV_REGISTER_REPLY && f == PBW_REGISTER_REPLY_AGENT_ID)
			out->agent_id = v;
		else if (body == PBW_ENV_ERROR && f == PBW_ERROR_CODE)
			out->error_code = (int32_t)(int64_t)v;
		else if (body == PBW_ENV_ERROR && f == PBW_ERROR_MESSAGE && sub.p) {
			size_t len = sub.n < sizeof(out->error_message) - 1 ? sub.n
									 : sizeof(out->error_message) - 1;
			memcpy(out->error_message, sub.p, len);
			out->error_message[len] = '\0';
		}
	}
	return 0;
}

int pbw_decode_reply(const uint8_t *p, size_t n, struct pbw_reply *out)
{
	memset(out, 0, sizeof(*out));
	struct pbw_in in = {p, n}, body = {0};
	while (in.n) {
		uint32_t f;
		uint64_t v = 0;
		struct pbw_in sub = {0};
		if (pbw_next(&in, &f, &v, &sub))
			return -1;
		if (f == PBW_ENV_ID)
			out->id = v;
		else if (sub.p && f >= PBW_ENV_HELLO) {
			out->body = f; /* oneof: the last one wins, as in protobuf */
			body = sub;
		}
	}
	if (!out->body)
		return -1;
	return pbw_decode_body(body, out->body, out);
}
