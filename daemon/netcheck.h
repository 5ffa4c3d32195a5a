/* netcheck.h - at start, the sockets the configured modes need can be made. */
#ifndef TD_NETCHECK_H
#define TD_NETCHECK_H

#include <stddef.h>

/*
 * Fails (-1, err filled: what needs which family and how to allow it) when
 * --metrics HOST:PORT or --etcd URLs are configured and this process may not
 * create the IPv4/IPv6 sockets they need (systemd's RestrictAddressFamilies=,
 * another seccomp sandbox, or a kernel without IPv6).  metrics: NULL or
 * "/path" needs nothing; etcd: "" for none.  0 otherwise.
 */
int td_netcheck(const char *metrics, const char *etcd, char *err, size_t errlen);

#endif
