/*
 * life_hub.h - the layout of the agent's lifetime hub (life.c), C only.
 * life.c owns it (creates it, counts references, its destructors count
 * deaths); core.c reads its death count for tg_fast_update, so that the
 * lowest layer needs no call into life.c.
 */
#ifndef TG_LIFE_HUB_H
#define TG_LIFE_HUB_H

#include <stdatomic.h>
#include <stdint.h>

struct toggle_agent;

struct tg_life_hub {
	atomic_uint refs;                     /* the agent's, and one per object alive */
	_Atomic uint64_t deaths;              /* destructors that ran */
	_Atomic(struct toggle_agent *) agent; /* NULL once the agent closes */
	atomic_uint busy;                     /* destructors that may be using agent */
};

#endif
