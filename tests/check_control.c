/*
 * check_control.c - the agent's side of the daemon lane, driven by writing
 * its shared memory the way toggled does: standing sets take effect at step
 * boundaries (at once for agents that never begin steps), plan batches are
 * taken whole or rejected whole, clears drop what is pending, malformed
 * content is counted and never applied in part, and the status lane reports
 * what happened.  No daemon runs: the agent's connection thread retries in
 * the background against a socket nobody listens on.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent_impl.h"
#include "pbwire.h"
#include "testutil.h"
#include "toggle.h"
#include "toggle_frame.h"
#include "toggle_sim.h"

static const char *const names[2] = {"resid_post", "attn_out"};
static const struct toggle_catalog cat = {.type_names = names, .n_types = 2, .n_layers = 4};

struct cfx {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *a;
	CUgraph graph;
	CUgraphExec exec;
	struct toggle_set ran;
	struct toggle_hook hooks[8];
	struct toggle_shm_control_view ctl; /* what "the daemon" last wrote */
	uint64_t next_batch;
	char dir[64];
};

static struct cfx *cur; /* the producer bodies need the fixture */

static void producer(void *arg)
{
	toggle_set_add(&cur->ran, *(struct toggle_hook *)arg);
}

static void cfx_open(struct cfx *f)
{
	memset(f, 0, sizeof(*f));
	cur = f;
	snprintf(f->dir, sizeof(f->dir), "/tmp/tgc-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	char sock[128];
	snprintf(sock, sizeof(sock), "%s/nobody.sock", f->dir);
	ck_assert_int_eq(toggle_sim_create(&f->sim), 0);
	ck_assert_int_eq(toggle_sim_stream_create(f->sim, &f->stream), CUDA_SUCCESS);
	struct toggle_config cfg = {.name = "ctl-test", .catalog = cat,
				    .backend = TOGGLE_BACKEND_SIM, .sim = f->sim, .socket_path = sock};
	ck_assert_int_eq(toggle_agent_open(&cfg, &f->a), 0);
	ck_assert_ptr_nonnull(f->a->shm.ctl);
	ck_assert_int_eq(toggle_capture_begin(f->a), 0);
	ck_assert_int_eq(toggle_sim_stream_begin_capture(f->stream), CUDA_SUCCESS);
	for (uint16_t i = 0; i < 8; i++) {
		f->hooks[i] = (struct toggle_hook){(uint16_t)(i / 4), (uint16_t)(i % 4)};
		ck_assert_int_eq(toggle_sim_launch_kernel(f->stream, producer, &f->hooks[i]), 0);
		ck_assert_int_eq(toggle_record_producer(f->a, f->stream, f->hooks[i]), 0);
	}
	ck_assert_int_eq(toggle_sim_stream_end_capture(f->stream, &f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_capture_end(f->a), 0);
	ck_assert_int_eq(toggle_sim_graph_instantiate(&f->exec, f->graph), CUDA_SUCCESS);
	ck_assert_int_eq(toggle_graph_bind(f->a, f->graph, f->exec), 0);
}

static void cfx_close(struct cfx *f)
{
	toggle_agent_close(f->a);
	toggle_sim_destroy(f->sim);
	rmdir(f->dir);
}

static struct toggle_set spec(const char *text)
{
	struct toggle_set s;
	char err[128];
	ck_assert_msg(toggle_set_parse(&cat, text, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

static void daemon_set(struct cfx *f, const char *text)
{
	struct toggle_set s = spec(text);
	memcpy(f->ctl.standing, s.bits, sizeof(f->ctl.standing));
	f->ctl.standing_flags = 0;
	f->ctl.standing_step = 0;
	f->ctl.version++;
	toggle_shm_control_write(f->a->shm.ctl, &f->ctl);
}

/* An aligned set (togglectl set --aligned): the standing set from step at on. */
static void daemon_set_aligned(struct cfx *f, const char *text, int64_t at)
{
	struct toggle_set s = spec(text);
	memcpy(f->ctl.standing, s.bits, sizeof(f->ctl.standing));
	f->ctl.standing_flags = TOGGLE_SHM_STANDING_ALIGNED;
	f->ctl.standing_step = at;
	f->ctl.version++;
	toggle_shm_control_write(f->a->shm.ctl, &f->ctl);
}

/* Publish one batch: n entries, steps and specs. */
static void daemon_plan(struct cfx *f, size_t n, const int64_t *steps, const char *const *specs)
{
	uint64_t batch = ++f->next_batch;
	for (size_t k = 0; k < n; k++) {
		struct toggle_shm_plan_slot slot = {.batch = batch, .batch_len = n, .batch_index = k,
						    .step = steps[k]};
		struct toggle_set s = spec(specs[k]);
		memcpy(slot.set, s.bits, sizeof(slot.set));
		toggle_shm_plan_slot_write(f->a->shm.ctl, f->ctl.plan_head + k, &slot);
	}
	f->ctl.plan_head += n;
	toggle_shm_control_write(f->a->shm.ctl, &f->ctl);
}

/* Begin a step, replay, and check the gate's set is what ran. */
static struct toggle_set step(struct cfx *f, int64_t s)
{
	struct toggle_set gate;
	ck_assert_int_eq(toggle_step_begin(f->a, s, &gate), 0);
	toggle_set_clear(&f->ran);
	ck_assert_int_eq(toggle_graph_launch(f->a, f->graph, f->exec, f->stream), 0);
	ck_assert(toggle_set_equal(&gate, &f->ran));
	return gate;
}

static void status(struct cfx *f, struct toggle_shm_status *out)
{
	ck_assert_int_eq(toggle_shm_status_read(f->a->shm.st, out), 0);
}

START_TEST(test_standing_at_step_boundary)
{
	struct cfx f;
	cfx_open(&f);
	struct toggle_set none = spec("none"), want = spec("attn_out:1-2"), got;
	got = step(&f, 0);
	ck_assert(toggle_set_equal(&got, &none));
	daemon_set(&f, "attn_out:1-2");
	/* Mid-step: the replay still runs the step's set. */
	toggle_set_clear(&f.ran);
	ck_assert_int_eq(toggle_graph_launch(f.a, f.graph, f.exec, f.stream), 0);
	ck_assert(toggle_set_equal(&f.ran, &none));
	got = step(&f, 1);
	ck_assert(toggle_set_equal(&got, &want));
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	status(&f, st);
	ck_assert_uint_eq(st->version_seen, 1);
	ck_assert_uint_eq(st->version_applied, 1); /* published at that step's replay */
	ck_assert_int_eq(st->step, 1);
	/* Later replays of the step (the fast path) run the same set; the next
	 * change is published at the first replay of the step that takes it. */
	for (int k = 0; k < 3; k++) {
		toggle_set_clear(&f.ran);
		ck_assert_int_eq(toggle_graph_launch(f.a, f.graph, f.exec, f.stream), 0);
		ck_assert(toggle_set_equal(&f.ran, &want));
	}
	daemon_set(&f, "resid_post:3");
	got = step(&f, 2);
	struct toggle_set next = spec("resid_post:3");
	ck_assert(toggle_set_equal(&got, &next));
	status(&f, st);
	ck_assert_uint_eq(st->version_applied, 2);
	free(st);
	cfx_close(&f);
}
END_TEST

START_TEST(test_stepless_agent_takes_it_at_launch)
{
	struct cfx f;
	cfx_open(&f);
	/* Each change is taken at the very next launch, however many launches ran
	 * before it: the replay fast path must not skip the lane's check. */
	static const char *const sets[] = {"resid_post:*", "attn_out:0", "none", "all"};
	for (int i = 0; i < 4; i++) {
		daemon_set(&f, sets[i]);
		struct toggle_set want = spec(sets[i]);
		for (int k = 0; k < 3; k++) {
			toggle_set_clear(&f.ran);
			ck_assert_int_eq(toggle_graph_launch(f.a, f.graph, f.exec, f.stream), 0);
			ck_assert_msg(toggle_set_equal(&f.ran, &want), "change %d launch %d", i, k);
		}
	}
	cfx_close(&f);
}
END_TEST

START_TEST(test_plan_batch_whole)
{
	struct cfx f;
	cfx_open(&f);
	daemon_set(&f, "resid_post:0");
	step(&f, 0);
	static const int64_t steps[] = {3, 5};
	static const char *const specs[] = {"attn_out:*", "all"};
	daemon_plan(&f, 2, steps, specs);
	const char *expect[] = {NULL, "resid_post:0", "resid_post:0", "attn_out:*", "resid_post:0",
				"all", "resid_post:0"};
	for (int64_t s = 1; s <= 6; s++) {
		struct toggle_set got = step(&f, s), want = spec(expect[s]);
		ck_assert_msg(toggle_set_equal(&got, &want), "step %lld", (long long)s);
	}
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	status(&f, st);
	ck_assert_uint_eq(st->plan_consumed, 2);
	ck_assert_uint_eq(st->plan_rejected, 0);
	free(st);
	cfx_close(&f);
}
END_TEST

START_TEST(test_late_batch_rejected_whole)
{
	struct cfx f;
	cfx_open(&f);
	step(&f, 0);
	step(&f, 1);
	step(&f, 2);
	/* Written after step 2 began: the entry for step 2 is late, so step 4's
	 * entry, in the same batch, must not apply either. */
	static const int64_t steps[] = {4, 2};
	static const char *const specs[] = {"all", "all"};
	daemon_plan(&f, 2, steps, specs);
	struct toggle_set none = spec("none");
	for (int64_t s = 3; s <= 5; s++) {
		struct toggle_set got = step(&f, s);
		ck_assert_msg(toggle_set_equal(&got, &none), "step %lld", (long long)s);
	}
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	status(&f, st);
	ck_assert_uint_eq(st->plan_rejected, 1);
	ck_assert_uint_eq(st->plan_rejected_batch, 1);
	ck_assert_int_eq(st->plan_rejected_step, 2);
	ck_assert_uint_eq(st->plan_consumed, 2);
	ck_assert_uint_eq(st->anomalies[TOGGLE_SHM_AN_LATE_PLANS], 1);
	free(st);
	cfx_close(&f);
}
END_TEST

START_TEST(test_clear_drops_pending)
{
	struct cfx f;
	cfx_open(&f);
	step(&f, 0);
	static const int64_t steps[] = {3};
	static const char *const specs[] = {"all"};
	daemon_plan(&f, 1, steps, specs);
	step(&f, 1); /* taken into the agent's plan table */
	f.ctl.plan_clear = f.ctl.plan_head;
	f.ctl.plan_clears++;
	toggle_shm_control_write(f.a->shm.ctl, &f.ctl);
	struct toggle_set none = spec("none");
	for (int64_t s = 2; s <= 4; s++) {
		struct toggle_set got = step(&f, s);
		ck_assert_msg(toggle_set_equal(&got, &none), "step %lld", (long long)s);
	}
	/* A plan after the clear still works. */
	static const int64_t later[] = {6};
	daemon_plan(&f, 1, later, specs);
	step(&f, 5);
	struct toggle_set got = step(&f, 6), all = spec("all");
	ck_assert(toggle_set_equal(&got, &all));
	cfx_close(&f);
}
END_TEST

START_TEST(test_malformed_never_applied)
{
	struct cfx f;
	cfx_open(&f);
	step(&f, 0);
	/* A batch whose second slot claims another batch. */
	struct toggle_shm_plan_slot s0 = {.batch = 9, .batch_len = 2, .batch_index = 0, .step = 3};
	struct toggle_shm_plan_slot s1 = {.batch = 10, .batch_len = 2, .batch_index = 1, .step = 4};
	memset(s0.set, 0xff, sizeof(uint64_t)); /* resid_post:* and beyond layer 3: outside */
	toggle_shm_plan_slot_write(f.a->shm.ctl, 0, &s0);
	toggle_shm_plan_slot_write(f.a->shm.ctl, 1, &s1);
	f.ctl.plan_head = 2;
	toggle_shm_control_write(f.a->shm.ctl, &f.ctl);
	struct toggle_set none = spec("none");
	for (int64_t s = 1; s <= 5; s++) {
		struct toggle_set got = step(&f, s);
		ck_assert(toggle_set_equal(&got, &none));
	}
	/* A standing set outside the catalog is refused too. */
	memset(f.ctl.standing, 0xff, sizeof(f.ctl.standing));
	f.ctl.version++;
	toggle_shm_control_write(f.a->shm.ctl, &f.ctl);
	struct toggle_set got = step(&f, 6);
	ck_assert(toggle_set_equal(&got, &none));
	/* A head that breaks the ring contract is skipped, not followed. */
	f.ctl.plan_head += 1000;
	toggle_shm_control_write(f.a->shm.ctl, &f.ctl);
	step(&f, 7);
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	status(&f, st);
	ck_assert_uint_ge(st->anomalies[TOGGLE_SHM_AN_CONTROL_ERRORS], 3);
	ck_assert_uint_eq(st->anomalies[TOGGLE_SHM_AN_LATE_PLANS], 0); /* malformed, not late */
	ck_assert_uint_eq(st->plan_rejected, 1);
	ck_assert_uint_eq(st->plan_consumed, f.ctl.plan_head);
	free(st);
	cfx_close(&f);
}
END_TEST

/* ---- the agent's connection: replies up to the maximum frame ------------ */

/* A stand-in for toggled that answers Hello and RegisterAgent by hand. */
struct fake_daemon {
	int lfd;
	size_t pad;         /* bytes of an unknown field in the HelloReply */
	uint32_t announce;  /* != 0: the HelloReply frame only announces this length */
	pthread_t thread;
};

static int fake_read(int fd, uint8_t *buf, size_t n)
{
	while (n) {
		ssize_t k = read(fd, buf, n);
		if (k <= 0)
			return -1;
		buf += k;
		n -= (size_t)k;
	}
	return 0;
}

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

/* Read one request frame (any fd passed with it is dropped by read()). */
static int fake_skip_request(int fd)
{
	uint8_t hdr[TGP_FRAME_HEADER];
	if (fake_read(fd, hdr, sizeof(hdr)))
		return -1;
	uint32_t n = tgp_frame_header_get(hdr);
	uint8_t *body = tgp_frame_len_check(n) ? NULL : malloc(n);
	int rc = body ? fake_read(fd, body, n) : -1;
	free(body);
	return rc;
}

/* Send Envelope{id, field: body} with pbwire's own encoder. */
static int fake_reply(int fd, uint32_t field, const struct pbw_buf *body)
{
	size_t cap = body->len + 64;
	uint8_t *frame = malloc(cap);
	if (!frame)
		return -1;
	struct pbw_buf env = {.p = frame + TGP_FRAME_HEADER, .cap = cap - TGP_FRAME_HEADER};
	pbw_varint(&env, PBW_ENV_ID, 1);
	pbw_bytes(&env, field, body->p, body->len);
	tgp_frame_header_put(frame, (uint32_t)env.len);
	int rc = env.overflow ? -1 : fake_write(fd, frame, TGP_FRAME_HEADER + env.len);
	free(frame);
	return rc;
}

static void *fake_daemon_main(void *arg)
{
	struct fake_daemon *fd = arg;
	int c = accept(fd->lfd, NULL, NULL);
	if (c < 0 || fake_skip_request(c))
		goto out;
	if (fd->announce) {
		uint8_t hdr[TGP_FRAME_HEADER];
		tgp_frame_header_put(hdr, fd->announce);
		(void)fake_write(c, hdr, sizeof(hdr));
		goto out;
	}
	size_t cap = fd->pad + 64;
	struct pbw_buf hr = {.p = malloc(cap), .cap = cap};
	uint8_t *pad = calloc(1, fd->pad + 1);
	if (!hr.p || !pad) {
		free(hr.p);
		free(pad);
		goto out;
	}
	pbw_varint(&hr, PBW_HELLO_REPLY_PROTOCOL_VERSION, TGP_PROTOCOL_VERSION);
	pbw_bytes(&hr, 1000, pad, fd->pad); /* a field this agent does not know */
	int rc = fake_reply(c, PBW_ENV_HELLO_REPLY, &hr);
	free(hr.p);
	free(pad);
	if (rc || fake_skip_request(c))
		goto out;
	uint8_t tmp[16];
	struct pbw_buf rr = {.p = tmp, .cap = sizeof(tmp)};
	pbw_varint(&rr, PBW_REGISTER_REPLY_AGENT_ID, 77);
	if (fake_reply(c, PBW_ENV_REGISTER_REPLY, &rr))
		goto out;
	/* Registered: hold the connection until the agent closes it. */
	while (read(c, tmp, sizeof(tmp)) > 0)
		;
out:
	if (c >= 0)
		close(c);
	return NULL;
}

/*
 * The agent reads the daemon's replies under the same maximum frame as
 * every other reader (TGP_MAX_FRAME), no longer its own 64 KiB: a 200 KiB
 * HelloReply registers; a header announcing more than the maximum is refused
 * from the header alone.
 */
START_TEST(test_conn_reply_frame_limit)
{
	char dir[32], sock[64];
	snprintf(dir, sizeof(dir), "/tmp/tgc-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/fake.sock", dir);
	struct fake_daemon fd = {.pad = _i ? 0 : 200 * 1024,
				 .announce = _i ? TGP_MAX_FRAME + 1 : 0};
	fd.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd.lfd, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	ck_assert_int_eq(bind(fd.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd.lfd, 1), 0);
	ck_assert_int_eq(pthread_create(&fd.thread, NULL, fake_daemon_main, &fd), 0);

	struct toggle_sim *sim;
	ck_assert_int_eq(toggle_sim_create(&sim), 0);
	struct toggle_config cfg = {.name = "frame-test", .catalog = cat,
				    .backend = TOGGLE_BACKEND_SIM, .sim = sim, .socket_path = sock};
	struct toggle_agent *a;
	ck_assert_int_eq(toggle_agent_open(&cfg, &a), 0);
	struct toggle_conn_info ci;
	for (int ms = 0; ms < 10000; ms += 10) {
		ck_assert_int_eq(toggle_conn_get(a, &ci), 0);
		if (ci.state == TOGGLE_CONN_CONNECTED || ci.failures > 0)
			break;
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
	}
	if (_i == 0) {
		ck_assert_msg(ci.state == TOGGLE_CONN_CONNECTED, "not registered: %s", ci.last_error);
		ck_assert_uint_eq(ci.agent_id, 77);
	} else {
		ck_assert_int_ne(ci.state, TOGGLE_CONN_CONNECTED);
		ck_assert_ptr_nonnull(strstr(ci.last_error, "bad length"));
	}
	toggle_agent_close(a); /* the fake sees EOF */
	pthread_join(fd.thread, NULL);
	close(fd.lfd);
	toggle_sim_destroy(sim);
	unlink(sock);
	rmdir(dir);
}
END_TEST

/*
 * An aligned set runs from exactly its step: not before (the steps between
 * run the old set), and never at another step: one whose step has begun,
 * one stepped over, and one reaching a stepless agent are refused whole and
 * reported in the status lane; a plain set replaces a pending one; an
 * aligned set the agent already runs (a restarted daemon's rewrite) is no
 * change.  The status lane says the agent takes them (features).
 */
START_TEST(test_aligned_exactly_at_its_step)
{
	struct cfx f;
	cfx_open(&f);
	struct toggle_shm_status *st = calloc(1, sizeof(*st));
	/* Stepless: it could only take it at once, so it refuses it. */
	daemon_set_aligned(&f, "attn_out:0", 5);
	toggle_set_clear(&f.ran);
	ck_assert_int_eq(toggle_graph_launch(f.a, f.graph, f.exec, f.stream), 0);
	struct toggle_set none = spec("none"), a0 = spec("attn_out:0"), got;
	ck_assert(toggle_set_equal(&f.ran, &none));
	got = step(&f, 0);
	ck_assert(toggle_set_equal(&got, &none));
	status(&f, st);
	ck_assert_uint_eq(st->features & TOGGLE_SHM_FEAT_ALIGNED, TOGGLE_SHM_FEAT_ALIGNED);
	ck_assert_uint_eq(st->aligned_rejected, 1);
	ck_assert_uint_eq(st->aligned_rejected_version, f.ctl.version);

	/* Held until step 10, then the standing set. */
	daemon_set_aligned(&f, "attn_out:0", 10);
	for (int64_t s = 1; s <= 12; s++) {
		got = step(&f, s);
		ck_assert_msg(toggle_set_equal(&got, s < 10 ? &none : &a0), "step %lld", (long long)s);
	}
	status(&f, st);
	ck_assert_uint_eq(st->aligned_rejected, 1);

	/* Its step has begun: refused, the set stays. */
	daemon_set_aligned(&f, "all", 12);
	got = step(&f, 13);
	ck_assert(toggle_set_equal(&got, &a0));
	status(&f, st);
	ck_assert_uint_eq(st->aligned_rejected, 2);
	ck_assert_int_eq(st->aligned_rejected_step, 12);

	/* Stepped over (20 is never begun): refused at 25, never run at 25. */
	daemon_set_aligned(&f, "all", 20);
	got = step(&f, 14);
	ck_assert(toggle_set_equal(&got, &a0));
	got = step(&f, 25);
	ck_assert(toggle_set_equal(&got, &a0));
	got = step(&f, 26);
	ck_assert(toggle_set_equal(&got, &a0));
	status(&f, st);
	ck_assert_uint_eq(st->aligned_rejected, 3);
	ck_assert_uint_eq(st->aligned_rejected_version, f.ctl.version);

	/* A plain set replaces a pending aligned one. */
	daemon_set_aligned(&f, "all", 40);
	got = step(&f, 27);
	daemon_set(&f, "resid_post:1");
	struct toggle_set r1 = spec("resid_post:1");
	for (int64_t s = 28; s <= 42; s++) {
		got = step(&f, s);
		ck_assert_msg(toggle_set_equal(&got, &r1), "step %lld", (long long)s);
	}

	/* The set it runs, aligned to a step it passed: no change, not late. */
	daemon_set_aligned(&f, "resid_post:1", 30);
	got = step(&f, 43);
	ck_assert(toggle_set_equal(&got, &r1));
	status(&f, st);
	ck_assert_uint_eq(st->aligned_rejected, 3);
	free(st);
	cfx_close(&f);
}
END_TEST

static Suite *control_suite(void)
{
	Suite *s = suite_create("control");
	TCase *tc = tcase_create("control");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_standing_at_step_boundary);
	tcase_add_test(tc, test_stepless_agent_takes_it_at_launch);
	tcase_add_test(tc, test_plan_batch_whole);
	tcase_add_test(tc, test_late_batch_rejected_whole);
	tcase_add_test(tc, test_clear_drops_pending);
	tcase_add_test(tc, test_malformed_never_applied);
	tcase_add_test(tc, test_aligned_exactly_at_its_step);
	tcase_add_loop_test(tc, test_conn_reply_frame_limit, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(control_suite());
}
