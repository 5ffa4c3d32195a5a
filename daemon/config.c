/*
 * config.c - toggled.conf: "key = value" lines into struct td_config, the
 * same checks at start and on SIGHUP.  The file is untrusted input: every
 * line and value is bounded and checked (fuzz/fuzz_config.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "util.h"

void td_config_defaults(struct td_config *cfg)
{
	cfg->socket_mode = 0666;
	cfg->max_queue = TD_MAX_QUEUE;
	cfg->max_peers = TD_MAX_PEERS;
	cfg->reserved_peers = TD_RESERVED_PEERS;
	cfg->max_peers_per_uid = TD_MAX_PEERS_PER_UID;
	cfg->hello_timeout_ms = TD_HELLO_TIMEOUT_MS;
	cfg->idle_timeout_ms = TD_IDLE_TIMEOUT_MS;
	cfg->frames_per_turn = TD_FRAMES_PER_TURN;
	cfg->journal_max = 4u << 20;
	snprintf(cfg->operator_group, sizeof(cfg->operator_group), "toggle");
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

#define CONFIG_MAX_LINE  1024
#define CONFIG_MAX_BYTES (1u << 20)

/* An unsigned decimal in [lo, hi], or false. */
static bool config_uint(const char *val, unsigned long long lo, unsigned long long hi,
			unsigned long long *out)
{
	char *end;
	if (!*val || *val == '-' || *val == '+')
		return false;
	errno = 0;
	unsigned long long v = strtoull(val, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* The numeric keys: name, bounds, where the value goes. */
struct config_num {
	const char *key;
	unsigned long long lo, hi;
	size_t off;
	bool is_size;
};

static const struct config_num config_nums[] = {
	{"max_queue_bytes", 65536, 1ull << 30, offsetof(struct td_config, max_queue), true},
	{"max_peers", 1, TD_MAX_PEERS_LIMIT, offsetof(struct td_config, max_peers), false},
	{"reserved_peers", 0, TD_MAX_PEERS_LIMIT, offsetof(struct td_config, reserved_peers), false},
	{"max_peers_per_uid", 0, TD_MAX_PEERS_LIMIT, offsetof(struct td_config, max_peers_per_uid), false},
	{"hello_timeout_ms", 0, 3600000, offsetof(struct td_config, hello_timeout_ms), false},
	{"idle_timeout_ms", 0, 86400000, offsetof(struct td_config, idle_timeout_ms), false},
	{"frames_per_turn", 1, 65536, offsetof(struct td_config, frames_per_turn), false},
	{"journal_max_bytes", 1, 128ull << 20, offsetof(struct td_config, journal_max), true},
};

/* agent_group = NAME: UID|@UNIXGROUP[, ...] */
static int config_group_rule(struct td_config *cfg, char *val, char *why, size_t len)
{
	char *colon = strchr(val, ':');
	if (!colon) {
		snprintf(why, len, "agent_group: expected NAME: UID|@GROUP, ...");
		return -1;
	}
	*colon = '\0';
	char *name = trim(val);
	if (!util_name_ok(name, TGP_MAX_NAME)) { /* the rule of the group names agents send */
		snprintf(why, len, "agent_group: bad group name '%s'", name);
		return -1;
	}
	for (size_t i = 0; i < cfg->n_group_rules; i++)
		if (!strcmp(cfg->group_rules[i].name, name)) {
			snprintf(why, len, "agent_group: group '%s' listed twice", name);
			return -1;
		}
	if (cfg->n_group_rules >= TD_MAX_GROUP_RULES) {
		snprintf(why, len, "agent_group: more than %d lines", TD_MAX_GROUP_RULES);
		return -1;
	}
	struct td_group_rule *r = &cfg->group_rules[cfg->n_group_rules];
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	char *save = NULL;
	for (char *tok = strtok_r(colon + 1, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		unsigned long long uid;
		if (r->n >= TD_GROUP_MEMBERS) {
			snprintf(why, len, "agent_group: more than %d members for '%s'", TD_GROUP_MEMBERS,
				 name);
			return -1;
		}
		if (tok[0] == '@' && tok[1] && strlen(tok + 1) < sizeof(r->m[0].group)) {
			r->m[r->n].is_group = true;
			snprintf(r->m[r->n].group, sizeof(r->m[0].group), "%s", tok + 1);
		} else if (config_uint(tok, 0, UINT32_MAX - 1, &uid)) {
			r->m[r->n].uid = (uint32_t)uid;
		} else {
			snprintf(why, len, "agent_group: '%s' is neither a uid nor @unixgroup", tok);
			return -1;
		}
		r->n++;
	}
	if (r->n == 0) {
		snprintf(why, len, "agent_group: '%s' lists nobody", name);
		return -1;
	}
	cfg->n_group_rules++;
	return 0;
}

static int config_line(struct td_config *cfg, char *s, const char *path, int lineno, char *err,
		       size_t errlen)
{
	char *eq = strchr(s, '=');
	if (!eq) {
		snprintf(err, errlen, "%s:%d: expected key = value", path, lineno);
		return -1;
	}
	*eq = '\0';
	char *key = trim(s), *val = trim(eq + 1);
	if (strcmp(key, "operator_group") == 0 && strlen(val) < sizeof(cfg->operator_group)) {
		snprintf(cfg->operator_group, sizeof(cfg->operator_group), "%s", val);
		return 0;
	}
	if (strcmp(key, "verbose") == 0 && (!strcmp(val, "0") || !strcmp(val, "1"))) {
		cfg->verbose = val[0] == '1';
		return 0;
	}
	/* The cluster keys: read at start-up only (on_hup keeps the old values). */
	struct {
		const char *key;
		char *dst;
		size_t len;
	} strs[] = {{"etcd", cfg->etcd, sizeof(cfg->etcd)},
		    {"cluster", cfg->cluster, sizeof(cfg->cluster)},
		    {"host_id", cfg->host_id, sizeof(cfg->host_id)},
		    {"etcd_credentials", cfg->etcd_credentials, sizeof(cfg->etcd_credentials)}};
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		if (strcmp(key, strs[i].key) == 0 && strlen(val) < strs[i].len) {
			snprintf(strs[i].dst, strs[i].len, "%s", val);
			return 0;
		}
	}
	if (strcmp(key, "agent_group") == 0) {
		char why[256];
		if (config_group_rule(cfg, val, why, sizeof(why)) == 0)
			return 0;
		snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
		return -1;
	}
	for (size_t i = 0; i < sizeof(config_nums) / sizeof(config_nums[0]); i++) {
		const struct config_num *n = &config_nums[i];
		if (strcmp(key, n->key) != 0)
			continue;
		unsigned long long v;
		if (!config_uint(val, n->lo, n->hi, &v)) {
			snprintf(err, errlen, "%s:%d: %s must be an integer in %llu..%llu", path, lineno,
				 key, n->lo, n->hi);
			return -1;
		}
		if (n->is_size)
			*(size_t *)(void *)((char *)cfg + n->off) = (size_t)v;
		else
			*(unsigned *)(void *)((char *)cfg + n->off) = (unsigned)v;
		return 0;
	}
	snprintf(err, errlen, "%s:%d: unknown key '%s' or bad value (keys: operator_group, verbose, "
		 "max_queue_bytes, max_peers, reserved_peers, max_peers_per_uid, hello_timeout_ms, "
		 "idle_timeout_ms, frames_per_turn, journal_max_bytes, agent_group, etcd, cluster, "
		 "host_id, etcd_credentials)", path, lineno, key);
	return -1;
}

/*
 * Parse "key = value" lines; unknown keys and bad values are errors.  The
 * same checks at start and on SIGHUP: bounded lines and size, no NUL bytes
 * (a line cut at a NUL would be read as something else).
 */
int td_config_read(struct td_config *cfg, FILE *f, const char *path, char *err, size_t errlen)
{
	char *line = NULL;
	size_t cap = 0, total = 0;
	ssize_t len;
	int lineno = 0, rc = 0;
	errno = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		total += (size_t)len;
		if ((size_t)len > CONFIG_MAX_LINE || total > CONFIG_MAX_BYTES) {
			snprintf(err, errlen, "%s:%d: line or file too long (%d bytes a line, %u in all)",
				 path, lineno, CONFIG_MAX_LINE, CONFIG_MAX_BYTES);
			rc = -1;
			break;
		}
		if (memchr(line, '\0', (size_t)len)) {
			snprintf(err, errlen, "%s:%d: NUL byte in the line", path, lineno);
			rc = -1;
			break;
		}
		char *s = trim(line);
		if (!*s || *s == '#')
			continue;
		rc = config_line(cfg, s, path, lineno, err, errlen);
	}
	if (rc == 0 && cfg->reserved_peers >= cfg->max_peers) {
		snprintf(err, errlen, "%s: reserved_peers (%u) must be below max_peers (%u)", path,
			 cfg->reserved_peers, cfg->max_peers);
		rc = -1;
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "reading %s: %s", path, strerror(errno ? errno : EIO));
		rc = -1;
	}
	free(line);
	return rc;
}

/* A regular file (not a directory, a FIFO or a device), then td_config_read. */
int td_config_load(struct td_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat sb;
	if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", path);
		fclose(f);
		return -1;
	}
	int rc = td_config_read(cfg, f, path, err, errlen);
	fclose(f);
	return rc;
}
