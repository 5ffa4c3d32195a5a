/*
 * check_record_drops.c - a data ring's counters as toggled shows them (issue
 * 24: drops "counted and shown in `togglectl agents` and `/metrics`";
 * docs/recording.md): the real toggled (ASan build, TOGGLED_BIN) with
 * --metrics on a Unix socket, fake agents that register a data ring by hand
 * (the helpers are check_record_daemon.c's).
 *   - the ring's size, the agent's records, drops and errors reach
 *     ListAgents (AgentInfo.ring_*) and /metrics
 *     (graphtoggle_agent_ring_*); what toggled forwarded to a recording is
 *     toggled's own count, equal to what the client received;
 *   - a hostile agent that rewrites its counters backwards, to 2^64 - 1, or
 *     back again: the shown values never go back and never pass 2^53, each
 *     refused read is counted (counter_faults), and toggled serves on;
 *   - an agent without a ring has no ring series and ring_bytes 0.
 * toggled must exit 0 at every test's end (sanitizer reports fail it).
 */
#include <inttypes.h>

#include "fixture_record.h"

/* ---- what toggled shows ------------------------------------------------------ */

#define SHOWN_MAX (1ull << 53)

struct shown {
	uint64_t bytes, records, dropped, errors, fwd_records, fwd_bytes, faults;
};

/* ListAgents' ring fields of one agent. */
static struct shown listed(struct tgc *c, uint64_t agent_id)
{
	Toggle__Selector sel = sel_id(agent_id);
	Toggle__ListAgentsRequest m = TOGGLE__LIST_AGENTS_REQUEST__INIT;
	m.target = &sel;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT, *rep = NULL;
	env.body_case = TOGGLE__ENVELOPE__BODY_LIST_AGENTS;
	env.list_agents = &m;
	char err[ERRLEN];
	int rc = tgc_call(c, &env, &rep, RPC_MS, err, sizeof(err));
	ASSERT_CODE(rc, 0, err);
	ASSERT(rep->agents->n_agents == 1, "%zu agents", rep->agents->n_agents);
	const Toggle__AgentInfo *a = rep->agents->agents[0];
	struct shown s = {a->ring_bytes, a->ring_records, a->ring_dropped, a->ring_errors,
			  a->ring_forwarded_records, a->ring_forwarded_bytes, a->ring_counter_faults};
	toggle__envelope__free_unpacked(rep, NULL);
	return s;
}

/* GET /metrics over the Unix socket: the body, malloc'd. */
static char *scrape(const struct env *e)
{
	struct sockaddr_un sa;
	socklen_t salen;
	ASSERT(tgp_unix_address(e->msock, &sa, &salen) == 0, "address %s", e->msock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&sa, salen) == 0, "connect %s: %s",
	       e->msock, strerror(errno));
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	raw_write(fd, req, sizeof(req) - 1, -1);
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	ASSERT(buf, "malloc");
	uint64_t end = now_ms() + WAIT_MS;
	for (;;) {
		if (n + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ASSERT(buf, "realloc");
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ASSERT(now_ms() < end, "/metrics did not answer");
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t k = read(fd, buf + n, cap - n - 1);
		ASSERT(k >= 0, "read: %s", strerror(errno));
		if (k == 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	buf[n] = 0;
	ASSERT(!strncmp(buf, "HTTP/1.1 200", 12), "/metrics answered: %.80s", buf);
	char *body = strstr(buf, "\r\n\r\n");
	ASSERT(body, "no body");
	memmove(buf, body + 4, strlen(body + 4) + 1);
	return buf;
}

/* The value of metric name for agent id, or -1 when there is no such series. */
static long double series(const char *text, const char *name, uint64_t id)
{
	char idl[48];
	snprintf(idl, sizeof(idl), "id=\"%" PRIu64 "\"}", id);
	size_t nl = strlen(name);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, name, nl) || l[nl] != '{')
			continue;
		const char *eol = strchr(l, '\n');
		const char *at = strstr(l, idl);
		if (!at || (eol && at > eol))
			continue;
		return strtold(at + strlen(idl), NULL);
	}
	return -1;
}

/* Both HELP and TYPE lines of a metric are there. */
static void has_family(const char *text, const char *name, const char *type)
{
	char help[160], typ[160];
	snprintf(help, sizeof(help), "# HELP %s ", name);
	snprintf(typ, sizeof(typ), "# TYPE %s %s\n", name, type);
	ASSERT(strstr(text, help) && strstr(text, typ), "no HELP/TYPE %s for %s", type, name);
}

/* /metrics as a struct shown (every field must have its series). */
static struct shown scraped(const struct env *e, uint64_t id)
{
	/* A render answers scrapes for 250 ms (metrics.c's cache): wait it out. */
	sleep_ms(300);
	char *t = scrape(e);
	static const char *const names[] = {
		"graphtoggle_agent_ring_size_bytes", "graphtoggle_agent_ring_records_total",
		"graphtoggle_agent_ring_dropped_total", "graphtoggle_agent_ring_errors_total",
		"graphtoggle_agent_ring_forwarded_records_total",
		"graphtoggle_agent_ring_forwarded_bytes_total",
		"graphtoggle_agent_ring_counter_faults_total"};
	uint64_t v[7];
	for (size_t i = 0; i < 7; i++) {
		has_family(t, names[i], i ? "counter" : "gauge");
		long double x = series(t, names[i], id);
		ASSERT(x >= 0, "no series %s for agent %" PRIu64, names[i], id);
		ASSERT(x <= (long double)UINT64_MAX, "%s out of range", names[i]);
		v[i] = (uint64_t)x;
	}
	free(t);
	return (struct shown){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
}

static void same(const struct shown *a, const struct shown *b, const char *what)
{
	ASSERT(a->bytes == b->bytes && a->records == b->records && a->dropped == b->dropped &&
	       a->errors == b->errors && a->fwd_records == b->fwd_records &&
	       a->fwd_bytes == b->fwd_bytes && a->faults == b->faults,
	       "%s: listed bytes %" PRIu64 " records %" PRIu64 " dropped %" PRIu64 " errors %" PRIu64
	       " fwd %" PRIu64 "/%" PRIu64 " faults %" PRIu64 "; metrics %" PRIu64 " %" PRIu64
	       " %" PRIu64 " %" PRIu64 " %" PRIu64 "/%" PRIu64 " %" PRIu64,
	       what, a->bytes, a->records, a->dropped, a->errors, a->fwd_records, a->fwd_bytes,
	       a->faults, b->bytes, b->records, b->dropped, b->errors, b->fwd_records, b->fwd_bytes,
	       b->faults);
}

static void counters_write(struct fake *f, uint64_t records, uint64_t dropped, uint64_t errors)
{
	__atomic_store_n(&f->ring.prod->records, records, __ATOMIC_RELEASE);
	__atomic_store_n(&f->ring.prod->dropped, dropped, __ATOMIC_RELEASE);
	__atomic_store_n(&f->ring.prod->errors, errors, __ATOMIC_RELEASE);
}

/* ---- tests -------------------------------------------------------------------- */

/*
 * Real drops and forwarded records: a recording of 3 records whose client
 * reads them, then the ring filled with nobody reading; listed and scraped
 * values equal the ring's own words (written by toggle_ring.h's writer, not
 * by hand) and what the client received.
 */
START_TEST(test_drops_shown)
{
	struct env e;
	env_setup(&e, "check_drops", true);
	struct fake f, bare;
	fake_open(&f, &e, "eng", -1);
	fake_open(&bare, &e, "noring", -2);
	fake_step(&f, 1);
	struct tgc *c = client(&e);

	struct shown l = listed(c, f.agent_id), m = scraped(&e, f.agent_id);
	ASSERT(l.bytes == RING_CAP && l.records == 0 && l.dropped == 0 && l.fwd_records == 0,
	       "fresh ring listed: bytes %" PRIu64 " records %" PRIu64, l.bytes, l.records);
	same(&l, &m, "fresh ring");
	struct shown nb = listed(c, bare.agent_id);
	ASSERT(nb.bytes == 0 && nb.records == 0, "an agent without a ring lists one");
	char *t = scrape(&e);
	ASSERT(series(t, "graphtoggle_agent_ring_dropped_total", bare.agent_id) < 0,
	       "an agent without a ring has a ring series");
	ASSERT(series(t, "graphtoggle_agent_replays_total", bare.agent_id) >= 0,
	       "the ringless agent is in /metrics at all");
	free(t);

	/* A recording that reads 3 records of 24 bytes (and one of another hook, not forwarded). */
	Toggle__Selector sel = sel_id(f.agent_id);
	Toggle__Envelope *rep = NULL;
	uint64_t id;
	char err[ERRLEN];
	ASSERT_CODE(record_start(c, &sel, "resid_post:1", 0, &rep, &id, err), 0, err);
	toggle__envelope__free_unpacked(rep, NULL);
	uint64_t session = fake_session(&f, NULL, true);
	uint64_t sh[2] = {2, 3};
	float v[6];
	fill(v, 6, 1.0f);
	for (int s = 0; s < 3; s++)
		ASSERT(fake_put(&f, session, 2 + s, 0, 1, sh, 2, v, sizeof(v), true), "ring full");
	ASSERT(fake_put(&f, session, 5, 1, 0, sh, 2, v, sizeof(v), true), "ring full");
	struct got g;
	Toggle__RecordEnd rend;
	char msg[ERRLEN];
	uint64_t got_bytes = 0;
	for (int s = 0; s < 3; s++) {
		ASSERT(record_get(c, id, &g, &rend, msg), "ended: %s", msg);
		got_bytes += g.size;
		free(g.data);
	}
	/* The recording ends (its client leaves); then the ring fills with nobody
	 * reading it: the writer drops and counts, toggled forwards nothing more. */
	tgc_close(c);
	fake_session(&f, NULL, false);
	c = client(&e);
	static float big[16384];
	uint64_t bsh[1] = {16384}, written = 0, dropped = 0;
	uint64_t end = now_ms() + WAIT_MS;
	struct tgc *q = client(&e);
	while (dropped < 7 && now_ms() < end) {
		if (fake_put(&f, session, 100 + (int64_t)written, 0, 1, bsh, 1, big, sizeof(big), true))
			written++;
		else
			dropped++;
	}
	ASSERT(written >= RING_CAP / sizeof(big) - 2, "only %" PRIu64 " records fit", written);
	ASSERT(dropped == 7, "the ring never filled");
	uint64_t pub = __atomic_load_n(&f.ring.prod->records, __ATOMIC_RELAXED);
	ASSERT(__atomic_load_n(&f.ring.prod->dropped, __ATOMIC_RELAXED) == 7,
	       "the writer counted its drops");
	l = listed(q, f.agent_id);
	m = scraped(&e, f.agent_id);
	ASSERT(l.dropped == 7 && l.records == pub && l.errors == 0 && l.faults == 0,
	       "listed: records %" PRIu64 " (ring %" PRIu64 ") dropped %" PRIu64 " faults %" PRIu64,
	       l.records, pub, l.dropped, l.faults);
	ASSERT(l.fwd_records == 3 && l.fwd_bytes == got_bytes,
	       "forwarded %" PRIu64 " records, %" PRIu64 " bytes; the client got 3, %" PRIu64,
	       l.fwd_records, l.fwd_bytes, got_bytes);
	same(&l, &m, "after drops");
	tgc_close(q);
	tgc_close(c);
	fake_close(&bare);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

/*
 * What a hostile agent writes into its counters, in order, and what must be
 * shown after each: never lower than before, never past 2^53.  Every read
 * of a refused value counts one fault: a listing, a scrape, a listing
 * again, so a lying write adds exactly one fault per read and an honest one
 * none.
 */
START_TEST(test_drops_hostile)
{
	struct env e;
	env_setup(&e, "check_drops", true);
	struct fake f;
	fake_open(&f, &e, "liar", -1);
	fake_step(&f, 1);
	struct tgc *c = client(&e);
	static const struct {
		uint64_t records, dropped, errors;       /* written by the agent */
		uint64_t s_records, s_dropped, s_errors; /* shown */
		bool lie;
	} seq[] = {
		{10, 5, 1, 10, 5, 1, false}, /* honest */
		{20, 9, 1, 20, 9, 1, false},
		{20, 2, 1, 20, 9, 1, true},  /* drops backwards: kept at 9 */
		{0, 0, 0, 20, 9, 1, true},   /* everything to 0 */
		{25, 9, 2, 25, 9, 2, false}, /* honest again: moves on */
		{26, UINT64_MAX, 2, 26, SHOWN_MAX, 2, true}, /* huge: cut at 2^53 */
		{27, 12, 2, 27, SHOWN_MAX, 2, true},         /* back from huge: stays */
		{UINT64_MAX, UINT64_MAX, UINT64_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, true},
		{SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, SHOWN_MAX, false},
	};
	uint64_t faults = 0;
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		counters_write(&f, seq[i].records, seq[i].dropped, seq[i].errors);
		unsigned lie = seq[i].lie ? 1 : 0;
		struct shown l = listed(c, f.agent_id);
		ASSERT(l.records == seq[i].s_records && l.dropped == seq[i].s_dropped &&
		       l.errors == seq[i].s_errors,
		       "write %zu: listed records %" PRIu64 " dropped %" PRIu64 " errors %" PRIu64
		       ", expected %" PRIu64 " %" PRIu64 " %" PRIu64,
		       i, l.records, l.dropped, l.errors, seq[i].s_records, seq[i].s_dropped,
		       seq[i].s_errors);
		ASSERT(l.faults == faults + lie, "write %zu: %" PRIu64 " faults listed, expected %" PRIu64,
		       i, l.faults, faults + lie);
		struct shown m = scraped(&e, f.agent_id);
		ASSERT(m.records == l.records && m.dropped == l.dropped && m.errors == l.errors,
		       "write %zu: /metrics shows records %" PRIu64 " dropped %" PRIu64 " errors %" PRIu64,
		       i, m.records, m.dropped, m.errors);
		ASSERT(m.faults == l.faults + lie, "write %zu: /metrics faults %" PRIu64 ", expected %" PRIu64,
		       i, m.faults, l.faults + lie);
		struct shown again = listed(c, f.agent_id);
		ASSERT(again.dropped == l.dropped && again.faults == m.faults + lie,
		       "write %zu: listed again dropped %" PRIu64 " faults %" PRIu64, i, again.dropped,
		       again.faults);
		faults = again.faults;
	}
	daemon_serves(&e);
	tgc_close(c);
	fake_close(&f);
	env_teardown(&e);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("record_drops");
	TCase *t = tcase_create("drops");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_drops_shown);
	tcase_add_test(t, test_drops_hostile);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return tu_run_suite(suite());
}
