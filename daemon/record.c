/*
 * record.c - recordings: an agent's data ring (toggle_ring.h) shared with
 * toggled at registration (RegisterRing), and `togglectl record`
 * (RecordRequest): the daemon adds the recorded hooks to each target's
 * standing set, asks the agent's ring for them (the ring's request area:
 * a session and a set), forwards what the ring publishes to the client as
 * RecordData chunks, and at the end (steps done, the agent left or broke
 * its ring, the client left, the daemon stops) removes what it added and
 * turns the agent's recording off.  docs/recording.md.
 *
 * The agent is an adversary: every record header is copied and validated
 * by toggle_ring_reader_next (positions, lengths, seq, dtype, shape) and
 * then here against the agent's catalog and the recording's session and
 * set; payload bytes are read at the validated offset and length only.  A
 * fault ends that agent's part with TOGGLE_ESHM and the ring is never read
 * again; nothing else is affected.  Rings are read on a timer, a bounded
 * number of bytes per tick and only while the client's write queue has
 * room: a client that does not read makes the ring fill up, and the agent
 * drops and counts (it never waits).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "report.h"
#include "rpc.h"
#include "toggle_ring.h"

#define REC_POLL_MS     1              /* ring polling while a recording runs */
#define REC_TICK_BYTES  (8u << 20)     /* payload bytes forwarded per tick, all recordings */
#define REC_QUEUE_SHARE 2              /* a client's queue may be filled to max_queue / this */
#define REC_STALL_MS    30000          /* a client whose queue stays full this long is dropped */
#define REC_FRAME_SLACK 1024           /* a RecordData frame's bytes besides its data */

/* An agent's data ring, as the daemon holds it. */
struct td_ring {
	struct toggle_ring_map map;
	struct toggle_ring_reader rd;
	bool dead;                 /* it faulted: never read again */
	struct rec_part *part;     /* the recording reading it, or NULL */
	/* What is shown of the agent's counters (ring_fold): never back, never past RING_SHOWN_MAX. */
	uint64_t shown_records, shown_dropped, shown_errors;
	uint64_t counter_faults;   /* observations ring_fold refused a value of */
	/* toggled's own count of what it read, validated and forwarded from this ring. */
	uint64_t fwd_records, fwd_bytes;
};

/*
 * The agent's counters are its word, in memory it may rewrite at any
 * moment: a drop counter that goes back (a hostile or broken agent) would
 * make a Prometheus counter reset and rate() read a huge spike, one near
 * 2^64 would overflow whoever sums it.  So toggled shows a folded copy,
 * per ring: each observation loads each word once; a value below what was
 * shown is refused (the shown value stays), a value above RING_SHOWN_MAX
 * counts as RING_SHOWN_MAX (2^53: exact in the double Prometheus stores,
 * and no real ring publishes or drops that many records: 10^9 a second
 * for 104 days); either counts one counter fault.  The shown values are
 * for display only: nothing sizes, indexes or ends anything with them.
 */
#define RING_SHOWN_MAX (1ull << 53)

struct td_recording;

/* One agent of a recording. */
struct rec_part {
	struct td_recording *rec;
	struct td_agent *a;        /* NULL once it left */
	uint64_t agent_id;
	char name[TGP_MAX_NAME];
	struct toggle_set want;    /* what is recorded */
	struct toggle_set added;   /* what the recording added to its standing set */
	bool ended;
	bool have;                 /* cur is a record being sent */
	struct toggle_ring_record cur;
	const unsigned char *payload;
	uint64_t off;
	bool have_step;
	int64_t last_step;
	uint64_t steps, records, bytes, dropped0, dropped;
};

struct td_recording {
	struct td_recording *next;
	struct td_daemon *d;
	struct td_peer *peer;      /* NULL once it left */
	uint64_t request_id;
	uint64_t session;
	uint64_t steps;            /* per agent; 0: until the client leaves */
	size_t n, n_ended;
	struct rec_part *parts;
	uint64_t full_since_ms;    /* its queue has been full since (0: it is not) */
	bool done;                 /* every part ended: freed by rec_reap */
};

/* The module's state: its list and timer, made at the first use. */
struct td_rec {
	uv_timer_t timer;
	struct td_recording *head;
	uint64_t last_session;
	uint64_t faults;           /* rings that faulted */
	bool in_tick;              /* on_rec_timer runs: recordings are freed at its end */
};

static struct td_rec *rec_state(struct td_daemon *d)
{
	if (d->rec)
		return d->rec;
	struct td_rec *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	uv_timer_init(d->loop, &s->timer);
	s->timer.data = d;
	/* Sessions are never reused, also across restarts: the ring outlives us. */
	s->last_session = util_unix_ms() << 10;
	d->rec = s;
	return s;
}

/* ---- the ring of an agent -------------------------------------------------- */

void rpc_register_ring(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	struct td_agent *a = p->agent;
	if (!a) {
		rpc_fail(r, TOGGLE_EPROTO, "RegisterRing before RegisterAgent on this connection");
		return;
	}
	if (a->ring) {
		rpc_fail(r, TOGGLE_EPROTO, "agent %s already registered its data ring", a->name);
		return;
	}
	if (p->pending_fd < 0) {
		rpc_fail(r, TOGGLE_ESHM, "RegisterRing came without its memfd (SCM_RIGHTS)");
		return;
	}
	struct td_ring *g = calloc(1, sizeof(*g));
	if (!g) {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
		return;
	}
	char err[256] = "";
	int rc = toggle_ring_attach(p->pending_fd, req->register_ring->ring_size, &g->map, err,
				    sizeof(err));
	close(p->pending_fd);
	p->pending_fd = -1;
	if (rc) {
		free(g);
		log_warnx("agent %s (id %llu): data ring refused: %s", a->name,
			  (unsigned long long)a->id, err);
		rpc_fail(r, rc, "data ring refused: %s", err);
		return;
	}
	/* A previous daemon's recording may have left the agent recording: off. */
	struct toggle_set none = {{0}};
	toggle_ring_request_write(g->map.req, 0, &none);
	a->ring = g;
	log_info("agent %s (id %llu): data ring of %llu bytes", a->name, (unsigned long long)a->id,
		 (unsigned long long)g->map.capacity);
	toggle__register_ring_reply__init(rpc_body(r, TOGGLE__ENVELOPE__BODY_REGISTER_RING_REPLY));
}

/* One counter's observation: false when v was refused or cut (see RING_SHOWN_MAX). */
static bool shown_fold(uint64_t *shown, uint64_t v)
{
	bool ok = true;
	if (v > RING_SHOWN_MAX) {
		v = RING_SHOWN_MAX;
		ok = false;
	}
	if (v < *shown)
		return false;
	*shown = v;
	return ok;
}

/* Observe the agent's counters once (each word loaded once) into the shown copy. */
static void ring_fold(struct td_agent *a)
{
	struct td_ring *g = a->ring;
	const struct toggle_ring_producer *pr = g->map.prod;
	uint64_t records = __atomic_load_n(&pr->records, __ATOMIC_RELAXED);
	uint64_t dropped = __atomic_load_n(&pr->dropped, __ATOMIC_RELAXED);
	uint64_t errors = __atomic_load_n(&pr->errors, __ATOMIC_RELAXED);
	bool ok = shown_fold(&g->shown_records, records);
	ok = shown_fold(&g->shown_dropped, dropped) && ok;
	ok = shown_fold(&g->shown_errors, errors) && ok;
	if (ok)
		return;
	/* Logged at the first fault only: the agent decides how often it lies. */
	if (g->counter_faults++ == 0)
		log_warnx("agent %s (id %llu): its data ring's counters went back or past 2^53 "
			  "(records %llu, dropped %llu, errors %llu): shown as before",
			  a->name, (unsigned long long)a->id, (unsigned long long)records,
			  (unsigned long long)dropped, (unsigned long long)errors);
}

void td_record_ring_counters(struct td_agent *a, struct td_ring_counters *out)
{
	memset(out, 0, sizeof(*out));
	struct td_ring *g = a->ring;
	if (!g)
		return;
	ring_fold(a);
	out->capacity = g->map.capacity;
	out->records = g->shown_records;
	out->dropped = g->shown_dropped;
	out->errors = g->shown_errors;
	out->counter_faults = g->counter_faults;
	out->forwarded_records = g->fwd_records;
	out->forwarded_bytes = g->fwd_bytes;
}

void td_record_fill_agent(Toggle__AgentInfo *m, struct td_agent *a)
{
	struct td_ring_counters k;
	td_record_ring_counters(a, &k);
	if (!k.capacity)
		return;
	m->ring_bytes = k.capacity;
	m->ring_records = k.records;
	m->ring_dropped = k.dropped;
	m->ring_errors = k.errors;
	m->ring_forwarded_records = k.forwarded_records;
	m->ring_forwarded_bytes = k.forwarded_bytes;
	m->ring_counter_faults = k.counter_faults;
}

/* ---- ending -------------------------------------------------------------- */

static void rec_timer_update(struct td_daemon *d);

static void rec_send_end(struct td_recording *rec, uint64_t agent_id, int code, const char *msg,
			 const struct rec_part *pt)
{
	if (!rec->peer)
		return;
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__RecordEnd m = TOGGLE__RECORD_END__INIT;
	env.id = rec->request_id;
	env.body_case = TOGGLE__ENVELOPE__BODY_RECORD_END;
	env.record_end = &m;
	m.agent_id = agent_id;
	m.code = code;
	m.message = (char *)(uintptr_t)(msg ? msg : "");
	for (size_t i = 0; i < rec->n; i++) {
		const struct rec_part *q = pt ? pt : &rec->parts[i];
		m.records += q->records;
		m.bytes += q->bytes;
		m.dropped += q->dropped;
		m.steps += q->steps;
		if (pt)
			break;
	}
	td_report_send(rec->peer, &env);
}

static bool set_any(const struct toggle_set *t)
{
	for (size_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++)
		if (t->bits[w])
			return true;
	return false;
}

/* Put the agent's hooks back: remove what the recording added, turn its ring's request off. */
static void part_restore(struct rec_part *pt)
{
	struct td_agent *a = pt->a;
	if (!a)
		return;
	if (a->ring) {
		struct toggle_set none = {{0}};
		toggle_ring_request_write(a->ring->map.req, 0, &none);
		if (a->ring->part == pt)
			a->ring->part = NULL;
	}
	if (!set_any(&pt->added))
		return;
	char *spec = td_view_spec(a, pt->added.bits);
	struct td_ctl_err e;
	if (!spec || td_ctl_set(&a, 1, spec, TOGGLE__SET_OP__SET_OP_REMOVE, &e) != 0) {
		log_warnx("agent %s (id %llu): the hooks a recording added (%s) could not be removed: "
			  "%s (its note stays: removed when the agent joins again)", a->name,
			  (unsigned long long)a->id, spec ? spec : "?", spec ? e.msg : "out of memory");
	} else {
		log_info("agent %s (id %llu): recording over, %s removed from its standing set",
			 a->name, (unsigned long long)a->id, spec);
		td_owed_paid(a->d, a, pt->rec->session); /* the note goes once that is durable */
	}
	free(spec);
}

/* Free the recordings whose parts all ended; never while the timer walks them. */
static void rec_reap(struct td_daemon *d)
{
	struct td_rec *s = d->rec;
	if (!s || s->in_tick)
		return;
	for (struct td_recording **q = &s->head; *q;) {
		struct td_recording *rec = *q;
		if (!rec->done) {
			q = &rec->next;
			continue;
		}
		*q = rec->next;
		if (rec->peer)
			rec->peer->recording = false;
		free(rec->parts);
		free(rec);
	}
}

/* End one agent's part: code 0 when its steps are done. */
static void part_end(struct rec_part *pt, int code, const char *msg)
{
	if (pt->ended)
		return;
	struct td_recording *rec = pt->rec;
	pt->ended = true;
	if (pt->have && pt->a && pt->a->ring && !pt->a->ring->dead)
		toggle_ring_reader_release(&pt->a->ring->rd, &pt->cur);
	pt->have = false;
	part_restore(pt);
	rec_send_end(rec, pt->agent_id, code, msg, pt);
	if (code)
		log_info("recording %llu, agent %s (id %llu): ended: %s",
			 (unsigned long long)rec->session, pt->name, (unsigned long long)pt->agent_id,
			 msg);
	if (++rec->n_ended == rec->n) {
		rec->done = true;
		rec_send_end(rec, 0, 0, "every agent's part ended", NULL);
		if (rec->peer)
			rec->peer->recording = false;
	}
}

/* The client is gone (or the daemon stops): every part ends, nothing is sent. */
static void rec_abort(struct td_recording *rec, const char *why)
{
	log_info("recording %llu: %s", (unsigned long long)rec->session, why);
	if (rec->peer)
		rec->peer->recording = false;
	rec->peer = NULL;
	for (size_t i = 0; i < rec->n; i++)
		part_end(&rec->parts[i], TOGGLE_EIO, why);
}

void td_record_peer_gone(struct td_peer *p)
{
	struct td_rec *s = p->d->rec;
	if (!s || !p->recording)
		return;
	for (struct td_recording *rec = s->head; rec; rec = rec->next)
		if (rec->peer == p)
			rec_abort(rec, "the client left");
	rec_reap(p->d);
	rec_timer_update(p->d);
}

static void record_agent_gone(struct td_agent *a)
{
	struct td_ring *g = a->ring;
	if (g && g->part) {
		struct rec_part *pt = g->part;
		pt->have = false; /* its ring goes away with it */
		g->part = NULL;
		pt->a = NULL;
		part_end(pt, TOGGLE_ENOAGENT, "the agent left");
	}
	if (g) {
		toggle_ring_unmap(&g->map);
		free(g);
	}
	a->ring = NULL;
	rec_reap(a->d);
	rec_timer_update(a->d);
}

/* An agent leaving (report.h, still in the registry): its part of a
 * recording ends and its ring is unmapped (what the part added stays noted:
 * removed when the agent joins again).  An agent joining: what a recording
 * that did not end here added is removed (record_owed.c). */
static void record_on_change(void *arg, const struct td_change *c)
{
	(void)arg;
	if (c->kind == TD_AGENT_LEFT)
		record_agent_gone(c->a);
	else if (c->kind == TD_AGENT_JOINED)
		td_owed_settle(c->a);
}

int td_record_init(struct td_daemon *d)
{
	/* An applier: a join may change the agent's standing set. */
	return td_report_subscribe(d, TD_SUB_APPLY, record_on_change, NULL);
}

void td_record_stop(struct td_daemon *d)
{
	struct td_rec *s = d->rec;
	if (!s)
		return;
	for (struct td_recording *rec = s->head; rec; rec = rec->next)
		rec_abort(rec, "toggled stops");
	rec_reap(d);
	uv_timer_stop(&s->timer);
	uv_close((uv_handle_t *)&s->timer, NULL);
}

/* After uv_close's callbacks ran (main.c's last uv_run). */
void td_record_free(struct td_daemon *d)
{
	free(d->rec);
	d->rec = NULL;
}

/* ---- forwarding ------------------------------------------------------------ */

/* The ring broke a rule: that agent's part ends, and the ring is never read again. */
static void part_fault(struct rec_part *pt, const char *what)
{
	struct td_agent *a = pt->a;
	char msg[300];
	snprintf(msg, sizeof(msg), "agent %s (id %llu) broke its data ring: %s; its recording ends",
		 pt->name, (unsigned long long)pt->agent_id, what);
	log_warnx("%s", msg);
	if (a && a->ring) {
		a->ring->dead = true;
		a->d->rec->faults++;
	}
	pt->have = false;
	part_end(pt, TOGGLE_ESHM, msg);
}

/* Has the agent gone past its last recorded step with nothing left in the ring? */
static bool part_steps_done(const struct rec_part *pt)
{
	const struct td_recording *rec = pt->rec;
	if (!rec->steps || pt->steps < rec->steps)
		return false;
	/* The step the status lane reports is the agent's word: only compared. */
	return pt->a->st->step > pt->last_step + 1;
}

/*
 * The next record of pt's ring to send: 1 (pt->cur), 0 when none is
 * published, -1 when the part ended.  Records of another session, or of a
 * hook not asked for, are released unseen.
 */
static int part_next(struct rec_part *pt)
{
	struct td_agent *a = pt->a;
	struct td_ring *g = a->ring;
	for (int skipped = 0; skipped < 64; skipped++) {
		const void *payload = NULL;
		int rc = toggle_ring_reader_next(&g->rd, &pt->cur, &payload);
		if (rc == 0)
			return 0;
		if (rc < 0) {
			part_fault(pt, toggle_ring_fault_str(g->rd.fault));
			return -1;
		}
		const struct toggle_ring_record *c = &pt->cur;
		if (c->hook_type >= a->cat.n_types || c->layer >= a->cat.n_layers) {
			char what[96];
			snprintf(what, sizeof(what), "a record of hook %u:%u, outside its catalog",
				 c->hook_type, c->layer);
			part_fault(pt, what);
			return -1;
		}
		unsigned bit = (unsigned)c->hook_type * TOGGLE_MAX_LAYERS + c->layer;
		bool wanted = c->session == pt->rec->session &&
			      (pt->want.bits[bit / 64] >> (bit % 64) & 1);
		if (!wanted) {
			toggle_ring_reader_release(&g->rd, c);
			continue;
		}
		if (pt->rec->steps && (!pt->have_step || c->step != pt->last_step) &&
		    pt->steps >= pt->rec->steps) {
			toggle_ring_reader_release(&g->rd, c);
			part_end(pt, 0, "steps done");
			return -1;
		}
		if (!pt->have_step || c->step != pt->last_step) {
			pt->steps++;
			pt->have_step = true;
			pt->last_step = c->step;
		}
		/* The drop count is the agent's word, folded (ring_fold): shown, never used as a size. */
		ring_fold(a);
		pt->dropped = g->shown_dropped - pt->dropped0;
		pt->payload = payload;
		pt->off = 0;
		pt->have = true;
		return 1;
	}
	return 0; /* more next tick: bounded work */
}

/* One chunk of pt's current record to the client; its bytes, and the record released at its end. */
static uint64_t part_send_chunk(struct rec_part *pt)
{
	struct td_agent *a = pt->a;
	const struct toggle_ring_record *c = &pt->cur;
	uint64_t left = c->payload_len - pt->off;
	uint64_t len = left > TGP_RECORD_CHUNK ? TGP_RECORD_CHUNK : left;
	char hook[TGP_MAX_NAME + 16];
	snprintf(hook, sizeof(hook), "%s:%u", a->cat.type_names[c->hook_type], c->layer);
	uint64_t shape[TOGGLE_RING_MAX_DIMS];
	for (unsigned i = 0; i < c->ndim && i < TOGGLE_RING_MAX_DIMS; i++)
		shape[i] = c->shape[i];
	Toggle__Envelope env = TOGGLE__ENVELOPE__INIT;
	Toggle__RecordData m = TOGGLE__RECORD_DATA__INIT;
	env.id = pt->rec->request_id;
	env.body_case = TOGGLE__ENVELOPE__BODY_RECORD_DATA;
	env.record_data = &m;
	m.agent_id = pt->agent_id;
	m.step = c->step;
	m.hook = hook;
	m.graph = c->graph;
	m.dtype = (char *)(uintptr_t)toggle_dtype_name(c->dtype);
	m.n_shape = c->ndim;
	m.shape = shape;
	m.size = c->payload_len;
	m.offset = pt->off;
	m.data.len = (size_t)len;
	m.data.data = (uint8_t *)(uintptr_t)(pt->payload + pt->off);
	m.seq = c->seq;
	m.dropped = pt->dropped;
	td_report_send(pt->rec->peer, &env);
	if (pt->ended)
		return len ? len : 1; /* the send dropped the client: the part ended inside it */
	pt->off += len;
	pt->bytes += len;
	a->ring->fwd_bytes += len;
	if (pt->off == c->payload_len) {
		toggle_ring_reader_release(&a->ring->rd, c);
		pt->have = false;
		pt->records++;
		a->ring->fwd_records++;
	}
	return len ? len : 1;
}

/* Does the client's queue have room for another chunk? */
static bool rec_room(const struct td_recording *rec)
{
	const struct td_peer *p = rec->peer;
	size_t cap = p->d->cfg.max_queue / REC_QUEUE_SHARE;
	return !p->closing && p->out_bytes + TGP_RECORD_CHUNK + REC_FRAME_SLACK <= cap;
}

/* Forward up to *budget bytes of pt's ring; false when the client's queue is full. */
static bool part_pump(struct rec_part *pt, uint64_t *budget)
{
	while (*budget && !pt->ended) {
		if (!rec_room(pt->rec))
			return false;
		if (!pt->have) {
			int rc = part_next(pt);
			if (rc < 0)
				return true;
			if (rc == 0) {
				if (part_steps_done(pt))
					part_end(pt, 0, "steps done");
				return true;
			}
		}
		uint64_t n = part_send_chunk(pt);
		*budget = n >= *budget ? 0 : *budget - n;
	}
	return true;
}

static void on_rec_timer(uv_timer_t *t)
{
	struct td_daemon *d = t->data;
	struct td_rec *s = d->rec;
	uint64_t budget = REC_TICK_BYTES, now = util_mono_ms();
	s->in_tick = true;
	for (struct td_recording *rec = s->head; rec; rec = rec->next) {
		bool room = true;
		for (size_t i = 0; i < rec->n && !rec->done && budget; i++) {
			struct rec_part *pt = &rec->parts[i];
			if (pt->ended || !rec->peer)
				continue;
			room = part_pump(pt, &budget) && room;
		}
		if (rec->done || !rec->peer) {
			continue;
		} else if (room) {
			rec->full_since_ms = 0;
		} else if (!rec->full_since_ms) {
			rec->full_since_ms = now;
		} else if (now - rec->full_since_ms >= REC_STALL_MS) {
			struct td_peer *p = rec->peer;
			log_warnx("recording %llu: its client (pid %u) read nothing for %d ms",
				  (unsigned long long)rec->session, p->pid, REC_STALL_MS);
			td_report_drop(p, "recording client stopped reading"); /* ends rec */
		}
	}
	s->in_tick = false;
	rec_reap(d);
	rec_timer_update(d);
}

static void rec_timer_update(struct td_daemon *d)
{
	struct td_rec *s = d->rec;
	if (!s)
		return;
	bool want = s->head != NULL;
	if (want && !uv_is_active((uv_handle_t *)&s->timer))
		uv_timer_start(&s->timer, on_rec_timer, REC_POLL_MS, REC_POLL_MS);
	else if (!want && uv_is_active((uv_handle_t *)&s->timer))
		uv_timer_stop(&s->timer);
}

/* ---- the request --------------------------------------------------------- */

/* Can a be recorded?  NULL if so, else why not. */
static const char *rec_unfit(const struct td_agent *a)
{
	if (!a->ring)
		return "it shared no data ring (libtoggle without recording, or an older one)";
	if (a->ring->dead)
		return "its data ring broke a rule earlier";
	if (a->ring->part)
		return "another recording reads it";
	return NULL;
}

/* Drop the agents that cannot be recorded: named in r->skipped (default target) or refused. */
static int rec_filter(struct td_peer *p, struct rpc_reply *r, const Toggle__Selector *sel,
		      struct td_agent **v, size_t *n)
{
	bool dflt = !sel || sel->sel_case == TOGGLE__SELECTOR__SEL__NOT_SET ||
		    sel->sel_case == TOGGLE__SELECTOR__SEL_ALL;
	(void)p;
	size_t k = 0;
	for (size_t i = 0; i < *n; i++) {
		const char *why = rec_unfit(v[i]);
		if (!why) {
			v[k++] = v[i];
			continue;
		}
		int code = v[i]->ring && v[i]->ring->part ? TOGGLE_EBUSY : TOGGLE_ENOTSUP;
		if (!dflt || *n == 1) {
			rpc_fail(r, code, "agent %s (id %llu) cannot be recorded: %s", v[i]->name,
				 (unsigned long long)v[i]->id, why);
			return code;
		}
		char line[400];
		snprintf(line, sizeof(line), "%s (id %llu, uid %u): %s", v[i]->name,
			 (unsigned long long)v[i]->id, v[i]->uid, why);
		char **sv = realloc(r->skipped.v, (r->skipped.n + 1) * sizeof(*sv));
		char *dup = strdup(line);
		if (!sv || !dup) {
			free(dup);
			if (sv)
				r->skipped.v = sv;
			rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
			return TOGGLE_ENOMEM;
		}
		r->skipped.v = sv;
		r->skipped.v[r->skipped.n++] = dup;
	}
	if (k == 0) {
		rpc_fail(r, TOGGLE_ENOTSUP, "no target agent can be recorded: %s",
			 r->skipped.n ? r->skipped.v[0] : "none shares a data ring");
		return TOGGLE_ENOTSUP;
	}
	*n = k;
	return 0;
}

/* The reply's agents (strings owned by the reply). */
static int rec_reply(struct rpc_reply *r, const struct td_recording *rec)
{
	Toggle__RecordReply *rep = rpc_body(r, TOGGLE__ENVELOPE__BODY_RECORD_REPLY);
	toggle__record_reply__init(rep);
	Toggle__RecordAgent **pv = rpc_alloc(r, rec->n, sizeof(*pv));
	Toggle__RecordAgent *av = rpc_alloc(r, rec->n, sizeof(*av));
	if (!pv || !av)
		return TOGGLE_ENOMEM;
	for (size_t i = 0; i < rec->n; i++) {
		const struct rec_part *pt = &rec->parts[i];
		const struct td_agent *a = pt->a;
		toggle__record_agent__init(&av[i]);
		av[i].agent_id = a->id;
		av[i].name = (char *)(uintptr_t)a->name;
		av[i].n_hook_types = a->cat.n_types;
		av[i].hook_types = (char **)(uintptr_t)a->type_ptrs;
		av[i].n_layers = a->cat.n_layers;
		av[i].added = rpc_adopt(r, td_view_spec(a, pt->added.bits));
		if (!av[i].added)
			return TOGGLE_ENOMEM;
		av[i].ring_bytes = a->ring->map.capacity;
		pv[i] = &av[i];
	}
	rep->n_agents = rec->n;
	rep->agents = pv;
	rep->n_skipped = r->skipped.n;
	rep->skipped = r->skipped.v;
	r->after_save = true; /* it leaves once the added hooks are saved */
	return 0;
}

void rpc_record(struct td_peer *p, const Toggle__Envelope *req, struct rpc_reply *r)
{
	const Toggle__RecordRequest *m = req->record;
	struct td_daemon *d = p->d;
	if (!m->spec || !m->spec[0] || strlen(m->spec) > TGP_MAX_SPEC) {
		rpc_fail(r, TOGGLE_ESPEC, "record needs a hook spec of 1 to %d bytes", TGP_MAX_SPEC);
		return;
	}
	if (m->steps > TGP_MAX_RECORD_STEPS) {
		rpc_fail(r, TOGGLE_EINVAL, "%llu steps is over the limit of %llu",
			 (unsigned long long)m->steps, (unsigned long long)TGP_MAX_RECORD_STEPS);
		return;
	}
	if (p->recording) {
		rpc_fail(r, TOGGLE_EBUSY, "this connection records already (one recording each)");
		return;
	}
	struct td_rec *s = rec_state(d);
	if (!s) {
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
		return;
	}
	struct td_agent **v = NULL;
	size_t n = 0;
	if (rpc_targets(p, r, m->target, &v, &n))
		return;
	struct td_recording *rec = NULL;
	const char *specs[1] = {m->spec};
	/* The catalog filter first: it starts the skipped list afresh. */
	if (rpc_default_filter(p, r, m->target, v, &n, specs, 1) || rec_filter(p, r, m->target, v, &n))
		goto out;
	rec = calloc(1, sizeof(*rec));
	struct rec_part *parts = calloc(n, sizeof(*parts));
	if (!rec || !parts) {
		free(parts);
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
		goto out;
	}
	rec->parts = parts;
	/* Every target's set first: a hook outside one catalog refuses the whole recording. */
	for (size_t i = 0; i < n; i++) {
		struct td_agent *a = v[i];
		char err[256];
		int rc = toggle_set_parse(&a->cat, m->spec, &parts[i].want, err, sizeof(err));
		if (rc) {
			struct td_ctl_err e = {.code = rc, .agent_id = a->id};
			snprintf(e.msg, sizeof(e.msg), "agent %s (id %llu): %s", a->name,
				 (unsigned long long)a->id, err);
			snprintf(e.agent, sizeof(e.agent), "%s", a->name);
			rpc_fail_ctl(r, &e);
			goto out;
		}
		td_agent_refresh(a);
		const uint64_t *prev = a->has_standing ? a->ctl.standing : a->st->current;
		for (size_t w = 0; w < TOGGLE_MAX_HOOKS / 64; w++)
			parts[i].added.bits[w] = parts[i].want.bits[w] & ~prev[w];
	}
	/* What each target is owed back, on disk before anything is added
	 * (record_owed.c): paid at the end, or when the agent joins again. */
	uint64_t session = s->last_session + 1;
	for (size_t i = 0; i < n; i++) {
		if (!set_any(&parts[i].added))
			continue;
		char *spec = td_view_spec(v[i], parts[i].added.bits), err[256] = "out of memory";
		int rc = spec ? td_owed_note(d, v[i], session, spec, err, sizeof(err)) : TOGGLE_ENOMEM;
		free(spec);
		if (rc) {
			for (size_t j = 0; j < i; j++)
				td_owed_forget(d, v[j], session);
			log_warnx("recording refused: the note of what it adds to agent %s: %s",
				  v[i]->name, err);
			rpc_fail(r, rc, "recording refused: the note of what it adds to agent %s could "
				 "not be saved: %s", v[i]->name, err);
			goto out;
		}
	}
	struct td_ctl_err e;
	if (td_ctl_set(v, n, m->spec, TOGGLE__SET_OP__SET_OP_ADD, &e)) {
		for (size_t i = 0; i < n; i++)
			td_owed_forget(d, v[i], session);
		rpc_fail_ctl(r, &e);
		goto out;
	}
	rec->d = d;
	rec->peer = p;
	rec->request_id = req->id;
	rec->session = s->last_session = session;
	rec->steps = m->steps;
	rec->n = n;
	for (size_t i = 0; i < n; i++) {
		struct rec_part *pt = &parts[i];
		struct td_agent *a = v[i];
		pt->rec = rec;
		pt->a = a;
		pt->agent_id = a->id;
		snprintf(pt->name, sizeof(pt->name), "%s", a->name);
		a->ring->part = pt;
		toggle_ring_reader_open(&a->ring->rd, &a->ring->map);
		ring_fold(a);
		pt->dropped0 = a->ring->shown_dropped;
		toggle_ring_request_write(a->ring->map.req, rec->session, &pt->want);
	}
	p->recording = true;
	rec->next = s->head;
	s->head = rec;
	if (rec_reply(r, rec)) {
		/* The hooks are added and saved all the same: the peer is dropped, which ends it. */
		rpc_fail(r, TOGGLE_ENOMEM, "out of memory");
		r->drop = "out of memory";
	}
	log_info("recording %llu: %s on %zu agents for pid %u uid %u (%s)",
		 (unsigned long long)rec->session, m->spec, n, p->pid, p->uid,
		 m->steps ? "steps given" : "until the client leaves");
	rec = NULL;
	rec_timer_update(d);
out:
	if (rec) {
		free(rec->parts);
		free(rec);
	}
	free(v);
}
