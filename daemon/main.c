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

#include "config.h"
#include "log.h"
#include "netcheck.h"
#include "toggled.h"

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
		"  -E, --etcd-credentials FILE\n"
		"                             etcd's CA, client cert and key, user and password\n"
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
	char creds[sizeof(next.etcd_credentials)];
	char err[512];
	if (td_config_load(&next, d->cfg.config_path, err, sizeof(err)) != 0) {
		log_warnx("SIGHUP: keeping the old configuration: %s", err);
		return;
	}
	config_apply_cli(&next);
	/* The cluster keys are read at start-up only. */
	memcpy(etcd, d->cfg.etcd, sizeof(etcd));
	memcpy(cluster, d->cfg.cluster, sizeof(cluster));
	memcpy(host, d->cfg.host_id, sizeof(host));
	memcpy(creds, d->cfg.etcd_credentials, sizeof(creds));
	d->cfg = next;
	memcpy(d->cfg.etcd_credentials, creds, sizeof(creds));
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
		{"etcd-credentials", required_argument, NULL, 'E'},
		{"verbose", no_argument, NULL, 'v'},
		{"strict-state", no_argument, NULL, 'S'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct td_config *cfg = &d->cfg;
	const char *sock = NULL, *state = NULL, *group = NULL;
	const char *etcd = NULL, *cluster = NULL, *host = NULL, *creds = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "s:d:c:g:m:M:e:C:H:E:fvVh", opts, NULL)) != -1) {
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
		case 'E': creds = optarg; break;
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
	if (cfg->config_path[0] && td_config_load(cfg, cfg->config_path, err, sizeof(err)) != 0) {
		fprintf(stderr, "toggled: %s\n", err);
		exit(2);
	}
	/* The command line wins over the file. */
	if (group)
		snprintf(cfg->cli_group, sizeof(cfg->cli_group), "%s", group);
	config_apply_cli(cfg);
	const char *cl_opt[4] = {etcd, cluster, host, creds};
	char *cl_dst[4] = {cfg->etcd, cfg->cluster, cfg->host_id, cfg->etcd_credentials};
	size_t cl_len[4] = {sizeof(cfg->etcd), sizeof(cfg->cluster), sizeof(cfg->host_id),
			    sizeof(cfg->etcd_credentials)};
	for (int i = 0; i < 4; i++) {
		if (cl_opt[i] && strlen(cl_opt[i]) >= cl_len[i]) {
			fprintf(stderr, "toggled: --etcd, --cluster, --host-id or --etcd-credentials "
				"value too long\n");
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
	/* Binding both on one path would take the RPC socket away (issue 30);
	 * another spelling of it is refused when the metrics start. */
	if (metrics_address && strcmp(metrics_address, cfg->socket_path) == 0) {
		fprintf(stderr, "toggled: --metrics %s is the RPC socket (--socket): give the metrics "
			"a path of their own\n", metrics_address);
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
	td_config_defaults(&d->cfg);
	d->reserve_fd = -1;
	d->listen_fd = -1;
	parse_args(d, argc, argv);
	log_init("toggled", d->cfg.verbose);

	char err[512];
	/* before anything is created: a mode the sandbox forbids fails here, saying so */
	if (td_netcheck(metrics_address, d->cfg.etcd, err, sizeof(err)) != 0)
		fatalx("%s", err);
	if (state_dir_prepare(d->cfg.state_dir, err, sizeof(err)) != 0)
		fatalx("state directory: %s", err);
	d->store.quarantine = !d->cfg.strict_state;
	d->store.journal = true; /* one fdatasync per save, however many agents it holds */
	if (td_store_load(&d->store, d->cfg.state_dir, err, sizeof(err)) != 0)
		fatalx("cannot restore the desired state: %s", err);
	td_auth_reload(d);
	fd_limit_fit(&d->cfg);
	d->loop = uv_default_loop();
	d->start_ms = util_mono_ms();
	/* The layers below report up through report.h: each subscribes here, before
	 * any agent can join (the cluster, an applier, is called before them all). */
	if (td_commit_init(d) != 0 || td_events_init(d) != 0 || td_dispatch_init(d) != 0 ||
	    td_record_init(d) != 0)
		fatalx("cannot subscribe the daemon's modules to agent changes");
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
	if (metrics_address && td_metrics_start(d, metrics_address, err, sizeof(err)) != 0) {
		if (d->socket_owned)
			unlink(d->cfg.socket_path); /* not left behind by a start that failed */
		fatalx("--metrics: %s", err);
	}
	if (td_cluster_start(d, err, sizeof(err)) != 0)
		fatalx("cluster: %s", err);
	log_info("toggled %s listening on %s (state in %s, operator group '%s'%s)", TD_VERSION,
		 d->cfg.socket_path, d->cfg.state_dir, d->cfg.operator_group,
		 d->have_operator_gid ? "" : ", not found: only root and this user may write");
	uv_run(d->loop, UV_RUN_DEFAULT);

	/* Shutdown: stop the cluster's watch (its batch saves are in the queue), finish
	 * the save in flight, save the rest, answer those writes, close. */
	td_cluster_stop(d);
	td_record_stop(d); /* the hooks recordings added are removed before the last save */
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
	td_record_free(d);
	td_store_free(&d->store);
	free(d->by_id);
	log_info("stopped");
	return 0;
}
