/*
 * check_pbwire.c - libtoggle's hand-written protobuf (pbwire.c) against
 * protobuf-c's generated code for toggle.proto: what the agent sends must
 * decode there, what the daemon sends must decode here, and hostile bytes
 * must never crash the decoder.
 */
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "pbwire.h"
#include "testutil.h"

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

START_TEST(test_register_decodes_in_protobuf_c)
{
	static const char *const types[] = {"resid_post", "attn_out", "mlp_out"};
	struct pbw_register r = {.name = "engine-0", .group = "decode", .hook_types = types,
				 .n_types = 3, .n_layers = 32, .mode = 1,
				 .driver_version = _i ? -7 : 13000, .shm_size = 123456789};
	uint8_t buf[4096];
	long n = pbw_frame_register(buf, sizeof(buf), 42, &r);
	ck_assert_int_gt(n, 4);
	ck_assert_uint_eq(be32(buf), (uint64_t)n - 4);
	Toggle__Envelope *env = toggle__envelope__unpack(NULL, (size_t)n - 4, buf + 4);
	ck_assert_ptr_nonnull(env);
	ck_assert_uint_eq(env->id, 42);
	ck_assert_int_eq(env->body_case, TOGGLE__ENVELOPE__BODY_REGISTER_AGENT);
	const Toggle__RegisterAgentRequest *m = env->register_agent;
	ck_assert_str_eq(m->name, "engine-0");
	ck_assert_str_eq(m->group, "decode");
	ck_assert_uint_eq(m->n_hook_types, 3);
	ck_assert_str_eq(m->hook_types[2], "mlp_out");
	ck_assert_uint_eq(m->n_layers, 32);
	ck_assert_uint_eq(m->mode, 1);
	ck_assert_int_eq(m->driver_version, r.driver_version);
	ck_assert_uint_eq(m->shm_size, 123456789);
	toggle__envelope__free_unpacked(env, NULL);

	/* The data ring's registration (toggle_ring.h), right after it. */
	n = pbw_frame_register_ring(buf, sizeof(buf), 43, 4096 + (1ull << 34));
	env = toggle__envelope__unpack(NULL, (size_t)n - 4, buf + 4);
	ck_assert_ptr_nonnull(env);
	ck_assert_uint_eq(env->id, 43);
	ck_assert_int_eq(env->body_case, TOGGLE__ENVELOPE__BODY_REGISTER_RING);
	ck_assert_uint_eq(env->register_ring->ring_size, 4096 + (1ull << 34));
	toggle__envelope__free_unpacked(env, NULL);

	n = pbw_frame_hello(buf, sizeof(buf), 1, TGP_PROTOCOL_VERSION, "libtoggle");
	env = toggle__envelope__unpack(NULL, (size_t)n - 4, buf + 4);
	ck_assert_ptr_nonnull(env);
	ck_assert_int_eq(env->body_case, TOGGLE__ENVELOPE__BODY_HELLO);
	ck_assert_uint_eq(env->hello->protocol_version, TGP_PROTOCOL_VERSION);
	ck_assert_str_eq(env->hello->client, "libtoggle");
	toggle__envelope__free_unpacked(env, NULL);
	/* Too small a buffer: refused, not overrun. */
	ck_assert_int_eq(pbw_frame_register(buf, 16, 42, &r), -1);
}
END_TEST

/*
 * proto3's canonical encoding: what pbwire sends re-packs, in protobuf-c, to
 * exactly its own bytes, also for the simulator's lazy agent (mode 0, driver
 * 0), whose zeros proto3 leaves out.  A daemon that checks this (a frame
 * must re-pack to its own size) refused such a registration.
 */
START_TEST(test_encoding_is_canonical)
{
	static const char *const types[] = {"resid_post", "attn_out"};
	struct pbw_register r = {.name = "sim-0", .group = _i ? "g" : NULL, .hook_types = types,
				 .n_types = 2, .n_layers = 4, .mode = 0,
				 .driver_version = 0, .shm_size = 4096};
	uint8_t buf[4096], *re = NULL;
	size_t relen = 0;
	long n = pbw_frame_register(buf, sizeof(buf), 7, &r);
	ck_assert_int_gt(n, 4);
	Toggle__Envelope *env = toggle__envelope__unpack(NULL, (size_t)n - 4, buf + 4);
	ck_assert_ptr_nonnull(env);
	ck_assert_uint_eq(env->register_agent->mode, 0);
	ck_assert_int_eq(env->register_agent->driver_version, 0);
	ck_assert_int_eq(tgp_frame_encode(env, &re, &relen), 0);
	ck_assert_uint_eq(relen, (size_t)n);
	ck_assert_mem_eq(re, buf, relen);
	free(re);
	toggle__envelope__free_unpacked(env, NULL);

	n = pbw_frame_hello(buf, sizeof(buf), 1, TGP_PROTOCOL_VERSION, "libtoggle");
	env = toggle__envelope__unpack(NULL, (size_t)n - 4, buf + 4);
	ck_assert_ptr_nonnull(env);
	ck_assert_int_eq(tgp_frame_encode(env, &re, &relen), 0);
	ck_assert_uint_eq(relen, (size_t)n);
	ck_assert_mem_eq(re, buf, relen);
	free(re);
	toggle__envelope__free_unpacked(env, NULL);
}
END_TEST

/* Pack with protobuf-c, decode with pbwire. */
static void decode_packed(const Toggle__Envelope *env, struct pbw_reply *out)
{
	uint8_t *buf;
	size_t len;
	ck_assert_int_eq(tgp_frame_encode(env, &buf, &len), 0);
	ck_assert_int_eq(pbw_decode_reply(buf + 4, len - 4, out), 0);
	free(buf);
}

START_TEST(test_replies_decode_here)
{
	struct pbw_reply r;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__RegisterAgentReply rr = TOGGLE__REGISTER_AGENT_REPLY__INIT;
	env.id = 9;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_REPLY;
	env.register_reply = &rr;
	rr.agent_id = 1ull << 40;
	decode_packed(&env, &r);
	ck_assert_uint_eq(r.id, 9);
	ck_assert_uint_eq(r.body, PBW_ENV_REGISTER_REPLY);
	ck_assert_uint_eq(r.agent_id, 1ull << 40);

	Toggle__Error err = TOGGLE__ERROR__INIT;
	char *agents[] = {"a", "b"};
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = &err;
	err.code = (Toggle__ErrorCode)TOGGLE_EVERSION;
	err.message = "protocol version 2 is not spoken here";
	err.n_agents = 2;
	err.agents = agents;
	decode_packed(&env, &r);
	ck_assert_uint_eq(r.body, PBW_ENV_ERROR);
	ck_assert_int_eq(r.error_code, TOGGLE_EVERSION);
	ck_assert_str_eq(r.error_message, "protocol version 2 is not spoken here");
	/* Contract v1: Error.agent_ids (packed repeated) is skipped, the rest read. */
	uint64_t ids[] = {7, 1ull << 50};
	err.n_agent_ids = 2;
	err.agent_ids = ids;
	err.code = TOGGLE__ERROR_CODE__ERROR_CODE_UNIMPLEMENTED;
	decode_packed(&env, &r);
	ck_assert_int_eq(r.error_code, TOGGLE_EUNIMPLEMENTED);
	ck_assert_str_eq(r.error_message, "protocol version 2 is not spoken here");
	err.n_agent_ids = 0;

	Toggle__HelloReply hr = TOGGLE__HELLO_REPLY__INIT;
	env.body_case = TOGGLE__ENVELOPE__BODY_HELLO_REPLY;
	env.hello_reply = &hr;
	hr.protocol_version = 1;
	hr.daemon_version = "0.1.0";
	hr.may_write = 1;
	decode_packed(&env, &r);
	ck_assert_uint_eq(r.body, PBW_ENV_HELLO_REPLY);
	ck_assert_uint_eq(r.protocol_version, 1);

	/* A long error message is cut, still terminated. */
	char big[1000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	env.body_case = TOGGLE__ENVELOPE__BODY_ERROR;
	env.error = &err;
	err.message = big;
	decode_packed(&env, &r);
	ck_assert_uint_eq(strlen(r.error_message), sizeof(r.error_message) - 1);
}
END_TEST

START_TEST(test_hostile_bytes)
{
	struct pbw_reply r;
	/* Truncations of a valid reply: never a crash, never a wrong success. */
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__RegisterAgentReply rr = TOGGLE__REGISTER_AGENT_REPLY__INIT;
	env.id = 300;
	env.body_case = TOGGLE__ENVELOPE__BODY_REGISTER_REPLY;
	env.register_reply = &rr;
	rr.agent_id = 77;
	uint8_t *buf;
	size_t len;
	ck_assert_int_eq(tgp_frame_encode(&env, &buf, &len), 0);
	for (size_t n = 0; n < len - 4; n++) {
		int rc = pbw_decode_reply(buf + 4, n, &r);
		ck_assert(rc == -1 || r.agent_id != 77 || n == len - 4);
	}
	free(buf);
	/* Lengths pointing past the end, overlong varints, group wire types. */
	static const uint8_t cases[][12] = {
		{0x0a, 0x7f},                                     /* field 1 LEN 127, no bytes */
		{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0x0b},                                           /* start group */
		{0x00, 0x01},                                     /* field 0 */
		{0xaa, 0x01, 0x05, 0x08},                         /* body 21 LEN 5, 1 byte */
	};
	static const size_t lens[] = {2, 12, 1, 2, 4};
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		ck_assert_int_eq(pbw_decode_reply(cases[i], lens[i], &r), -1);
	/* Random bytes. */
	unsigned seed = 7;
	uint8_t rnd[64];
	for (int i = 0; i < 20000; i++) {
		size_t n = (size_t)rand_r(&seed) % sizeof(rnd);
		for (size_t k = 0; k < n; k++)
			rnd[k] = (uint8_t)rand_r(&seed);
		(void)pbw_decode_reply(rnd, n, &r);
		ck_assert_uint_lt(strlen(r.error_message), sizeof(r.error_message));
	}
}
END_TEST

/*
 * pbwire's field numbers (pbwire.h, PBW_FIELDS) are the ones protoc-c
 * generated from toggle.proto: looked up by name in the descriptors, each
 * must have the same number and type.  A field renumbered, renamed or
 * retyped in the .proto fails here, not at a daemon.
 */
START_TEST(test_field_numbers_match_proto)
{
	static const struct {
		const char *constant;
		const ProtobufCMessageDescriptor *msg;
		const char *field;
		ProtobufCType type;
		unsigned number;
	} fields[] = {
#define PBW_FIELD_ROW(name, m, f, t, n) \
	{"PBW_" #name, &toggle__##m##__descriptor, #f, PROTOBUF_C_TYPE_##t, PBW_##name},
		PBW_FIELDS(PBW_FIELD_ROW)
#undef PBW_FIELD_ROW
	};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field_by_name(fields[i].msg, fields[i].field);
		ck_assert_msg(f != NULL, "%s: %s has no field %s", fields[i].constant,
			      fields[i].msg->name, fields[i].field);
		ck_assert_msg(f->id == fields[i].number, "%s is %u, toggle.proto says %s.%s = %u",
			      fields[i].constant, fields[i].number, fields[i].msg->name,
			      fields[i].field, f->id);
		ck_assert_msg(f->type == fields[i].type, "%s: %s.%s changed its type",
			      fields[i].constant, fields[i].msg->name, fields[i].field);
	}
}
END_TEST

static Suite *pbwire_suite(void)
{
	Suite *s = suite_create("pbwire");
	TCase *tc = tcase_create("pbwire");
	tcase_add_loop_test(tc, test_register_decodes_in_protobuf_c, 0, 2);
	tcase_add_loop_test(tc, test_encoding_is_canonical, 0, 2);
	tcase_add_test(tc, test_replies_decode_here);
	tcase_add_test(tc, test_hostile_bytes);
	tcase_add_test(tc, test_field_numbers_match_proto);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(pbwire_suite());
}
