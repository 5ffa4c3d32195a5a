/*
 * check_report.c - daemon/report.c, the one way up out of the daemon's
 * lower layers: subscribers are called in the promised order (appliers
 * before observers, each in the order they came, so that a joining agent's
 * event carries what the cluster gave it), the table is bounded, and a
 * peer's output reaches what the server registered, or is freed when
 * nothing is (unit tests of the state alone).
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toggled.h"

static char calls[64];

static void sub(void *arg, const struct td_change *c)
{
	size_t n = strlen(calls);
	if (n + 2 < sizeof(calls)) {
		calls[n] = *(const char *)arg;
		calls[n + 1] = c->kind == TD_AGENT_JOINED ? 'j' : c->kind == TD_AGENT_LEFT ? 'l' : 'p';
		calls[n + 2] = '\0';
	}
}

START_TEST(test_subscriber_order)
{
	static struct td_daemon d; /* large: not on the stack */
	memset(&d, 0, sizeof(d));
	calls[0] = '\0';
	ck_assert_int_eq(td_report_subscribe(&d, TD_SUB_OBSERVE, sub, "A"), 0);
	ck_assert_int_eq(td_report_subscribe(&d, TD_SUB_APPLY, sub, "B"), 0);
	ck_assert_int_eq(td_report_subscribe(&d, TD_SUB_OBSERVE, sub, "C"), 0);
	ck_assert_int_eq(td_report_subscribe(&d, TD_SUB_APPLY, sub, "D"), 0);
	td_report_change(&d, TD_AGENT_JOINED, NULL);
	td_report_change(&d, TD_AGENTS_POLLED, NULL);
	ck_assert_str_eq(calls, "BjDjAjCjBpDpApCp");
	for (int i = 4; i < TD_MAX_SUBSCRIBERS; i++)
		ck_assert_int_eq(td_report_subscribe(&d, TD_SUB_OBSERVE, sub, "E"), 0);
	ck_assert_int_eq(td_report_subscribe(&d, TD_SUB_APPLY, sub, "F"), TOGGLE_ELIMIT);
	calls[0] = '\0';
	td_report_change(&d, TD_AGENT_LEFT, NULL);
	ck_assert_str_eq(calls, "BlDlAlClElElElEl"); /* F is not among them */
}
END_TEST

static size_t frames, frame_len;
static const char *dropped;

static void io_frame(struct td_peer *p, uint8_t *buf, size_t len)
{
	(void)p;
	frames++;
	frame_len = len;
	free(buf);
}

static struct td_out *io_hold(struct td_peer *p, struct td_pending *pend)
{
	(void)p;
	(void)pend;
	return NULL;
}

static void io_fill(struct td_peer *p, struct td_out *slot, uint8_t *data, size_t len)
{
	(void)p;
	(void)slot;
	(void)len;
	free(data);
}

static void io_drop(struct td_peer *p, const char *why)
{
	(void)p;
	dropped = why;
}

START_TEST(test_peer_output)
{
	static struct td_daemon d;
	memset(&d, 0, sizeof(d));
	struct td_peer p = {.d = &d, .id = 7};
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__Ack ack = TOGGLE__ACK__INIT;
	env.id = 3;
	env.body_case = TOGGLE__ENVELOPE__BODY_ACK;
	env.ack = &ack;
	/* Nothing registered: the frame is freed (ASan's leak check), nobody dropped. */
	td_report_send(&p, &env);
	td_report_frame(&p, malloc(16), 16);
	td_report_fill(&p, NULL, malloc(16), 16);
	ck_assert_ptr_null(td_report_hold(&p, NULL));
	td_report_drop(&p, "x");
	ck_assert_ptr_null(dropped);
	static const struct td_report_io io = {io_frame, io_hold, io_fill, io_drop};
	td_report_io(&d, &io);
	td_report_send(&p, &env);
	ck_assert_uint_eq(frames, 1);
	ck_assert_uint_eq(frame_len, TGP_FRAME_HEADER + toggle__envelope__get_packed_size(&env));
	td_report_drop(&p, "why");
	ck_assert_str_eq(dropped, "why");
	/* A closing peer gets nothing more. */
	p.closing = true;
	td_report_send(&p, &env);
	ck_assert_uint_eq(frames, 1);
}
END_TEST

static Suite *report_suite(void)
{
	Suite *s = suite_create("report");
	TCase *tc = tcase_create("report");
	tcase_add_test(tc, test_subscriber_order);
	tcase_add_test(tc, test_peer_output);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(report_suite());
}
