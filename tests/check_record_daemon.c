/*
 * check_record_daemon.c - recordings end to end (issue 24, docs/recording.md):
 * the real toggled (ASan build, TOGGLED_BIN) on a private socket, fake
 * agents in this process that register a control region and a data ring
 * by hand and write records into the ring with toggle_ring.h's writer (or
 * forge them), and recording clients through the client library.
 *   - a recording delivers exactly the records of the hooks asked for, in
 *     chunks that reassemble to the bytes written; the hooks it added are
 *     in the standing set while it runs and gone after; --steps ends it;
 *   - hostile rings (a rewritten header, forged lengths, an unknown dtype,
 *     a huge shape, a head past the capacity, a hook outside the catalog):
 *     that agent's part ends with ESHM, the other agent of the same
 *     recording goes on, toggled serves everyone and exits cleanly;
 *   - refused: a hook outside the catalog, an agent without a ring, a
 *     second recording of one agent, a ring fd that is not sealed, a user
 *     who may not write sets;
 *   - a client that stops reading: toggled keeps serving, the agent's ring
 *     fills (it drops, never waits); the client leaves: hooks restored and
 *     the agent told to stop recording;
 *   - the whole path with libtoggle's own recorder (toggle_record.h) on the
 *     simulator: every record toggled forwards equals what the producer of
 *     its step and hook wrote, and only hooks the recording asked for.
 * toggled must exit 0 at every test's end (sanitizer reports fail it).
 */

#include "toggle.h"
#include "toggle_record.h"
#include "toggle_sim.h"

#include "fixture_record.h"

/* ---- tests -------------------------------------------------------------------- */

/* The records asked for, exact, in order; others filtered; steps end it; hooks restored. */
START_TEST(test_record_steps)
{
	struct env e;
	env_setup(&e, "check_record", false);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	fake_step(&f, 4);
	struct tgc *c = client(&e);
	ASSERT_CODE(set_spec(c, f.agent_id, "attn_out:0"), 0, "set");
	enabled_wait(c, f.agent_id, "attn_out:0");

	Toggle__Selector sel = sel_id(f.agent_id);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	int rc = record_start(c, &sel, "resid_post:1,attn_out:0", 2, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->record_reply->n_agents == 1, "reply names %zu agents", rep->record_reply->n_agents);
	ASSERT(!strcmp(rep->record_reply->agents[0]->added, "resid_post:1"),
	       "added '%s' (attn_out:0 was on already)", rep->record_reply->agents[0]->added);
	toggle__envelope__free_unpacked(rep, NULL);
	enabled_wait(c, f.agent_id, "resid_post:1,attn_out:0");

	struct toggle_set want;
	uint64_t session = fake_session(&f, &want, true);
	/* A record of the session before (reserved before the agent saw the change): dropped. */
	uint64_t sh[2] = {2, 3};
	float small[6], big[3 * 40000];
	fill(small, 6, 1.0f);
	fill(big, 3 * 40000, 7.0f);
	uint64_t bigsh[2] = {3, 40000};
	ASSERT(fake_put(&f, session - 1, 5, 0, 1, sh, 2, small, sizeof(small), true), "ring full");
	ASSERT(fake_put(&f, session, 5, 0, 1, sh, 2, small, sizeof(small), true), "ring full");
	ASSERT(fake_put(&f, session, 5, 1, 2, sh, 2, small, sizeof(small), true), "ring full"); /* not asked */
	ASSERT(fake_put(&f, session, 6, 1, 0, bigsh, 2, big, sizeof(big), true), "ring full");

	struct got g;
	Toggle__RecordEnd end;
	char msg[ERRLEN];
	ASSERT(record_get(c, id, &g, &end, msg), "ended early: %s", msg);
	ASSERT(g.step == 5 && !strcmp(g.hook, "resid_post:1") && !strcmp(g.dtype, "F32") &&
	       g.ndim == 2 && g.shape[0] == 2 && g.shape[1] == 3 && g.size == sizeof(small) &&
	       g.agent_id == f.agent_id && g.graph == 0xabc1,
	       "first record: step %lld hook %s dtype %s", (long long)g.step, g.hook, g.dtype);
	ASSERT(!memcmp(g.data, small, sizeof(small)), "bytes differ");
	free(g.data);
	ASSERT(record_get(c, id, &g, &end, msg), "ended early: %s", msg);
	ASSERT(g.step == 6 && !strcmp(g.hook, "attn_out:0") && g.size == sizeof(big) &&
	       g.chunks == (sizeof(big) + TGP_RECORD_CHUNK - 1) / TGP_RECORD_CHUNK,
	       "second record: step %lld hook %s, %zu chunks", (long long)g.step, g.hook, g.chunks);
	ASSERT(!memcmp(g.data, big, sizeof(big)), "bytes of the chunked record differ");
	free(g.data);
	/* Step 7 is a third step: the recording of 2 steps ends before it. */
	ASSERT(fake_put(&f, session, 7, 0, 1, sh, 2, small, sizeof(small), true), "ring full");
	ASSERT(!record_get(c, id, &g, &end, msg), "a record of a third step was forwarded");
	ASSERT(end.agent_id == f.agent_id && end.code == 0 && end.records == 2 && end.steps == 2,
	       "agent's end: agent %llu code %d records %llu steps %llu (%s)",
	       (unsigned long long)end.agent_id, end.code, (unsigned long long)end.records,
	       (unsigned long long)end.steps, msg);
	ASSERT(!record_get(c, id, &g, &end, msg) && end.agent_id == 0, "no final end");
	enabled_wait(c, f.agent_id, "attn_out:0"); /* what it added is gone, the rest stays */
	fake_session(&f, NULL, false);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* Forge one record (or the head) of a ring: kind selects how. */
enum forge { F_LENGTH, F_DTYPE, F_SHAPE, F_HEAD, F_HOOK, F_HEADER };

static const char *forge_name(enum forge k)
{
	static const char *n[] = {"length", "dtype", "huge shape", "head", "hook", "header"};
	return n[k];
}

static void forge(struct fake *f, uint64_t session, enum forge k)
{
	float v[6];
	fill(v, 6, 0.0f);
	uint64_t sh[2] = {2, 3};
	if (k == F_HEAD) {
		__atomic_store_n(&f->ring.prod->head, f->w.head + 4 * RING_CAP, __ATOMIC_RELEASE);
		return;
	}
	if (k == F_HEADER) {
		/* The header is copied at registration and never read again: rewriting
		 * it (a huge capacity, a bad magic) must change nothing; the next forged
		 * record then ends it. */
		struct toggle_ring_header *h = f->ring.base;
		h->capacity = 1ull << 40;
		h->magic = 0;
		k = F_LENGTH;
	}
	struct toggle_ring_record *r = fake_put(f, session, 9, 0, 0, sh, 2, v, sizeof(v), false);
	ASSERT(r, "ring full");
	switch (k) {
	case F_LENGTH: r->length = 64ull * RING_CAP; break;
	case F_DTYPE: r->dtype = 200; break;
	case F_SHAPE: r->shape[0] = 1ull << 62; r->shape[1] = 1ull << 62; break;
	case F_HOOK: r->hook_type = 1; r->layer = 100; break; /* in the hook space, not the catalog */
	default: break;
	}
	toggle_ring_record_seal(r);
	toggle_ring_writer_publish(&f->w, f->w.reserve, 1);
}

/* A hostile ring ends its agent's part (ESHM); the other agent goes on; toggled lives. */
START_TEST(test_record_hostile)
{
	struct env e;
	env_setup(&e, "check_record", false);
	enum forge k = (enum forge)_i;
	struct fake bad, good;
	fake_open(&bad, &e, "bad", -1);
	fake_open(&good, &e, "good", -1);
	fake_step(&bad, 1);
	fake_step(&good, 1);
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN], msg[ERRLEN];
	int rc = record_start(c, NULL, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->record_reply->n_agents == 2, "%zu agents", rep->record_reply->n_agents);
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t sb = fake_session(&bad, NULL, true), sg = fake_session(&good, NULL, true);
	forge(&bad, sb, k);
	struct got g;
	Toggle__RecordEnd end;
	ASSERT(!record_get(c, id, &g, &end, msg), "a forged record (%s) was forwarded", forge_name(k));
	ASSERT(end.agent_id == bad.agent_id && end.code == TOGGLE_ESHM,
	       "forged %s: end of agent %llu code %d (%s)", forge_name(k),
	       (unsigned long long)end.agent_id, end.code, msg);
	/* The good agent's records still come, exact. */
	float v[4] = {1, 2, 3, 4};
	uint64_t sh[1] = {4};
	ASSERT(fake_put(&good, sg, 2, 0, 0, sh, 1, v, sizeof(v), true), "ring full");
	ASSERT(record_get(c, id, &g, &end, msg), "the good agent's part ended: %s", msg);
	ASSERT(g.agent_id == good.agent_id && !memcmp(g.data, v, sizeof(v)), "good agent's record");
	free(g.data);
	daemon_serves(&e);
	struct tgc *q = client(&e);
	enabled_wait(q, bad.agent_id, "none"); /* restored at once */
	fake_session(&bad, NULL, false);
	/* A broken ring is not recorded again. */
	Toggle__Selector sel = sel_id(bad.agent_id);
	rc = record_start(q, &sel, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, TOGGLE_ENOTSUP, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(q);
	tgc_close(c);
	fake_close(&bad);
	fake_close(&good);
	env_teardown(&e);
}
END_TEST

/* Refused: outside the catalog, no ring, a second recording, an unsealed ring fd. */
START_TEST(test_record_refused)
{
	struct env e;
	env_setup(&e, "check_record", false);
	struct fake f, plain;
	fake_open(&f, &e, "eng", -1);
	fake_open(&plain, &e, "plain", -2);
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	Toggle__Selector sel = sel_id(f.agent_id);
	int rc = record_start(c, &sel, "resid_post:7", 0, &rep, &id, err);
	ASSERT(rc == TOGGLE_ESPEC || rc == TOGGLE_ERANGE, "code %d (%s): %s", rc, toggle_strerror(rc),
	       err);
	ASSERT(strstr(err, "eng"), "the error names the agent: %s", err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	enabled_wait(c, f.agent_id, "none"); /* nothing was added */
	Toggle__Selector ps = sel_id(plain.agent_id);
	rc = record_start(c, &ps, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, TOGGLE_ENOTSUP, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	/* The default target leaves the agent without a ring out and names it. */
	rc = record_start(c, NULL, "resid_post:0", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->record_reply->n_agents == 1 && rep->record_reply->n_skipped == 1 &&
	       strstr(rep->record_reply->skipped[0], "plain"), "default target: %zu agents, %zu skipped",
	       rep->record_reply->n_agents, rep->record_reply->n_skipped);
	toggle__envelope__free_unpacked(rep, NULL);
	struct tgc *c2 = client(&e);
	rc = record_start(c2, &sel, "resid_post:1", 0, &rep, &id, err);
	ASSERT_CODE(rc, TOGGLE_EBUSY, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c2);
	/* A ring fd that is not sealed is refused; the agent stays registered. */
	struct fake u;
	fake_open(&u, &e, "unsealed", -2);
	int mfd = memfd_create("not-a-ring", MFD_CLOEXEC);
	ASSERT(mfd >= 0 && ftruncate(mfd, TOGGLE_RING_DATA_OFFSET + RING_CAP) == 0, "memfd");
	Toggle__RegisterRingRequest rr = TOGGLE__REGISTER_RING_REQUEST__INIT;
	rr.ring_size = TOGGLE_RING_DATA_OFFSET + RING_CAP;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_RING;
	env.register_ring = &rr;
	rc = fake_call(&u, &env, mfd, TOGGLE__ENVELOPE__BODY_REGISTER_RING_REPLY, err);
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(mfd);
	enabled_of(c2 = client(&e), u.agent_id, err, sizeof(err)); /* still listed */
	tgc_close(c2);
	tgc_close(c);
	fake_close(&u);
	fake_close(&plain);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* Only users who may write sets may record. */
START_TEST(test_record_perm)
{
	if (geteuid() != 0) {
		tu_skip(TU_SKIP_ROOT, __func__, "needs root to connect as uid %d", NOBODY);
		return;
	}
	struct env e;
	env_setup(&e, "check_record", false);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0, "fork");
	if (pid == 0) {
		if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
			_exit(10);
		struct tgc *c = NULL;
		char err[ERRLEN];
		setenv("TOGGLE_DAEMON_UID", "0", 1);
		if (tgc_connect(e.sock, RPC_MS, &c, err, sizeof(err)) != 0)
			_exit(11);
		Toggle__Envelope *rep = NULL;
		uint64_t id;
		int rc = record_start(c, NULL, "resid_post:0", 0, &rep, &id, err);
		_exit(rc == TOGGLE_EPERM ? 0 : 12);
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "uid %d: record was not refused with EPERM "
	       "(child status %d)", NOBODY, st);
	struct tgc *c = client(&e);
	enabled_wait(c, f.agent_id, "none");
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* A client that stops reading: toggled serves on, the ring fills; it leaves: restored. */
START_TEST(test_record_client_stops)
{
	struct env e;
	env_setup(&e, "check_record", false);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	fake_step(&f, 1);
	struct tgc *c = client(&e);
	ASSERT_CODE(set_spec(c, f.agent_id, "attn_out:3"), 0, "set");
	Toggle__Selector sel = sel_id(f.agent_id);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	int rc = record_start(c, &sel, "resid_post:*", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t session = fake_session(&f, NULL, true);
	/* Write far more than the client's queue and the ring hold, never reading. */
	static float chunk[16384]; /* 64 KiB a record */
	uint64_t sh[1] = {16384};
	uint64_t written = 0, dropped = 0;
	uint64_t end = now_ms() + WAIT_MS;
	while (dropped < 64 && now_ms() < end) {
		if (fake_put(&f, session, (int64_t)(2 + written), 0, 0, sh, 1, chunk, sizeof(chunk), true))
			written++;
		else
			dropped++, sleep_ms(1);
	}
	ASSERT(dropped >= 64, "the ring never filled (%llu records written)",
	       (unsigned long long)written);
	/* More than the ring holds: toggled forwarded until the client's queue was full. */
	ASSERT(written > 2 * RING_CAP / sizeof(chunk),
	       "only %llu records went before the ring filled", (unsigned long long)written);
	ASSERT(__atomic_load_n(&f.ring.prod->dropped, __ATOMIC_RELAXED) == dropped,
	       "the agent counted its drops");
	daemon_serves(&e); /* toggled did not block on the stuck client */
	/* What toggled queued for the client is there, in ring order without a gap:
	 * the daemon held back (the ring filled) rather than dropping records. */
	struct got g;
	Toggle__RecordEnd rend;
	char msg[ERRLEN];
	uint64_t prev = 0;
	for (unsigned i = 0; i < 32; i++) {
		ASSERT(record_get(c, id, &g, &rend, msg), "recording ended: %s", msg);
		ASSERT(!strcmp(g.hook, "resid_post:0") && g.size == sizeof(chunk), "record %u", i);
		/* seq counts PADs too (where a record would straddle the ring's end): one at most. */
		ASSERT(i == 0 || (g.seq > prev && g.seq <= prev + 2), "record %u has seq %llu after %llu",
		       i, (unsigned long long)g.seq, (unsigned long long)prev);
		prev = g.seq;
		free(g.data);
	}
	struct tgc *q = client(&e);
	enabled_of(q, f.agent_id, err, sizeof(err));
	ASSERT(!strcmp(err, "resid_post:*,attn_out:3"), "while recording: '%s'", err);
	tgc_close(c); /* the client goes away */
	enabled_wait(q, f.agent_id, "attn_out:3");
	fake_session(&f, NULL, false);
	tgc_close(q);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* The agent leaves mid-recording: its part ends ENOAGENT, the recording's last end follows. */
START_TEST(test_record_agent_leaves)
{
	struct env e;
	env_setup(&e, "check_record", false);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	struct tgc *c = client(&e);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN], msg[ERRLEN];
	int rc = record_start(c, NULL, "all", 0, &rep, &id, err);
	ASSERT_CODE(rc, 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	fake_session(&f, NULL, true);
	fake_close(&f);
	struct got g;
	Toggle__RecordEnd end;
	ASSERT(!record_get(c, id, &g, &end, msg) && end.code == TOGGLE_ENOAGENT, "end code %d (%s)",
	       end.code, msg);
	ASSERT(!record_get(c, id, &g, &end, msg) && end.agent_id == 0, "no final end");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* ---- libtoggle's recorder on the simulator, end to end ---------------------- */

struct lt;
struct lt_prod {
	struct lt *lt;
	unsigned h;                  /* the producer's buffer: type * NL + layer */
};

struct lt {
	struct toggle_sim *sim;
	CUstream stream;
	struct toggle_agent *agent;
	CUdeviceptr buf[NT * NL];
	uint32_t runs;               /* graph runs (head kernel) */
	int64_t run_step[4096];      /* the step of each run */
	struct lt_prod prod[NT * NL];
	CUgraph graph;
	CUgraphExec exec;
};

static float lt_pattern(uint32_t run, unsigned h, unsigned i)
{
	return (float)(run * 1000u + h * 20u + i);
}

static void lt_head(void *arg)
{
	((struct lt *)arg)->runs++;
}

/* What ran: the run that executes (the head kernel counted it) and the hook. */
static void lt_producer(void *arg)
{
	const struct lt_prod *p = arg;
	float *b = (float *)(uintptr_t)p->lt->buf[p->h];
	for (unsigned i = 0; i < 16; i++)
		b[i] = lt_pattern(p->lt->runs - 1, p->h, i);
}

START_TEST(test_record_libtoggle)
{
	struct env e;
	env_setup(&e, "check_record", false);
	static struct lt lt;
	memset(&lt, 0, sizeof(lt));
	ASSERT(toggle_sim_create(&lt.sim) == 0, "sim");
	ASSERT(toggle_sim_stream_create(lt.sim, &lt.stream) == CUDA_SUCCESS, "stream");
	struct toggle_config cfg = {.name = "lt", .catalog = {.type_names = type_names,
							      .n_types = NT, .n_layers = NL},
				    .mode = TOGGLE_MODE_LAZY, .backend = TOGGLE_BACKEND_SIM,
				    .sim = lt.sim, .socket_path = e.sock};
	ASSERT(toggle_agent_open(&cfg, &lt.agent) == 0, "agent open");
	ASSERT(toggle_capture_begin(lt.agent) == 0, "capture");
	ASSERT(toggle_sim_stream_begin_capture(lt.stream) == CUDA_SUCCESS, "capture");
	ASSERT(toggle_sim_launch_kernel(lt.stream, lt_head, &lt) == CUDA_SUCCESS, "head");
	for (unsigned t = 0; t < NT; t++)
		for (unsigned l = 0; l < NL; l++) {
			unsigned h = t * NL + l;
			ASSERT(toggle_sim_mem_alloc(lt.sim, &lt.buf[h], 64) == CUDA_SUCCESS, "alloc");
			lt.prod[h].lt = &lt;
			lt.prod[h].h = h;
			ASSERT(toggle_sim_launch_kernel(lt.stream, lt_producer, &lt.prod[h]) ==
			       CUDA_SUCCESS, "producer");
			struct toggle_hook hk = {(uint16_t)t, (uint16_t)l};
			ASSERT(toggle_record_producer(lt.agent, lt.stream, hk) == 0, "record producer");
			struct toggle_record_buffer b = {.ptr = lt.buf[h], .bytes = 64,
							 .dtype = TOGGLE_DTYPE_F32, .ndim = 2,
							 .shape = {4, 4}};
			ASSERT(toggle_record_buffer(lt.agent, NULL, hk, &b) == 0, "buffer");
		}
	ASSERT(toggle_sim_stream_end_capture(lt.stream, &lt.graph) == CUDA_SUCCESS, "end capture");
	ASSERT(toggle_capture_end(lt.agent) == 0, "capture end");
	ASSERT(toggle_sim_graph_instantiate(&lt.exec, lt.graph) == CUDA_SUCCESS, "instantiate");
	ASSERT(toggle_graph_bind(lt.agent, lt.graph, lt.exec) == 0, "bind");
	ASSERT(toggle_record_open(lt.agent, 1u << 20, NULL) == 0, "record open");

	/* Steps go on while the client asks: the agent and the client share this thread. */
	struct tgc *c = client(&e);
	int64_t step = 0;
	struct toggle_set eff;
	Toggle__Envelope *rep = NULL;
	uint64_t id = 0;
	char err[ERRLEN];
	int rc = TOGGLE_ENOAGENT;
	uint64_t end = now_ms() + WAIT_MS;
	while (rc) { /* until the agent and its ring are registered */
		ASSERT(toggle_step_begin(lt.agent, ++step, &eff) == 0, "step");
		ASSERT(now_ms() < end, "the agent's ring never reached toggled: %s", err);
		rc = record_start(c, NULL, "resid_post:1,attn_out:2", 3, &rep, &id, err);
		ASSERT(rc == 0 || rc == TOGGLE_ENOAGENT || rc == TOGGLE_ENOTSUP, "record: %s", err);
		if (rep)
			toggle__envelope__free_unpacked(rep, NULL);
		rep = NULL;
		sleep_ms(5);
	}
	unsigned got = 0, ends = 0;
	end = now_ms() + WAIT_MS;
	while (ends < 2) {
		ASSERT(now_ms() < end, "the recording did not end (%u records)", got);
		ASSERT(toggle_step_begin(lt.agent, ++step, &eff) == 0, "step");
		ASSERT(lt.runs < 4096, "runs");
		lt.run_step[lt.runs] = step;
		ASSERT(toggle_graph_launch(lt.agent, lt.graph, lt.exec, lt.stream) == 0, "launch: %s",
		       toggle_last_error(lt.agent));
		toggle_record_poll(lt.agent);
		for (;;) {
			Toggle__Envelope *env = NULL;
			if (tgc_recv(c, &env, 2) != 1)
				break;
			if (env->id == id && env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_END) {
				ASSERT(env->record_end->code == 0, "end: %s", env->record_end->message);
				ends++;
			} else if (env->id == id && env->body_case == TOGGLE__ENVELOPE__BODY_RECORD_DATA) {
				const Toggle__RecordData *m = env->record_data;
				ASSERT(!strcmp(m->hook, "resid_post:1") || !strcmp(m->hook, "attn_out:2"),
				       "a record of %s, not asked for", m->hook);
				ASSERT(m->size == 64 && m->data.len == 64 && !strcmp(m->dtype, "F32") &&
				       m->n_shape == 2, "record shape");
				unsigned h = m->hook[0] == 'r' ? 1 : NL + 2;
				float v[16];
				memcpy(v, m->data.data, 64);
				uint32_t run = (uint32_t)(v[0] / 1000.0f);
				ASSERT(run < lt.runs && lt.run_step[run] == m->step,
				       "record of step %lld names run %u", (long long)m->step, run);
				for (unsigned i = 0; i < 16; i++)
					ASSERT(v[i] == lt_pattern(run, h, i), "%s step %lld word %u: %g",
					       m->hook, (long long)m->step, i, v[i]);
				ASSERT(m->graph == (uint64_t)(uintptr_t)lt.graph, "graph");
				got++;
			}
			toggle__envelope__free_unpacked(env, NULL);
		}
	}
	ASSERT(got == 6, "%u records for 3 steps of 2 hooks", got);
	enabled_wait(c, 1, "none");
	tgc_close(c);
	toggle_agent_close(lt.agent);
	toggle_sim_destroy(lt.sim);
	env_teardown(&e);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("record_daemon");
	TCase *t = tcase_create("record");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_record_steps);
	tcase_add_loop_test(t, test_record_hostile, F_LENGTH, F_HEADER + 1);
	tcase_add_test(t, test_record_refused);
	tcase_add_test(t, test_record_perm);
	tcase_add_test(t, test_record_client_stops);
	tcase_add_test(t, test_record_agent_leaves);
	tcase_add_test(t, test_record_libtoggle);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return tu_run_suite(suite());
}
