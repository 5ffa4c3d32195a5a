/*
 * fuzz_shm.c - libFuzzer target: a hostile agent rewrites its shared-memory
 * region while the daemon attaches to it and reads it (issue 11, item 1).
 *
 * The input is a list of 12-byte records: an opcode byte, a 3-byte offset and
 * an 8-byte value.  "Agent" records store the value anywhere in the region
 * (header included) through the agent's own mapping; "daemon" records run
 * what toggled does with an agent's region: attach (check, then map), read
 * the status lane whole or its head, read the control lane to continue it,
 * fill a plan slot and publish, and then use what it read the way the daemon
 * does (walk the graph records, format the current set, ring arithmetic).
 * A second thread replays the input's agent stores in a loop for the whole
 * run, so the region also changes *during* each daemon read.
 *
 * Must never crash, read or write outside the mapping, or hand out lanes
 * that are not where the validated layout puts them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "toggle.h"
#include "toggle_shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REC 12

enum { OP_AGENT_STORE, OP_AGENT_HEADER, OP_ATTACH, OP_STATUS, OP_HEAD, OP_CONTROL_CONTINUE,
       OP_CONTROL_WRITE, OP_PLAN, OP_COUNT };

struct rec {
	uint8_t op;
	uint32_t off;
	uint64_t val;
};

struct mutator {
	struct toggle_shm *agent;
	const struct rec *v;
	size_t n;
	int stop;
};

static const char *const fz_types[2] = {"resid_post", "attn_out"};
static const struct toggle_catalog fz_cat = {.type_names = fz_types, .n_types = 2, .n_layers = 4};

/* The agent's store: any 8-byte word of the region (offset taken modulo its size). */
static void agent_store(struct toggle_shm *a, const struct rec *r)
{
	size_t words = a->size / 8;
	size_t w = r->op == OP_AGENT_HEADER ? r->off % (sizeof(struct toggle_shm_header) / 8)
					    : r->off % words;
	__atomic_store_n((uint64_t *)a->base + w, r->val, __ATOMIC_RELAXED);
}

static void *mutate(void *arg)
{
	struct mutator *m = arg;
	while (!__atomic_load_n(&m->stop, __ATOMIC_RELAXED))
		for (size_t i = 0; i < m->n; i++)
			if (m->v[i].op == OP_AGENT_STORE || m->v[i].op == OP_AGENT_HEADER)
				agent_store(m->agent, &m->v[i]);
	return NULL;
}

/* What the daemon does with a status copy: every use bounded by the copy. */
static void use_status(const struct toggle_shm_status *st, bool whole)
{
	if (st->n_graphs > TOGGLE_SHM_MAX_GRAPHS)
		abort(); /* a reader that returned 0 must have bounded it */
	uint64_t sum = 0;
	for (int i = 0; i < TOGGLE_SHM_AN_COUNT; i++)
		sum += st->anomalies[i];
	if (!whole)
		return;
	for (uint64_t i = 0; i < st->n_graphs; i++)
		sum += st->graphs[i].nodes + st->graphs[i].replays;
	struct toggle_set s;
	memcpy(s.bits, st->current, sizeof(s.bits));
	char buf[512];
	int n = toggle_set_format(&fz_cat, &s, buf, sizeof(buf));
	if (n >= 0 && memchr(buf, '\0', sizeof(buf)) == NULL)
		abort();
	(void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = size / REC;
	if (n == 0 || n > 256)
		return 0;
	struct rec *v = calloc(n, sizeof(*v));
	struct toggle_shm_status *st = malloc(sizeof(*st));
	if (!v || !st) {
		free(v);
		free(st);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		const uint8_t *p = data + i * REC;
		v[i].op = p[0] % OP_COUNT;
		v[i].off = (uint32_t)p[1] | (uint32_t)p[2] << 8 | (uint32_t)p[3] << 16;
		memcpy(&v[i].val, p + 4, 8);
	}
	char err[256];
	struct toggle_shm agent, d = {.fd = -1};
	if (toggle_shm_create(&agent, err, sizeof(err)) != 0)
		abort();
	const size_t good_ctl = (size_t)((char *)agent.ctl - (char *)agent.base);
	const size_t good_st = (size_t)((char *)agent.st - (char *)agent.base);
	struct mutator m = {.agent = &agent, .v = v, .n = n};
	pthread_t t;
	bool threaded = pthread_create(&t, NULL, mutate, &m) == 0;
	struct toggle_shm_control_view ctl = {0};
	for (size_t i = 0; i < n; i++) {
		const struct rec *r = &v[i];
		switch (r->op) {
		case OP_AGENT_STORE:
		case OP_AGENT_HEADER:
			agent_store(&agent, r);
			break;
		case OP_ATTACH:
			toggle_shm_unmap(&d);
			if (toggle_shm_attach(agent.fd, &d, err, sizeof(err)) == 0) {
				if (d.size != agent.size || (char *)d.ctl != (char *)d.base + good_ctl ||
				    (char *)d.st != (char *)d.base + good_st)
					abort(); /* lanes placed from something the agent wrote */
			} else if (d.base || memchr(err, '\0', sizeof(err)) == NULL) {
				abort();
			}
			break;
		case OP_STATUS:
			if (d.base && toggle_shm_status_read(d.st, st) == 0)
				use_status(st, true);
			break;
		case OP_HEAD:
			if (d.base && toggle_shm_status_read_head(d.st, st) == 0)
				use_status(st, false);
			break;
		case OP_CONTROL_CONTINUE:
			if (d.base && toggle_shm_control_read(d.ctl, &ctl) != 0)
				memset(&ctl, 0, sizeof(ctl));
			break;
		case OP_CONTROL_WRITE:
			if (d.base) {
				ctl.version = r->val;
				toggle_shm_control_write(d.ctl, &ctl);
			}
			break;
		case OP_PLAN:
			if (d.base && toggle_shm_status_read_head(d.st, st) == 0) {
				/* The daemon's ring arithmetic on values the agent wrote. */
				uint64_t used = ctl.plan_head - st->plan_consumed;
				uint64_t room = used > TOGGLE_SHM_PLAN_RING ? 0 : TOGGLE_SHM_PLAN_RING - used;
				struct toggle_shm_plan_slot slot = {.batch = r->val, .batch_len = 1};
				for (uint64_t k = 0; k < room && k < 2; k++)
					toggle_shm_plan_slot_write(d.ctl, ctl.plan_head++, &slot);
				toggle_shm_control_write(d.ctl, &ctl);
			}
			break;
		}
	}
	if (threaded) {
		__atomic_store_n(&m.stop, 1, __ATOMIC_RELAXED);
		pthread_join(t, NULL);
	}
	toggle_shm_unmap(&d);
	toggle_shm_unmap(&agent);
	free(st);
	free(v);
	return 0;
}
