/*
 * rpc_reply.c - filling a handler's reply (struct rpc_reply, rpc.h): a body,
 * an error naming its agents, and the memory a body points to, freed with
 * the reply once the dispatcher encoded it.  Below the handlers and the
 * dispatcher, which both fill replies.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* A block of reply memory: one rpc_alloc, or one adopted string (held). */
struct rpc_mem {
	struct rpc_mem *next;
	char *held;
	max_align_t data[];
};

_Static_assert(sizeof(((struct rpc_reply *)0)->text) >= sizeof(((struct td_ctl_err *)0)->msg),
	       "an rpc_reply holds a td_ctl_err's message whole");

void rpc_reply_init(struct rpc_reply *r)
{
	memset(r, 0, sizeof(*r));
	r->outcome = RPC_BODY;
	r->body = TOGGLE__ENVELOPE__BODY__NOT_SET;
}

void rpc_reply_free(struct rpc_reply *r)
{
	for (struct rpc_mem *m = r->mem, *next; m; m = next) {
		next = m->next;
		free(m->held);
		free(m);
	}
	r->mem = NULL;
	if (r->waiter)
		td_waiter_free(r->waiter);
	r->waiter = NULL;
	rpc_skipped_free(&r->skipped);
}

void rpc_skipped_free(struct rpc_skipped *sk)
{
	for (size_t i = 0; i < sk->n; i++)
		free(sk->v[i]);
	free(sk->v);
	sk->v = NULL;
	sk->n = 0;
}

void *rpc_body(struct rpc_reply *r, Toggle__Envelope__BodyCase body)
{
	r->outcome = RPC_BODY;
	r->body = body;
	return &r->u;
}

int rpc_fail(struct rpc_reply *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->text, sizeof(r->text), fmt, ap);
	va_end(ap);
	r->outcome = RPC_ERROR;
	r->code = code;
	return code;
}

int rpc_fail_ctl(struct rpc_reply *r, const struct td_ctl_err *e)
{
	rpc_fail(r, e->code, "%s", e->msg);
	snprintf(r->agent, sizeof(r->agent), "%s", e->agent);
	r->agent_ptr = r->agent;
	r->agents = &r->agent_ptr;
	r->agent_id = e->agent_id;
	r->agent_ids = &r->agent_id;
	r->n_agents = e->agent[0] ? 1 : 0;
	return e->code;
}

void *rpc_alloc(struct rpc_reply *r, size_t n, size_t size)
{
	if (n == 0)
		n = 1;
	if (size && n > (SIZE_MAX - sizeof(struct rpc_mem)) / size)
		return NULL;
	struct rpc_mem *m = calloc(1, sizeof(*m) + n * size);
	if (!m)
		return NULL;
	m->next = r->mem;
	r->mem = m;
	return m->data;
}

char *rpc_adopt(struct rpc_reply *r, char *s)
{
	if (!s)
		return NULL;
	struct rpc_mem *m = calloc(1, sizeof(*m));
	if (!m) {
		free(s);
		return NULL;
	}
	m->held = s;
	m->next = r->mem;
	r->mem = m;
	return s;
}

