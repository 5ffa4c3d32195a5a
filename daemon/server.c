/*
 * server.c - the listening socket and the peers: accept, SO_PEERCRED,
 * reading frames (with SCM_RIGHTS fds), bounded write queues.
 *
 * Sockets are driven with uv_poll on non-blocking fds rather than uv_pipe,
 * because agents pass a memfd with their registration frame and we want the
 * plain recvmsg semantics for it.  Replies are queued by the dispatcher
 * (through report.h: the layers below reach a peer only through the write
 * queue registered here) and written in the loop's check phase.  A reply to a write holds its place in the queue
 * until its save is done (commit.c): a command is never acknowledged before
 * it is durable, and a peer gets its replies in request order.  A peer whose
 * queue grows over its bound is dropped: a slow or stuck peer never blocks
 * the loop.
 *
 * No uid can lock the others out (issue 11): the peer table has a limit per
 * uid and a reserve that only root, our uid and the operator group may use;
 * a peer must say hello within a deadline, and a client that is not an agent,
 * not watching and not waiting is dropped when idle.  When accept() runs out
 * of fds (EMFILE, ENFILE) a reserve fd is spent to accept and refuse the
 * waiting connections with an error, rather than spinning on a listening
 * socket that stays readable; repeated warnings are rate-limited.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"

#define READ_CHUNK 65536 /* bytes per recvmsg, not a frame limit: tgp_reader bounds frames */
#define MAX_FDS_PER_MSG 4
#define HELD_BYTES 256 /* what a held place counts against the queue bound */
#define FLUSH_IOV  64  /* frames per sendmsg: one wake-up of a pipelining client, not 64 */
/* Per turn: reads of peers whose writes wait for a save, and writes at the
 * turn's end.  A save's replies to many pipelining clients, and their next
 * windows, are spread over turns instead of all in one (issue 17): each
 * such read or write can wake a client and cost several microseconds, and
 * a turn is what a read from another client may have to wait for.  One of
 * each still moves over 100,000 acknowledged sets a second (each read and
 * write carries a window of frames); 4 gave a 15% higher read tail. */
#define BUSY_IO_PER_TURN 1

static void peer_on_io(uv_poll_t *h, int status, int events);
static void queue_remove(struct td_peer *p);
static void flush_remove(struct td_peer *p);
static void td_peer_drop(struct td_peer *p, const char *why);

/* true when a repeated warning may be logged now; *suppressed says how many were not. */
static bool ratelog_ok(struct td_ratelog *r, uint64_t *suppressed)
{
	uint64_t now = util_mono_ms();
	if (now < r->next_ms) {
		r->suppressed++;
		return false;
	}
	*suppressed = r->suppressed;
	r->suppressed = 0;
	r->next_ms = now + TD_LOG_EVERY_MS;
	return true;
}

static void peer_free_cb(uv_handle_t *h)
{
	struct td_peer *p = h->data;
	tgp_reader_free(&p->rd);
	free(p);
}

/*
 * Before a close: write what is queued without waiting, so that an error
 * queued just before the drop (a request before hello) reaches the peer.
 * It stops at a reply that still waits for its save.
 */
static void peer_out_last_words(struct td_peer *p)
{
	for (struct td_out *o = p->out_head; o; o = o->next) {
		if (o->pend)
			return;
		if (!o->data)
			continue;
		ssize_t n;
		do
			n = send(p->fd, o->data + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n < 0 || (size_t)n != o->len - o->off)
			return;
	}
}

static void peer_out_free(struct td_peer *p)
{
	for (struct td_out *o = p->out_head, *n; o; o = n) {
		n = o->next;
		if (o->pend)
			td_pending_detach(o->pend);
		free(o->data);
		free(o);
	}
	p->out_head = p->out_tail = NULL;
	p->out_bytes = 0;
}

static void td_peer_drop(struct td_peer *p, const char *why)
{
	if (p->closing)
		return;
	p->closing = true;
	struct td_daemon *d = p->d;
	if (why)
		log_info("peer %llu (pid %u uid %u) dropped: %s", (unsigned long long)p->id, p->pid,
			 p->uid, why);
	if (p->agent)
		td_agent_gone(p->agent);
	td_record_peer_gone(p);
	/* Waiters of this peer die with it. */
	for (struct td_waiter **w = &d->waiters; *w;) {
		if ((*w)->peer == p) {
			struct td_waiter *dead = *w;
			*w = dead->next;
			td_waiter_free(dead);
		} else {
			w = &(*w)->next;
		}
	}
	if (p->prev)
		p->prev->next = p->next;
	else
		d->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	d->n_peers--;
	if (p->queued != TD_QUEUE_NONE)
		queue_remove(p);
	if (p->flush_queued)
		flush_remove(p);
	peer_out_last_words(p);
	peer_out_free(p);
	if (p->pending_fd >= 0)
		close(p->pending_fd);
	uv_poll_stop(&p->poll);
	close(p->fd);
	uv_close((uv_handle_t *)&p->poll, peer_free_cb);
	td_timer_update(d);
}

/* The peer has a reply ready to write: the turn's end writes it. */
static void flush_add(struct td_peer *p)
{
	if (p->flush_queued || p->closing)
		return;
	p->flush_queued = true;
	p->flush_next = NULL;
	if (p->d->flush_tail)
		p->d->flush_tail->flush_next = p;
	else
		p->d->flush_head = p;
	p->d->flush_tail = p; /* in order: a peer is written within a few turns */
}

static void flush_remove(struct td_peer *p)
{
	struct td_peer *prev = NULL;
	for (struct td_peer **q = &p->d->flush_head; *q; prev = *q, q = &(*q)->flush_next)
		if (*q == p) {
			*q = p->flush_next;
			if (p->d->flush_tail == p)
				p->d->flush_tail = prev;
			break;
		}
	p->flush_queued = false;
	p->flush_next = NULL;
}

/* Queue an encoded frame (taken) behind the peer's other replies. */
static void peer_queue(struct td_peer *p, uint8_t *buf, size_t len)
{
	if (p->closing) {
		free(buf);
		return;
	}
	if (p->out_bytes + len > p->d->cfg.max_queue) {
		free(buf);
		p->d->stats.dropped_peers++;
		td_peer_drop(p, "write queue over its bound (slow or stuck peer)");
		return;
	}
	struct td_out *o = calloc(1, sizeof(*o));
	if (!o) {
		free(buf);
		td_peer_drop(p, "out of memory");
		return;
	}
	o->data = buf;
	o->len = len;
	if (p->out_tail)
		p->out_tail->next = o;
	else
		p->out_head = o;
	p->out_tail = o;
	p->out_bytes += len;
	flush_add(p);
}

static struct td_out *td_peer_hold(struct td_peer *p, struct td_pending *pend)
{
	if (p->closing)
		return NULL;
	if (p->out_bytes + HELD_BYTES > p->d->cfg.max_queue) {
		p->d->stats.dropped_peers++;
		td_peer_drop(p, "write queue over its bound (slow or stuck peer)");
		return NULL;
	}
	struct td_out *o = calloc(1, sizeof(*o));
	if (!o) {
		td_peer_drop(p, "out of memory");
		return NULL;
	}
	o->pend = pend;
	o->len = HELD_BYTES; /* counted until filled */
	p->held++;
	if (p->out_tail)
		p->out_tail->next = o;
	else
		p->out_head = o;
	p->out_tail = o;
	p->out_bytes += HELD_BYTES;
	return o;
}

static void td_peer_fill(struct td_peer *p, struct td_out *slot, uint8_t *data, size_t len)
{
	p->out_bytes -= slot->len;
	p->held--;
	slot->pend = NULL;
	slot->data = data;
	slot->len = data ? len : 0;
	slot->off = 0;
	p->out_bytes += slot->len;
	flush_add(p);
}

/* Write what can be written now; 0, or -1 if the peer was dropped. */
static int peer_flush(struct td_peer *p)
{
	while (p->out_head && !p->out_head->pend) {
		/* Every frame ready, up to the first held place, in one sendmsg. */
		struct iovec iov[FLUSH_IOV];
		int n_iov = 0;
		size_t total = 0;
		for (struct td_out *o = p->out_head; o && !o->pend && n_iov < FLUSH_IOV; o = o->next)
			if (o->off < o->len) {
				iov[n_iov++] = (struct iovec){o->data + o->off, o->len - o->off};
				total += o->len - o->off;
			}
		ssize_t n = 0;
		if (n_iov) {
			struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
			n = sendmsg(p->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (n < 0) {
				td_peer_drop(p, strerror(errno));
				return -1;
			}
		}
		/* Free what went (and held places that got no reply), keep the rest. */
		size_t left = (size_t)n;
		while (p->out_head && !p->out_head->pend) {
			struct td_out *o = p->out_head;
			size_t rem = o->len - o->off;
			if (rem > left) {
				o->off += left;
				p->out_bytes -= left;
				left = 0;
				break;
			}
			left -= rem;
			p->out_bytes -= rem;
			p->out_head = o->next;
			if (!p->out_head)
				p->out_tail = NULL;
			free(o->data);
			free(o);
		}
		if ((size_t)n < total)
			break; /* the socket is full */
	}
	bool want = p->out_head != NULL && !p->out_head->pend;
	if (want != p->want_write) {
		p->want_write = want;
		uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT | (want ? UV_WRITABLE : 0),
			      peer_on_io);
	}
	return 0;
}

/* recvmsg one chunk; fds that came with it are kept (one) or closed. */
static ssize_t peer_recv(struct td_peer *p, uint8_t *buf, size_t len)
{
	union {
		char buf[CMSG_SPACE(MAX_FDS_PER_MSG * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	ssize_t n;
	do
		n = recvmsg(p->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	bool extra = (msg.msg_flags & MSG_CTRUNC) != 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); n >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (p->pending_fd < 0 && i == 0)
				p->pending_fd = fd;
			else {
				close(fd);
				extra = true;
			}
		}
	}
	if (extra) {
		errno = EPROTO;
		return -2;
	}
	return n;
}

/* The body length of the next buffered frame (0 if its header is not there yet). */
static uint32_t reader_frame_len(const struct tgp_reader *rd)
{
	if (tgp_reader_pending(rd) < TGP_FRAME_HEADER)
		return 0;
	const uint8_t *h = rd->buf + rd->off;
	return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
}

/* tgp_reader_next, and the body length of the frame it decodes (*flen). */
static int peer_next_frame(struct td_peer *p, Toggle__Envelope **env, uint32_t *flen)
{
	*flen = reader_frame_len(&p->rd);
	return tgp_reader_next(&p->rd, env);
}

/* Would tgp_reader_next hand out something now: a complete frame, or the stream's error? */
static bool reader_ready(const struct tgp_reader *rd)
{
	size_t pending = tgp_reader_pending(rd);
	return rd->err ||
	       (pending >= TGP_FRAME_HEADER && pending - TGP_FRAME_HEADER >= reader_frame_len(rd));
}

static void queue_push(struct td_peer_queue *q, struct td_peer *p, enum td_peer_queue_id id)
{
	p->queued = id;
	p->queue_next = NULL;
	if (q->tail)
		q->tail->queue_next = p;
	else
		q->head = p;
	q->tail = p;
}

static struct td_peer *queue_pop(struct td_peer_queue *q)
{
	struct td_peer *p = q->head;
	if (!p)
		return NULL;
	q->head = p->queue_next;
	if (!q->head)
		q->tail = NULL;
	p->queued = TD_QUEUE_NONE;
	p->queue_next = NULL;
	return p;
}

static void queue_remove(struct td_peer *p)
{
	struct td_daemon *d = p->d;
	struct td_peer_queue *q = p->queued == TD_QUEUE_FRESH ? &d->fresh : &d->busy;
	struct td_peer *prev = NULL;
	for (struct td_peer *x = q->head; x; prev = x, x = x->queue_next) {
		if (x != p)
			continue;
		if (prev)
			prev->queue_next = p->queue_next;
		else
			q->head = p->queue_next;
		if (q->tail == p)
			q->tail = prev;
		break;
	}
	p->queued = TD_QUEUE_NONE;
	p->queue_next = NULL;
}

/* Every request, timed and counted by method and result for --metrics (the
 * code is the one the dispatcher left in rpc_code). */
static void dispatch_counted(struct td_peer *p, Toggle__Envelope *env)
{
	struct td_daemon *d = p->d;
	uint64_t t0 = d->metrics ? td_mono_ns() : 0;
	td_dispatch(p, env);
	if (d->metrics)
		td_metrics_rpc(d, env, d->rpc_code, td_mono_ns() - t0);
}

/* Handle the peer's next buffered frame (there is one, or the stream's error). */
static void peer_frame(struct td_peer *p)
{
	Toggle__Envelope *env;
	uint32_t flen;
	int got = peer_next_frame(p, &env, &flen);
	if (got < 0) {
		p->d->stats.frames_refused++;
		log_warnx("peer %llu (pid %u): bad frame: %s; closing", (unsigned long long)p->id,
			  p->pid, toggle_strerror(got));
		td_peer_drop(p, NULL);
		return;
	}
	if (got == 0)
		return;
	p->active_ms = util_mono_ms();
	/* protobuf-c keeps a string's bytes past a NUL, but C reads it up to the
	 * NUL: "a\0/../x" would act as "a".  Such a frame re-packs shorter. */
	if (toggle__envelope__get_packed_size(env) != flen) {
		p->d->stats.frames_refused++;
		td_dispatch_error(p, env->id, TOGGLE_EINVAL,
				  "request refused: a string holds a NUL byte, or a field is "
				  "repeated or not canonically encoded", NULL, NULL, 0);
	} else {
		dispatch_counted(p, env);
	}
	toggle__envelope__free_unpacked(env, NULL);
	/* An fd belongs to the frame it came with (a stream read never spans
	 * an SCM_RIGHTS boundary): one its frame did not claim is closed. */
	if (p->pending_fd >= 0 && !p->closing) {
		close(p->pending_fd);
		p->pending_fd = -1;
	}
}

/*
 * The turn's frames: at most frames_per_turn, one per peer at a time.  A
 * peer with nothing in flight (fresh: a request/reply client) is served as
 * soon as its frame is read in the poll phase, for up to half the turn's
 * frames (rounded up; then it joins the fresh queue).  The check phase
 * spends what is left, at least one frame, alternating between the fresh
 * queue (arrival order) and busy peers (round robin): those with frames
 * left from an earlier pick, or writes still waiting for their save.  A
 * client that pipelines thousands of requests gets one frame handled per
 * pick like everyone else; a request from a client with nothing else in
 * flight waits for at most the rest of the turn it arrived in (and one
 * busy frame when fresh frames are many): a bounded amount of work,
 * whatever the load.  The busy peers' share keeps them from starving
 * behind a stream of fresh ones.
 */
static void serve_frame(struct td_daemon *d, struct td_peer *p, bool fresh)
{
	peer_frame(p);
	if (p->closing)
		return;
	/* A client with nothing else in flight waits for this reply:
	 * it goes now, not after the rest of the turn. */
	if (fresh && p->out_head && !p->out_head->pend && !p->want_write && peer_flush(p) != 0)
		return;
	if (reader_ready(&p->rd))
		queue_push(&d->busy, p, TD_QUEUE_BUSY);
}

/* Fresh frames the poll phase may handle: half the turn's, rounded up (so
 * a turn of 1 frame can handle 2: one fresh as read, one busy). */
static unsigned fresh_budget(const struct td_daemon *d)
{
	return (d->cfg.frames_per_turn + 1) / 2;
}

static void serve_turn(struct td_daemon *d)
{
	unsigned budget = d->cfg.frames_per_turn;
	budget = d->fresh_served < budget ? budget - d->fresh_served : 1;
	for (; budget > 0; budget--) {
		bool fresh = d->fresh.head && (!d->busy.head || !d->last_fresh);
		struct td_peer *p = queue_pop(fresh ? &d->fresh : &d->busy);
		if (!p)
			return;
		d->last_fresh = fresh;
		serve_frame(d, p, fresh);
	}
}

/* Idle phase: nothing to do; being active keeps poll from blocking while work is left. */
static void on_turn_idle(uv_idle_t *h)
{
	(void)h;
}

/* Check phase: one turn (see struct td_daemon), then write replies. */
static void on_check(uv_check_t *h)
{
	struct td_daemon *d = h->data;
	serve_turn(d);
	td_commit_kick(d);
	bool more = td_commit_step(d);
	for (int n = 0; n < BUSY_IO_PER_TURN && d->flush_head; n++) {
		struct td_peer *p = d->flush_head;
		d->flush_head = p->flush_next;
		if (!d->flush_head)
			d->flush_tail = NULL;
		p->flush_queued = false;
		p->flush_next = NULL;
		if (p->out_head && !p->out_head->pend && !p->want_write)
			peer_flush(p);
	}
	d->busy_reads = 0;
	d->fresh_served = 0;
	if (more || d->fresh.head || d->busy.head || d->flush_head)
		uv_idle_start(&d->turn_idle, on_turn_idle);
	else
		uv_idle_stop(&d->turn_idle);
}

static void peer_read(struct td_peer *p)
{
	/* Buffered frames first (and a passed fd must stay with its frame). */
	if (p->queued != TD_QUEUE_NONE)
		return;
	/* Its bytes wait in the socket, and poll reports it again next turn. */
	if (p->held && p->d->busy_reads >= BUSY_IO_PER_TURN)
		return;
	if (p->held)
		p->d->busy_reads++;
	uint8_t buf[READ_CHUNK];
	size_t room = tgp_reader_room(&p->rd);
	ssize_t n = peer_recv(p, buf, room < sizeof(buf) ? room : sizeof(buf));
	if (n == -2) {
		td_peer_drop(p, "more than one file descriptor passed");
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			td_peer_drop(p, strerror(errno));
		return;
	}
	if (n == 0) {
		td_peer_drop(p, p->agent ? "agent disconnected" : NULL);
		return;
	}
	/* A bad header is a sticky error that tgp_reader_next reports after the
	 * frames before it; an error that is not (no memory) loses these bytes. */
	int rc = tgp_reader_feed(&p->rd, buf, (size_t)n);
	if (rc && rc != TOGGLE_EBUSY && !p->rd.err) {
		p->d->stats.frames_refused++;
		log_warnx("peer %llu (pid %u): cannot buffer its frames: %s; closing",
			  (unsigned long long)p->id, p->pid, toggle_strerror(rc));
		td_peer_drop(p, NULL);
		return;
	}
	if (!reader_ready(&p->rd))
		return;
	/* A client with nothing in flight is answered as soon as its request is
	 * read, ahead of the busy peers' reads still to come in this poll phase
	 * (up to half the turn's frames; then the fresh queue). */
	struct td_daemon *d = p->d;
	if (!p->held && d->fresh_served < fresh_budget(d)) {
		d->fresh_served++;
		serve_frame(d, p, true);
		return;
	}
	/* Handled in this loop turn's check phase (serve_turn). */
	if (p->held)
		queue_push(&d->busy, p, TD_QUEUE_BUSY);
	else
		queue_push(&d->fresh, p, TD_QUEUE_FRESH);
}

static void peer_on_io(uv_poll_t *h, int status, int events)
{
	struct td_peer *p = h->data;
	if (status < 0) {
		td_peer_drop(p, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE) {
		p->want_write = true; /* flush recomputes it */
		if (peer_flush(p) != 0)
			return;
	}
	if (events & (UV_READABLE | UV_DISCONNECT))
		peer_read(p);
}

/* Tell a connection we will not serve why (best effort: its buffer is empty), then close it. */
static void refuse_fd(int fd, int code, const char *msg)
{
	uint8_t *buf;
	size_t len;
	if (td_error_frame(0, code, msg, NULL, NULL, 0, &buf, &len) == 0) {
		ssize_t n;
		do
			n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		free(buf);
	}
	close(fd);
}

static unsigned peers_of_uid(const struct td_daemon *d, uint32_t uid)
{
	unsigned n = 0;
	for (const struct td_peer *p = d->peers; p; p = p->next)
		n += p->uid == uid;
	return n;
}

/*
 * May a new peer of this uid take a slot?  NULL if so, else why not.  The
 * last reserved_peers slots are for peers that may write (root, our uid, the
 * operator group); root and our uid are not counted per uid.
 */
static const char *peer_admit(const struct td_daemon *d, uint32_t uid, bool may_write,
			      char *why, size_t len)
{
	const struct td_config *c = &d->cfg;
	unsigned open_slots = c->max_peers > c->reserved_peers ? c->max_peers - c->reserved_peers : 0;
	if (d->n_peers >= c->max_peers) {
		snprintf(why, len, "toggled serves %u connections already (max_peers)", c->max_peers);
		return why;
	}
	if (!may_write && d->n_peers >= open_slots) {
		snprintf(why, len, "the last %u of %u connections are reserved for root and the "
			 "operator group '%s'", c->reserved_peers, c->max_peers, c->operator_group);
		return why;
	}
	if (uid != 0 && (uid_t)uid != geteuid() && c->max_peers_per_uid &&
	    peers_of_uid(d, uid) >= c->max_peers_per_uid) {
		snprintf(why, len, "uid %u has %u connections open already (max_peers_per_uid)", uid,
			 c->max_peers_per_uid);
		return why;
	}
	return NULL;
}

static void peer_add(struct td_daemon *d, int fd)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
		log_warn("SO_PEERCRED");
		close(fd);
		return;
	}
	bool may_write = td_auth_may_write(d, cred.uid, cred.gid, (uint32_t)cred.pid);
	char why[192];
	if (peer_admit(d, cred.uid, may_write, why, sizeof(why))) {
		uint64_t more;
		d->stats.refused_peers++;
		if (ratelog_ok(&d->log_refused, &more))
			log_warnx("refusing pid %d uid %u: %s (%llu more refused since the last such line)",
				  cred.pid, cred.uid, why, (unsigned long long)more);
		refuse_fd(fd, TOGGLE_ELIMIT, why);
		return;
	}
	struct td_peer *p = calloc(1, sizeof(*p));
	if (!p) {
		close(fd);
		return;
	}
	p->d = d;
	p->fd = fd;
	p->id = ++d->next_peer_id;
	p->pid = (uint32_t)cred.pid;
	p->uid = cred.uid;
	p->gid = cred.gid;
	p->pending_fd = -1;
	p->may_write = may_write;
	p->connected_ms = p->active_ms = util_mono_ms();
	tgp_reader_init(&p->rd);
	if (uv_poll_init(d->loop, &p->poll, fd) != 0) {
		close(fd);
		free(p);
		return;
	}
	p->poll.data = p;
	uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT, peer_on_io);
	p->next = d->peers;
	if (d->peers)
		d->peers->prev = p;
	d->peers = p;
	d->n_peers++;
	log_debug("peer %llu connected: pid %u uid %u%s", (unsigned long long)p->id, p->pid, p->uid,
		  p->may_write ? " (may write)" : " (read-only)");
}

static bool peer_waits(const struct td_peer *p)
{
	for (const struct td_waiter *w = p->d->waiters; w; w = w->next)
		if (w->peer == p)
			return true;
	return false;
}

/* Hello deadlines and idle timeouts. */
static void on_peer_timer(uv_timer_t *t)
{
	struct td_daemon *d = t->data;
	const struct td_config *c = &d->cfg;
	uint64_t now = util_mono_ms();
	for (struct td_peer *p = d->peers, *next; p; p = next) {
		next = p->next;
		const char *why = NULL;
		if (!p->said_hello && c->hello_timeout_ms && now - p->connected_ms >= c->hello_timeout_ms)
			why = "no hello within hello_timeout_ms";
		else if (p->said_hello && c->idle_timeout_ms && !p->agent && !p->watching && !p->recording &&
			 now - p->active_ms >= c->idle_timeout_ms && !peer_waits(p))
			why = "idle for idle_timeout_ms";
		if (why) {
			d->stats.timed_out_peers++;
			td_peer_drop(p, why);
		}
	}
}

/* Sweep often enough for the shorter timeout to be kept within about a quarter of it. */
static void peer_timer_start(struct td_daemon *d)
{
	unsigned h = d->cfg.hello_timeout_ms, i = d->cfg.idle_timeout_ms;
	unsigned shortest = h && (!i || h < i) ? h : i;
	if (!shortest) {
		uv_timer_stop(&d->peer_timer);
		return;
	}
	uint64_t every = shortest / 4;
	every = every < 20 ? 20 : every > 1000 ? 1000 : every;
	uv_timer_start(&d->peer_timer, on_peer_timer, every, every);
}

static int reserve_open(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_listen(uv_poll_t *h, int status, int events);

static void on_listen_resume(uv_timer_t *t)
{
	struct td_daemon *d = t->data;
	if (d->reserve_fd < 0)
		d->reserve_fd = reserve_open();
	d->listen_paused = false;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_listen);
}

/*
 * accept() said EMFILE or ENFILE: the connection stays queued and the socket
 * stays readable, so retrying would spin.  Spend the reserve fd to accept the
 * waiting connections one at a time and refuse them with an error, then take
 * the reserve back.  Without a reserve (it could not be taken back), stop
 * accepting for a while.
 */
static void listen_out_of_fds(struct td_daemon *d, int err)
{
	uint64_t more;
	d->stats.accept_errors++;
	if (ratelog_ok(&d->log_accept, &more))
		log_warnx("accept: %s: refusing new connections until fds are free (%llu more since "
			  "the last such line; raise LimitNOFILE or ulimit -n)", strerror(err),
			  (unsigned long long)more);
	if (d->reserve_fd >= 0) {
		close(d->reserve_fd);
		d->reserve_fd = -1;
		for (int i = 0; i < 64; i++) {
			int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0)
				break;
			d->stats.refused_peers++;
			refuse_fd(fd, TOGGLE_ELIMIT, "toggled is out of file descriptors; try again later");
		}
		d->reserve_fd = reserve_open();
	}
	if (d->reserve_fd < 0 && !d->listen_paused) {
		d->listen_paused = true;
		uv_poll_stop(&d->listen_poll);
		uv_timer_start(&d->listen_timer, on_listen_resume, 200, 0);
	}
}

static void on_listen(uv_poll_t *h, int status, int events)
{
	struct td_daemon *d = h->data;
	(void)events;
	if (status < 0)
		return;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			if (e == EAGAIN || e == EWOULDBLOCK)
				return;
			if (e == EINTR || e == ECONNABORTED)
				continue;
			if (e == EMFILE || e == ENFILE) {
				listen_out_of_fds(d, e);
				return;
			}
			uint64_t more;
			d->stats.accept_errors++;
			if (ratelog_ok(&d->log_accept, &more))
				log_warnx("accept: %s (%llu more since the last such line)", strerror(e),
					  (unsigned long long)more);
			return;
		}
		peer_add(d, fd);
	}
}

/* A live daemon answers a connect; a stale socket file refuses it. */
static int socket_is_live(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return live;
}

static int listen_bind(struct td_daemon *d)
{
	const char *path = d->cfg.socket_path;
	char dir[sizeof(d->cfg.socket_path)], err[512];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	/* Our own directory (a sticky one like /tmp too: nobody else can rename in it). */
	if (td_path_mkdirs(dir, 0755, err, sizeof(err)) != 0 ||
	    td_path_dir_trusted(dir, true, err, sizeof(err)) != 0) {
		log_warnx("socket directory: %s", err);
		return -1;
	}
	if (socket_is_live(path)) {
		log_warnx("a daemon is already listening on %s; not starting", path);
		return -1;
	}
	/* Only a socket nobody listens on is ours to remove (issue 11 item 10). */
	struct stat sb;
	if (lstat(path, &sb) == 0) {
		if (!S_ISSOCK(sb.st_mode)) {
			log_warnx("%s exists and is not a socket; not removing it (choose another "
				  "--socket, or remove it if it is yours)", path);
			return -1;
		}
		if (unlink(path) != 0) {
			log_warn("removing the stale socket %s", path);
			return -1;
		}
		log_info("replaced a stale socket at %s", path);
	} else if (errno != ENOENT) {
		log_warn("%s", path);
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_warn("socket");
		return -1;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0 ||
	    chmod(path, d->cfg.socket_mode) != 0) {
		log_warn("listening on %s", path);
		close(fd);
		return -1;
	}
	d->socket_owned = true;
	return fd;
}

/* The lower layers' way to a peer (report.h): these write queues. */
static const struct td_report_io server_io = {
	.frame = peer_queue,
	.hold = td_peer_hold,
	.fill = td_peer_fill,
	.drop = td_peer_drop,
};

int td_server_listen(struct td_daemon *d, int activated_fd)
{
	td_report_io(d, &server_io);
	if (activated_fd >= 0) {
		d->listen_fd = activated_fd;
		int fl = fcntl(activated_fd, F_GETFL);
		if (fl < 0 || fcntl(activated_fd, F_SETFL, fl | O_NONBLOCK) != 0)
			return -1;
	} else if ((d->listen_fd = listen_bind(d)) < 0) {
		return -1;
	}
	d->reserve_fd = reserve_open();
	if (d->reserve_fd < 0) {
		log_warn("opening the reserve fd (/dev/null)");
		return -1;
	}
	if (uv_poll_init(d->loop, &d->listen_poll, d->listen_fd) != 0 ||
	    uv_timer_init(d->loop, &d->listen_timer) != 0 ||
	    uv_timer_init(d->loop, &d->peer_timer) != 0 ||
	    uv_check_init(d->loop, &d->turn_check) != 0 ||
	    uv_idle_init(d->loop, &d->turn_idle) != 0) {
		log_warnx("cannot set up the listener's loop handles");
		return -1;
	}
	d->listen_poll.data = d;
	d->listen_timer.data = d;
	d->peer_timer.data = d;
	d->turn_check.data = d;
	d->turn_idle.data = d;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_listen);
	uv_check_start(&d->turn_check, on_check);
	peer_timer_start(d);
	return 0;
}

void td_server_reconfigure(struct td_daemon *d)
{
	peer_timer_start(d);
}

void td_server_close(struct td_daemon *d)
{
	while (d->peers)
		td_peer_drop(d->peers, NULL);
	if (d->listen_fd >= 0) {
		uv_poll_stop(&d->listen_poll);
		uv_close((uv_handle_t *)&d->listen_poll, NULL);
		close(d->listen_fd);
		d->listen_fd = -1;
	}
	uv_timer_stop(&d->listen_timer);
	uv_close((uv_handle_t *)&d->listen_timer, NULL);
	uv_timer_stop(&d->peer_timer);
	uv_close((uv_handle_t *)&d->peer_timer, NULL);
	if (d->reserve_fd >= 0)
		close(d->reserve_fd);
	d->reserve_fd = -1;
	uv_check_stop(&d->turn_check);
	uv_close((uv_handle_t *)&d->turn_check, NULL);
	uv_idle_stop(&d->turn_idle);
	uv_close((uv_handle_t *)&d->turn_idle, NULL);
	if (d->socket_owned)
		unlink(d->cfg.socket_path);
}
