/*
 * tgclient.h - the blocking C client of toggled, for togglectl, the tests
 * and integrators: connect and say hello, call (one request, its reply),
 * collect events.  Messages are the protobuf-c types of proto/graphtoggle/v1/toggle.proto;
 * errors are the negative TOGGLE_E* codes of toggle_error.h, with a human
 * message in the caller's err buffer.  A struct tgc is used by one thread
 * at a time.
 *
 * Timeouts are in milliseconds: a negative one waits forever, 0 does not
 * wait at all.
 */
#ifndef TGCLIENT_H
#define TGCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/toggle.pb-c.h"
#include "toggle_proto.h"

/* Events kept while a call waits for its reply; the oldest are dropped. */
#define TGC_EVENT_QUEUE 1024

struct tgc;

/*
 * Connect to the daemon at path (NULL: tgp_default_socket_path) and say
 * Hello.  Before sending anything it checks who listens there (SO_PEERCRED:
 * root, our effective uid or a uid in TOGGLE_DAEMON_UID; peer_trust.h).
 * Returns 0 with *out, or: TOGGLE_ECONNECT (err names the path, the reason
 * and a hint; also for a listener run by an untrusted uid), TOGGLE_EVERSION (err is the daemon's message),
 * TOGGLE_ETIMEDOUT, TOGGLE_EIO (the daemon closed the connection), another
 * code the daemon answered, TOGGLE_EPROTO, TOGGLE_ENOMEM.  *out is NULL on
 * error.  err may be NULL.
 */
int tgc_connect(const char *path, int timeout_ms, struct tgc **out, char *err, size_t errlen);

/* What the daemon said in its HelloReply. */
bool tgc_may_write(const struct tgc *c);
const char *tgc_daemon_version(const struct tgc *c);

/*
 * Send req (its id is set to the next request id; the caller keeps owning
 * req) and wait for the reply with that id.  Events arriving meanwhile are
 * queued for tgc_next_event.  Returns 0 with *reply, or a negative code: the
 * daemon's Error code (unknown codes become TOGGLE_EPROTO) with err = its
 * message and the agents it names, and *reply still set to the envelope
 * when reply is not NULL; TOGGLE_ETIMEDOUT (the connection stays usable, a
 * late reply is skipped); TOGGLE_EIO (closed or failed: the connection is
 * dead from then on); TOGGLE_EPROTO (the daemon sent a malformed frame);
 * TOGGLE_EINVAL, TOGGLE_ELIMIT (req too large), TOGGLE_ENOMEM.  Free *reply
 * with toggle__envelope__free_unpacked(*reply, NULL).
 */
int tgc_call(struct tgc *c, Toggle__Envelope *req, Toggle__Envelope **reply,
	     int timeout_ms, char *err, size_t errlen);

/*
 * The next event (queued first, then from the socket): 1 with *event (free
 * as above), 0 on timeout, negative when the connection failed or closed.
 * After poll() says tgc_fd() is readable, call it with timeout 0 until it
 * returns 0: frames may already be buffered.
 */
int tgc_next_event(struct tgc *c, Toggle__Envelope **event, int timeout_ms);

/* Events dropped because the queue was full. */
uint64_t tgc_events_dropped(const struct tgc *c);

/*
 * The next envelope from the socket whatever it is (queued events are not
 * looked at): 1 with *env, 0 on timeout, negative on error.  For tests that
 * check what the daemon answers to tgc_send_raw.
 */
int tgc_recv(struct tgc *c, Toggle__Envelope **env, int timeout_ms);

/*
 * Write raw bytes (garbage, oversize headers) for tests, waiting at most
 * TGC_RAW_TIMEOUT_MS: 0, TOGGLE_EIO or TOGGLE_ETIMEDOUT.
 */
#define TGC_RAW_TIMEOUT_MS 10000
int tgc_send_raw(struct tgc *c, const void *buf, size_t len);

/* The socket (non-blocking), for poll(); it stays open until tgc_close. */
int tgc_fd(const struct tgc *c);

/* Close and free; NULL is fine. */
void tgc_close(struct tgc *c);

#endif /* TGCLIENT_H */
