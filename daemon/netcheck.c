/*
 * netcheck.c - before toggled serves, prove that it may create the sockets
 * its configured modes need.  Under toggled.service (RestrictAddressFamilies=
 * AF_UNIX) a --metrics TCP listener failed with a bare "Address family not
 * supported by protocol" and --etcd logged "etcd unreachable" forever: libcurl
 * never said why.  One socket of each needed family, made and closed at start,
 * turns both into one error that names the fix.
 */
#include "netcheck.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* What a refused family means here, and the fix (toggled(8), SYSTEMD). */
#define NETCHECK_FIX                                                                           \
	"under systemd, toggled.service allows AF_UNIX only: add "                              \
	"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 in a drop-in (graphtoggle installs "  \
	"two, metrics.conf and cluster.conf, under share/graphtoggle/systemd/; toggled(8), "    \
	"SYSTEMD)"

/* 0: a socket of FAMILY can be made; else the errno that refused it. */
static int netcheck_probe(int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	/*
	 * Only the refusals of a family (a seccomp filter answers EAFNOSUPPORT,
	 * others EPERM or EACCES; a kernel without IPv6 EAFNOSUPPORT) count:
	 * running out of descriptors is reported by the real socket later.
	 */
	if (errno == EAFNOSUPPORT || errno == EPERM || errno == EACCES)
		return errno;
	return 0;
}

static const char *netcheck_name(int family)
{
	return family == AF_INET6 ? "AF_INET6" : "AF_INET";
}

/*
 * The family one etcd endpoint needs: "[...]" AF_INET6, a dotted quad
 * AF_INET, a name either (AF_UNSPEC: one of the two must work).
 */
static int netcheck_url_family(const char *url, size_t len)
{
	const char *p = url, *end = url + len;
	const char *scheme = strstr(url, "://");
	if (scheme && scheme < end)
		p = scheme + 3;
	if (p < end && *p == '[')
		return AF_INET6;
	char host[64];
	size_t n = 0;
	while (p + n < end && p[n] != ':' && p[n] != '/')
		n++;
	if (n == 0 || n >= sizeof(host))
		return AF_UNSPEC;
	memcpy(host, p, n);
	host[n] = '\0';
	struct in_addr a;
	return inet_pton(AF_INET, host, &a) == 1 ? AF_INET : AF_UNSPEC;
}

static int netcheck_need(const char *what, int len, int family, char *err, size_t errlen)
{
	int e4 = family == AF_INET6 ? -1 : netcheck_probe(AF_INET);
	int e6 = family == AF_INET ? -1 : netcheck_probe(AF_INET6);
	if (family == AF_INET && e4 == 0)
		return 0;
	if (family == AF_INET6 && e6 == 0)
		return 0;
	if (family == AF_UNSPEC && (e4 == 0 || e6 == 0))
		return 0;
	int e = family == AF_INET6 ? e6 : e4;
	snprintf(err, errlen, "%.*s needs %s sockets and this process may not create them (%s): %s",
		 len, what, family == AF_UNSPEC ? "AF_INET or AF_INET6" : netcheck_name(family),
		 strerror(e), NETCHECK_FIX);
	return -1;
}

int td_netcheck(const char *metrics, const char *etcd, char *err, size_t errlen)
{
	if (metrics && metrics[0] != '/') {
		/* PORT or HOST:PORT with a numeric host: "[v6]:PORT" or one with colons is IPv6 */
		const char *c = strchr(metrics, ':');
		bool v6 = strchr(metrics, '[') || (c && strchr(c + 1, ':'));
		char what[96];
		int n = snprintf(what, sizeof(what), "--metrics %s", metrics);
		if (netcheck_need(what, n < 0 ? 0 : n, v6 ? AF_INET6 : AF_INET, err, errlen) != 0)
			return -1;
	}
	for (const char *p = etcd ? etcd : ""; *p;) {
		size_t len = strcspn(p, ",");
		if (len > 0) {
			char what[96];
			int n = snprintf(what, sizeof(what), "--etcd %.*s", (int)(len > 80 ? 80 : len), p);
			if (netcheck_need(what, n < 0 ? 0 : n, netcheck_url_family(p, len), err, errlen))
				return -1;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}
