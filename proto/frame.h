/*
 * frame.h - the framing layer of the wire protocol: a 4-byte length in
 * network byte order, then one packed toggle.Envelope (proto/graphtoggle/v1/toggle.proto).
 * Shared by toggled, the client library and libtoggle's agent connection.
 * Every byte a reader is fed is treated as untrusted.
 */
#ifndef TGP_FRAME_H
#define TGP_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "proto/toggle.pb-c.h"
#include "toggle_proto.h"

/* Most bytes a reader ever buffers: one whole frame of the largest size. */
#define TGP_READER_MAX (TGP_FRAME_HEADER + TGP_MAX_FRAME)

/*
 * Pack env into a new buffer (header + envelope); *buf is freed with free().
 * Returns 0, TOGGLE_EINVAL (NULL argument, no body set, a required field
 * missing), TOGGLE_ELIMIT (packed envelope over TGP_MAX_FRAME) or
 * TOGGLE_ENOMEM.  On error *buf and *len are left untouched.
 */
int tgp_frame_encode(const Toggle__Envelope *env, uint8_t **buf, size_t *len);

/*
 * Incremental decoder of a byte stream.  Embed it, tgp_reader_init() it,
 * then alternate tgp_reader_feed() with tgp_reader_next() until next
 * returns 0.  The fields are for the implementation (tests read cap).
 */
struct tgp_reader {
	uint8_t *buf;
	size_t cap;  /* allocated bytes, never over TGP_READER_MAX */
	size_t off;  /* first byte not consumed by next() */
	size_t len;  /* end of the buffered bytes */
	size_t scan; /* where the next frame header not yet checked starts */
	int err;     /* sticky error (0 while the stream is healthy) */
};

void tgp_reader_init(struct tgp_reader *r);
void tgp_reader_free(struct tgp_reader *r);

/*
 * Append n bytes.  Frame headers are checked as they arrive, so a length
 * over TGP_MAX_FRAME (TOGGLE_ELIMIT) or of zero (TOGGLE_EPROTO) is caught
 * from its 4 header bytes, before its body is buffered; bytes after a bad
 * header are dropped.  Returns 0, the sticky error once the stream is bad
 * (complete frames before the bad header are still handed out by next),
 * TOGGLE_EBUSY when the buffered bytes would exceed TGP_READER_MAX (nothing
 * is appended; drain with next and feed again: read at most
 * tgp_reader_room() bytes to never see it), or TOGGLE_ENOMEM/EINVAL.
 */
int tgp_reader_feed(struct tgp_reader *r, const uint8_t *data, size_t n);

/*
 * Decode the next complete frame: 1 with *out (free it with
 * toggle__envelope__free_unpacked(*out, NULL)), 0 when more bytes are
 * needed, or the negative sticky error: TOGGLE_ELIMIT (announced length too
 * big), TOGGLE_EPROTO (zero length, a body protobuf-c cannot unpack, an
 * envelope with no body).  After an error the caller closes the connection.
 * An envelope whose body is unknown to this schema (a newer peer's) comes
 * out with body_case NOT_SET and base.n_unknown_fields > 0.
 */
int tgp_reader_next(struct tgp_reader *r, Toggle__Envelope **out);

/* How many bytes tgp_reader_feed accepts now (at least 1 after next returned 0). */
size_t tgp_reader_room(const struct tgp_reader *r);

/* Bytes buffered and not yet handed out as envelopes. */
size_t tgp_reader_pending(const struct tgp_reader *r);

/*
 * The socket path when none is given: $TOGGLE_SOCKET if set and not empty;
 * else /run/toggle/toggled.sock for euid 0; else
 * $XDG_RUNTIME_DIR/toggle/toggled.sock; else /tmp/toggle-<euid>/toggled.sock.
 * Returns buf, or NULL when the path does not fit in len bytes.
 */
const char *tgp_default_socket_path(char *buf, size_t len);

/*
 * Fill a sockaddr_un for path.  Returns 0, or TOGGLE_EINVAL for an empty
 * path or one too long for sun_path (Linux silently truncates those).
 */
int tgp_unix_address(const char *path, struct sockaddr_un *sa, socklen_t *salen);

#endif /* TGP_FRAME_H */
