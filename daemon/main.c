/*
 * main.c - toggled start-up: options, configuration file, socket path,
 * systemd socket activation, the state store, signals, and the loop.
 *
 * SIGTERM/SIGINT: clean shutdown; agents keep their last state (their shared
 * memory outlives us) and reconnect to the next daemon.  SIGHUP: reload the
 * configuration file (operator group, verbosity, queue bound).
 */
#include <errno.h>
#include <signal.h>
#include <getopt.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"
#include "util.h"

#define SD_LISTEN_FDS_START 3

static void usage(FILE *f)
{
	fprintf(f,
		"usage: toggled [options]\n"
		"  -s, --socket PATH          listen on PATH (default: $TOGGLE_SOCKET, else\n"
		"                             /run/toggle/toggled.sock as root, else\n"
		"                             $XDG_RUNTIME_DIR/toggle/toggled.sock)\n"
		"  -d, --state-dir DIR        where the desired state is saved (default:\n"
		"                             $STATE_DIRECTORY, else /var/lib/toggle as root,\n"
		"                             else $XDG_STATE_HOME/toggle or ~/.local/state/toggle)\n"
		"  -c, --config FILE          configuration file (key = value; reloaded on SIGHUP)\n"
		"  -g, --operator-group NAME  members may change state (default: toggle)\n"
		"  -m, --socket-mode OCTAL    socket file mode (default: 0666; the daemon checks\n"
		"                             every writer with SO_PEERCRED)\n"
		"  -f, --foreground           stay in the foreground (toggled never forks; accepted\n"
		"                             for compatibility)\n"
		"      --strict-state         refuse to start on a corrupt state file (default:\n"
		"                             set it aside as FILE.corrupt-TIME and start without it)\n"
		"  -M, --metrics ADDRESS      serve Prometheus /metrics on ADDRESS: PORT or\n"
		"                             HOST:PORT (TCP, HOST 127.0.0.1 by default) or\n"
		"                             /path (Unix socket); off by default\n"
		"  -e, --etcd URL[,URL...]    join a cluster through etcd (docs/cluster.md)\n"
		"  -C, --cluster NAME         the cluster's name (with --etcd)\n"
		"  -H, --host-id ID           this host's id in the cluster (with --etcd)\n"
		"  -v, --verbose              debug logging\n"
		"  -V, --version              print the version and exit\n"
		"  -h, --help                 this text\n");
}

static int default_state_dir(char *buf, size_t len)
{
	const char *sd = getenv("STATE_DIRECTORY"); /* systemd StateDirectory= */
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	int n;
	if (sd && sd[0])
		n = snprintf(buf, len, "%s", sd);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/var/lib/toggle");
	else if (xdg && xdg[0])
		n = snprintf(buf, len, "%s/toggle", xdg);
	else if (home && home[0])
		n = snprintf(buf, len, "%s/.local/state/toggle", home);
	else
		n = snprintf(buf, len, "/tmp/toggle-%u-state", (unsigned)geteuid());
	return (n < 0 || (size_t)n >= len) ? -1 : 0;
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
		    {"host_id", cfg->host_id, sizeof(cfg->host_id)}};
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
		 "idle_timeout_ms, frames_per_turn, agent_group, etcd, cluster, host_id)", path, lineno, key);
	return -1;
}

/*
 * Parse "key = value" lines; unknown keys and bad values are errors.  The
 * same checks at start and on SIGHUP: a regular file, bounded lines and
 * size, no NUL bytes (a line cut at a NUL would be read as something else).
 */
static int config_load(struct td_config *cfg, const char *path, char *err, size_t errlen)
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
	fclose(f);
	return rc;
}

/* systemd socket activation: exactly one listening fd for us. */
static int activated_fd(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	if (!pid || !fds || strtol(pid, NULL, 10) != (long)getpid())
		return -1;
	if (strtol(fds, NULL, 10) != 1)
		fatalx("socket activation passed %s fds; toggled takes exactly one", fds);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return SD_LISTEN_FDS_START;
}

static void config_apply_cli(struct td_config *cfg)
{
	if (cfg->cli_group[0])
		snprintf(cfg->operator_group, sizeof(cfg->operator_group), "%s", cfg->cli_group);
	if (cfg->cli_verbose)
		cfg->verbose = 1;
}

/*
 * Every peer may hold up to TD_FDS_PER_PEER fds: raise the soft
 * RLIMIT_NOFILE towards what max_peers needs (the hard limit caps it), and
 * say so when it stays short.  accept() running out is handled anyway.
 */
static void fd_limit_fit(const struct td_config *cfg)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)cfg->max_peers * TD_FDS_PER_PEER + TD_FDS_SPARE;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		log_warn("getrlimit(RLIMIT_NOFILE)");
		return;
	}
	if (rl.rlim_cur >= need)
		return;
	struct rlimit want = rl;
	want.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
	if (want.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) == 0)
		rl = want;
	if (rl.rlim_cur < need)
		log_warnx("open files limited to %llu; max_peers %u needs %llu: connections past that are "
			  "refused (raise LimitNOFILE= or ulimit -n, or lower max_peers)",
			  (unsigned long long)rl.rlim_cur, cfg->max_peers, (unsigned long long)need);
}

/*
 * The state directory (and its agents/) must be ours before anything in it
 * is read: made by us now, or already owned by us or root and writable by
 * nobody else (issue 11 item 6).
 */
static int state_dir_prepare(const char *dir, char *err, size_t errlen)
{
	char sub[PATH_MAX];
	if (td_path_mkdirs(dir, 0750, err, errlen) != 0 ||
	    td_path_dir_trusted(dir, false, err, errlen) != 0)
		return -1;
	int n = snprintf(sub, sizeof(sub), "%s/agents", dir);
	if (n < 0 || (size_t)n >= sizeof(sub)) {
		snprintf(err, errlen, "state directory path too long");
		return -1;
	}
	struct stat sb;
	if (lstat(sub, &sb) != 0 && errno == ENOENT)
		return 0; /* the store makes it */
	return td_path_dir_trusted(sub, false, err, errlen);
}

static void on_stop(uv_signal_t *h, int signum)
{
	struct td_daemon *d = h->data;
	log_info("signal %d: shutting down; agents keep their last state", signum);
	uv_stop(d->loop);
}

static void on_hup(uv_signal_t *h, int signum)
{
	struct td_daemon *d = h->data;
	(void)signum;
	if (!d->cfg.config_path[0]) {
		log_info("SIGHUP: no configuration file to reload");
		return;
	}
	struct td_config next = d->cfg;
	next.n_group_rules = 0; /* the file's list replaces the old one */
	char etcd[sizeof(next.etcd)], cluster[sizeof(next.cluster)], host[sizeof(next.host_id)];
	char err[512];
	if (config_load(&next, d->cfg.config_path, err, sizeof(err)) != 0) {
		log_warnx("SIGHUP: keeping the old configuration: %s", err);
		return;
	}
	config_apply_cli(&next);
	/* The cluster keys are read at start-up only. */
	memcpy(etcd, d->cfg.etcd, sizeof(etcd));
	memcpy(cluster, d->cfg.cluster, sizeof(cluster));
	memcpy(host, d->cfg.host_id, sizeof(host));
	d->cfg = next;
	memcpy(d->cfg.etcd, etcd, sizeof(etcd));
	memcpy(d->cfg.cluster, cluster, sizeof(cluster));
	memcpy(d->cfg.host_id, host, sizeof(host));
	log_set_verbose(d->cfg.verbose);
	td_auth_reload(d);
	fd_limit_fit(&d->cfg);
	td_server_reconfigure(d);
	/* Rights of connected peers follow the new configuration. */
	for (struct td_peer *p = d->peers; p; p = p->next)
		p->may_write = td_auth_may_write(d, p->uid, p->gid, p->pid);
	log_info("SIGHUP: configuration reloaded from %s (operator group '%s'%s)",
		 d->cfg.config_path, d->cfg.operator_group, d->have_operator_gid ? "" : ", not found");
}

static const char *metrics_address; /* --metrics, NULL: off */

static void parse_args(struct td_daemon *d, int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"state-dir", required_argument, NULL, 'd'},
		{"config", required_argument, NULL, 'c'},
		{"operator-group", required_argument, NULL, 'g'},
		{"socket-mode", required_argument, NULL, 'm'},
		{"foreground", no_argument, NULL, 'f'},
		{"metrics", required_argument, NULL, 'M'},
		{"etcd", required_argument, NULL, 'e'},
		{"cluster", required_argument, NULL, 'C'},
		{"host-id", required_argument, NULL, 'H'},
		{"verbose", no_argument, NULL, 'v'},
		{"strict-state", no_argument, NULL, 'S'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct td_config *cfg = &d->cfg;
	const char *sock = NULL, *state = NULL, *group = NULL;
	const char *etcd = NULL, *cluster = NULL, *host = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "s:d:c:g:m:M:e:C:H:fvVh", opts, NULL)) != -1) {
		switch (c) {
		case 's': sock = optarg; break;
		case 'd': state = optarg; break;
		case 'c': snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", optarg); break;
		case 'g': group = optarg; break;
		case 'm': {
			char *end;
			unsigned long m = strtoul(optarg, &end, 8);
			if (*end || m > 0777) {
				fprintf(stderr, "toggled: bad --socket-mode '%s' (octal, e.g. 0660)\n", optarg);
				exit(2);
			}
			cfg->socket_mode = (unsigned)m;
			break;
		}
		case 'e': etcd = optarg; break;
		case 'C': cluster = optarg; break;
		case 'H': host = optarg; break;
		case 'f': break;
		case 'M': metrics_address = optarg; break;
		case 'v': cfg->cli_verbose = true; break;
		case 'S': cfg->strict_state = true; break;
		case 'V': printf("toggled %s (protocol %d)\n", TD_VERSION, TGP_PROTOCOL_VERSION); exit(0);
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "toggled: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		exit(2);
	}
	char err[512];
	if (cfg->config_path[0] && config_load(cfg, cfg->config_path, err, sizeof(err)) != 0) {
		fprintf(stderr, "toggled: %s\n", err);
		exit(2);
	}
	/* The command line wins over the file. */
	if (group)
		snprintf(cfg->cli_group, sizeof(cfg->cli_group), "%s", group);
	config_apply_cli(cfg);
	const char *cl_opt[3] = {etcd, cluster, host};
	char *cl_dst[3] = {cfg->etcd, cfg->cluster, cfg->host_id};
	size_t cl_len[3] = {sizeof(cfg->etcd), sizeof(cfg->cluster), sizeof(cfg->host_id)};
	for (int i = 0; i < 3; i++) {
		if (cl_opt[i] && strlen(cl_opt[i]) >= cl_len[i]) {
			fprintf(stderr, "toggled: --etcd, --cluster or --host-id value too long\n");
			exit(2);
		}
		if (cl_opt[i])
			snprintf(cl_dst[i], cl_len[i], "%s", cl_opt[i]);
	}
	if (sock) {
		if (strlen(sock) >= sizeof(cfg->socket_path)) {
			fprintf(stderr, "toggled: socket path longer than %zu bytes\n", sizeof(cfg->socket_path) - 1);
			exit(2);
		}
		snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", sock);
	} else if (!tgp_default_socket_path(cfg->socket_path, sizeof(cfg->socket_path))) {
		fprintf(stderr, "toggled: default socket path too long; use --socket\n");
		exit(2);
	}
	if (state)
		snprintf(cfg->state_dir, sizeof(cfg->state_dir), "%s", state);
	else if (default_state_dir(cfg->state_dir, sizeof(cfg->state_dir)) != 0) {
		fprintf(stderr, "toggled: default state directory too long; use --state-dir\n");
		exit(2);
	}
}

int main(int argc, char **argv)
{
	static struct td_daemon daemon; /* one per process, by nature */
	struct td_daemon *d = &daemon;
	d->cfg.socket_mode = 0666;
	d->cfg.max_queue = TD_MAX_QUEUE;
	d->cfg.max_peers = TD_MAX_PEERS;
	d->cfg.reserved_peers = TD_RESERVED_PEERS;
	d->cfg.max_peers_per_uid = TD_MAX_PEERS_PER_UID;
	d->cfg.hello_timeout_ms = TD_HELLO_TIMEOUT_MS;
	d->cfg.idle_timeout_ms = TD_IDLE_TIMEOUT_MS;
	d->cfg.frames_per_turn = TD_FRAMES_PER_TURN;
	d->reserve_fd = -1;
	snprintf(d->cfg.operator_group, sizeof(d->cfg.operator_group), "toggle");
	d->listen_fd = -1;
	parse_args(d, argc, argv);
	log_init("toggled", d->cfg.verbose);

	char err[512];
	if (state_dir_prepare(d->cfg.state_dir, err, sizeof(err)) != 0)
		fatalx("state directory: %s", err);
	d->store.quarantine = !d->cfg.strict_state;
	d->store.journal = true; /* one fdatasync per save, however many agents it holds */
	if (td_store_load(&d->store, d->cfg.state_dir, err, sizeof(err)) != 0)
		fatalx("cannot restore the desired state: %s", err);
	td_auth_reload(d);
	fd_limit_fit(&d->cfg);
	d->loop = uv_default_loop();
	d->start_ms = td_now_ms();
	td_commit_init(d);
	uv_timer_init(d->loop, &d->status_timer);
	d->status_timer.data = d;
	if (td_server_listen(d, activated_fd()) != 0)
		fatalx("cannot listen on %s", d->cfg.socket_path);
	uv_signal_t *sigs[] = {&d->sig_term, &d->sig_int, &d->sig_hup};
	int nums[] = {SIGTERM, SIGINT, SIGHUP};
	for (int i = 0; i < 3; i++) {
		uv_signal_init(d->loop, sigs[i]);
		sigs[i]->data = d;
		uv_signal_start(sigs[i], nums[i] == SIGHUP ? on_hup : on_stop, nums[i]);
	}
	signal(SIGPIPE, SIG_IGN);
	if (metrics_address && td_metrics_start(d, metrics_address, err, sizeof(err)) != 0)
		fatalx("--metrics: %s", err);
	if (td_cluster_start(d, err, sizeof(err)) != 0)
		fatalx("cluster: %s", err);
	log_info("toggled %s listening on %s (state in %s, operator group '%s'%s)", TD_VERSION,
		 d->cfg.socket_path, d->cfg.state_dir, d->cfg.operator_group,
		 d->have_operator_gid ? "" : ", not found: only root and this user may write");
	uv_run(d->loop, UV_RUN_DEFAULT);

	/* Shutdown: stop the cluster's watch (its batch saves are in the queue), finish
	 * the save in flight, save the rest, answer those writes, close. */
	td_cluster_stop(d);
	td_commit_drain(d);
	td_metrics_stop(d);
	td_server_close(d);
	while (d->waiters) {
		struct td_waiter *w = d->waiters;
		d->waiters = w->next;
		td_waiter_free(w);
	}
	uv_timer_stop(&d->status_timer);
	uv_close((uv_handle_t *)&d->status_timer, NULL);
	for (int i = 0; i < 3; i++)
		uv_close((uv_handle_t *)sigs[i], NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	uv_loop_close(d->loop);
	td_store_free(&d->store);
	free(d->by_id);
	log_info("stopped");
	return 0;
}
