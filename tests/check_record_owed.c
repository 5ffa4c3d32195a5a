/*
 * check_record_owed.c - what a recording added to an agent's standing set is
 * removed even when the recording cannot end it (daemon/record_owed.c,
 * docs/recording.md "The end"): the real toggled (ASan build) on a private
 * socket and state directory, fake agents with their data rings
 * (tests/fixture_record.h).
 *
 *  - toggled killed (SIGKILL) during a recording, started again on the same
 *    state: before, the restarted daemon restored the saved set with the
 *    recording's hooks in it, for good; now they go when the agent joins;
 *  - the agent leaving during a recording and joining again: before, its
 *    saved set kept the recording's hooks (its part ended with the agent
 *    gone, nothing removed); now they go at the join;
 *  - a recording that ends (the client leaves) leaves no note behind;
 *  - a note that is not one (garbage, too long, a symlink) is removed and
 *    takes nothing from the set; a note that cannot be written refuses the
 *    recording, nothing added.
 */
#include <dirent.h>

#include "fixture_record.h"

/* The agent's note under the state directory. */
static void note_path(const struct env *e, char *out, size_t len)
{
	snprintf(out, len, "%s/recording/eng", e->state);
}

static bool note_exists(const struct env *e)
{
	char p[256];
	struct stat sb;
	note_path(e, p, sizeof(p));
	return lstat(p, &sb) == 0;
}

/* Wait (bounded) until the note is gone (it goes once the removal is durable). */
static void note_gone_wait(const struct env *e)
{
	uint64_t end = now_ms() + WAIT_MS;
	while (note_exists(e)) {
		ASSERT(now_ms() < end, "the recording note stayed");
		sleep_ms(10);
	}
}

/* Agent "eng" at standing set "attn_out:0", recording resid_post:0-1 until the client leaves. */
static struct tgc *recording(const struct env *e, struct fake *f, char *before, char *during,
			     size_t len)
{
	fake_open(f, e, "eng", -1);
	fake_step(f, 3);
	struct tgc *c = client(e);
	ASSERT_CODE(set_spec(c, f->agent_id, "attn_out:0"), 0, "set");
	enabled_wait(c, f->agent_id, "attn_out:0");
	enabled_of(c, f->agent_id, before, len);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	Toggle__Selector sel = sel_id(f->agent_id);
	ASSERT_CODE(record_start(c, &sel, "resid_post:0-1", 0, &rep, &id, err), 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	fake_session(f, NULL, true);
	enabled_of(c, f->agent_id, during, len);
	ASSERT(strcmp(before, during) != 0, "the recording added nothing ('%s')", during);
	ASSERT(note_exists(e), "no note of what the recording added");
	return c;
}

START_TEST(test_daemon_killed_during_recording)
{
	struct env e;
	env_setup(&e, "check_owed", false);
	struct fake f;
	char before[256], during[256];
	struct tgc *c = recording(&e, &f, before, during, sizeof(before));
	env_daemon_kill9(&e);
	tgc_close(c);
	fake_close(&f);
	env_daemon_start(&e);
	fake_open(&f, &e, "eng", -1); /* the agent reconnects: joins the new daemon */
	c = client(&e);
	enabled_wait(c, f.agent_id, before);
	note_gone_wait(&e);
	/* The ring's request is off too (the new daemon turns it off at RegisterRing). */
	fake_session(&f, NULL, false);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

START_TEST(test_agent_leaves_during_recording)
{
	struct env e;
	env_setup(&e, "check_owed", false);
	struct fake f;
	char before[256], during[256];
	struct tgc *c = recording(&e, &f, before, during, sizeof(before));
	fake_close(&f); /* its part ends: NOAGENT */
	fake_open(&f, &e, "eng", -1);
	struct tgc *q = client(&e);
	enabled_wait(q, f.agent_id, before);
	note_gone_wait(&e);
	tgc_close(q);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

START_TEST(test_ended_recording_leaves_no_note)
{
	struct env e;
	env_setup(&e, "check_owed", false);
	struct fake f;
	char before[256], during[256];
	struct tgc *c = recording(&e, &f, before, during, sizeof(before));
	tgc_close(c); /* the client leaves: the recording ends, hooks restored */
	c = client(&e);
	enabled_wait(c, f.agent_id, before);
	note_gone_wait(&e);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/*
 * A note that is not one, found at the agent's join: removed, nothing taken
 * from the set.  _i: 0 garbage, 1 a spec of no hook of the catalog, 2 too
 * long, 3 a symlink to a real-looking note elsewhere.
 */
START_TEST(test_bad_note_removed)
{
	struct env e;
	env_setup(&e, "check_owed", false);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	struct tgc *c = client(&e);
	ASSERT_CODE(set_spec(c, f.agent_id, "attn_out:0,resid_post:1"), 0, "set");
	char before[256];
	enabled_wait(c, f.agent_id, "resid_post:1,attn_out:0"); /* as toggled writes it */
	enabled_of(c, f.agent_id, before, sizeof(before));
	tgc_close(c);
	fake_close(&f);
	char dir[256], p[256], other[256];
	snprintf(dir, sizeof(dir), "%s/recording", e.state);
	ASSERT(mkdir(dir, 0700) == 0 || errno == EEXIST, "mkdir: %s", strerror(errno));
	note_path(&e, p, sizeof(p));
	FILE *w = NULL;
	if (_i == 3) {
		snprintf(other, sizeof(other), "%s/elsewhere", e.dir);
		w = fopen(other, "w");
		ASSERT(w, "fopen");
		fputs("7 resid_post:1\n", w);
		fclose(w);
		ASSERT(symlink(other, p) == 0, "symlink: %s", strerror(errno));
	} else {
		w = fopen(p, "w");
		ASSERT(w, "fopen: %s", strerror(errno));
		if (_i == 0)
			fputs("\x01\x02 not a note", w);
		else if (_i == 1)
			fputs("9 mlp_in:0\n", w);
		else
			for (int k = 0; k < 2000; k++)
				fputs("resid_post:1,", w);
		fclose(w);
	}
	fake_open(&f, &e, "eng", -1);
	c = client(&e);
	note_gone_wait(&e);
	char after[256];
	enabled_of(c, f.agent_id, after, sizeof(after));
	ASSERT(!strcmp(after, before), "the set is '%s', was '%s'", after, before);
	daemon_serves(&e);
	if (_i == 3) {
		struct stat sb;
		ASSERT(stat(other, &sb) == 0, "the symlink's target was removed");
	}
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/* The note cannot be written (its directory's place taken by a file): refused, nothing added. */
START_TEST(test_note_unwritable_refuses)
{
	struct env e;
	env_setup(&e, "check_owed", false);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/recording", e.state);
	FILE *w = fopen(dir, "w");
	ASSERT(w, "fopen: %s", strerror(errno));
	fclose(w);
	struct fake f;
	fake_open(&f, &e, "eng", -1);
	struct tgc *c = client(&e);
	ASSERT_CODE(set_spec(c, f.agent_id, "attn_out:0"), 0, "set");
	enabled_wait(c, f.agent_id, "attn_out:0");
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	Toggle__Selector sel = sel_id(f.agent_id);
	int rc = record_start(c, &sel, "resid_post:0-1", 0, &rep, &id, err);
	if (rep)
		toggle__envelope__free_unpacked(rep, NULL);
	ASSERT(rc == TOGGLE_EIO && strstr(err, "note"), "rc %d (%s): %s", rc, toggle_strerror(rc),
	       err);
	enabled_wait(c, f.agent_id, "attn_out:0");
	uint64_t session = 1;
	struct toggle_set set;
	ASSERT(toggle_ring_request_read(f.ring.req, &session, &set) == 0 && session == 0,
	       "the ring was asked to record (session %llu)", (unsigned long long)session);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("record_owed");
	TCase *tc = tcase_create("owed");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_daemon_killed_during_recording);
	tcase_add_test(tc, test_agent_leaves_during_recording);
	tcase_add_test(tc, test_ended_recording_leaves_no_note);
	tcase_add_loop_test(tc, test_bad_note_removed, 0, 4);
	tcase_add_test(tc, test_note_unwritable_refuses);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
