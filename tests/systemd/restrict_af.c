/*
 * restrict_af.c - systemd's RestrictAddressFamilies= without systemd, for
 * tests/systemd/run.sh where no systemd runs (CI containers, chroots).
 *
 *   restrict_af allow|deny FAMILY... -- COMMAND [ARG...]
 *
 * installs the filter systemd installs for that setting (socket(2) with a
 * family outside an allow list, or inside a deny list, fails EAFNOSUPPORT;
 * socketpair(2) and inherited sockets are untouched, as under systemd), with
 * no_new_privs (the unit has NoNewPrivileges=yes), then execs COMMAND.
 * FAMILY is AF_UNIX, AF_INET, AF_INET6, AF_NETLINK or AF_PACKET.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define RAF_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define RAF_ARCH AUDIT_ARCH_AARCH64
#else
#error "restrict_af: add this architecture's AUDIT_ARCH_*"
#endif

/* socket(2)'s first argument, the low 32 bits of args[0] */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RAF_ARG0 (offsetof(struct seccomp_data, args[0]))
#else
#define RAF_ARG0 (offsetof(struct seccomp_data, args[0]) + 4)
#endif

#define RAF_MAX 16

static const struct {
	const char *name;
	int family;
} raf_names[] = {
	{"AF_UNIX", AF_UNIX}, {"AF_INET", AF_INET}, {"AF_INET6", AF_INET6},
	{"AF_NETLINK", AF_NETLINK}, {"AF_PACKET", AF_PACKET},
};

static int raf_family(const char *name)
{
	for (size_t i = 0; i < sizeof(raf_names) / sizeof(raf_names[0]); i++)
		if (strcmp(name, raf_names[i].name) == 0)
			return raf_names[i].family;
	return -1;
}

static int raf_usage(void)
{
	fprintf(stderr, "usage: restrict_af allow|deny FAMILY... -- COMMAND [ARG...]\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return raf_usage();
	int allow;
	if (strcmp(argv[1], "allow") == 0)
		allow = 1;
	else if (strcmp(argv[1], "deny") == 0)
		allow = 0;
	else
		return raf_usage();
	int fam[RAF_MAX], n = 0, i = 2;
	for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (n == RAF_MAX)
			return raf_usage();
		if ((fam[n++] = raf_family(argv[i])) < 0) {
			fprintf(stderr, "restrict_af: unknown family '%s'\n", argv[i]);
			return 2;
		}
	}
	if (i + 1 >= argc)
		return raf_usage();

	/* arch, syscall number, then one comparison per family */
	struct sock_filter f[6 + RAF_MAX + 2];
	unsigned k = 0;
	const struct sock_filter ok = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	const struct sock_filter no = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	/* another ABI (x32, i386 on x86-64): refused, as SystemCallArchitectures=native does */
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, RAF_ARCH, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 1, 0);
	f[k++] = ok;
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, RAF_ARG0);
	/* a listed family jumps to the last instruction: allowed (allow list) or refused (deny) */
	for (int j = 0; j < n; j++)
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)fam[j],
						      (unsigned char)(n - j), 0);
	f[k++] = allow ? no : ok;
	f[k++] = allow ? ok : no;
	struct sock_fprog prog = {.len = (unsigned short)k, .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		fprintf(stderr, "restrict_af: seccomp: %s\n", strerror(errno));
		return 1;
	}
	execvp(argv[i + 1], argv + i + 1);
	fprintf(stderr, "restrict_af: %s: %s\n", argv[i + 1], strerror(errno));
	return 127;
}
