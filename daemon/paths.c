/*
 * paths.c - the directories toggled puts its socket and its state in must
 * be its own (issue 11 item 6): a directory another user owns or may write
 * could have been made in advance (the /tmp fallbacks of a non-root daemon)
 * to take over the socket, be handed agents' memfds, or plant state.
 *
 * A trusted directory is owned by our uid or root and not writable by group
 * or others; an ancestor may be writable by others only with the sticky bit
 * (/tmp), which stops them from renaming what is in it.  Directories we
 * create are made with mkdir, which fails on anything already there; what
 * was there is then checked, never assumed.
 *
 * A socket path about to be bound (--metrics PATH, issue 30) sits in such a
 * directory, and only a stale socket of ours is ever removed from it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "toggled.h"
#include "util.h"

static const char *mode_what(mode_t m)
{
	if (S_ISREG(m)) return "a regular file";
	if (S_ISDIR(m)) return "a directory";
	if (S_ISLNK(m)) return "a symbolic link";
	if (S_ISSOCK(m)) return "a socket";
	if (S_ISFIFO(m)) return "a FIFO";
	if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
	return "not a directory";
}

/* One directory: owner and write bits; leaf: the last component (no symlink, no sticky pass). */
static int dir_trusted(const char *dir, bool leaf, bool sticky_leaf_ok, char *err, size_t errlen)
{
	struct stat sb;
	if ((leaf ? lstat(dir, &sb) : stat(dir, &sb)) != 0) {
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(sb.st_mode)) {
		snprintf(err, errlen, "%s is %s, not a directory", dir, mode_what(sb.st_mode));
		return -1;
	}
	if (sb.st_uid != geteuid() && sb.st_uid != 0) {
		snprintf(err, errlen, "%s belongs to uid %u, not to uid %u (toggled) or root: another "
			 "user may have made it; not using it", dir, (unsigned)sb.st_uid,
			 (unsigned)geteuid());
		return -1;
	}
	bool others_write = (sb.st_mode & (S_IWGRP | S_IWOTH)) != 0;
	bool sticky = (sb.st_mode & S_ISVTX) != 0;
	if (others_write && !(sticky && (!leaf || sticky_leaf_ok))) {
		snprintf(err, errlen, "%s is writable by %s (mode %04o): not using it", dir,
			 sb.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(sb.st_mode & 07777));
		return -1;
	}
	return 0;
}

int td_path_dir_trusted(const char *dir, bool sticky_leaf_ok, char *err, size_t errlen)
{
	char buf[PATH_MAX];
	size_t n = strlen(dir);
	if (n == 0 || n >= sizeof(buf)) {
		snprintf(err, errlen, "directory path empty or too long");
		return -1;
	}
	memcpy(buf, dir, n + 1);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	if (dir_trusted(buf, true, sticky_leaf_ok, err, errlen) != 0)
		return -1;
	/* The ancestors, from the nearest up (relative paths: up to the working directory's). */
	for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
		if (slash == buf) {
			buf[1] = '\0';
			return dir_trusted(buf, false, true, err, errlen);
		}
		*slash = '\0';
		if (dir_trusted(buf, false, true, err, errlen) != 0)
			return -1;
	}
	return dir_trusted(".", false, true, err, errlen);
}

int td_path_mkdirs(const char *dir, mode_t leaf_mode, char *err, size_t errlen)
{
	char at[PATH_MAX];
	switch (util_mkdirs(dir, 0755, leaf_mode, at, sizeof(at))) {
	case UTIL_MKDIRS_OK:
		return 0;
	case UTIL_MKDIRS_BADPATH:
		snprintf(err, errlen, "directory path empty or too long");
		return -1;
	case UTIL_MKDIRS_FAILED:
		snprintf(err, errlen, "cannot create %s: %s", at, strerror(errno));
		return -1;
	}
	return -1;
}

/* Something accepts connections on the socket at path (a full backlog counts:
 * EAGAIN); a stale socket file refuses them (ECONNREFUSED). */
static bool socket_listened_on(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n = strlen(path);
	if (n >= sizeof(sa.sun_path))
		return false;
	memcpy(sa.sun_path, path, n + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return true; /* cannot tell: not ours to remove */
	bool live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN ||
		    errno == EINPROGRESS;
	close(fd);
	return live;
}

int td_path_socket_claim(const char *path, bool *replaced, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	size_t n = strlen(path);
	*replaced = false;
	if (n == 0 || n >= sizeof(dir)) {
		snprintf(err, errlen, "socket path empty or too long");
		return -1;
	}
	memcpy(dir, path, n + 1);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	/* As the RPC socket's: ours or root's, nobody else may write in it but
	 * under a sticky bit (/tmp), so what we check below stays what we bind. */
	if (td_path_dir_trusted(dir, true, err, errlen) != 0)
		return -1;
	struct stat sb;
	if (lstat(path, &sb) != 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISSOCK(sb.st_mode)) {
		snprintf(err, errlen, "%s exists and is %s, not a socket: not removing it (choose "
			 "another path, or remove it if it is yours)", path, mode_what(sb.st_mode));
		return -1;
	}
	if (sb.st_uid != geteuid()) {
		snprintf(err, errlen, "%s is a socket of uid %u, not of uid %u (toggled): not "
			 "removing it", path, (unsigned)sb.st_uid, (unsigned)geteuid());
		return -1;
	}
	if (socket_listened_on(path)) {
		snprintf(err, errlen, "a program is listening on %s (another toggled?): not taking "
			 "it over", path);
		return -1;
	}
	if (unlink(path) != 0) {
		snprintf(err, errlen, "removing the stale socket %s: %s", path, strerror(errno));
		return -1;
	}
	*replaced = true;
	return 0;
}
