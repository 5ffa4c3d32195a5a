/*
 * check_control.c - the agent's side of the daemon lane, driven by writing
 * its shared memory the way toggled does: standing sets take effect at step
 * boundaries (at once for agents that never begin steps), plan batches are
 * taken whole or rejected whole, clears drop what is pending, malformed
 * content is counted and never applied in part, and the status lane reports
 * what happened.  No daemon runs: the agent's connection thread retries in
 * the background against a socket nobody listens on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_impl.h"
#include "testutil.h"
#include "toggle.h"
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
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(control_suite());
}
