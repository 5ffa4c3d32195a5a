/*
 * peer_trust.h - who may listen at toggled's socket (issue 11 item 6).
 *
 * The agent hands its writable memfd to whatever answers at the socket path,
 * and togglectl believes the replies it reads there.  A listener run by
 * another local user (a pre-created /tmp/toggle-<uid>/, a mistyped path)
 * would get the memfd or fake the daemon.  So right after connect(), before
 * a byte is sent, both read the listener's SO_PEERCRED and go on only if its
 * uid is root (the packaged toggled: systemd/toggled.service has no User=),
 * the caller's effective uid (a per-user toggled), or one listed in
 * TOGGLE_DAEMON_UID ("uid[,uid...]", decimal).  For a listening socket the
 * kernel records who called listen(): systemd when socket-activated.
 *
 * Header-only: libtoggle and the client library share no object file.  No
 * state: the caller passes the variable's value it read.
 */
#ifndef PEER_TRUST_H
#define PEER_TRUST_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "toggle_error.h"

#define TGP_TRUST_ENV      "TOGGLE_DAEMON_UID"
#define TGP_TRUST_ENV_MAX  255   /* bytes of its value */
#define TGP_TRUST_MAX_UIDS 16

/*
 * Is uid in list ("uid[,uid...]", at most TGP_TRUST_MAX_UIDS decimal uids,
 * no blanks, (uid_t)-1 excluded)?  1 listed, 0 not (an empty value is an
 * unset one, as for TOGGLE_SOCKET), -1 malformed (a malformed list trusts
 * nobody: the caller refuses and says so).
 */
static inline int tgp_trust_listed(const char *list, uid_t uid)
{
	size_t len = strnlen(list, TGP_TRUST_ENV_MAX + 1);
	if (len == 0)
		return 0;
	if (len > TGP_TRUST_ENV_MAX)
		return -1;
	int found = 0, n = 0;
	const char *p = list;
	for (;;) {
		unsigned long long v = 0;
		int digits = 0;
		for (; *p >= '0' && *p <= '9'; p++) {
			v = v * 10 + (unsigned)(*p - '0');
			if (++digits > 10 || v >= (unsigned long long)(uid_t)-1)
				return -1;
		}
		if (digits == 0 || ++n > TGP_TRUST_MAX_UIDS)
			return -1;
		if ((uid_t)v == uid)
			found = 1;
		if (*p == '\0')
			return found;
		if (*p++ != ',')
			return -1;
	}
}

/*
 * May we talk to the listener at the other end of the connected Unix socket
 * fd (reached at path)?  trusted_env: TOGGLE_DAEMON_UID's value, or NULL.
 * 0 when trusted; TOGGLE_EPERM (refused) or TOGGLE_EIO (no credentials),
 * with err naming the socket, the listener's uid and how to trust it.
 */
static inline int tgp_peer_trusted(int fd, const char *path, const char *trusted_env,
				   char *err, size_t errlen)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof(cr)) {
		snprintf(err, errlen, "cannot read the credentials of the listener at %s: %s", path,
			 strerror(errno));
		return TOGGLE_EIO;
	}
	uid_t me = geteuid();
	if (cr.uid == 0 || cr.uid == me)
		return 0;
	int listed = trusted_env ? tgp_trust_listed(trusted_env, cr.uid) : 0;
	if (listed == 1)
		return 0;
	if (listed < 0)
		snprintf(err, errlen, "%s is served by uid %u (pid %d), not root or uid %u, and "
			 TGP_TRUST_ENV " is malformed (want uid[,uid], at most %d): refused",
			 path, (unsigned)cr.uid, (int)cr.pid, (unsigned)me, TGP_TRUST_MAX_UIDS);
	else
		snprintf(err, errlen, "%s is served by uid %u (pid %d), not root, uid %u or "
			 TGP_TRUST_ENV ": refused; if it is your daemon, set " TGP_TRUST_ENV "=%u",
			 path, (unsigned)cr.uid, (int)cr.pid, (unsigned)me, (unsigned)cr.uid);
	return TOGGLE_EPERM;
}

#endif /* PEER_TRUST_H */
