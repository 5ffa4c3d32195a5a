/*
 * conn.h - the agent's background connection to toggled.
 *
 * A thread of its own connects to the daemon's socket, says hello, registers
 * the agent and passes its shared-memory fd (SCM_RIGHTS), then waits for the
 * connection to end and reconnects with backoff.  The application never
 * waits on it: everything the daemon decides reaches the agent through
 * shared memory, read on the replay path without locks.
 */
#ifndef TG_CONN_H
#define TG_CONN_H

#include <stdint.h>

#include "pbwire.h"

struct tg_conn;

/* Copies everything it needs; the fd stays owned by the caller and open
 * until tg_conn_stop() returns. */
int tg_conn_start(const char *path, int shm_fd, const struct pbw_register *reg,
		  struct tg_conn **out, char *err, size_t errlen);
void tg_conn_stop(struct tg_conn *c);

struct tg_conn_state {
	int connected;
	uint64_t agent_id;
	uint64_t sessions;  /* successful registrations so far */
	uint64_t failures;  /* failed attempts */
	char last_error[256];
};
void tg_conn_state(struct tg_conn *c, struct tg_conn_state *out);

#endif
