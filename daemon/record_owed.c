/*
 * record_owed.c - what a running recording owes an agent's standing set,
 * kept on disk so that it is paid even when the recording cannot end it.
 *
 * A recording adds the hooks it records to each target's standing set and
 * removes them at its end (record.c, docs/recording.md).  Two ends cannot
 * remove them: toggled killed during the recording (the restarted daemon
 * restores the saved set, hooks included), and the agent leaving during it
 * (its part ends with the agent gone).  So before the hooks are added,
 * record.c notes them here: <state_dir>/recording/<agent key> holds
 * "<session> <spec>\n", written synced (temporary file, fsync, rename,
 * fsync of the directory).  The note goes once the removal at the
 * recording's end is durable (td_commit_notify).  An agent that joins with
 * a note left has those hooks removed from its standing set, as the end
 * would have done, and the note goes once that is durable.
 *
 * The file is in toggled's own state directory (main.c checks it is ours)
 * but is read as untrusted all the same: a regular file, bounded, parsed,
 * its spec checked against the agent's catalog by td_ctl_set.  A note that
 * does not parse is logged and removed: nothing is removed from the set.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "toggled.h"

#define OWED_DIR "recording"
#define OWED_MAX (TGP_MAX_SPEC + 32) /* "<session> <spec>\n" */

/* What a durable-save callback needs after the agent may be gone. */
struct owed_wait {
	struct td_daemon *d;
	char key[TD_MAX_KEY];
	uint64_t session;
};

static int owed_dir(const struct td_daemon *d, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/" OWED_DIR, d->cfg.state_dir);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int owed_path(const struct td_daemon *d, const char *key, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/" OWED_DIR "/%s", d->cfg.state_dir, key);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int agent_key(const struct td_agent *a, char *key)
{
	return td_store_key(key, TD_MAX_KEY, a->name, a->uid);
}

static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

/* The note of key: 1 (session and spec filled), 0 (none), -1 (unreadable or not a note). */
static int owed_read(const struct td_daemon *d, const char *key, uint64_t *session, char *spec,
		     size_t spec_len)
{
	char path[PATH_MAX];
	if (owed_path(d, key, path, sizeof(path)) != 0)
		return -1;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	struct stat sb;
	char buf[OWED_MAX + 1];
	ssize_t n = -1;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size <= OWED_MAX)
		n = read(fd, buf, OWED_MAX);
	close(fd);
	return n <= 0 ? -1 : td_owed_parse(buf, (size_t)n, session, spec, spec_len);
}

int td_owed_parse(const char *text, size_t n, uint64_t *session, char *spec, size_t spec_len)
{
	char buf[OWED_MAX + 1];
	if (n == 0 || n > OWED_MAX || memchr(text, '\0', n))
		return -1;
	memcpy(buf, text, n);
	buf[n] = '\0';
	if (buf[0] < '1' || buf[0] > '9')
		return -1; /* strtoull would take a sign, spaces or leading zeros: not what a note holds */
	char *end;
	errno = 0;
	unsigned long long s = strtoull(buf, &end, 10);
	if (errno || end == buf || *end != ' ' || s == 0)
		return -1;
	const char *sp = end + 1;
	size_t k = strcspn(sp, "\n");
	if (k == 0 || k >= spec_len || sp[k] != '\n' || sp[k + 1] != '\0')
		return -1;
	for (size_t i = 0; i < k; i++)
		if ((unsigned char)sp[i] < 0x20 || (unsigned char)sp[i] >= 0x7f)
			return -1;
	memcpy(spec, sp, k);
	spec[k] = '\0';
	*session = s;
	return 1;
}

/* Remove key's note: any (session 0) or only the note of session. */
static void owed_remove(const struct td_daemon *d, const char *key, uint64_t session)
{
	char path[PATH_MAX], dir[PATH_MAX], spec[OWED_MAX];
	uint64_t s = 0;
	if (owed_path(d, key, path, sizeof(path)) != 0 || owed_dir(d, dir, sizeof(dir)) != 0)
		return;
	if (session && (owed_read(d, key, &s, spec, sizeof(spec)) != 1 || s != session))
		return; /* another recording's note by now (or none): not ours to remove */
	if (unlink(path) != 0 && errno != ENOENT) {
		log_warnx("recording note %s: unlink: %s", path, strerror(errno));
		return;
	}
	if (sync_dir(dir) != 0)
		log_warnx("recording notes %s: fsync: %s", dir, strerror(errno));
}

int td_owed_note(struct td_daemon *d, const struct td_agent *a, uint64_t session,
		 const char *spec, char *err, size_t errlen)
{
	char key[TD_MAX_KEY], dir[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 8];
	if (agent_key(a, key) != 0 || owed_dir(d, dir, sizeof(dir)) != 0 ||
	    owed_path(d, key, path, sizeof(path)) != 0 ||
	    snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "the note's path is too long");
		return TOGGLE_EINVAL;
	}
	if (td_path_mkdirs(dir, 0700, err, errlen) != 0 ||
	    td_path_dir_trusted(dir, false, err, errlen) != 0)
		return TOGGLE_EIO;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		return TOGGLE_EIO;
	}
	char buf[OWED_MAX + 1];
	int n = snprintf(buf, sizeof(buf), "%" PRIu64 " %s\n", session, spec);
	bool ok = n > 0 && n <= OWED_MAX && write(fd, buf, (size_t)n) == n && fsync(fd) == 0;
	int e = errno;
	if (close(fd) != 0 && ok) {
		ok = false;
		e = errno;
	}
	if (ok && rename(tmp, path) != 0) {
		ok = false;
		e = errno;
	}
	if (ok && sync_dir(dir) != 0) {
		ok = false;
		e = errno;
	}
	if (!ok) {
		unlink(tmp);
		snprintf(err, errlen, "%s: %s", path, n > OWED_MAX ? "spec too long" : strerror(e));
		return TOGGLE_EIO;
	}
	return 0;
}

static void owed_saved(void *arg, int rc, const char *reason)
{
	struct owed_wait *w = arg;
	if (rc == 0)
		owed_remove(w->d, w->key, w->session);
	else
		log_warnx("recording note of %s kept: the removal's save failed (%s); retried when "
			  "the agent joins", w->key, reason ? reason : "?");
	free(w);
}

void td_owed_paid(struct td_daemon *d, const struct td_agent *a, uint64_t session)
{
	struct owed_wait *w = calloc(1, sizeof(*w));
	if (!w || agent_key(a, w->key) != 0) {
		free(w);
		return; /* the note stays: the agent's next join pays it again */
	}
	w->d = d;
	w->session = session;
	if (td_commit_notify(d, owed_saved, w) != 0)
		free(w);
}

void td_owed_forget(struct td_daemon *d, const struct td_agent *a, uint64_t session)
{
	char key[TD_MAX_KEY];
	if (agent_key(a, key) == 0)
		owed_remove(d, key, session);
}

void td_owed_settle(struct td_agent *a)
{
	struct td_daemon *d = a->d;
	char key[TD_MAX_KEY], spec[OWED_MAX];
	uint64_t session = 0;
	if (agent_key(a, key) != 0)
		return;
	int rc = owed_read(d, key, &session, spec, sizeof(spec));
	if (rc == 0)
		return;
	if (rc < 0) {
		log_warnx("agent %s (id %llu): its recording note (%s/" OWED_DIR "/%s) is not one: "
			  "removed, nothing taken from its set", a->name, (unsigned long long)a->id,
			  d->cfg.state_dir, key);
		owed_remove(d, key, 0);
		return;
	}
	struct td_ctl_err e;
	if (td_ctl_set(&a, 1, spec, TOGGLE__SET_OP__SET_OP_REMOVE, &e) != 0) {
		log_warnx("agent %s (id %llu): recording %llu had added %s, which cannot be removed "
			  "(%s): its note is removed", a->name, (unsigned long long)a->id,
			  (unsigned long long)session, spec, e.msg);
		owed_remove(d, key, session);
		return;
	}
	log_info("agent %s (id %llu): recording %llu did not end here; %s, which it had added, "
		 "removed from the standing set", a->name, (unsigned long long)a->id,
		 (unsigned long long)session, spec);
	td_owed_paid(d, a, session);
}
