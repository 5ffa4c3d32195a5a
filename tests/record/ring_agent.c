/*
 * ring_agent.c - a stand-in agent for the recording tests (tests/cli/record.sh,
 * python/tests/test_recording.py): it registers a control region and a data
 * ring with toggled the way libtoggle does (RegisterAgent, RegisterRing),
 * then steps: at each step, while the ring's request asks for a session, it
 * writes one F32 record of [batch, width] per requested hook of its catalog
 * whose values say what they are: the first element of hook (type t,
 * layer l) at step s is s * 1000 + t * 100 + l, element i > 0 is i (both
 * exact in float; the readers check them).  It needs no GPU and no libtoggle
 * agent: only the ring's writer arithmetic (toggle_ring.h).
 *
 *   ring_agent --socket PATH [--name N] [--period-ms MS] [--batch B] [--width W]
 *              [--ring-kib K] [--steps N]
 *
 * Exits 0 at SIGTERM/SIGINT or after --steps steps, 1 on an error.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "toggle_hooks.h"
#include "toggle_ring.h"
#include "toggle_shm.h"

#define NT 2
#define NL 4

static const char *const type_names[NT] = {"resid_post", "attn_out"};
static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static void die(const char *what, const char *why)
{
	fprintf(stderr, "ring_agent: %s: %s\n", what, why);
	exit(1);
}

static void send_frame(int fd, const Toggle__Envelope *env, int pass_fd)
{
	uint8_t *buf;
	size_t len;
	if (tgp_frame_encode(env, &buf, &len) != 0)
		die("encode", "failed");
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
	}
	while (iov.iov_len) {
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("send", strerror(errno));
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
	}
	free(buf);
}

/* The reply to the last frame: its body case (an Error dies). */
static void expect(int fd, struct tgp_reader *rd, Toggle__Envelope__BodyCase want, uint64_t *agent_id)
{
	for (;;) {
		Toggle__Envelope *env = NULL;
		int got = tgp_reader_next(rd, &env);
		if (got < 0)
			die("reply", "malformed frame");
		if (got == 1) {
			if (env->body_case == TOGGLE__ENVELOPE__BODY_ERROR)
				die("toggled refused", env->error->message);
			if (env->body_case != want)
				die("reply", "unexpected message");
			if (agent_id)
				*agent_id = env->register_reply->agent_id;
			toggle__envelope__free_unpacked(env, NULL);
			return;
		}
		uint8_t b[4096];
		ssize_t k = read(fd, b, sizeof(b));
		if (k <= 0)
			die("read", k < 0 ? strerror(errno) : "toggled closed the connection");
		if (tgp_reader_feed(rd, b, (size_t)k) != 0)
			die("read", "frame reader");
	}
}

int main(int argc, char **argv)
{
	const char *sock = NULL, *name = "ring-agent";
	long period_ms = 5, batch = 2, width = 8, ring_kib = 1024, steps = -1;
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'}, {"name", required_argument, NULL, 'n'},
		{"period-ms", required_argument, NULL, 'p'}, {"batch", required_argument, NULL, 'b'},
		{"width", required_argument, NULL, 'w'}, {"ring-kib", required_argument, NULL, 'r'},
		{"steps", required_argument, NULL, 'S'}, {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': sock = optarg; break;
		case 'n': name = optarg; break;
		case 'p': period_ms = atol(optarg); break;
		case 'b': batch = atol(optarg); break;
		case 'w': width = atol(optarg); break;
		case 'r': ring_kib = atol(optarg); break;
		case 'S': steps = atol(optarg); break;
		default:
			fprintf(stderr, "usage: ring_agent --socket PATH [--name N] [--period-ms MS] "
				"[--batch B] [--width W] [--ring-kib K] [--steps N]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (!sock || batch < 1 || width < 1 || batch * width > (1 << 22) || period_ms < 0)
		die("usage", "--socket PATH is needed; batch * width at most 4M");
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	struct sockaddr_un sa;
	socklen_t salen;
	if (tgp_unix_address(sock, &sa, &salen) != 0)
		die(sock, "bad socket path");
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, salen) != 0)
		die(sock, strerror(errno));
	struct tgp_reader rd;
	tgp_reader_init(&rd);
	char err[256];
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = TGP_PROTOCOL_VERSION;
	h.client = (char *)(uintptr_t)"ring_agent";
	env.id = 1;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	send_frame(fd, &env, -1);
	expect(fd, &rd, TOGGLE__ENVELOPE__BODY_HELLO_REPLY, NULL);
	struct toggle_shm shm;
	if (toggle_shm_create(&shm, err, sizeof(err)) != 0)
		die("shared memory", err);
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.n_hook_types = NT;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = NL;
	env.id = 2;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	send_frame(fd, &env, shm.fd);
	uint64_t agent_id = 0;
	expect(fd, &rd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, &agent_id);
	struct toggle_ring_map ring;
	if (toggle_ring_create((uint64_t)ring_kib << 10, &ring, err, sizeof(err)) != 0)
		die("ring", err);
	Toggle__RegisterRingRequest rr = TOGGLE__REGISTER_RING_REQUEST__INIT;
	rr.ring_size = ring.size;
	env.id = 3;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_RING;
	env.register_ring = &rr;
	send_frame(fd, &env, ring.fd);
	expect(fd, &rd, TOGGLE__ENVELOPE__BODY_REGISTER_RING_REPLY, NULL);
	printf("ring_agent %s: agent %llu, ring of %ld KiB\n", name, (unsigned long long)agent_id,
	       ring_kib);
	fflush(stdout);

	struct toggle_ring_writer w;
	toggle_ring_writer_init(&w, &ring);
	size_t n = (size_t)(batch * width);
	float *vals = malloc(n * sizeof(float));
	if (!vals)
		die("memory", "out of memory");
	for (int64_t step = 0; !stop && (steps < 0 || step < steps); step++) {
		struct toggle_shm_status st;
		memset(&st, 0, sizeof(st));
		st.step = step;
		toggle_shm_status_write(shm.st, &st);
		uint64_t session = 0;
		struct toggle_set set;
		if (toggle_ring_request_read(ring.req, &session, &set) == 0 && session) {
			uint64_t n_data = 0;
			for (unsigned t = 0; t < NT; t++)
				for (unsigned l = 0; l < NL; l++) {
					unsigned bit = t * TOGGLE_MAX_LAYERS + l;
					if (!(set.bits[bit / 64] >> (bit % 64) & 1))
						continue;
					uint64_t pos;
					struct toggle_ring_record *r =
						toggle_ring_writer_reserve(&w, n * sizeof(float), &pos);
					if (!r)
						continue; /* full: dropped and counted, never waited for */
					for (size_t i = 0; i < n; i++)
						vals[i] = i ? (float)i : (float)(step * 1000 + t * 100 + l);
					r->session = session;
					r->step = step;
					r->graph = 0x7000 + (uint64_t)batch;
					r->launch = (uint64_t)step;
					r->hook_type = (uint16_t)t;
					r->layer = (uint16_t)l;
					r->dtype = TOGGLE_DTYPE_F32;
					r->ndim = 2;
					r->shape[0] = (uint64_t)batch;
					r->shape[1] = (uint64_t)width;
					memcpy((unsigned char *)r + sizeof(*r), vals, n * sizeof(float));
					toggle_ring_record_seal(r);
					n_data++;
				}
			toggle_ring_writer_publish(&w, w.reserve, n_data);
		}
		if (period_ms) {
			struct timespec ts = {period_ms / 1000, (period_ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	free(vals);
	toggle_ring_unmap(&ring);
	toggle_shm_unmap(&shm);
	tgp_reader_free(&rd);
	close(fd);
	return 0;
}
