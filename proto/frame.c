/*
 * frame.c - length-prefixed protobuf-c frames: the encoder, the incremental
 * stream reader (bounded memory, oversize frames refused from their header)
 * and the default socket path.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "toggle_frame.h"

/* A reader that held a big frame gives the memory back once drained. */
#define READER_KEEP  (64u * 1024u)
#define READER_MIN   4096u

int tgp_frame_encode(const Toggle__Envelope *env, uint8_t **buf, size_t *len)
{
	if (!env || !buf || !len || env->body_case == TOGGLE__ENVELOPE__BODY__NOT_SET)
		return TOGGLE_EINVAL;
	/* A malformed message (a count without its array) would only surface at the peer. */
	if (!protobuf_c_message_check(&env->base))
		return TOGGLE_EINVAL;
	size_t body = toggle__envelope__get_packed_size(env);
	int rc = tgp_frame_len_check(body); /* never 0: the body's key is a byte at least */
	if (rc)
		return rc;
	uint8_t *p = malloc(TGP_FRAME_HEADER + body);
	if (!p)
		return TOGGLE_ENOMEM;
	tgp_frame_header_put(p, (uint32_t)body);
	if (toggle__envelope__pack(env, p + TGP_FRAME_HEADER) != body) {
		free(p);
		return TOGGLE_EINVAL;
	}
	*buf = p;
	*len = TGP_FRAME_HEADER + body;
	return 0;
}

/* ---- reader ------------------------------------------------------------- */

void tgp_reader_init(struct tgp_reader *r)
{
	memset(r, 0, sizeof(*r));
}

void tgp_reader_free(struct tgp_reader *r)
{
	free(r->buf);
	memset(r, 0, sizeof(*r));
}

size_t tgp_reader_pending(const struct tgp_reader *r)
{
	return r->len - r->off;
}

size_t tgp_reader_room(const struct tgp_reader *r)
{
	return r->err ? 0 : TGP_READER_MAX - tgp_reader_pending(r);
}

/*
 * Move the unconsumed bytes to the front; returns by how much they moved.
 * Only done when an append would not fit, so a peer trickling one byte at a
 * time does not make us move a large partial frame on every byte.
 */
static size_t reader_compact(struct tgp_reader *r)
{
	size_t shift = r->off;
	if (shift == 0)
		return 0;
	size_t pending = tgp_reader_pending(r);
	if (pending)
		memmove(r->buf, r->buf + shift, pending);
	r->scan -= shift;
	r->len = pending;
	r->off = 0;
	return shift;
}

/* Make room for len + n bytes; the caller has checked that against the bound. */
static int reader_reserve(struct tgp_reader *r, size_t n)
{
	size_t need = r->len + n;
	if (need <= r->cap)
		return 0;
	size_t cap = r->cap ? r->cap * 2 : READER_MIN;
	if (cap > TGP_READER_MAX)
		cap = TGP_READER_MAX;
	if (cap < need)
		cap = need;
	uint8_t *p = realloc(r->buf, cap);
	if (!p)
		return TOGGLE_ENOMEM;
	r->buf = p;
	r->cap = cap;
	return 0;
}

/* Byte i of the stream made of the buffered bytes followed by data. */
static uint8_t stream_byte(const struct tgp_reader *r, const uint8_t *data, size_t i)
{
	return i < r->len ? r->buf[i] : data[i - r->len];
}

/*
 * Walk the frame headers that become complete once data is appended,
 * starting at *scan.  Returns 0, or the error of the first bad header with
 * *scan left at that header.
 */
static int check_headers(const struct tgp_reader *r, const uint8_t *data, size_t n,
			 size_t *scan)
{
	size_t end = r->len + n;
	while (end >= TGP_FRAME_HEADER && *scan <= end - TGP_FRAME_HEADER) {
		uint8_t h[TGP_FRAME_HEADER];
		for (size_t i = 0; i < TGP_FRAME_HEADER; i++)
			h[i] = stream_byte(r, data, *scan + i);
		uint32_t flen = tgp_frame_header_get(h);
		int rc = tgp_frame_len_check(flen);
		if (rc)
			return rc;
		*scan += TGP_FRAME_HEADER + flen;
	}
	return 0;
}

int tgp_reader_feed(struct tgp_reader *r, const uint8_t *data, size_t n)
{
	if (r->err)
		return r->err;
	if (n == 0)
		return 0;
	if (!data)
		return TOGGLE_EINVAL;
	size_t scan = r->scan;
	int bad = check_headers(r, data, n, &scan);
	size_t take = n;
	if (bad) {
		/* Keep only what precedes the bad header: the frames before it are
		 * still good, the rest is never buffered. */
		take = scan > r->len ? scan - r->len : 0;
		if (take > n)
			take = n;
		if (take > tgp_reader_room(r))
			take = 0;
	} else if (n > tgp_reader_room(r)) {
		return TOGGLE_EBUSY;
	}
	if (r->len + take > r->cap)
		scan -= reader_compact(r);
	int rc = reader_reserve(r, take);
	if (rc)
		return rc;
	if (take)
		memcpy(r->buf + r->len, data, take);
	r->len += take;
	r->scan = scan;
	r->err = bad;
	return bad;
}

/* Drop everything buffered: used once the stream is known bad. */
static void reader_discard(struct tgp_reader *r)
{
	r->off = r->len = r->scan = 0;
}

/* After a frame is consumed: give back a big buffer that is now empty. */
static void reader_after_frame(struct tgp_reader *r)
{
	if (r->off != r->len)
		return;
	r->scan -= r->off;
	r->off = r->len = 0;
	if (r->cap > READER_KEEP) {
		free(r->buf);
		r->buf = NULL;
		r->cap = 0;
	}
}

int tgp_reader_next(struct tgp_reader *r, Toggle__Envelope **out)
{
	if (!out)
		return TOGGLE_EINVAL;
	size_t pending = tgp_reader_pending(r);
	if (pending < TGP_FRAME_HEADER)
		return r->err;
	uint32_t flen = tgp_frame_header_get(r->buf + r->off);
	/* Already checked by feed; re-checked because it decides a memory read. */
	int bad = tgp_frame_len_check(flen);
	if (bad) {
		reader_discard(r);
		return r->err = bad;
	}
	if (pending - TGP_FRAME_HEADER < flen)
		return r->err;
	Toggle__Envelope *env =
		toggle__envelope__unpack(NULL, flen, r->buf + r->off + TGP_FRAME_HEADER);
	/* No body at all is malformed; a body this schema lacks arrives as an
	 * unknown field (a newer peer) and is the caller's to answer. */
	if (!env || (env->body_case == TOGGLE__ENVELOPE__BODY__NOT_SET &&
		     env->base.n_unknown_fields == 0)) {
		if (env)
			toggle__envelope__free_unpacked(env, NULL);
		reader_discard(r);
		return r->err = TOGGLE_EPROTO;
	}
	r->off += TGP_FRAME_HEADER + flen;
	reader_after_frame(r);
	*out = env;
	return 1;
}

/* ---- socket path -------------------------------------------------------- */

/* snprintf into buf; NULL when it did not fit. */
static const char *path_fmt(char *buf, size_t len, const char *a, const char *b)
{
	int n = snprintf(buf, len, "%s%s", a, b);
	return n < 0 || (size_t)n >= len ? NULL : buf;
}

const char *tgp_default_socket_path(char *buf, size_t len)
{
	if (!buf || len == 0)
		return NULL;
	const char *env = getenv("TOGGLE_SOCKET");
	if (env && *env)
		return path_fmt(buf, len, env, "");
	uid_t uid = geteuid();
	if (uid == 0)
		return path_fmt(buf, len, "/run/toggle/toggled.sock", "");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && *xdg)
		return path_fmt(buf, len, xdg, "/toggle/toggled.sock");
	int n = snprintf(buf, len, "/tmp/toggle-%lu/toggled.sock", (unsigned long)uid);
	return n < 0 || (size_t)n >= len ? NULL : buf;
}

int tgp_unix_address(const char *path, struct sockaddr_un *sa, socklen_t *salen)
{
	if (!path || !sa || !salen)
		return TOGGLE_EINVAL;
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof(sa->sun_path))
		return TOGGLE_EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, n + 1);
	*salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	return 0;
}
