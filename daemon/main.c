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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
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
		"  -M, --metrics ADDRESS      serve Prometheus /metrics on ADDRESS: PORT or\n"
		"                             HOST:PORT (TCP, HOST 127.0.0.1 by default) or\n"
		"                             /path (Unix socket); off by default\n"
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

/* Parse "key = value" lines; unknown keys and bad values are errors. */
static int config_load(struct td_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	char line[512];
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		lineno++;
		char *s = trim(line);
		if (!*s || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected key = value", path, lineno);
			rc = -1;
			break;
		}
		*eq = '\0';
		char *key = trim(s), *val = trim(eq + 1);
		char *end;
		if (strcmp(key, "operator_group") == 0 && strlen(val) < sizeof(cfg->operator_group)) {
			snprintf(cfg->operator_group, sizeof(cfg->operator_group), "%s", val);
		} else if (strcmp(key, "verbose") == 0 && (!strcmp(val, "0") || !strcmp(val, "1"))) {
			cfg->verbose = val[0] == '1';
		} else if (strcmp(key, "max_queue_bytes") == 0) {
			unsigned long long v = strtoull(val, &end, 10);
			if (*end || v < 65536 || v > (1ull << 30)) {
				snprintf(err, errlen, "%s:%d: max_queue_bytes must be 65536..2^30", path, lineno);
				rc = -1;
			} else {
				cfg->max_queue = (size_t)v;
			}
		} else {
			snprintf(err, errlen, "%s:%d: unknown key '%s' or bad value (keys: operator_group, "
				 "verbose, max_queue_bytes)", path, lineno, key);
			rc = -1;
		}
	}
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
	char err[512];
	if (config_load(&next, d->cfg.config_path, err, sizeof(err)) != 0) {
		log_warnx("SIGHUP: keeping the old configuration: %s", err);
		return;
	}
	config_apply_cli(&next);
	d->cfg = next;
	log_set_verbose(d->cfg.verbose);
	td_auth_reload(d);
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
		{"verbose", no_argument, NULL, 'v'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct td_config *cfg = &d->cfg;
	const char *sock = NULL, *state = NULL, *group = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "s:d:c:g:m:M:fvVh", opts, NULL)) != -1) {
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
		case 'f': break;
		case 'M': metrics_address = optarg; break;
		case 'v': cfg->cli_verbose = true; break;
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
	snprintf(d->cfg.operator_group, sizeof(d->cfg.operator_group), "toggle");
	d->listen_fd = -1;
	parse_args(d, argc, argv);
	log_init("toggled", d->cfg.verbose);

	char err[512];
	if (td_store_load(&d->store, d->cfg.state_dir, err, sizeof(err)) != 0)
		fatalx("cannot restore the desired state: %s", err);
	td_auth_reload(d);
	d->loop = uv_default_loop();
	d->start_ms = td_now_ms();
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
	log_info("toggled %s listening on %s (state in %s, operator group '%s'%s)", TD_VERSION,
		 d->cfg.socket_path, d->cfg.state_dir, d->cfg.operator_group,
		 d->have_operator_gid ? "" : ", not found: only root and this user may write");
	uv_run(d->loop, UV_RUN_DEFAULT);

	/* Shutdown: answer nothing more, save, close everything. */
	if (d->store.dirty && td_store_save(&d->store, d->cfg.state_dir) != 0)
		log_warn("saving the desired state at shutdown");
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
	log_info("stopped");
	return 0;
}
