/*
 * check_frame.c - tests of the framing layer (proto/frame.c): encode and
 * decode round trips, byte-at-a-time and batched input, every refused
 * frame (oversize from its header alone, zero length, garbage, no body),
 * the reader's memory bound, and the default socket path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

/* A growable byte string that collects several frames. */
struct bytes {
	uint8_t *p;
	size_t n;
};

static void bytes_add(struct bytes *b, const uint8_t *p, size_t n)
{
	b->p = realloc(b->p, b->n + n);
	ck_assert_ptr_nonnull(b->p);
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void bytes_add_env(struct bytes *b, const Toggle__Envelope *env)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	ck_assert_int_eq(tgp_frame_encode(env, &buf, &len), 0);
	bytes_add(b, buf, len);
	free(buf);
}

/* Encode env, feed it whole, decode it: the caller frees the result. */
static Toggle__Envelope *round_trip(const Toggle__Envelope *env)
{
	struct bytes b = { 0 };
	bytes_add_env(&b, env);
	ck_assert_uint_gt(b.n, TGP_FRAME_HEADER);
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p, b.n), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(tgp_reader_next(&r, &(Toggle__Envelope *){ NULL }), 0);
	ck_assert_uint_eq(tgp_reader_pending(&r), 0);
	tgp_reader_free(&r);
	free(b.p);
	return out;
}

static void put_header(uint8_t h[TGP_FRAME_HEADER], uint32_t len)
{
	h[0] = (uint8_t)(len >> 24);
	h[1] = (uint8_t)(len >> 16);
	h[2] = (uint8_t)(len >> 8);
	h[3] = (uint8_t)len;
}

static Toggle__Envelope status_env(uint64_t id)
{
	static Toggle__StatusRequest st = TOGGLE__STATUS_REQUEST__INIT;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = id;
	env.body_case = TOGGLE__ENVELOPE__BODY_STATUS;
	env.status = &st;
	return env;
}

/* An Error envelope whose message is n bytes of 'x' (caller frees msg). */
static Toggle__Envelope error_env(Toggle__Error *e, size_t n)
{
	char *msg = malloc(n + 1);
	ck_assert_ptr_nonnull(msg);
	memset(msg, 'x', n);
	msg[n] = '\0';
	toggle__error__init(e);
	e->code = (Toggle__ErrorCode)TOGGLE_EINVAL;
	e->message = msg;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 3;
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = e;
	return env;
}

/* An Error envelope packing to exactly `size` bytes. */
static Toggle__Envelope error_env_of_size(Toggle__Error *e, size_t size)
{
	size_t n = size - 32;
	for (int i = 0; i < 8; i++) {
		Toggle__Envelope env = error_env(e, n);
		size_t got = toggle__envelope__get_packed_size(&env);
		if (got == size)
			return env;
		free(e->message);
		n = n + size - got;
	}
	ck_abort_msg("cannot size an envelope to %zu bytes", size);
	return (Toggle__Envelope)TOGGLE__ENVELOPE__INIT;
}

/* ---- round trips -------------------------------------------------------- */

START_TEST(test_round_trip_hello)
{
	Toggle__HelloRequest h = TOGGLE__HELLO_REQUEST__INIT;
	h.protocol_version = TGP_PROTOCOL_VERSION;
	h.client = "togglectl";
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 1;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO;
	env.hello = &h;
	Toggle__Envelope *out = round_trip(&env);
	ck_assert_uint_eq(out->id, 1);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_HELLO);
	ck_assert_uint_eq(out->hello->protocol_version, TGP_PROTOCOL_VERSION);
	ck_assert_str_eq(out->hello->client, "togglectl");
	toggle__envelope__free_unpacked(out, NULL);
}
END_TEST

START_TEST(test_round_trip_error_agents)
{
	char *agents[] = { "engine-0", "engine-1" };
	Toggle__Error e = TOGGLE__ERROR__INIT;
	e.code = (Toggle__ErrorCode)TOGGLE_ETIMEDOUT;
	e.message = "wait timed out";
	e.n_agents = 2;
	e.agents = agents;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = UINT64_MAX;
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = &e;
	Toggle__Envelope *out = round_trip(&env);
	ck_assert_uint_eq(out->id, UINT64_MAX);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_ERROR);
	ck_assert_int_eq(out->error->code, TOGGLE_ETIMEDOUT);
	ck_assert_str_eq(out->error->message, "wait timed out");
	ck_assert_uint_eq(out->error->n_agents, 2);
	ck_assert_str_eq(out->error->agents[1], "engine-1");
	toggle__envelope__free_unpacked(out, NULL);
}
END_TEST

START_TEST(test_round_trip_set_enabled)
{
	Toggle__Selector sel = TOGGLE__SELECTOR__INIT;
	sel.sel_case = TOGGLE__SELECTOR__SEL_AGENT_ID;
	sel.agent_id = 42;
	Toggle__SetEnabledRequest req = TOGGLE__SET_ENABLED_REQUEST__INIT;
	req.target = &sel;
	req.op = TOGGLE__SET_OP__SET_OP_ADD;
	req.spec = "resid_post:0-31,attn_out:*";
	req.wait_ms = 500;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 9;
	env.body_case = TOGGLE__ENVELOPE__BODY_SET_ENABLED;
	env.set_enabled = &req;
	Toggle__Envelope *out = round_trip(&env);
	Toggle__SetEnabledRequest *got = out->set_enabled;
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_SET_ENABLED);
	ck_assert_int_eq(got->target->sel_case, TOGGLE__SELECTOR__SEL_AGENT_ID);
	ck_assert_uint_eq(got->target->agent_id, 42);
	ck_assert_int_eq(got->op, TOGGLE__SET_OP__SET_OP_ADD);
	ck_assert_str_eq(got->spec, "resid_post:0-31,attn_out:*");
	ck_assert_uint_eq(got->wait_ms, 500);
	toggle__envelope__free_unpacked(out, NULL);
}
END_TEST

START_TEST(test_round_trip_plan_and_event)
{
	Toggle__PlanEntry e1 = TOGGLE__PLAN_ENTRY__INIT, e2 = TOGGLE__PLAN_ENTRY__INIT;
	e1.step = 10;
	e1.spec = "all";
	e2.step = -1;
	e2.spec = "none";
	Toggle__PlanEntry *entries[] = { &e1, &e2 };
	Toggle__SubmitPlanRequest plan = TOGGLE__SUBMIT_PLAN_REQUEST__INIT;
	plan.n_entries = 2;
	plan.entries = entries;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 5;
	env.body_case = TOGGLE__ENVELOPE__BODY_SUBMIT_PLAN;
	env.submit_plan = &plan;
	Toggle__Envelope *out = round_trip(&env);
	ck_assert_uint_eq(out->submit_plan->n_entries, 2);
	ck_assert_int_eq(out->submit_plan->entries[0]->step, 10);
	ck_assert_int_eq(out->submit_plan->entries[1]->step, -1);
	ck_assert_str_eq(out->submit_plan->entries[1]->spec, "none");
	toggle__envelope__free_unpacked(out, NULL);

	Toggle__Event ev = TOGGLE__EVENT__INIT;
	ev.kind = TOGGLE__EVENT_KIND__EVENT_KIND_PLAN_REJECTED;
	ev.agent_id = 7;
	ev.agent_name = "engine";
	ev.step = 12;
	ev.unix_ms = 1700000000000ull;
	Toggle__Envelope eenv = TOGGLE__ENVELOPE__INIT;
	eenv.body_case = TOGGLE__ENVELOPE__BODY_EVENT;
	eenv.event = &ev;
	out = round_trip(&eenv);
	ck_assert_uint_eq(out->id, 0);
	ck_assert_int_eq(out->event->kind, TOGGLE__EVENT_KIND__EVENT_KIND_PLAN_REJECTED);
	ck_assert_str_eq(out->event->agent_name, "engine");
	ck_assert_int_eq(out->event->step, 12);
	ck_assert_uint_eq(out->event->version, 0); /* proto3: unset decodes as 0 */
	ck_assert_uint_eq(out->event->unix_ms, 1700000000000ull);
	toggle__envelope__free_unpacked(out, NULL);
}
END_TEST

START_TEST(test_frame_header_is_network_order)
{
	Toggle__Envelope env = status_env(1);
	uint8_t *buf = NULL;
	size_t len = 0;
	ck_assert_int_eq(tgp_frame_encode(&env, &buf, &len), 0);
	size_t body = toggle__envelope__get_packed_size(&env);
	ck_assert_uint_eq(len, TGP_FRAME_HEADER + body);
	ck_assert_uint_eq(buf[0], 0);
	ck_assert_uint_eq(buf[1], 0);
	ck_assert_uint_eq(buf[2], (body >> 8) & 0xff);
	ck_assert_uint_eq(buf[3], body & 0xff);
	free(buf);
}
END_TEST

/* ---- stream input ------------------------------------------------------- */

START_TEST(test_byte_at_a_time)
{
	struct bytes b = { 0 };
	for (uint64_t id = 1; id <= 3; id++) {
		Toggle__Envelope env = status_env(id);
		bytes_add_env(&b, &env);
	}
	struct tgp_reader r;
	tgp_reader_init(&r);
	uint64_t want = 1;
	for (size_t i = 0; i < b.n; i++) {
		ck_assert_int_eq(tgp_reader_feed(&r, b.p + i, 1), 0);
		Toggle__Envelope *out = NULL;
		int rc = tgp_reader_next(&r, &out);
		ck_assert_int_ge(rc, 0);
		if (rc == 1) {
			ck_assert_uint_eq(out->id, want++);
			toggle__envelope__free_unpacked(out, NULL);
			ck_assert_int_eq(tgp_reader_next(&r, &out), 0);
		}
	}
	ck_assert_uint_eq(want, 4);
	ck_assert_uint_eq(tgp_reader_pending(&r), 0);
	tgp_reader_free(&r);
	free(b.p);
}
END_TEST

START_TEST(test_two_frames_one_feed)
{
	struct bytes b = { 0 };
	Toggle__Envelope e1 = status_env(11);
	Toggle__Ack ack = TOGGLE__ACK__INIT;
	Toggle__Envelope e2 = TOGGLE__ENVELOPE__INIT;
	e2.id = 12;
	e2.body_case = TOGGLE__ENVELOPE__BODY_ACK;
	e2.ack = &ack;
	bytes_add_env(&b, &e1);
	bytes_add_env(&b, &e2);
	bytes_add(&b, (const uint8_t *)"\0\0", 2);   /* start of a third frame */
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p, b.n), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(out->id, 11);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_STATUS);
	toggle__envelope__free_unpacked(out, NULL);
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(out->id, 12);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_ACK);
	toggle__envelope__free_unpacked(out, NULL);
	ck_assert_int_eq(tgp_reader_next(&r, &out), 0);
	ck_assert_uint_eq(tgp_reader_pending(&r), 2);
	tgp_reader_free(&r);
	free(b.p);
}
END_TEST

/* Frames split at every possible point across two feeds. */
START_TEST(test_split_everywhere)
{
	struct bytes b = { 0 };
	Toggle__Envelope e1 = status_env(1), e2 = status_env(2);
	bytes_add_env(&b, &e1);
	bytes_add_env(&b, &e2);
	for (size_t cut = 0; cut <= b.n; cut++) {
		struct tgp_reader r;
		tgp_reader_init(&r);
		int got = 0;
		Toggle__Envelope *out = NULL;
		ck_assert_int_eq(tgp_reader_feed(&r, b.p, cut), 0);
		while (tgp_reader_next(&r, &out) == 1) {
			ck_assert_uint_eq(out->id, (uint64_t)++got);
			toggle__envelope__free_unpacked(out, NULL);
		}
		ck_assert_int_eq(tgp_reader_feed(&r, b.p + cut, b.n - cut), 0);
		while (tgp_reader_next(&r, &out) == 1) {
			ck_assert_uint_eq(out->id, (uint64_t)++got);
			toggle__envelope__free_unpacked(out, NULL);
		}
		ck_assert_int_eq(got, 2);
		tgp_reader_free(&r);
	}
	free(b.p);
}
END_TEST

/* ---- refused input ------------------------------------------------------ */

START_TEST(test_oversize_header_refused_early)
{
	uint8_t h[TGP_FRAME_HEADER];
	put_header(h, TGP_MAX_FRAME + 1);
	struct tgp_reader r;
	tgp_reader_init(&r);
	Toggle__Envelope *out = NULL;
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(tgp_reader_feed(&r, h + i, 1), 0);
		ck_assert_int_eq(tgp_reader_next(&r, &out), 0);
	}
	ck_assert_int_eq(tgp_reader_feed(&r, h + 3, 1), TOGGLE_ELIMIT);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_ELIMIT);
	ck_assert_ptr_null(out);
	/* Nothing close to the announced size was allocated. */
	ck_assert_uint_le(r.cap, 4096);
	/* Sticky: more bytes are dropped, the error stays. */
	uint8_t junk[64] = { 0 };
	ck_assert_int_eq(tgp_reader_feed(&r, junk, sizeof(junk)), TOGGLE_ELIMIT);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_ELIMIT);
	ck_assert_uint_le(r.cap, 4096);
	ck_assert_uint_eq(tgp_reader_room(&r), 0);
	tgp_reader_free(&r);
}
END_TEST

/* Oversize header arriving with a lot of body in one feed: ELIMIT, not EBUSY. */
START_TEST(test_oversize_header_with_body)
{
	size_t n = TGP_READER_MAX + 100;
	uint8_t *p = calloc(1, n);
	ck_assert_ptr_nonnull(p);
	put_header(p, UINT32_MAX);
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, p, n), TOGGLE_ELIMIT);
	ck_assert_uint_le(r.cap, 4096);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_ELIMIT);
	tgp_reader_free(&r);
	free(p);
}
END_TEST

/* Good frames before a bad header are still handed out, then the error. */
START_TEST(test_good_frame_then_bad_header)
{
	struct bytes b = { 0 };
	Toggle__Envelope e1 = status_env(21);
	bytes_add_env(&b, &e1);
	uint8_t h[TGP_FRAME_HEADER];
	put_header(h, TGP_MAX_FRAME + 1);
	bytes_add(&b, h, sizeof(h));
	bytes_add(&b, (const uint8_t *)"more", 4);
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p, b.n), TOGGLE_ELIMIT);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(out->id, 21);
	toggle__envelope__free_unpacked(out, NULL);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_ELIMIT);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_ELIMIT);
	tgp_reader_free(&r);
	free(b.p);
}
END_TEST

START_TEST(test_zero_length)
{
	uint8_t h[TGP_FRAME_HEADER] = { 0, 0, 0, 0 };
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, h, sizeof(h)), TOGGLE_EPROTO);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_EPROTO);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_EPROTO);
	tgp_reader_free(&r);
}
END_TEST

START_TEST(test_garbage_body)
{
	uint8_t f[TGP_FRAME_HEADER + 5];
	put_header(f, 5);
	memset(f + TGP_FRAME_HEADER, 0xff, 5);
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, f, sizeof(f)), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_EPROTO);
	ck_assert_ptr_null(out);
	/* The reader stays in the error state, even if good bytes follow. */
	struct bytes b = { 0 };
	Toggle__Envelope e1 = status_env(1);
	bytes_add_env(&b, &e1);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p, b.n), TOGGLE_EPROTO);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_EPROTO);
	tgp_reader_free(&r);
	free(b.p);
}
END_TEST

/* Contract v1 (proto3) has no required fields: an envelope without its id
 * decodes with id 0, which the daemon refuses as a request (check_proto). */
START_TEST(test_missing_required_field)
{
	/* field 34 (status), length 0: body set, id (field 1) absent */
	uint8_t f[TGP_FRAME_HEADER + 3] = { 0, 0, 0, 3, 0x92, 0x02, 0x00 };
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, f, sizeof(f)), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(out->id, 0);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_STATUS);
	toggle__envelope__free_unpacked(out, NULL);
	tgp_reader_free(&r);
}
END_TEST

START_TEST(test_envelope_without_body)
{
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 7;
	/* The encoder refuses it, so pack it by hand as a hostile peer would. */
	uint8_t *buf = NULL;
	size_t len = 0;
	ck_assert_int_eq(tgp_frame_encode(&env, &buf, &len), TOGGLE_EINVAL);
	ck_assert_ptr_null(buf);
	uint8_t f[64];
	size_t body = toggle__envelope__pack(&env, f + TGP_FRAME_HEADER);
	ck_assert_uint_gt(body, 0);
	put_header(f, (uint32_t)body);
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, f, TGP_FRAME_HEADER + body), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_EPROTO);
	ck_assert_ptr_null(out);
	tgp_reader_free(&r);
}
END_TEST

/* Contract v1: an unknown body field is a newer peer's message: handed out
 * with no body case and the unknown field kept (the daemon answers it with
 * UNIMPLEMENTED, check_proto); an envelope with no field but its id is still
 * EPROTO, never a crash. */
START_TEST(test_unknown_body_field)
{
	/* id=1 (08 01), then field 99 varint (98 06 05) */
	uint8_t f[TGP_FRAME_HEADER + 5] = { 0, 0, 0, 5, 0x08, 0x01, 0x98, 0x06, 0x05 };
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, f, sizeof(f)), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(out->id, 1);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY__NOT_SET);
	ck_assert_uint_eq(out->base.n_unknown_fields, 1);
	ck_assert_uint_eq(out->base.unknown_fields[0].tag, 99);
	toggle__envelope__free_unpacked(out, NULL);
	tgp_reader_free(&r);
	/* id only: no body at all. */
	uint8_t g[TGP_FRAME_HEADER + 2] = { 0, 0, 0, 2, 0x08, 0x01 };
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, g, sizeof(g)), 0);
	ck_assert_int_eq(tgp_reader_next(&r, &out), TOGGLE_EPROTO);
	tgp_reader_free(&r);
}
END_TEST

START_TEST(test_encode_refuses_oversize)
{
	Toggle__Error e;
	Toggle__Envelope env = error_env(&e, TGP_MAX_FRAME);
	ck_assert_uint_gt(toggle__envelope__get_packed_size(&env), TGP_MAX_FRAME);
	uint8_t *buf = (uint8_t *)"untouched";
	size_t len = 123;
	ck_assert_int_eq(tgp_frame_encode(&env, &buf, &len), TOGGLE_ELIMIT);
	ck_assert_str_eq((const char *)buf, "untouched");
	ck_assert_uint_eq(len, 123);
	free(e.message);
}
END_TEST

START_TEST(test_encode_refuses_missing_required)
{
	/* Contract v1 (proto3): no required fields; a NULL string travels as "". */
	Toggle__HelloReply hr = TOGGLE__HELLO_REPLY__INIT;
	hr.daemon_version = NULL;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	env.id = 1;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO_REPLY;
	env.hello_reply = &hr;
	Toggle__Envelope *out = round_trip(&env);
	ck_assert_int_eq(out->body_case, TOGGLE__ENVELOPE__BODY_HELLO_REPLY);
	ck_assert_str_eq(out->hello_reply->daemon_version, "");
	toggle__envelope__free_unpacked(out, NULL);
	uint8_t *buf = NULL;
	size_t len = 0;
	ck_assert_int_eq(tgp_frame_encode(NULL, &buf, &len), TOGGLE_EINVAL);
	ck_assert_ptr_null(buf);
}
END_TEST

/*
 * A frame of exactly TGP_MAX_FRAME bytes goes through; the reader never
 * holds more than one such frame (EBUSY asks the caller to drain first) and
 * gives the big buffer back once it is drained.
 */
START_TEST(test_max_frame_and_bound)
{
	Toggle__Error e;
	Toggle__Envelope env = error_env_of_size(&e, TGP_MAX_FRAME);
	uint8_t *buf = NULL;
	size_t len = 0;
	ck_assert_int_eq(tgp_frame_encode(&env, &buf, &len), 0);
	ck_assert_uint_eq(len, TGP_READER_MAX);
	struct bytes b = { 0 };
	bytes_add(&b, buf, len);
	Toggle__Envelope small = status_env(99);
	bytes_add_env(&b, &small);

	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_uint_eq(tgp_reader_room(&r), TGP_READER_MAX);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p, b.n), TOGGLE_EBUSY);
	ck_assert_uint_eq(tgp_reader_pending(&r), 0);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p, 10), 0);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p + 10, len - 10), 0);
	ck_assert_uint_eq(tgp_reader_room(&r), 0);
	ck_assert_uint_le(r.cap, TGP_READER_MAX);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(strlen(out->error->message), strlen(e.message));
	toggle__envelope__free_unpacked(out, NULL);
	ck_assert_uint_eq(r.cap, 0);
	ck_assert_int_eq(tgp_reader_feed(&r, b.p + len, b.n - len), 0);
	ck_assert_int_eq(tgp_reader_next(&r, &out), 1);
	ck_assert_uint_eq(out->id, 99);
	toggle__envelope__free_unpacked(out, NULL);
	tgp_reader_free(&r);
	free(b.p);
	free(buf);
	free(e.message);
}
END_TEST

/* After next() returns 0 there is always room for at least one more byte. */
START_TEST(test_room_after_partial_max_frame)
{
	uint8_t h[TGP_FRAME_HEADER];
	put_header(h, TGP_MAX_FRAME);
	uint8_t *body = calloc(1, TGP_MAX_FRAME);
	ck_assert_ptr_nonnull(body);
	struct tgp_reader r;
	tgp_reader_init(&r);
	ck_assert_int_eq(tgp_reader_feed(&r, h, sizeof(h)), 0);
	ck_assert_int_eq(tgp_reader_feed(&r, body, TGP_MAX_FRAME - 1), 0);
	Toggle__Envelope *out = NULL;
	ck_assert_int_eq(tgp_reader_next(&r, &out), 0);
	ck_assert_uint_eq(tgp_reader_room(&r), 1);
	ck_assert_int_eq(tgp_reader_feed(&r, body, 2), TOGGLE_EBUSY);
	tgp_reader_free(&r);
	free(body);
}
END_TEST

/* ---- socket path -------------------------------------------------------- */

static const char *def_path(char *buf, size_t len)
{
	return tgp_default_socket_path(buf, len);
}

/* The branches for a user other than root. */
static void check_user_paths(void)
{
	char buf[256], want[64];
	unsetenv("TOGGLE_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
	ck_assert_str_eq(def_path(buf, sizeof(buf)), "/run/user/4242/toggle/toggled.sock");
	setenv("XDG_RUNTIME_DIR", "", 1);
	snprintf(want, sizeof(want), "/tmp/toggle-%lu/toggled.sock", (unsigned long)geteuid());
	ck_assert_str_eq(def_path(buf, sizeof(buf)), want);
	unsetenv("XDG_RUNTIME_DIR");
	ck_assert_str_eq(def_path(buf, sizeof(buf)), want);
	setenv("TOGGLE_SOCKET", "/srv/t.sock", 1);
	ck_assert_str_eq(def_path(buf, sizeof(buf)), "/srv/t.sock");
}

START_TEST(test_default_socket_path)
{
	char buf[256];
	setenv("TOGGLE_SOCKET", "/x/y.sock", 1);
	ck_assert_str_eq(def_path(buf, sizeof(buf)), "/x/y.sock");
	ck_assert_ptr_null(def_path(buf, 5));            /* does not fit */
	ck_assert_ptr_null(def_path(NULL, 0));
	setenv("TOGGLE_SOCKET", "", 1);                   /* empty: ignored */
	setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
	if (geteuid() == 0) {
		ck_assert_str_eq(def_path(buf, sizeof(buf)), "/run/toggle/toggled.sock");
		unsetenv("TOGGLE_SOCKET");
		ck_assert_str_eq(def_path(buf, sizeof(buf)), "/run/toggle/toggled.sock");
		/* Root can test the other branches as nobody (saved uid brings it back). */
		ck_assert_int_eq(seteuid(65534), 0);
		check_user_paths();
		ck_assert_int_eq(seteuid(0), 0);
	} else {
		check_user_paths();
	}
	unsetenv("TOGGLE_SOCKET");
}
END_TEST

START_TEST(test_unix_address)
{
	struct sockaddr_un sa;
	socklen_t salen = 0;
	ck_assert_int_eq(tgp_unix_address("/tmp/a.sock", &sa, &salen), 0);
	ck_assert_str_eq(sa.sun_path, "/tmp/a.sock");
	ck_assert_int_eq(sa.sun_family, AF_UNIX);
	ck_assert_uint_gt(salen, sizeof(sa.sun_family));
	char longp[sizeof(sa.sun_path) + 1];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	/* sizeof(sun_path) characters: one too many for the NUL */
	ck_assert_int_eq(tgp_unix_address(longp, &sa, &salen), TOGGLE_EINVAL);
	longp[sizeof(sa.sun_path) - 1] = '\0';           /* fits with its NUL */
	ck_assert_int_eq(tgp_unix_address(longp, &sa, &salen), 0);
	ck_assert_uint_eq(strlen(sa.sun_path), sizeof(sa.sun_path) - 1);
	ck_assert_int_eq(tgp_unix_address("", &sa, &salen), TOGGLE_EINVAL);
}
END_TEST

static Suite *frame_suite(void)
{
	Suite *s = suite_create("frame");
	TCase *tc = tcase_create("encode");
	tcase_add_test(tc, test_round_trip_hello);
	tcase_add_test(tc, test_round_trip_error_agents);
	tcase_add_test(tc, test_round_trip_set_enabled);
	tcase_add_test(tc, test_round_trip_plan_and_event);
	tcase_add_test(tc, test_frame_header_is_network_order);
	tcase_add_test(tc, test_encode_refuses_oversize);
	tcase_add_test(tc, test_encode_refuses_missing_required);
	suite_add_tcase(s, tc);

	tc = tcase_create("reader");
	tcase_add_test(tc, test_byte_at_a_time);
	tcase_add_test(tc, test_two_frames_one_feed);
	tcase_add_test(tc, test_split_everywhere);
	tcase_add_test(tc, test_oversize_header_refused_early);
	tcase_add_test(tc, test_oversize_header_with_body);
	tcase_add_test(tc, test_good_frame_then_bad_header);
	tcase_add_test(tc, test_zero_length);
	tcase_add_test(tc, test_garbage_body);
	tcase_add_test(tc, test_missing_required_field);
	tcase_add_test(tc, test_envelope_without_body);
	tcase_add_test(tc, test_unknown_body_field);
	tcase_add_test(tc, test_max_frame_and_bound);
	tcase_add_test(tc, test_room_after_partial_max_frame);
	suite_add_tcase(s, tc);

	tc = tcase_create("path");
	tcase_add_test(tc, test_default_socket_path);
	tcase_add_test(tc, test_unix_address);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(frame_suite());
}
