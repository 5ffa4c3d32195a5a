/*
 * auth.c - who may change state: root, the daemon's own user and members of
 * the operator group; every other peer may only read.  The peer's identity
 * comes from SO_PEERCRED (uid, gid, pid at connect time).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "toggled.h"

#define AUTH_BUF_START  4096
#define AUTH_BUF_MAX    (1u << 20)  /* getpwuid_r/getgrnam_r buffer, after ERANGE doublings */
#define AUTH_GROUPS_MAX 65537       /* NGROUPS_MAX plus the primary group */
#define AUTH_PROC_MAX   (1u << 20)  /* bytes of /proc/<pid>/status read at most */
#define AUTH_KEY_MAX    32

/* ---- /proc/<pid>/status -------------------------------------------------- */

/* A bounded reader: past AUTH_PROC_MAX bytes it reports end of file and marks itself bad. */
struct proc_scan {
	FILE *f;
	size_t used;
	bool bad;
};

static int scan_getc(struct proc_scan *ps)
{
	if (ps->used++ >= AUTH_PROC_MAX) {
		ps->bad = true;
		return EOF;
	}
	return getc(ps->f);
}

static void scan_skip_line(struct proc_scan *ps)
{
	int c;
	do
		c = scan_getc(ps);
	while (c != '\n' && c != EOF);
}

/* The "Key" of a "Key:\t..." line: 1 read, 0 end of file, -1 no usable key (line skipped). */
static int scan_key(struct proc_scan *ps, char *key, size_t keylen)
{
	size_t n = 0;
	int c = scan_getc(ps);
	if (c == EOF)
		return 0;
	for (; c != ':'; c = scan_getc(ps)) {
		if (c == '\n' || c == EOF)
			return -1;
		if (n + 1 >= keylen) {
			scan_skip_line(ps);
			return -1;
		}
		key[n++] = (char)c;
	}
	key[n] = '\0';
	return 1;
}

/* What one line of ids held: how many, the second (the effective one on Uid:), and whether want was there. */
struct id_line {
	size_t n;
	uint32_t second;
	bool has_want;
};

/* Parse the rest of a line as blank-separated decimal ids; -1 on anything else. */
static int scan_ids(struct proc_scan *ps, uint32_t want, struct id_line *out)
{
	int c = scan_getc(ps);
	memset(out, 0, sizeof(*out));
	for (;;) {
		while (c == ' ' || c == '\t')
			c = scan_getc(ps);
		if (c == '\n' || c == EOF)
			return ps->bad ? -1 : 0;
		uint64_t v = 0;
		int digits = 0;
		for (; c >= '0' && c <= '9'; c = scan_getc(ps)) {
			v = v * 10 + (uint64_t)(c - '0');
			if (++digits > 10 || v > UINT32_MAX)
				return -1;
		}
		if (digits == 0 || (c != ' ' && c != '\t' && c != '\n' && c != EOF))
			return -1;
		if (++out->n == 2)
			out->second = (uint32_t)v;
		if (v == want)
			out->has_want = true;
	}
}

/*
 * Is gid among the groups of process pid?  1 yes, 0 no, -1 cannot tell
 * (unreadable, malformed, or the process's effective uid is no longer uid:
 * it changed identity, or pid was reused by another process, so its groups
 * say nothing about this peer).
 */
static int proc_has_group(uint32_t pid, uint32_t uid, gid_t gid)
{
	char path[48], key[AUTH_KEY_MAX];
	struct id_line uids = { 0 }, groups = { 0 };
	bool seen_uid = false, seen_groups = false;
	int r;
	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	struct proc_scan ps = { fopen(path, "re"), 0, false };
	if (!ps.f)
		return -1;
	while (!ps.bad && (r = scan_key(&ps, key, sizeof(key))) != 0) {
		if (r < 0)
			continue;
		if (strcmp(key, "Uid") == 0) {
			if (seen_uid || scan_ids(&ps, 0, &uids) != 0)
				break;
			seen_uid = true;
		} else if (strcmp(key, "Groups") == 0) {
			if (seen_groups || scan_ids(&ps, (uint32_t)gid, &groups) != 0)
				break;
			seen_groups = true;
		} else {
			scan_skip_line(&ps);
		}
	}
	bool usable = !ps.bad && !ferror(ps.f) && seen_uid && seen_groups && uids.n == 4 &&
		      uids.second == uid;
	fclose(ps.f);
	return usable ? groups.has_want : -1;
}

/* ---- the user database --------------------------------------------------- */

/* getpwuid_r with a buffer grown on ERANGE; *buf freed by the caller. */
static struct passwd *lookup_user(uid_t uid, struct passwd *pw, char **buf)
{
	struct passwd *res = NULL;
	for (size_t len = AUTH_BUF_START; len <= AUTH_BUF_MAX; len *= 2) {
		char *nb = realloc(*buf, len);
		if (!nb)
			return NULL;
		*buf = nb;
		int rc = getpwuid_r(uid, pw, *buf, len, &res);
		if (rc != ERANGE)
			return rc == 0 ? res : NULL;
	}
	return NULL;
}

/* Is gid among the groups the user database gives uid (primary included)? */
static bool user_has_group(uid_t uid, gid_t gid)
{
	struct passwd pw;
	char *buf = NULL;
	gid_t *groups = NULL;
	bool found = false;
	struct passwd *u = lookup_user(uid, &pw, &buf);
	/* getgrouplist says how many it needs when the array is too small: two tries. */
	for (int n = 64, tries = 0; u && tries < 2 && n > 0 && n <= AUTH_GROUPS_MAX; tries++) {
		gid_t *ng = realloc(groups, (size_t)n * sizeof(*groups));
		if (!ng)
			break;
		groups = ng;
		int room = n;
		if (getgrouplist(u->pw_name, u->pw_gid, groups, &n) >= 0) {
			for (int i = 0; i < n && i < room; i++)
				found = found || groups[i] == gid;
			break;
		}
	}
	free(groups);
	free(buf);
	return found;
}

/* ---- the rule ------------------------------------------------------------ */

static bool in_group(uint32_t uid, uint32_t gid, uint32_t pid, gid_t want)
{
	if ((gid_t)gid == want)
		return true;
	/* The peer process's own groups first: what it holds now, not what /etc/group says. */
	int r = pid ? proc_has_group(pid, uid, want) : -1;
	if (r >= 0)
		return r == 1;
	return user_has_group((uid_t)uid, want);
}

static bool in_operator_group(const struct td_daemon *d, uint32_t uid, uint32_t gid, uint32_t pid)
{
	return d->have_operator_gid && in_group(uid, gid, pid, d->operator_gid);
}

bool td_auth_may_write(const struct td_daemon *d, uint32_t uid, uint32_t gid, uint32_t pid)
{
	if (uid == 0 || (uid_t)uid == geteuid())
		return true;
	return d && in_operator_group(d, uid, gid, pid);
}

/* A unix group's gid by name; false if unknown (or the name is not terminated in len). */
static bool group_gid(const char *name, size_t cap, gid_t *out)
{
	struct group gr, *res = NULL;
	char *buf = NULL;
	size_t len = strnlen(name, cap);
	if (len == 0 || len == cap)
		return false;
	for (size_t size = AUTH_BUF_START; size <= AUTH_BUF_MAX; size *= 2) {
		char *nb = realloc(buf, size);
		if (!nb)
			break;
		buf = nb;
		if (getgrnam_r(name, &gr, buf, size, &res) != ERANGE)
			break;
		res = NULL;
	}
	if (res)
		*out = res->gr_gid;
	free(buf);
	return res != NULL;
}

/* Resolve cfg.operator_group; an empty or unknown name means no operator group. */
void td_auth_reload(struct td_daemon *d)
{
	d->operator_gid = 0;
	d->have_operator_gid =
		group_gid(d->cfg.operator_group, sizeof(d->cfg.operator_group), &d->operator_gid);
}

/*
 * Agent groups are labels an agent declares.  A group named by an
 * agent_group line admits only root, our uid and the uids and unix groups it
 * lists; any other group is open to every agent (so a group selector is a
 * security boundary only for groups listed in toggled.conf).
 */
const char *td_auth_group_denied(const struct td_daemon *d, const char *group, uint32_t uid,
				 uint32_t gid, uint32_t pid, char *why, size_t len)
{
	const struct td_group_rule *rule = NULL;
	for (size_t i = 0; i < d->cfg.n_group_rules; i++)
		if (strcmp(d->cfg.group_rules[i].name, group) == 0)
			rule = &d->cfg.group_rules[i];
	if (!rule || uid == 0 || (uid_t)uid == geteuid())
		return NULL;
	for (size_t i = 0; i < rule->n; i++) {
		gid_t g;
		if (!rule->m[i].is_group && rule->m[i].uid == uid)
			return NULL;
		if (rule->m[i].is_group &&
		    group_gid(rule->m[i].group, sizeof(rule->m[i].group), &g) &&
		    in_group(uid, gid, pid, g))
			return NULL;
	}
	snprintf(why, len, "group '%s' admits only the uids and unix groups its agent_group line "
		 "in toggled.conf lists; uid %u is not among them", group, uid);
	return why;
}
