/*
 * report.c - the one way up out of the daemon's lower layers (report.h):
 * what the layers above registered at start-up, called where the state or
 * the dispatcher reports what happened.  It calls nothing above it by name.
 */
#include <stdlib.h>

#include "log.h"
#include "toggled.h"

void td_report_io(struct td_daemon *d, const struct td_report_io *io)
{
	d->report.io = io;
}

int td_report_subscribe(struct td_daemon *d, enum td_sub_role role, td_change_fn *fn, void *arg)
{
	struct td_report *r = &d->report;
	if (r->n_subs == TD_MAX_SUBSCRIBERS)
		return TOGGLE_ELIMIT;
	/* Appliers first, then observers; each in the order they came. */
	size_t at = r->n_subs;
	if (role == TD_SUB_APPLY)
		while (at > 0 && r->subs[at - 1].role == TD_SUB_OBSERVE)
			at--;
	for (size_t i = r->n_subs; i > at; i--)
		r->subs[i] = r->subs[i - 1];
	r->subs[at].fn = fn;
	r->subs[at].arg = arg;
	r->subs[at].role = role;
	r->n_subs++;
	return 0;
}

void td_report_change(struct td_daemon *d, enum td_change_kind kind, struct td_agent *a)
{
	struct td_change c = {.kind = kind, .d = d, .a = a};
	for (size_t i = 0; i < d->report.n_subs; i++)
		d->report.subs[i].fn(d->report.subs[i].arg, &c);
}

void td_report_frame(struct td_peer *p, uint8_t *buf, size_t len)
{
	const struct td_report_io *io = p->d->report.io;
	if (io)
		io->frame(p, buf, len);
	else
		free(buf);
}

void td_report_send(struct td_peer *p, const Toggle__Envelope *env)
{
	if (p->closing)
		return;
	uint8_t *buf;
	size_t len;
	int rc = tgp_frame_encode(env, &buf, &len);
	if (rc) {
		log_warnx("cannot encode a reply for peer %llu: %s", (unsigned long long)p->id,
			  toggle_strerror(rc));
		return;
	}
	td_report_frame(p, buf, len);
}

struct td_out *td_report_hold(struct td_peer *p, struct td_pending *pend)
{
	const struct td_report_io *io = p->d->report.io;
	return io ? io->hold(p, pend) : NULL;
}

void td_report_fill(struct td_peer *p, struct td_out *slot, uint8_t *data, size_t len)
{
	const struct td_report_io *io = p->d->report.io;
	if (io)
		io->fill(p, slot, data, len);
	else
		free(data);
}

void td_report_drop(struct td_peer *p, const char *why)
{
	const struct td_report_io *io = p->d->report.io;
	if (io)
		io->drop(p, why);
}
