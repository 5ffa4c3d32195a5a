/*
 * record_impl.h - what the rest of libtoggle calls of the recorder
 * (record.c, toggle_record.h): one call after a launch, one at each step,
 * one at close.  agent->rec_on is NULL until a ring is open, so the
 * launch path's only cost without one is the test of that pointer.
 */
#ifndef TG_RECORD_IMPL_H
#define TG_RECORD_IMPL_H

#include "agent_impl.h"

struct tg_rec;

/* After g's exec was launched on stream (toggle_graph_launch): record what
 * its step enabled, if a recording is requested.  Never fails the launch. */
void tg_record_launch(struct toggle_agent *a, struct tg_graph *g, CUstream stream);
/* toggle_step_begin: the request re-read, completed copies published. */
void tg_record_step(struct toggle_agent *a);
/* toggle_agent_close: waits for the copies in flight, frees the ring. */
void tg_record_close(struct toggle_agent *a);

#endif
