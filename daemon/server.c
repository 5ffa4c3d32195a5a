/*
 * server.c - the listening socket and the peers: accept, SO_PEERCRED,
 * reading frames (with SCM_RIGHTS fds), bounded write queues.
 *
 * Sockets are driven with uv_poll on non-blocking fds rather than uv_pipe,
 * because agents pass a memfd with their registration frame and we want the
 * plain recvmsg semantics for it.  Replies are queued by handlers and written
 * in the loop's check phase, after the desired state was saved: a command is
 * never acknowledged before it is durable.  A peer whose queue grows over
 * its bound is dropped: a slow or stuck peer never blocks the loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"

#define READ_CHUNK 65536
#define MAX_FDS_PER_MSG 4

static void peer_on_io(uv_poll_t *h, int status, int events);

static void peer_free_cb(uv_handle_t *h)
{
	struct td_peer *p = h->data;
	tgp_reader_free(&p->rd);
	free(p);
}

/*
 * Before a close: write what is queued without waiting, so that an error
 * queued just before the drop (a request before hello) reaches the peer.
 */
static void peer_out_last_words(struct td_peer *p)
{
	struct td_daemon *d = p->d;
	if (!p->out_head)
		return;
	/* Acknowledgements never leave before the state they acknowledge is saved. */
	if (d->store.dirty && td_store_save(&d->store, d->cfg.state_dir) != 0)
		log_warn("saving the desired state under %s", d->cfg.state_dir);
	for (struct td_out *o = p->out_head; o; o = o->next) {
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
		free(o->data);
		free(o);
	}
	p->out_head = p->out_tail = NULL;
	p->out_bytes = 0;
}

void td_peer_drop(struct td_peer *p, const char *why)
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
	peer_out_last_words(p);
	peer_out_free(p);
	if (p->pending_fd >= 0)
		close(p->pending_fd);
	uv_poll_stop(&p->poll);
	close(p->fd);
	uv_close((uv_handle_t *)&p->poll, peer_free_cb);
	td_timer_update(d);
}

void td_peer_send(struct td_peer *p, const Toggle__Envelope *env)
{
	if (p->closing)
		return;
	uint8_t *buf;
	size_t len;
	int rc = tgp_frame_encode(env, &buf, &len);
	if (rc) {
		log_warnx("cannot encode a reply for peer %llu: %s", (unsigned long long)p->id,
			  toggle_strerror(rc));
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
}

void td_peer_send_error(struct td_peer *p, uint64_t id, int code, const char *msg,
			const char *const *agents, size_t n_agents)
{
	td_peer_send_error_ids(p, id, code, msg, agents, NULL, n_agents);
}

void td_peer_send_error_ids(struct td_peer *p, uint64_t id, int code, const char *msg,
			    const char *const *agents, const uint64_t *ids, size_t n_agents)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__Error err = TOGGLE__ERROR__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = &err;
	err.code = code;
	err.message = (char *)(uintptr_t)msg;
	err.n_agents = n_agents;
	err.agents = (char **)(uintptr_t)agents;
	err.n_agent_ids = ids ? n_agents : 0;
	err.agent_ids = (uint64_t *)(uintptr_t)ids;
	p->d->stats.errors++;
	p->d->rpc_code = code; /* for --metrics */
	td_peer_send(p, &env);
}

/* Write what can be written now; 0, or -1 if the peer was dropped. */
static int peer_flush(struct td_peer *p)
{
	while (p->out_head) {
		struct td_out *o = p->out_head;
		ssize_t n = send(p->fd, o->data + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			td_peer_drop(p, strerror(errno));
			return -1;
		}
		o->off += (size_t)n;
		p->out_bytes -= (size_t)n;
		if (o->off == o->len) {
			p->out_head = o->next;
			if (!p->out_head)
				p->out_tail = NULL;
			free(o->data);
			free(o);
		}
	}
	bool want = p->out_head != NULL;
	if (want != p->want_write) {
		p->want_write = want;
		uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT | (want ? UV_WRITABLE : 0),
			      peer_on_io);
	}
	return 0;
}

/* Check phase: save the desired state if it changed, then write replies. */
static void on_check(uv_check_t *h)
{
	struct td_daemon *d = h->data;
	if (d->store.dirty && td_store_save(&d->store, d->cfg.state_dir) != 0)
		log_warn("saving the desired state under %s", d->cfg.state_dir);
	for (struct td_peer *p = d->peers, *next; p; p = next) {
		next = p->next;
		if (p->out_head && !p->want_write)
			peer_flush(p);
	}
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

static void peer_read(struct td_peer *p)
{
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
	int rc = tgp_reader_feed(&p->rd, buf, (size_t)n);
	Toggle__Envelope *env;
	int got;
	while (!p->closing && (got = tgp_reader_next(&p->rd, &env)) == 1) {
		td_dispatch(p, env);
		toggle__envelope__free_unpacked(env, NULL);
		/* An fd belongs to the frame it came with (a stream read never spans
		 * an SCM_RIGHTS boundary): one its frame did not claim is closed. */
		if (p->pending_fd >= 0 && !p->closing) {
			close(p->pending_fd);
			p->pending_fd = -1;
		}
	}
	if (p->closing)
		return;
	if (got < 0 || (rc && rc != TOGGLE_EBUSY)) {
		int e = got < 0 ? got : rc;
		p->d->stats.frames_refused++;
		log_warnx("peer %llu (pid %u): bad frame: %s; closing", (unsigned long long)p->id,
			  p->pid, toggle_strerror(e));
		td_peer_drop(p, NULL);
	}
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

static void peer_add(struct td_daemon *d, int fd)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
		log_warn("SO_PEERCRED");
		close(fd);
		return;
	}
	if (d->n_peers >= TD_MAX_PEERS) {
		log_warnx("refusing pid %d: %d peers already", cred.pid, TD_MAX_PEERS);
		close(fd);
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
	p->may_write = td_auth_may_write(d, p->uid, p->gid, p->pid);
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

static void on_listen(uv_poll_t *h, int status, int events)
{
	struct td_daemon *d = h->data;
	(void)events;
	if (status < 0)
		return;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_warn("accept");
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

static int mkdir_parents(const char *path)
{
	char tmp[sizeof(((struct sockaddr_un *)0)->sun_path)];
	snprintf(tmp, sizeof(tmp), "%s", path);
	char *slash = strrchr(tmp, '/');
	if (!slash || slash == tmp)
		return 0;
	*slash = '\0';
	for (char *c = tmp + 1; *c; c++) {
		if (*c != '/')
			continue;
		*c = '\0';
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			return -1;
		*c = '/';
	}
	return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static int listen_bind(struct td_daemon *d)
{
	const char *path = d->cfg.socket_path;
	if (socket_is_live(path)) {
		log_warnx("a daemon is already listening on %s; not starting", path);
		return -1;
	}
	if (mkdir_parents(path) != 0) {
		log_warn("creating the directory of %s", path);
		return -1;
	}
	if (unlink(path) == 0)
		log_info("replaced a stale socket at %s", path);
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

int td_server_listen(struct td_daemon *d, int activated_fd)
{
	if (activated_fd >= 0) {
		d->listen_fd = activated_fd;
		int fl = fcntl(activated_fd, F_GETFL);
		if (fl < 0 || fcntl(activated_fd, F_SETFL, fl | O_NONBLOCK) != 0)
			return -1;
	} else if ((d->listen_fd = listen_bind(d)) < 0) {
		return -1;
	}
	uv_poll_init(d->loop, &d->listen_poll, d->listen_fd);
	d->listen_poll.data = d;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_listen);
	uv_check_init(d->loop, &d->flush_check);
	d->flush_check.data = d;
	uv_check_start(&d->flush_check, on_check);
	return 0;
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
	uv_check_stop(&d->flush_check);
	uv_close((uv_handle_t *)&d->flush_check, NULL);
	if (d->socket_owned)
		unlink(d->cfg.socket_path);
}
