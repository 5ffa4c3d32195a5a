/*
 * check_proto.c - wire contract v1 (proto/graphtoggle/v1/toggle.proto): the ErrorCode enum
 * equals toggle_error.h; forward compatibility against the real toggled
 * (unknown fields ignored, an unknown request answered with UNIMPLEMENTED on
 * the same connection, a newer client's version range accepted, SetOp
 * UNSPECIFIED refused, id 0 refused); errors name agents by id as well.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "tgclient.h"
#include "testutil.h"
#include "util.h"

#ifndef TOGGLED_BIN
#define TOGGLED_BIN "build/toggled-san"
#endif
#ifndef DEMO_AGENT_BIN
#define DEMO_AGENT_BIN "build/examples/demo_agent"
#endif

/* ---- the ErrorCode enum against toggle_error.h ---- */

/* The one error list, as the header writes it. */
struct list_error {
	int code;
	const char *name; /* without TOGGLE_E */
};
#define LIST_ERROR(code, name, desc) {code, #name},
static const struct list_error list_errors[] = {TOGGLE_ERROR_MAP(LIST_ERROR)};
#undef LIST_ERROR
#define N_LIST_ERRORS (sizeof(list_errors) / sizeof(list_errors[0]))

/* Every TOGGLE_E<NAME> = <n> of TOGGLE_ERROR_MAP is ERROR_CODE_<NAME> = <n> in
 * the .proto and the reverse; TOGGLE_OK is ERROR_CODE_UNSPECIFIED.  The
 * library's toggle_err_name() and toggle_strerror() know each code. */
START_TEST(test_error_codes_agree)
{
	const ProtobufCEnumDescriptor *d = &toggle__error_code__descriptor;
	for (size_t i = 0; i < N_LIST_ERRORS; i++) {
		const struct list_error *e = &list_errors[i];
		char pname[80], cname[80];
		snprintf(pname, sizeof(pname), "ERROR_CODE_%s", e->name);
		snprintf(cname, sizeof(cname), "TOGGLE_E%s", e->name);
		const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(d, pname);
		ck_assert_msg(v != NULL, "%s (%d) has no %s in toggle.proto", cname, e->code, pname);
		ck_assert_msg(v->value == e->code, "%s is %d, %s is %d", cname, e->code, pname,
			      v->value);
		ck_assert_msg(e->code < 0 && e->code >= TOGGLE_ERROR_MIN, "%s = %d outside [%d, -1]",
			      cname, e->code, TOGGLE_ERROR_MIN);
		ck_assert_pstr_eq(toggle_err_name(e->code), cname);
		ck_assert_str_ne(toggle_strerror(e->code), "unknown error");
	}
	/* The .proto has exactly those, plus UNSPECIFIED for TOGGLE_OK. */
	for (unsigned i = 0; i < d->n_values; i++) {
		const ProtobufCEnumValue *v = &d->values[i];
		if (v->value == TOGGLE_OK) {
			ck_assert_str_eq(v->name, "ERROR_CODE_UNSPECIFIED");
			continue;
		}
		ck_assert_msg(strncmp(v->name, "ERROR_CODE_", 11) == 0, "%s: no ERROR_CODE_ prefix",
			      v->name);
		const struct list_error *e = NULL;
		for (size_t k = 0; k < N_LIST_ERRORS && !e; k++)
			if (list_errors[k].code == v->value)
				e = &list_errors[k];
		ck_assert_msg(e != NULL, "%s (%d) of toggle.proto is not in TOGGLE_ERROR_MAP", v->name,
			      v->value);
		ck_assert_msg(strcmp(e->name, v->name + 11) == 0, "%s (%d) is TOGGLE_E%s in the list",
			      v->name, v->value, e->name);
	}
	ck_assert_uint_eq(d->n_values, N_LIST_ERRORS + 1);
	ck_assert_int_eq(TOGGLE_ERROR_MIN, -(int)N_LIST_ERRORS);
	ck_assert_int_eq(TOGGLE_OK, 0);
	ck_assert_pstr_eq(toggle_err_name(TOGGLE_OK), "TOGGLE_OK");
	/* Codes outside the list: NULL and "unknown error", as toggle_error.h says. */
	const int outside[] = {TOGGLE_ERROR_MIN - 1, 1, -1000};
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		ck_assert_ptr_null(toggle_err_name(outside[i]));
		ck_assert_str_eq(toggle_strerror(outside[i]), "unknown error");
	}
}
END_TEST

/* Every enum's zero value is *_UNSPECIFIED. */
START_TEST(test_enum_zero_is_unspecified)
{
	const ProtobufCEnumDescriptor *const all[] = {&toggle__error_code__descriptor,
						      &toggle__set_op__descriptor,
						      &toggle__event_kind__descriptor};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		const ProtobufCEnumValue *z = protobuf_c_enum_descriptor_get_value(all[i], 0);
		ck_assert_msg(z != NULL, "%s has no zero value", all[i]->name);
		size_t n = strlen(z->name);
		ck_assert_msg(n > 12 && strcmp(z->name + n - 12, "_UNSPECIFIED") == 0,
			      "%s: zero value is %s", all[i]->name, z->name);
	}
}
END_TEST

/* ---- against the real daemon ---- */

struct env {
	char dir[64], sock[128], state[128], log[128];
	pid_t daemon, agent;
};
static struct env g;

static uint64_t now_ms(void)
{
	return util_mono_ms();
}

static pid_t spawn(char *const argv[])
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(99);
		int fd = open(g.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static void stop(pid_t *pid, bool must_exit_0)
{
	if (*pid <= 0)
		return;
	int st = 0;
	kill(*pid, SIGTERM);
	uint64_t end = now_ms() + 20000;
	while (waitpid(*pid, &st, WNOHANG) != *pid) {
		if (now_ms() > end) {
			kill(*pid, SIGKILL);
			waitpid(*pid, &st, 0);
			break;
		}
		usleep(5000);
	}
	*pid = 0;
	if (must_exit_0)
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "toggled ended with status %#x (log: %s)", st, g.log);
}

static struct tgc *client(void)
{
	struct tgc *c = NULL;
	char err[512];
	int rc = tgc_connect(g.sock, 10000, &c, err, sizeof(err));
	ck_assert_msg(rc == 0, "connect: %s", err);
	return c;
}

static void setup(void)
{
	snprintf(g.dir, sizeof(g.dir), "/tmp/check_proto.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(g.dir));
	snprintf(g.sock, sizeof(g.sock), "%s/t.sock", g.dir);
	snprintf(g.state, sizeof(g.state), "%s/state", g.dir);
	snprintf(g.log, sizeof(g.log), "%s/log", g.dir);
	char *argv[] = {TOGGLED_BIN, "--socket", g.sock, "--state-dir", g.state, NULL};
	g.daemon = spawn(argv);
	uint64_t end = now_ms() + 10000;
	for (;;) {
		struct tgc *c = NULL;
		if (tgc_connect(g.sock, 1000, &c, NULL, 0) == 0) {
			tgc_close(c);
			break;
		}
		ck_assert_msg(now_ms() < end, "toggled does not answer on %s", g.sock);
		usleep(10000);
	}
}

static void teardown(void)
{
	stop(&g.agent, false);
	stop(&g.daemon, true);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "check_proto: could not remove %s\n", g.dir);
}

/* A raw connection without tgclient's hello. */
struct raw {
	int fd;
	struct tgp_reader rd;
};

static void raw_open(struct raw *r)
{
	struct sockaddr_un sa;
	socklen_t len;
	ck_assert_int_eq(tgp_unix_address(g.sock, &sa, &len), 0);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(r->fd, 0);
	ck_assert_int_eq(connect(r->fd, (struct sockaddr *)&sa, len), 0);
	tgp_reader_init(&r->rd);
}

static void raw_close(struct raw *r)
{
	close(r->fd);
	tgp_reader_free(&r->rd);
}

static void raw_bytes(struct raw *r, const void *p, size_t n)
{
	ck_assert_int_eq(send(r->fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void raw_env(struct raw *r, const Toggle__Envelope *env)
{
	uint8_t *buf;
	size_t len;
	ck_assert_int_eq(tgp_frame_encode(env, &buf, &len), 0);
	raw_bytes(r, buf, len);
	free(buf);
}

/* 1 with *env, 0 when closed, TOGGLE_ETIMEDOUT. */
static int raw_recv(struct raw *r, Toggle__Envelope **env)
{
	uint64_t end = now_ms() + 10000;
	for (;;) {
		int got = tgp_reader_next(&r->rd, env);
		ck_assert_int_ge(got, 0);
		if (got == 1)
			return 1;
		uint64_t now = now_ms();
		if (now >= end)
			return TOGGLE_ETIMEDOUT;
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		if (poll(&p, 1, (int)(end - now)) <= 0)
			continue;
		uint8_t buf[4096];
		ssize_t k = read(r->fd, buf, sizeof(buf));
		if (k <= 0)
			return 0;
		ck_assert_int_eq(tgp_reader_feed(&r->rd, buf, (size_t)k), 0);
	}
}

static Toggle__Envelope *raw_hello(struct raw *r, uint32_t min, uint32_t max)
{
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = max;
	h.min_protocol_version = min;
	h.client = "check_proto";
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 1;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	raw_env(r, &env);
	Toggle__Envelope *rep = NULL;
	ck_assert_int_eq(raw_recv(r, &rep), 1);
	ck_assert_uint_eq(rep->id, 1);
	return rep;
}

/* Frame a hand-made envelope body. */
static size_t frame(uint8_t *out, const uint8_t *body, size_t n)
{
	out[0] = 0;
	out[1] = 0;
	out[2] = (uint8_t)(n >> 8);
	out[3] = (uint8_t)n;
	memcpy(out + 4, body, n);
	return n + 4;
}

START_TEST(test_unknown_fields_ignored)
{
	struct raw r;
	raw_open(&r);
	/* Hello{protocol_version = 2, field 77 = "future"} + an unknown envelope field 999. */
	const uint8_t hello[] = {
		0x08, 0x01,                                           /* id 1 */
		0x52, 0x0b,                                           /* hello (10), 11 bytes */
		0x08, TGP_PROTOCOL_VERSION,                           /* protocol_version */
		0xea, 0x04, 0x06, 'f', 'u', 't', 'u', 'r', 'e',       /* field 77, "future" */
		0xb8, 0x3e, 0x05,                                     /* field 999 varint 5 */
	};
	uint8_t buf[128];
	raw_bytes(&r, buf, frame(buf, hello, sizeof(hello)));
	Toggle__Envelope *rep = NULL;
	ck_assert_int_eq(raw_recv(&r, &rep), 1);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_HELLO_REPLY);
	ck_assert_uint_eq(rep->hello_reply->protocol_version, TGP_PROTOCOL_VERSION);
	toggle__envelope__free_unpacked(rep, NULL);
	/* StatusRequest{field 5 = fixed64, field 6 = "x"}: answered as a plain status. */
	const uint8_t status[] = {
		0x08, 0x07,                                           /* id 7 */
		0x92, 0x02, 0x0c,                                     /* status (34), 12 bytes */
		0x29, 1, 2, 3, 4, 5, 6, 7, 8,                         /* field 5, fixed64 */
		0x32, 0x01, 'x',                                      /* field 6, "x" */
	};
	raw_bytes(&r, buf, frame(buf, status, sizeof(status)));
	ck_assert_int_eq(raw_recv(&r, &rep), 1);
	ck_assert_uint_eq(rep->id, 7);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_STATUS_REPLY);
	ck_assert_uint_eq(rep->status_reply->protocol_version, TGP_PROTOCOL_VERSION);
	toggle__envelope__free_unpacked(rep, NULL);
	raw_close(&r);
}
END_TEST

START_TEST(test_unknown_request_unimplemented)
{
	struct tgc *c = client();
	/* Envelope{id 8, field 99 (no such body; 60 is RecordRequest now), empty}. */
	const uint8_t unknown[] = {0x08, 0x08, 0x9a, 0x06, 0x00};
	uint8_t buf[32];
	ck_assert_int_eq(tgc_send_raw(c, buf, frame(buf, unknown, sizeof(unknown))), 0);
	Toggle__Envelope *rep = NULL;
	ck_assert_int_eq(tgc_recv(c, &rep, 10000), 1);
	ck_assert_uint_eq(rep->id, 8);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_ERROR);
	ck_assert_int_eq(rep->error->code, TOGGLE__ERROR_CODE__ERROR_CODE_UNIMPLEMENTED);
	ck_assert_int_eq((int)rep->error->code, TOGGLE_EUNIMPLEMENTED);
	ck_assert_ptr_nonnull(strstr(rep->error->message, "field 99"));
	toggle__envelope__free_unpacked(rep, NULL);
	/* The same connection keeps serving. */
	Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope req = TOGGLE__ENVELOPE__INIT;
	req.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	req.status = &st;
	char err[256];
	ck_assert_int_eq(tgc_call(c, &req, &rep, 10000, err, sizeof(err)), 0);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_STATUS_REPLY);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
}
END_TEST

START_TEST(test_version_range)
{
	struct raw r;
	raw_open(&r);
	/* Newer client speaking 3..9 only: VERSION, and the connection stays. */
	Toggle__Envelope *rep = raw_hello(&r, TGP_PROTOCOL_VERSION + 1, 9);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_ERROR);
	ck_assert_int_eq((int)rep->error->code, TOGGLE_EVERSION);
	toggle__envelope__free_unpacked(rep, NULL);
	/* Newer client that also speaks this version: accepted at this version. */
	rep = raw_hello(&r, 1, 9);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_HELLO_REPLY);
	ck_assert_uint_eq(rep->hello_reply->protocol_version, TGP_PROTOCOL_VERSION);
	toggle__envelope__free_unpacked(rep, NULL);
	raw_close(&r);
	/* A protocol 1 client (no min): refused. */
	raw_open(&r);
	rep = raw_hello(&r, 0, 1);
	ck_assert_int_eq((int)rep->error->code, TOGGLE_EVERSION);
	toggle__envelope__free_unpacked(rep, NULL);
	raw_close(&r);
}
END_TEST

START_TEST(test_request_id_zero_refused)
{
	struct tgc *c = client();
	const uint8_t status[] = {0x92, 0x02, 0x00}; /* status, no id */
	uint8_t buf[16];
	ck_assert_int_eq(tgc_send_raw(c, buf, frame(buf, status, sizeof(status))), 0);
	Toggle__Envelope *rep = NULL;
	ck_assert_int_eq(tgc_recv(c, &rep, 10000), 1);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_ERROR);
	ck_assert_int_eq((int)rep->error->code, TOGGLE_EPROTO);
	toggle__envelope__free_unpacked(rep, NULL);
	ck_assert_int_lt(tgc_recv(c, &rep, 10000), 0); /* then closed */
	tgc_close(c);
}
END_TEST

static int set_enabled(struct tgc *c, Toggle__SetOp op, const char *spec, Toggle__Envelope **rep,
		       char *err, size_t errlen)
{
	Toggle__SetEnabledRequest m = TOGGLE__SET_ENABLED_REQUEST__INIT;
	m.op = op;
	m.spec = (char *)(uintptr_t)spec;
	Toggle__Envelope req = TOGGLE__ENVELOPE__INIT;
	req.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	req.set_enabled = &m;
	return tgc_call(c, &req, rep, 10000, err, errlen);
}

START_TEST(test_set_op_unspecified_refused)
{
	struct tgc *c = client();
	char err[512];
	Toggle__Envelope *rep = NULL;
	int rc = set_enabled(c, TOGGLE__SET_OP__SET_OP_UNSPECIFIED, "all", &rep, err, sizeof(err));
	ck_assert_int_eq(rc, TOGGLE_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "UNSPECIFIED"));
	toggle__envelope__free_unpacked(rep, NULL);
	rc = set_enabled(c, (Toggle__SetOp)42, "all", &rep, err, sizeof(err));
	ck_assert_int_eq(rc, TOGGLE_EINVAL);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
}
END_TEST

/* An error about an agent names it and gives its id. */
START_TEST(test_error_names_agent_ids)
{
	char *argv[] = {DEMO_AGENT_BIN, "--backend", "sim", "--socket", g.sock, "--period-ms", "20",
			"--name", "idagent", NULL};
	g.agent = spawn(argv);
	struct tgc *c = client();
	char err[512];
	Toggle__Envelope *rep = NULL;
	uint64_t id = 0;
	uint64_t end = now_ms() + 10000;
	while (!id) {
		Toggle__ListAgentsRequest la = TOGGLE__LIST_AGENTS_REQUEST__INIT;
		Toggle__Envelope req = TOGGLE__ENVELOPE__INIT;
		req.body_case = TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
		req.list_agents = &la;
		ck_assert_int_eq(tgc_call(c, &req, &rep, 10000, err, sizeof(err)), 0);
		if (rep->agents->n_agents == 1)
			id = rep->agents->agents[0]->agent_id;
		toggle__envelope__free_unpacked(rep, NULL);
		ck_assert_msg(id || now_ms() < end, "demo_agent did not register");
		usleep(20000);
	}
	int rc = set_enabled(c, TOGGLE__SET_OP__SET_OP_REPLACE, "no_such_hook:1", &rep, err, sizeof(err));
	ck_assert_int_lt(rc, 0);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->body_case, TOGGLE__ENVELOPE__BODY_ERROR);
	ck_assert_uint_eq(rep->error->n_agents, 1);
	ck_assert_str_eq(rep->error->agents[0], "idagent");
	ck_assert_uint_eq(rep->error->n_agent_ids, 1);
	ck_assert_uint_eq(rep->error->agent_ids[0], id);
	toggle__envelope__free_unpacked(rep, NULL);
	tgc_close(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("enums");
	tcase_add_test(tc, test_error_codes_agree);
	tcase_add_test(tc, test_enum_zero_is_unspecified);
	suite_add_tcase(s, tc);
	tc = tcase_create("daemon");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_unknown_fields_ignored);
	tcase_add_test(tc, test_unknown_request_unimplemented);
	tcase_add_test(tc, test_version_range);
	tcase_add_test(tc, test_request_id_zero_refused);
	tcase_add_test(tc, test_set_op_unspecified_refused);
	tcase_add_test(tc, test_error_names_agent_ids);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
