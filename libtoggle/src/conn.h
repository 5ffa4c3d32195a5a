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
#include "toggle.h"
#include "toggle_shm.h"

struct tg_conn;

/* Copies everything it needs; the fd stays owned by the caller and open
 * until tg_conn_stop() returns. */
int tg_conn_start(const char *path, int shm_fd, const struct pbw_register *reg,
		  struct tg_conn **out, char *err, size_t errlen);
void tg_conn_stop(struct tg_conn *c);
/* The agent's data ring (toggle_ring.h): sent with RegisterRingRequest after
 * every registration, and now if registered.  fd stays the caller's, open
 * until tg_conn_stop() returns. */
void tg_conn_ring(struct tg_conn *c, int fd, uint64_t size);

/* What toggle_conn_get() reports (under the connection's lock). */
void tg_conn_info(struct tg_conn *c, struct toggle_conn_info *out);
/* The same without the lock, for the status lane: each word is read
 * atomically (the thread stores them as it changes them), never blocks. */
void tg_conn_lane(const struct tg_conn *c, struct toggle_shm_conn *out);

#endif
