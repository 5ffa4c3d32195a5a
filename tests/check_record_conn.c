/*
 * check_record_conn.c - the data ring reaches the daemon: after
 * RegisterAgent the agent sends RegisterRingRequest with the ring's memfd
 * (SCM_RIGHTS), once per session, whether the ring existed before the
 * connection or came during it; a daemon that refuses it leaves the agent
 * registered.  A stand-in daemon (hand-written frames) maps the fd as
 * toggled would (toggle_ring_attach), asks for a recording through the
 * request area and reads what the agent records.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pbwire.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_frame.h"
#include "toggle_proto.h"
#include "toggle_record.h"
#include "toggle_ring.h"
#include "toggle_sim.h"

static const char *const names[2] = {"resid_post", "attn_out"};
static const struct toggle_catalog cat = {.type_names = names, .n_types = 2, .n_layers = 4};

struct fake {
	int lfd;
	bool refuse;            /* answer RegisterRing with Error UNIMPLEMENTED */
	pthread_t thread;
	pthread_mutex_t mu;
	int rings;              /* RegisterRing requests seen */
	uint64_t ring_size;
	struct toggle_ring_map m; /* the ring, mapped as toggled maps it */
	bool mapped;
	char err[256];
};

static int fake_write(int fd, const uint8_t *buf, size_t n)
{
	while (n) {
		ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
		if (k <= 0)
			return -1;
		buf += k;
		n -= (size_t)k;
	}
	return 0;
}

/* One frame and the fd that came with its first byte (-1: none). */
static int fake_recv(int c, uint8_t *body, size_t cap, size_t *len, int *fd)
{
	uint8_t hdr[TGP_FRAME_HEADER];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = hdr, .iov_len = sizeof(hdr)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	*fd = -1;
	ssize_t n = recvmsg(c, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
	if (n != (ssize_t)sizeof(hdr))
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
	uint32_t blen = tgp_frame_header_get(hdr);
	if (blen > cap)
		return -1;
	if (blen && recv(c, body, blen, MSG_WAITALL) != (ssize_t)blen)
		return -1;
	*len = blen;
	return 0;
}

static uint64_t varint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	for (unsigned s = 0; *p < end && s < 64; s += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			break;
	}
	return v;
}

/* The Envelope's body field and, for a length-delimited one, its bytes. */
static uint32_t body_of(const uint8_t *p, size_t n, const uint8_t **sub, size_t *sublen)
{
	const uint8_t *end = p + n;
	uint32_t body = 0;
	while (p < end) {
		uint64_t key = varint(&p, end);
		if ((key & 7) == 0) {
			(void)varint(&p, end);
		} else if ((key & 7) == 2) {
			uint64_t l = varint(&p, end);
			if (l > (uint64_t)(end - p))
				return 0;
			body = (uint32_t)(key >> 3);
			*sub = p;
			*sublen = (size_t)l;
			p += l;
		} else {
			return 0;
		}
	}
	return body;
}

static int fake_reply(int fd, uint32_t field, const struct pbw_buf *body)
{
	uint8_t frame[256];
	struct pbw_buf env = {.p = frame + TGP_FRAME_HEADER, .cap = sizeof(frame) - TGP_FRAME_HEADER};
	pbw_varint(&env, PBW_ENV_ID, 1);
	pbw_bytes(&env, field, body->p, body->len);
	tgp_frame_header_put(frame, (uint32_t)env.len);
	return env.overflow ? -1 : fake_write(fd, frame, TGP_FRAME_HEADER + env.len);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int c = accept(f->lfd, NULL, NULL);
	uint8_t *body = malloc(1 << 16);
	uint8_t tmp[64];
	for (;;) {
		size_t n;
		int fd;
		if (c < 0 || !body || fake_recv(c, body, 1 << 16, &n, &fd))
			break;
		const uint8_t *sub = NULL;
		size_t sublen = 0;
		uint32_t what = body_of(body, n, &sub, &sublen);
		struct pbw_buf rb = {.p = tmp, .cap = sizeof(tmp)};
		int rc = 0;
		if (what == PBW_ENV_HELLO) {
			pbw_varint(&rb, PBW_HELLO_REPLY_PROTOCOL_VERSION, TGP_PROTOCOL_VERSION);
			rc = fake_reply(c, PBW_ENV_HELLO_REPLY, &rb);
		} else if (what == PBW_ENV_REGISTER) {
			pbw_varint(&rb, PBW_REGISTER_REPLY_AGENT_ID, 9);
			rc = fake_reply(c, PBW_ENV_REGISTER_REPLY, &rb);
		} else if (what == PBW_ENV_REGISTER_RING) {
			const uint8_t *q = sub, *end = sub + sublen;
			uint64_t size = 0;
			while (q < end) {
				uint64_t key = varint(&q, end);
				uint64_t v = varint(&q, end);
				if (key >> 3 == PBW_REGISTER_RING_SIZE)
					size = v;
			}
			pthread_mutex_lock(&f->mu);
			f->rings++;
			f->ring_size = size;
			if (f->refuse) {
				pbw_varint(&rb, PBW_ERROR_CODE, (uint64_t)(int64_t)TOGGLE_EUNIMPLEMENTED);
				pbw_string(&rb, PBW_ERROR_MESSAGE, "no rings here");
				rc = fake_reply(c, PBW_ENV_ERROR, &rb);
			} else if (!f->mapped && fd >= 0 &&
				   toggle_ring_attach(fd, size, &f->m, f->err, sizeof(f->err)) == 0) {
				f->mapped = true;
				rc = fake_reply(c, PBW_ENV_REGISTER_RING_REPLY, &rb);
			} else {
				pbw_varint(&rb, PBW_ERROR_CODE, (uint64_t)(int64_t)TOGGLE_ESHM);
				rc = fake_reply(c, PBW_ENV_ERROR, &rb);
			}
			pthread_mutex_unlock(&f->mu);
		}
		if (fd >= 0)
			close(fd);
		if (rc)
			break;
	}
	free(body);
	if (c >= 0)
		close(c);
	return NULL;
}

struct rfx {
	char dir[32], sock[64];
	struct fake fk;
	struct toggle_sim *sim;
	struct toggle_agent *a;
};

static void rfx_listen(struct rfx *x)
{
	x->fk.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(x->fk.lfd, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", x->sock);
	ck_assert_int_eq(bind(x->fk.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(x->fk.lfd, 1), 0);
	ck_assert_int_eq(pthread_create(&x->fk.thread, NULL, fake_main, &x->fk), 0);
}

static void sleep_ms(int ms)
{
	nanosleep(&(struct timespec){.tv_nsec = ms * 1000 * 1000}, NULL);
}

static void wait_connected(struct rfx *x)
{
	struct toggle_conn_info ci;
	for (int ms = 0; ms < 10000; ms += 10) {
		ck_assert_int_eq(toggle_conn_get(x->a, &ci), 0);
		if (ci.state == TOGGLE_CONN_CONNECTED)
			return;
		sleep_ms(10);
	}
	ck_abort_msg("not registered: %s", ci.last_error);
}

/* Until the fake has seen n RegisterRing requests (and answered). */
static void wait_rings(struct rfx *x, int n)
{
	for (int ms = 0; ms < 10000; ms += 10) {
		pthread_mutex_lock(&x->fk.mu);
		int got = x->fk.rings;
		pthread_mutex_unlock(&x->fk.mu);
		if (got >= n)
			return;
		sleep_ms(10);
	}
	ck_abort_msg("the daemon never got the ring");
}

static void noop_fn(void *arg)
{
	(void)arg; /* the producer: the buffer holds what the test wrote */
}

static void record_one_launch(struct rfx *x)
{
	/* A graph with one producer writing 8 floats. */
	CUstream s;
	CUdeviceptr buf;
	ck_assert_int_eq(toggle_sim_stream_create(x->sim, &s), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_sim_mem_alloc(x->sim, &buf, 32), CUDA_SUCCESS);
	float *b = (float *)(uintptr_t)buf;
	for (int i = 0; i < 8; i++)
		b[i] = 3.0f + (float)i;
	ck_assert_int_eq(toggle_capture_begin(x->a), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(s), CUDA_SUCCESS);
	struct toggle_hook h = {1, 3};
	ck_assert_int_eq(toggle_sim_launch_kernel(s, noop_fn, NULL), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_record_producer(x->a, s, h), 0);
	CUgraph g;
	CUgraphExec e;
	ck_assert_int_eq(toggle_sim_stream_end_capture(s, &g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(x->a), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&e, g), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(x->a, g, e), 0);
	struct toggle_record_buffer d = {.ptr = buf, .bytes = 32, .dtype = TOGGLE_DTYPE_F32,
					 .ndim = 1, .shape = {8}};
	ck_assert_int_eq(toggle_record_buffer(x->a, NULL, h, &d), 0);
	/* The daemon asks (its request area); with a daemon the agent itself may not. */
	struct toggle_set want = {{0}}, set = {{0}}, eff;
	toggle_set_add(&want, h);
	toggle_set_add(&set, h);
	ck_assert_int_eq(toggle_record_set(x->a, 1, &want), TOGGLE_EBUSY);
	toggle_ring_request_write(x->fk.m.req, 5, &want);
	struct toggle_ring_reader rd;
	toggle_ring_reader_open(&rd, &x->fk.m);
	ck_assert_int_eq(toggle_set_enabled(x->a, &set), 0);
	ck_assert_int_eq(toggle_step_begin(x->a, 1, &eff), 0);
	ck_assert_int_eq(toggle_graph_launch(x->a, g, e, s), 0);
	ck_assert_int_eq(toggle_record_flush(x->a), 0);
	struct toggle_ring_record r;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&rd, &r, &pl), 1);
	ck_assert_uint_eq(r.session, 5);
	ck_assert_uint_eq(r.hook_type, 1);
	ck_assert_uint_eq(r.layer, 3);
	ck_assert_int_eq(r.step, 1);
	ck_assert(memcmp(pl, b, 32) == 0);
	toggle_ring_reader_release(&rd, &r);
}

/* _i: 0 the ring before the daemon listens, 1 the ring during a session,
 * 2 a daemon that takes no ring. */
START_TEST(test_ring_reaches_daemon)
{
	struct rfx x;
	memset(&x, 0, sizeof(x));
	pthread_mutex_init(&x.fk.mu, NULL);
	x.fk.refuse = _i == 2;
	snprintf(x.dir, sizeof(x.dir), "/tmp/tgr-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(x.dir));
	snprintf(x.sock, sizeof(x.sock), "%s/fake.sock", x.dir);
	ck_assert_int_eq(toggle_sim_create(&x.sim), 0);
	struct toggle_config cfg = {.name = "ring-test", .catalog = cat,
				    .backend = TOGGLE_BACKEND_SIM, .sim = x.sim, .socket_path = x.sock};
	ck_assert_int_eq(toggle_agent_open(&cfg, &x.a), 0);
	if (_i == 0)
		ck_assert_int_eq(toggle_record_open(x.a, 1u << 16, NULL), 0);
	rfx_listen(&x);
	wait_connected(&x);
	if (_i != 0)
		ck_assert_int_eq(toggle_record_open(x.a, 1u << 16, NULL), 0);
	wait_rings(&x, 1);
	sleep_ms(50); /* a second offer would come now */
	pthread_mutex_lock(&x.fk.mu);
	ck_assert_int_eq(x.fk.rings, 1);
	ck_assert_uint_eq(x.fk.ring_size, TOGGLE_RING_DATA_OFFSET + (1u << 16));
	ck_assert_msg(x.fk.mapped == (_i != 2), "%s", x.fk.err);
	pthread_mutex_unlock(&x.fk.mu);
	struct toggle_conn_info ci;
	ck_assert_int_eq(toggle_conn_get(x.a, &ci), 0);
	ck_assert_int_eq(ci.state, TOGGLE_CONN_CONNECTED); /* refused or not, still registered */
	if (_i == 2)
		ck_assert_msg(strstr(ci.last_error, "no data ring"), "%s", ci.last_error);
	else
		record_one_launch(&x);
	toggle_agent_close(x.a);
	pthread_join(x.fk.thread, NULL);
	close(x.fk.lfd);
	if (x.fk.mapped)
		toggle_ring_unmap(&x.fk.m);
	toggle_sim_destroy(x.sim);
	pthread_mutex_destroy(&x.fk.mu);
	unlink(x.sock);
	rmdir(x.dir);
}
END_TEST

static Suite *record_conn_suite(void)
{
	Suite *s = suite_create("record_conn");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_ring_reaches_daemon, 0, 3);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(record_conn_suite());
}
