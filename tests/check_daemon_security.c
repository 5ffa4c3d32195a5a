/*
 * check_daemon_security.c - end-to-end tests of toggled: permissions, bad input, error replies.
 *
 * The real daemon binary (the ASan/UBSan build, TOGGLED_BIN), agents on the
 * simulator backend in child processes, and the client library; the
 * environment, the agent children and the RPC helpers are the shared
 * fixture (tests/fixture_daemon.h).  Split out of check_daemon.c (issue 29).
 *
 * Run from the repository root (TOGGLED_BIN is a relative path).
 */
#include "fixture_daemon.h"
/* ======================================================================== */
/* 11-12. Permissions, bad input                                             */
/* ======================================================================== */

/* The unprivileged child: exit 0 if everything was as expected, else a step number. */
_Noreturn static void nobody_main(const struct env *e)
{
	char err[ERRLEN];
	struct tgc *c = NULL;
	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		_exit(10);
	if (tgc_connect(e->sock, 5000, &c, err, sizeof(err)) != 0)
		_exit(11);
	if (tgc_may_write(c))
		_exit(12);
	if (rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "all", 0, NULL, err) != TOGGLE_EPERM)
		_exit(13);
	if (!strstr(err, "65534"))
		_exit(14);
	if (rpc_status(c, NULL, err) != 0)
		_exit(15);
	if (rpc_list_agents(c, NULL, NULL, err) != 0)
		_exit(16);
	int64_t steps[1] = {1000000};
	const char *specs[1] = {"all"};
	if (rpc_plan(c, NULL, steps, specs, 1, err) != TOGGLE_EPERM)
		_exit(17);
	if (rpc_clear_plan(c, NULL, err) != TOGGLE_EPERM)
		_exit(18);
	tgc_close(c);
	_exit(0);
}
START_TEST(test_permission_denied)
{
	if (geteuid() != 0)
		TU_SKIP(TU_SKIP_ROOT, "needs root to become uid %d", NOBODY);
	struct env e;
	env_setup(&e);
	ASSERT(chmod(e.dir, 0755) == 0, "chmod %s: %s", e.dir, strerror(errno));
	struct tgc *c = client(&e);
	int a = agent_start(&e,
			&(struct agent_opts){.name = "guarded", .group = "g", .steps = true});
	agent_wait_listed(c, &e.agents[a], 1);

	static const char *const why[] = {
		[10] = "cannot become nobody", [11] = "cannot connect",
		[12] = "may_write is true for nobody", [13] = "set_enabled was not refused with EPERM",
		[14] = "EPERM message does not name the uid", [15] = "status failed",
		[16] = "list_agents failed", [17] = "submit_plan was not refused with EPERM",
		[18] = "clear_plan was not refused with EPERM",
	};
	run_child(&e, nobody_main, "unprivileged client", why, sizeof(why) / sizeof(why[0]));
	ASSERT(file_contains(e.dlog, "denied"), "the daemon log does not mention the denial");
	struct ainfo ai = agent_info(c, "guarded");
	ASSERT(ai.control_version == 0, "a denied request wrote the control lane");
	ASSERT_STR(ai.enabled, "none", "enabled after denied requests");
	tgc_close(c);
	env_teardown(&e);
}
END_TEST

/* Raw bytes on a hello'd connection; the daemon must close it. */
static void bad_bytes(const struct env *e, const void *bytes, size_t len, const char *what)
{
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	raw_write(&r, bytes, len, -1);
	raw_expect_closed(&r, what);
	raw_close(&r);
	daemon_alive(e, what);
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* A RegisterAgent on a fresh connection; the daemon keeps serving afterwards. */
static int register_on_fresh(const struct env *e, size_t n_types, uint32_t n_layers, int fd,
			     char *err, const char *what)
{
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	int rc = raw_register(&r, "raw-agent", n_types, n_layers, fd, err);
	raw_close(&r);
	daemon_alive(e, what);
	return rc;
}

START_TEST(test_bad_input)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	uint8_t frame[64];

	/* A frame announcing more than TGP_MAX_FRAME bytes. */
	put_be32(frame, TGP_MAX_FRAME + 1);
	bad_bytes(&e, frame, 4, "an oversize frame header");

	/* Garbage where a protobuf body should be. */
	put_be32(frame, 8);
	memset(frame + 4, 0xff, 8);
	bad_bytes(&e, frame, 12, "a garbage body");

	/* An envelope with no body (tgp_frame_encode refuses those: packed by hand). */
	Toggle__Envelope empty = TOGGLE__ENVELOPE__INIT;
	empty.id = 9;
	size_t n = toggle__envelope__get_packed_size(&empty);
	ASSERT(n + 4 <= sizeof(frame), "packed size %zu", n);
	put_be32(frame, (uint32_t)n);
	toggle__envelope__pack(&empty, frame + 4);
	bad_bytes(&e, frame, n + 4, "an envelope without a body");

	/* A truncated frame, then close. */
	{
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		put_be32(frame, 100);
		memset(frame + 4, 0, 10);
		raw_write(&r, frame, 14, -1);
		raw_close(&r);
		daemon_alive(&e, "a truncated frame and close");
	}

	/* A request before hello: an error, then closed. */
	{
		struct raw r;
		raw_open(&r, &e);
		int rc = raw_status(&r, err);
		ASSERT_CODE(rc, TOGGLE_EPROTO, err);
		raw_expect_closed(&r, "a request before hello");
		raw_close(&r);
		daemon_alive(&e, "a request before hello");
	}

	/* A reply-only body: EPROTO, and the connection stays usable. */
	{
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		Toggle__Ack ack = TOGGLE__ACK__INIT;
		Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
		env.body_case = TOGGLE__ENVELOPE__BODY_ACK;
		env.ack = &ack;
		int rc = raw_call(&r, &env, -1, TOGGLE__ENVELOPE__BODY_ACK, err);
		ASSERT_CODE(rc, TOGGLE_EPROTO, err);
		rc = raw_status(&r, err);
		ASSERT_CODE(rc, 0, err);
		raw_close(&r);
		daemon_alive(&e, "an Ack sent as a request");
	}

	/* RegisterAgent without an fd, with fds that are not a sealed region. */
	int rc = register_on_fresh(&e, NT, NL, -1, err, "a registration without an fd");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	int mfd = memfd_create("check-unsealed", MFD_CLOEXEC);
	ASSERT(mfd >= 0 && ftruncate(mfd, 1 << 20) == 0, "memfd: %s", strerror(errno));
	rc = register_on_fresh(&e, NT, NL, mfd, err, "a registration with an unsealed memfd");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(mfd);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/plain-file", e.dir);
	int tfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ASSERT(tfd >= 0 && ftruncate(tfd, 1 << 20) == 0, "temp file: %s", strerror(errno));
	rc = register_on_fresh(&e, NT, NL, tfd, err, "a registration with a plain file");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(tfd);
	int sfd = memfd_create("check-small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ASSERT(sfd >= 0 && ftruncate(sfd, 4096) == 0 &&
	       fcntl(sfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0,
	       "sealed memfd: %s", strerror(errno));
	rc = register_on_fresh(&e, NT, NL, sfd, err, "a registration with a small sealed memfd");
	ASSERT_CODE(rc, TOGGLE_ESHM, err);
	close(sfd);

	/* Catalogs out of bounds, with a good region. */
	struct toggle_shm shm;
	rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	rc = register_on_fresh(&e, 0, NL, shm.fd, err, "a registration with no hook types");
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	rc = register_on_fresh(&e, NT, 300, shm.fd, err, "a registration of 300 layers");
	ASSERT_CODE(rc, TOGGLE_ERANGE, err);
	/* The same path with everything right registers (the refusals above were for their reason). */
	{
		struct tgc *c = client(&e);
		struct raw r;
		raw_open(&r, &e);
		raw_hello(&r);
		rc = raw_register(&r, "raw-agent", NT, NL, shm.fd, err);
		ASSERT_CODE(rc, 0, err);
		struct ainfo ai = agent_info(c, "raw-agent");
		ASSERT(ai.pid == (uint32_t)getpid(), "raw agent pid %u", ai.pid);
		raw_close(&r);
		agent_wait_gone(c, "raw-agent");
		tgc_close(c);
	}
	toggle_shm_unmap(&shm);

	/* Limits of SetEnabled and SubmitPlan. */
	struct tgc *c = client(&e);
	rc = rpc_set(c, NULL, TOGGLE__SET_OP__SET_OP_REPLACE, "all", TGP_MAX_WAIT_MS + 1, NULL, err);
	ASSERT_CODE(rc, TOGGLE_EINVAL, err);
	int64_t steps[65];
	const char *specs[65];
	for (int i = 0; i < 65; i++) {
		steps[i] = 1000000 + i;
		specs[i] = "all";
	}
	rc = rpc_plan(c, NULL, steps, specs, 65, err);
	ASSERT_CODE(rc, TOGGLE_ELIMIT, err);
	tgc_close(c);
	daemon_alive(&e, "refused limits");
	env_teardown(&e);
}
END_TEST

/*
 * Every handler's error path, and the dispatcher's, reaches the client as an
 * Error carrying the request's id and the handler's code, naming the agent
 * concerned (Error.agents and agent_ids) where there is one, and the
 * connection keeps serving unless the error closes it (issue 16 item 4:
 * handlers fill a reply, only the dispatcher sends it).
 */
enum bad_fill { FILL_NONE, FILL_REGISTER, FILL_SET, FILL_PLAN, FILL_HELLO };
enum bad_target { TARGET_NONE, TARGET_AGENT, TARGET_NO_SUCH_ID, TARGET_NO_SUCH_PID, TARGET_BAD_GROUP };

static const struct bad_request {
	const char *what;
	Toggle__Envelope__BodyCase body;
	const ProtobufCMessageDescriptor *desc; /* the body's message */
	enum bad_target target;                 /* its target field */
	enum bad_fill fill;                     /* its other fields (bad_build) */
	const char *arg;                        /* a name, spec or "unspecified", per fill */
	int64_t num;                            /* a wait, step or protocol version, per fill */
	int code;
	bool names_agent; /* Error.agents and agent_ids name the test's agent */
	bool closes;      /* sent with id 0: answered, then the connection is closed */
} bad_requests[] = {
#define BODY(x, m) TOGGLE__ENVELOPE__BODY_##x, &toggle__##m##__descriptor
	{"RegisterAgent without its fd", BODY(REGISTER_AGENT, register_agent_request), TARGET_NONE,
	 FILL_REGISTER, "err-new", 0, TOGGLE_ESHM, false, false},
	{"RegisterAgent named '..'", BODY(REGISTER_AGENT, register_agent_request), TARGET_NONE,
	 FILL_REGISTER, "..", 1, TOGGLE_EINVAL, false, false},
	{"ListAgents of an agent id nobody has", BODY(LIST_AGENTS, list_agents_request),
	 TARGET_NO_SUCH_ID, FILL_NONE, NULL, 0, TOGGLE_ENOAGENT, false, false},
	{"ListGraphs of group '..'", BODY(LIST_GRAPHS, list_graphs_request), TARGET_BAD_GROUP,
	 FILL_NONE, NULL, 0, TOGGLE_EINVAL, false, false},
	{"Hooks of a pid no agent has", BODY(HOOKS, hooks_request), TARGET_NO_SUCH_PID, FILL_NONE,
	 NULL, 0, TOGGLE_ENOAGENT, false, false},
	{"ShowPlan of group '..'", BODY(SHOW_PLAN, show_plan_request), TARGET_BAD_GROUP, FILL_NONE,
	 NULL, 0, TOGGLE_EINVAL, false, false},
	{"Watch of group '..'", BODY(WATCH, watch_request), TARGET_BAD_GROUP, FILL_NONE, NULL, 0,
	 TOGGLE_EINVAL, false, false},
	{"SetEnabled without an op", BODY(SET_ENABLED, set_enabled_request), TARGET_AGENT, FILL_SET,
	 "unspecified", 0, TOGGLE_EINVAL, false, false},
	{"SetEnabled waiting over the limit", BODY(SET_ENABLED, set_enabled_request), TARGET_AGENT,
	 FILL_SET, "all", TGP_MAX_WAIT_MS + 1, TOGGLE_EINVAL, false, false},
	{"SetEnabled of a hook type the agent lacks", BODY(SET_ENABLED, set_enabled_request),
	 TARGET_AGENT, FILL_SET, "no_such_type:0", 0, TOGGLE_ESPEC, true, false},
	{"SubmitPlan with no entries", BODY(SUBMIT_PLAN, submit_plan_request), TARGET_AGENT,
	 FILL_NONE, NULL, 0, TOGGLE_ELIMIT, false, false},
	{"SubmitPlan of a negative step", BODY(SUBMIT_PLAN, submit_plan_request), TARGET_AGENT,
	 FILL_PLAN, "resid_post:0", -5, TOGGLE_EINVAL, false, false},
	{"SubmitPlan of a spec the agent refuses", BODY(SUBMIT_PLAN, submit_plan_request),
	 TARGET_AGENT, FILL_PLAN, "no_such_type:0", 1000000, TOGGLE_ESPEC, true, false},
	{"ClearPlan of an agent id nobody has", BODY(CLEAR_PLAN, clear_plan_request),
	 TARGET_NO_SUCH_ID, FILL_NONE, NULL, 0, TOGGLE_ENOAGENT, false, false},
	{"an Ack sent as a request", BODY(ACK, ack), TARGET_NONE, FILL_NONE, NULL, 0, TOGGLE_EPROTO,
	 false, false},
	{"a Hello of protocol 99", BODY(HELLO, hello_request), TARGET_NONE, FILL_HELLO, NULL, 99,
	 TOGGLE_EVERSION, false, false},
	{"a request with id 0", BODY(STATUS, status_request), TARGET_NONE, FILL_NONE, NULL, 0,
	 TOGGLE_EPROTO, false, true},
#undef BODY
};

/* What one bad request points to. */
struct bad_msgs {
	void *body; /* malloc'd */
	Toggle__Selector sel;
	Toggle__PlanEntry entry;
	Toggle__PlanEntry *entries[1];
};

static Toggle__Selector bad_selector(enum bad_target t, uint64_t agent_id)
{
	switch (t) {
	case TARGET_AGENT: return sel_id(agent_id);
	case TARGET_NO_SUCH_ID: return sel_id(agent_id + 1000);
	case TARGET_NO_SUCH_PID: return sel_pid((uint32_t)getpid() + 1000000);
	default: return sel_group("..");
	}
}

static void bad_build(const struct bad_request *b, struct bad_msgs *m, Toggle__Envelope *env,
		      uint64_t agent_id)
{
	memset(m, 0, sizeof(*m));
	m->body = calloc(1, b->desc->sizeof_message);
	ASSERT(m->body, "out of memory");
	protobuf_c_message_init(b->desc, m->body);
	if (b->target != TARGET_NONE) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field_by_name(b->desc, "target");
		ASSERT(f, "%s: no target field", b->what);
		m->sel = bad_selector(b->target, agent_id);
		*(Toggle__Selector **)(void *)((char *)m->body + f->offset) = &m->sel;
	}
	toggle__envelope__init(env);
	env->body_case = b->body;
	env->hello = m->body; /* every body member is a pointer in one union */
	if (b->fill == FILL_REGISTER) {
		Toggle__RegisterAgentRequest *reg = m->body;
		reg->name = (char *)(uintptr_t)b->arg;
		reg->n_hook_types = NT;
		reg->hook_types = (char **)(uintptr_t)type_names;
		reg->n_layers = NL;
	} else if (b->fill == FILL_SET) {
		Toggle__SetEnabledRequest *set = m->body;
		bool unspecified = strcmp(b->arg, "unspecified") == 0;
		set->op = unspecified ? TOGGLE__SET_OP__SET_OP_UNSPECIFIED : TOGGLE__SET_OP__SET_OP_REPLACE;
		set->spec = (char *)(uintptr_t)(unspecified ? "all" : b->arg);
		set->wait_ms = (uint32_t)b->num;
	} else if (b->fill == FILL_PLAN) {
		Toggle__SubmitPlanRequest *plan = m->body;
		toggle__plan_entry__init(&m->entry);
		m->entry.step = b->num;
		m->entry.spec = (char *)(uintptr_t)b->arg;
		m->entries[0] = &m->entry;
		plan->n_entries = 1;
		plan->entries = m->entries;
	} else if (b->fill == FILL_HELLO) {
		((Toggle__HelloRequest *)m->body)->protocol_version = (uint32_t)b->num;
	}
}

/* Send one bad request (a registration with shm_fd where its num says so);
 * its Error must come with its id, code and agents. */
static void bad_check(const struct env *e, const struct bad_request *b, uint64_t agent_id,
		      int shm_fd)
{
	struct raw r;
	raw_open(&r, e);
	raw_hello(&r);
	struct bad_msgs m;
	Toggle__Envelope env;
	bad_build(b, &m, &env, agent_id);
	env.id = b->closes ? 0 : 4200 + (uint64_t)(b - bad_requests);
	raw_send_env(&r, &env, b->fill == FILL_REGISTER && b->num ? shm_fd : -1);
	free(m.body);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(&r, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "%s: no reply (%s)", b->what, got == 0 ? "closed" : "timed out");
	ASSERT(rep->id == env.id, "%s: reply id %llu, request id %llu", b->what,
	       (unsigned long long)rep->id, (unsigned long long)env.id);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR, "%s: reply body %d, not an Error",
	       b->what, (int)rep->body_case);
	const Toggle__Error *er = rep->error;
	ASSERT((int)er->code == b->code, "%s: code %d (%s), expected %d (%s): %s", b->what,
	       (int)er->code, toggle_strerror((int)er->code), b->code, toggle_strerror(b->code),
	       er->message);
	ASSERT(er->message && er->message[0], "%s: an Error without a message", b->what);
	if (b->names_agent)
		ASSERT(er->n_agents == 1 && strcmp(er->agents[0], "err-agent") == 0 &&
			       er->n_agent_ids == 1 && er->agent_ids[0] == agent_id,
		       "%s: the Error names %zu agents (%s), %zu ids (%llu), not err-agent id %llu",
		       b->what, er->n_agents, er->n_agents ? er->agents[0] : "-", er->n_agent_ids,
		       er->n_agent_ids ? (unsigned long long)er->agent_ids[0] : 0ULL,
		       (unsigned long long)agent_id);
	else
		ASSERT(er->n_agents == 0 && er->n_agent_ids == 0, "%s: the Error names %zu agents",
		       b->what, er->n_agents);
	toggle__envelope__free_unpacked(rep, NULL);
	if (b->closes) {
		raw_expect_closed(&r, b->what);
	} else {
		char err[ERRLEN];
		int rc = raw_status(&r, err);
		ASSERT_CODE(rc, 0, err);
	}
	raw_close(&r);
}

START_TEST(test_error_replies)
{
	struct env e;
	env_setup(&e);
	char err[ERRLEN];
	struct toggle_shm shm;
	int rc = toggle_shm_create(&shm, err, ERRLEN);
	ASSERT_CODE(rc, 0, err);
	struct raw agent;
	raw_open(&agent, &e);
	raw_hello(&agent);
	rc = raw_register(&agent, "err-agent", NT, NL, shm.fd, err);
	ASSERT_CODE(rc, 0, err);
	struct tgc *c = client(&e);
	uint64_t id = agent_info(c, "err-agent").id;
	for (size_t i = 0; i < sizeof(bad_requests) / sizeof(bad_requests[0]); i++)
		bad_check(&e, &bad_requests[i], id, shm.fd);
	/* Nothing of it reached the agent: the daemon set no standing set, no plan. */
	struct ainfo ai = agent_info(c, "err-agent");
	ASSERT(ai.control_version == 0 && ai.pending_plan == 0,
	       "refused requests changed the agent: control version %llu, %u plan entries",
	       (unsigned long long)ai.control_version, ai.pending_plan);
	tgc_close(c);
	raw_close(&agent);
	toggle_shm_unmap(&shm);
	daemon_alive(&e, "the bad requests");
	env_teardown(&e);
}
END_TEST

/* ======================================================================== */

static Suite *daemon_security_suite(void)
{
	Suite *s = suite_create("daemon_security");
	TCase *tc = add_tcase(s, "security");
	tcase_add_test(tc, test_permission_denied);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_error_replies);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_security_suite());
}
