/*
 * fixture_rpc.c - the end-to-end suites' requests (check_daemon_*.c): client
 * RPCs through the client library, what list_agents and watch say, and raw
 * connections whose frames are built by hand.  Moved out of check_daemon.c
 * (issue 29).
 */
#include "fixture_daemon.h"


/* ======================================================================== */
/* Client RPCs                                                               */
/* ======================================================================== */

struct tgc *client(const struct env *e)
{
	struct tgc *c = NULL;
	char err[ERRLEN];
	int rc = tgc_connect(e->sock, 5000, &c, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	return c;
}

/* One request with body msg (every body member is a pointer in one union). */
int rpc(struct tgc *c, Toggle__Envelope__BodyCase body, void *msg, Toggle__Envelope **rep,
	char *err)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = body;
	env.hello = msg;
	return tgc_call(c, &env, rep, RPC_TIMEOUT_MS, err, ERRLEN);
}

int rpc_status(struct tgc *c, Toggle__Envelope **rep, char *err)
{
	Toggle__StatusRequest m = TOGGLE__STATUS_REQUEST__INIT;
	return rpc(c, TOGGLE__ENVELOPE__BODY_STATUS, &m, rep, err);
}

int rpc_list_agents(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_LIST_AGENTS, &m, rep, err);
}

int rpc_list_graphs(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__ListGraphsRequest m = TOGGLE__LIST_GRAPHS_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_LIST_GRAPHS, &m, rep, err);
}

int rpc_hooks(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__HooksRequest m = TOGGLE__HOOKS_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_HOOKS, &m, rep, err);
}

int rpc_show_plan(struct tgc *c, Toggle__Selector *sel, Toggle__Envelope **rep, char *err)
{
	Toggle__ShowPlanRequest m = TOGGLE__SHOW_PLAN_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SHOW_PLAN, &m, rep, err);
}

int rpc_clear_plan(struct tgc *c, Toggle__Selector *sel, char *err)
{
	Toggle__ClearPlanRequest m = TOGGLE__CLEAR_PLAN_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_CLEAR_PLAN, &m, NULL, err);
}

int rpc_watch(struct tgc *c, Toggle__Selector *sel, char *err)
{
	Toggle__WatchRequest m = TOGGLE__WATCH_REQUEST__INIT;
	m.target = sel;
	return rpc(c, TOGGLE__ENVELOPE__BODY_WATCH, &m, NULL, err);
}

int rpc_set(struct tgc *c, Toggle__Selector *sel, Toggle__SetOp op, const char *spec,
	    uint32_t wait_ms, Toggle__Envelope **rep, char *err)
{
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.target = sel;
	m.op = op;
	m.spec = (char *)(uintptr_t)spec;
	m.wait_ms = wait_ms;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SET_ENABLED, &m, rep, err);
}

/* Set and wait until applied; returns the version the reply names for the one target. */
uint64_t set_applied(struct tgc *c, Toggle__Selector *sel, Toggle__SetOp op,
		     const char *spec)
{
	Toggle__Envelope *rep = NULL;
	char err[ERRLEN];
	int rc = rpc_set(c, sel, op, spec, WAIT_MS, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_SET_ENABLED_REPLY, "reply body %d",
	       (int)rep->body_case);
	ASSERT(rep->set_enabled_reply->n_versions >= 1, "no versions in the reply");
	uint64_t v = rep->set_enabled_reply->versions[0]->version;
	toggle__envelope__free_unpacked(rep, NULL);
	return v;
}

int rpc_plan(struct tgc *c, Toggle__Selector *sel, const int64_t *steps,
	     const char *const *specs, size_t n, char *err)
{
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	Toggle__PlanEntry *e = calloc(n ? n : 1, sizeof(*e));
	Toggle__PlanEntry **ep = calloc(n ? n : 1, sizeof(*ep));
	ASSERT(e && ep, "out of memory");
	for (size_t i = 0; i < n; i++) {
		toggle__plan_entry__init(&e[i]);
		e[i].step = steps[i];
		e[i].spec = (char *)(uintptr_t)specs[i];
		ep[i] = &e[i];
	}
	m.target = sel;
	m.n_entries = n;
	m.entries = ep;
	int rc = rpc(c, TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &m, NULL, err);
	free(e);
	free(ep);
	return rc;
}

/* A plan of relative entries: each step is the agent's current step + after[i]. */
int rpc_plan_after(struct tgc *c, Toggle__Selector *sel, const int64_t *after,
		   const char *const *specs, size_t n, char *err)
{
	Toggle__SubmitPlanRequest m = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	Toggle__PlanEntry e[8], *ep[8];
	ASSERT(n <= 8, "rpc_plan_after takes 8 entries at most");
	for (size_t i = 0; i < n; i++) {
		toggle__plan_entry__init(&e[i]);
		e[i].step = -1;
		e[i].after = after[i];
		e[i].spec = (char *)(uintptr_t)specs[i];
		ep[i] = &e[i];
	}
	m.target = sel;
	m.n_entries = n;
	m.entries = ep;
	return rpc(c, TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN, &m, NULL, err);
}

Toggle__Selector sel_group(const char *group)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_GROUP;
	s.group = (char *)(uintptr_t)group;
	return s;
}

Toggle__Selector sel_id(uint64_t id)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	s.agent_id = id;
	return s;
}

Toggle__Selector sel_pid(uint32_t pid)
{
	Toggle__Selector s = TOGGLE__SELECTOR__INIT;
	s.sel_case = TOGGLE__SELECTOR__SEL_PID;
	s.pid = pid;
	return s;
}

void ainfo_copy(struct ainfo *o, const Toggle__AgentInfo *m)
{
	memset(o, 0, sizeof(*o));
	o->id = m->agent_id;
	o->control_version = m->control_version;
	o->applied_version = m->applied_version;
	o->anomalies = m->anomalies;
	o->pid = m->pid;
	o->uid = m->uid;
	o->mode = m->mode;
	o->n_layers = m->n_layers;
	o->graphs = m->graphs;
	o->driver_version = m->driver_version;
	o->step = m->step;
	o->pending_plan = m->pending_plan;
	snprintf(o->name, sizeof(o->name), "%s", m->name);
	snprintf(o->group, sizeof(o->group), "%s", m->group ? m->group : "");
	snprintf(o->enabled, sizeof(o->enabled), "%s", m->enabled);
	o->n_types = m->n_hook_types;
	for (size_t i = 0; i < m->n_hook_types && i < NT + 2; i++)
		snprintf(o->types[i], sizeof(o->types[i]), "%s", m->hook_types[i]);
}

/* Is the agent listed (then *out)?  How many agents are listed in all (*total)? */
bool agent_lookup(struct tgc *c, const char *name, struct ainfo *out, size_t *total)
{
	Toggle__Envelope *rep = NULL;
	char err[ERRLEN];
	int rc = rpc_list_agents(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->body_case == TOGGLE__ENVELOPE__BODY_AGENTS, "reply body %d", (int)rep->body_case);
	bool found = false;
	for (size_t i = 0; i < rep->agents->n_agents; i++) {
		if (strcmp(rep->agents->agents[i]->name, name) == 0) {
			if (out)
				ainfo_copy(out, rep->agents->agents[i]);
			found = true;
		}
	}
	if (total)
		*total = rep->agents->n_agents;
	toggle__envelope__free_unpacked(rep, NULL);
	return found;
}

struct ainfo agent_info(struct tgc *c, const char *name)
{
	struct ainfo ai;
	ASSERT(agent_lookup(c, name, &ai, NULL), "agent %s is not listed", name);
	return ai;
}

/* Wait until the agent is listed and has begun min_step (-1: registered is enough). */
struct ainfo agent_wait_listed(struct tgc *c, struct agent_proc *ap, int64_t min_step)
{
	struct ainfo ai;
	uint64_t end = now_ms() + 10000;
	while (!agent_lookup(c, ap->name, &ai, NULL) || ai.step < min_step) {
		agent_assert_alive(ap);
		ASSERT(now_ms() < end, "agent %s not listed (at step %lld) after 10 s", ap->name,
		       (long long)min_step);
		sleep_ms(10);
	}
	return ai;
}

void agent_wait_gone(struct tgc *c, const char *name)
{
	uint64_t end = now_ms() + 5000;
	while (agent_lookup(c, name, NULL, NULL)) {
		ASSERT(now_ms() < end, "agent %s still listed 5 s after it died", name);
		sleep_ms(10);
	}
}

/* The daemon answers a status request on a fresh connection. */
void daemon_alive(const struct env *e, const char *after)
{
	struct tgc *c = NULL;
	char err[ERRLEN];
	int rc = tgc_connect(e->sock, 5000, &c, err, sizeof(err));
	ASSERT(rc == 0, "after %s: cannot connect: %s", after, err);
	rc = rpc_status(c, NULL, err);
	ASSERT(rc == 0, "after %s: status: %s", after, err);
	tgc_close(c);
}

/* Wait for an event of kind about agent name; other events are skipped. */
struct evinfo event_wait(struct tgc *c, Toggle__EventKind kind, const char *name,
			 int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		uint64_t now = now_ms();
		ASSERT(now < end, "no event %d about %s within %d ms", (int)kind, name, timeout_ms);
		Toggle__Envelope *ev = NULL;
		int got = tgc_next_event(c, &ev, (int)(end - now));
		ASSERT(got >= 0, "watch connection failed: %d", got);
		if (got == 0)
			continue;
		const Toggle__Event *m = ev->event;
		bool match = m->kind == kind && strcmp(m->agent_name, name) == 0;
		struct evinfo out = {.agent_id = m->agent_id, .version = m->version, .step = m->step};
		toggle__envelope__free_unpacked(ev, NULL);
		if (match)
			return out;
	}
}

/* ======================================================================== */
/* Raw connections (frames built by hand, fds passed with SCM_RIGHTS)        */
/* ======================================================================== */

void raw_open(struct raw *r, const struct env *e)
{
	struct sockaddr_un sa;
	socklen_t len;
	ASSERT(tgp_unix_address(e->sock, &sa, &len) == 0, "socket path %s", e->sock);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(r->fd >= 0, "socket: %s", strerror(errno));
	ASSERT(connect(r->fd, (struct sockaddr *)&sa, len) == 0, "connect %s: %s", e->sock,
	       strerror(errno));
	tgp_reader_init(&r->rd);
	r->next_id = 100;
}

void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	tgp_reader_free(&r->rd);
}

/* Write bytes, the first with pass_fd (if >= 0) as SCM_RIGHTS. */
void raw_write(struct raw *r, const void *buf, size_t len, int pass_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = len};
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
		ssize_t n = sendmsg(r->fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		ASSERT(n > 0, "sendmsg: %s", n < 0 ? strerror(errno) : "no progress");
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
	}
}

void raw_send_env(struct raw *r, Toggle__Envelope *env, int pass_fd)
{
	uint8_t *buf;
	size_t len;
	int rc = tgp_frame_encode(env, &buf, &len);
	ASSERT_CODE(rc, 0, "tgp_frame_encode");
	raw_write(r, buf, len, pass_fd);
	free(buf);
}

/* 1 with *env, 0 when the daemon closed the connection, TOGGLE_ETIMEDOUT. */
int raw_recv(struct raw *r, Toggle__Envelope **env, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		int got = tgp_reader_next(&r->rd, env);
		ASSERT(got >= 0, "the daemon sent a malformed frame: %s", toggle_strerror(got));
		if (got == 1)
			return 1;
		uint64_t now = now_ms();
		if (now >= end)
			return TOGGLE_ETIMEDOUT;
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		int n = poll(&p, 1, (int)(end - now));
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			return TOGGLE_ETIMEDOUT;
		uint8_t buf[4096];
		ssize_t k = read(r->fd, buf, sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return 0; /* end of file or reset: closed */
		ASSERT(tgp_reader_feed(&r->rd, buf, (size_t)k) == 0, "frame reader refused bytes");
	}
}

/* Send req; the reply must come: 0 if its body is want, else the Error's code (err = message). */
int raw_call(struct raw *r, Toggle__Envelope *req, int pass_fd,
	     Toggle__Envelope__BodyCase want, char *err)
{
	req->id = ++r->next_id;
	raw_send_env(r, req, pass_fd);
	Toggle__Envelope *rep = NULL;
	int got = raw_recv(r, &rep, RPC_TIMEOUT_MS);
	ASSERT(got == 1, "no reply to message %d: %s", (int)req->body_case,
	       got == 0 ? "connection closed" : "timed out");
	ASSERT(rep->id == req->id, "reply id %llu to request %llu", (unsigned long long)rep->id,
	       (unsigned long long)req->id);
	int rc = 0;
	err[0] = '\0';
	if (rep->body_case == TOGGLE__ENVELOPE__BODY_ERROR) {
		rc = rep->error->code;
		snprintf(err, ERRLEN, "%s", rep->error->message);
		ASSERT(rc < 0, "Error with code %d", rc);
	} else {
		ASSERT(rep->body_case == want, "reply body %d, expected %d", (int)rep->body_case,
		       (int)want);
	}
	toggle__envelope__free_unpacked(rep, NULL);
	return rc;
}

int raw_hello_version(struct raw *r, uint32_t version, char *err)
{
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = version;
	h.client = (char *)(uintptr_t)"check_daemon-raw";
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	return raw_call(r, &env, -1, TOGGLE__ENVELOPE__BODY_HELLO_REPLY, err);
}

void raw_hello(struct raw *r)
{
	char err[ERRLEN];
	int rc = raw_hello_version(r, TGP_PROTOCOL_VERSION, err);
	ASSERT_CODE(rc, 0, err);
}

int raw_status(struct raw *r, char *err)
{
	Toggle__StatusRequest m = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	env.status = &m;
	return raw_call(r, &env, -1, TOGGLE__ENVELOPE__BODY_STATUS_REPLY, err);
}

/* The daemon closes the connection within 5 s (what it sends before that is dropped). */
void raw_expect_closed(struct raw *r, const char *after)
{
	for (;;) {
		Toggle__Envelope *env = NULL;
		int got = raw_recv(r, &env, 5000);
		ASSERT(got != TOGGLE_ETIMEDOUT, "after %s: the daemon kept the connection open", after);
		if (got == 0)
			return;
		toggle__envelope__free_unpacked(env, NULL);
	}
}

int raw_register(struct raw *r, const char *name, size_t n_types, uint32_t n_layers,
		 int pass_fd, char *err)
{
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.n_hook_types = n_types;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = n_layers;
	m.mode = 0;
	m.driver_version = 0;
	m.shm_size = 0;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	return raw_call(r, &env, pass_fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err);
}

/*
 * Submit entries at cur+offsets[k] (cur = the agent's step as the daemon
 * sees it) to the one agent; retried if the agent outran the request.
 * Returns cur.
 */
int64_t plan_ahead(struct tgc *c, const char *name, const int64_t *offsets,
		   const char *const *specs, size_t n)
{
	char err[ERRLEN];
	int64_t steps[8];
	ASSERT(n <= 8, "plan_ahead takes 8 entries at most");
	for (int attempt = 0; attempt < 3; attempt++) {
		int64_t cur = agent_info(c, name).step;
		for (size_t k = 0; k < n; k++)
			steps[k] = cur + offsets[k];
		int rc = rpc_plan(c, NULL, steps, specs, n, err);
		if (rc == TOGGLE_ELATE)
			continue;
		ASSERT_CODE(rc, 0, err);
		return cur;
	}
	ASSERT(0, "plans %lld steps ahead were late three times", (long long)offsets[0]);
}

/* show_plan of the one agent: its entries as "step=spec;..." relative to base. */
void plan_text(struct tgc *c, int64_t base, char *out, size_t len)
{
	char err[ERRLEN];
	Toggle__Envelope *rep = NULL;
	int rc = rpc_show_plan(c, NULL, &rep, err);
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->plan->n_plans == 1, "show_plan lists %zu agents", rep->plan->n_plans);
	const Toggle__AgentPlan *p = rep->plan->plans[0];
	out[0] = '\0';
	for (size_t i = 0; i < p->n_entries; i++) {
		size_t used = strlen(out);
		snprintf(out + used, len - used, "+%lld=%s;", (long long)(p->entries[i]->step - base),
			 p->entries[i]->spec);
	}
	toggle__envelope__free_unpacked(rep, NULL);
}


int raw_register_group(struct raw *r, const char *name, const char *group, int fd,
		       char *err)
{
	Toggle__RegisterAgentRequest m = TOGGLE__REGISTER_AGENT_REQUEST__INIT;
	m.name = (char *)(uintptr_t)name;
	m.group = (char *)(uintptr_t)group;
	m.n_hook_types = NT;
	m.hook_types = (char **)(uintptr_t)type_names;
	m.n_layers = NL;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_AGENT;
	env.register_agent = &m;
	return raw_call(r, &env, fd, TOGGLE__ENVELOPE__BODY_REGISTER_REPLY, err);
}
