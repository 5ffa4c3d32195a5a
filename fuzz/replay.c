/*
 * replay.c - runs a fuzz target's LLVMFuzzerTestOneInput over files without
 * libFuzzer, so that each corpus (fuzz/corpus/<target>/) is a regression
 * test that `make check` builds with the project's compiler and runs under
 * ASan and UBSan.  Arguments: files, or directories whose files are all
 * read (in name order).  A target that finds a bug aborts (or the
 * sanitizers stop it); no input at all is an error too, so that a corpus
 * that went missing does not pass.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (1u << 20) /* libFuzzer's default -max_len is far below */

/* The input being replayed, named when the target aborts or a sanitizer stops it. */
static const char *replay_current;

/* Sanitizers' death callback, where the runtime has one (weak: none without). */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void replay_name_current(void)
{
	static const char what[] = "replay: failed on input ";
	if (!replay_current)
		return;
	(void)!write(2, what, sizeof(what) - 1);
	(void)!write(2, replay_current, strlen(replay_current));
	(void)!write(2, "\n", 1);
}

static void replay_on_abort(int sig)
{
	replay_name_current();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	uint8_t *buf = malloc(REPLAY_MAX_INPUT);
	size_t n = buf ? fread(buf, 1, REPLAY_MAX_INPUT, f) : 0;
	int bad = !buf || ferror(f) || !feof(f);
	fclose(f);
	if (bad) {
		fprintf(stderr, "%s: cannot read, or larger than %u bytes\n", path, REPLAY_MAX_INPUT);
		free(buf);
		return -1;
	}
	/* An exact-size copy: ASan then sees a read past the input's end. */
	uint8_t *in = malloc(n ? n : 1);
	if (!in) {
		free(buf);
		return -1;
	}
	memcpy(in, buf, n);
	free(buf);
	replay_current = path;
	LLVMFuzzerTestOneInput(in, n);
	replay_current = NULL;
	free(in);
	return 0;
}

static int replay_dir(const char *dir, size_t *count)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	if (n < 0) {
		perror(dir);
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		if (rc == 0 && names[i]->d_name[0] != '.' &&
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name) < sizeof(path) &&
		    stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			rc = replay_file(path);
			*count += rc == 0;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	size_t count = 0;
	signal(SIGABRT, replay_on_abort);
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(replay_name_current);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		int rc = S_ISDIR(st.st_mode) ? replay_dir(argv[i], &count) : replay_file(argv[i]);
		if (rc != 0)
			return 1;
		count += !S_ISDIR(st.st_mode);
	}
	if (count == 0) {
		fprintf(stderr, "%s: no input to replay\n", argv[0]);
		return 1;
	}
	printf("%s: %zu inputs, no failure\n", argv[0], count);
	return 0;
}
