/*
 * store.h - the desired-state store (daemon/store.c): one file per agent
 * name under <state_dir>/agents/, a journal of records in front of them,
 * checkpoints that fold the journal into the files, and the seams the
 * tests and fuzz targets use.  Included by toggled.h (which defines struct
 * td_store and struct td_desired).
 */
#ifndef TD_STORE_H
#define TD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct td_store;
struct td_desired;
struct td_store_job;

int td_store_load(struct td_store *s, const char *dir, char *err, size_t errlen);

/*
 * What td_store_load decodes, from bytes (fuzz/fuzz_store.c calls them
 * too): one agents/<stem>.json, and one journal file.
 */
int td_store_parse_file(const char *path, const char *stem, const char *text, size_t len,
			struct td_store *out, char *err, size_t errlen);

/* What a journal's bytes held, as td_store_parse_journal found it. */
struct td_journal_scan {
	int format;          /* 2 (records with length and checksums), 1 (lines, the old
			      * format, read for the upgrade only), 0 (empty) */
	size_t good;         /* the end of the last record applied (a torn tail starts there) */
	size_t records;      /* records applied */
	size_t damaged;      /* stretches of damage (each a record or more) not applied */
	bool torn;           /* the journal ends inside a record: a save that never completed */
	bool corrupt;        /* damage that is not a torn tail */
	bool unknown;        /* a damaged record whose agent names cannot be read */
	uint64_t last_seq;   /* of the last record applied (format 2), or 0 */
	size_t n_affected;   /* agent names that damaged records held, and no later record */
	char affected[256];  /* the first of them, ", "-separated */
};

/*
 * A journal's bytes replayed over out, record by record, a later record
 * overriding an earlier one.  Format 2: each record is
 *
 *   magic "\xff" "TJ" "\x02" | payload length (u32 LE) | sequence (u64 LE)
 *   | CRC32C of the 16 bytes before it (u32 LE) | CRC32C of the payload
 *   (u32 LE) | payload: {"format":1,"entries":[<entry document>...]} "\n"
 *
 * with sequence numbers one apart (above after_seq).  A record cut short
 * at the end, or zero bytes to the end, is a torn tail (scan->torn, 0
 * returned); anything else that is not a valid record is damage: skipped
 * (the next valid record is found by its magic and checksums), never
 * applied, and TOGGLE_EINVAL returned with err describing the first
 * damage, out holding every intact record's value.  A journal beginning
 * with '{' is format 1 (lines of JSON, no checksums).  path names the
 * journal in err.  0, TOGGLE_EINVAL or TOGGLE_ENOMEM.
 */
int td_store_parse_journal(const char *path, const char *buf, size_t size, uint64_t after_seq,
			   struct td_store *out, struct td_journal_scan *scan, char *err,
			   size_t errlen);
/* The bytes of one format-2 record holding n entries (malloc'd), or NULL (ENOMEM). */
char *td_store_encode_record(uint64_t seq, const struct td_desired *v, size_t n, size_t *len);
/* CRC32C (Castagnoli): crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t td_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * Writes the dirty entries, all or nothing: a record appended to the
 * journal, or (without the journal) every file written and synced under a
 * temporary name before any is renamed into place.  With the journal, a
 * checkpoint that is due then runs too, in this thread (the daemon runs
 * them on the thread pool instead).  TOGGLE_EIO with errno.
 */
int td_store_save(struct td_store *s, const char *dir);
/*
 * The same in three steps, so that the file work can run on another
 * thread: begin (loop: snapshot the dirty entries, they become clean), run
 * (any thread: touches only the job), end (loop: 0 or TOGGLE_EIO with errno
 * and the reason in err; frees the job).  One save job at a time.
 */
struct td_store_job *td_store_job_begin(struct td_store *s, const char *dir);
size_t td_store_job_entries(const struct td_store_job *j);
void td_store_job_run(struct td_store_job *j);
int td_store_job_end(struct td_store *s, struct td_store_job *j, char *err, size_t errlen);
/* Drop a job that did not run: its entries are dirty again. */
void td_store_job_cancel(struct td_store *s, struct td_store_job *j);

/*
 * Checkpoints, beside the save jobs (one of each may run at once): begin
 * (loop) snapshots the durable value of every entry the old journal holds;
 * run is td_store_job_run; end (loop) records the outcome: 0, or
 * TOGGLE_EIO with the reason in err, after which saves are refused until a
 * checkpoint succeeds.  td_store_ckpt_due: one should start now (false
 * while one runs; after a failure true again, for the caller's retry).
 */
bool td_store_ckpt_due(const struct td_store *s);
struct td_store_job *td_store_ckpt_begin(struct td_store *s, const char *dir);
int td_store_ckpt_end(struct td_store *s, struct td_store_job *j, char *err, size_t errlen);
/* A due checkpoint, begin to end in this thread; 0 when none was due. */
int td_store_checkpoint(struct td_store *s, const char *dir, char *err, size_t errlen);

/* Every entry back to what is durable: pending changes dropped. */
void td_store_rollback(struct td_store *s);
/* The store key of an agent: its name for the daemon's own uid, name@uid for another. */
int td_store_key(char *out, size_t len, const char *name, uint32_t uid);
void td_store_free(struct td_store *s);
struct td_desired *td_store_get(struct td_store *s, const char *name, bool create);
int td_desired_set_standing(struct td_desired *dd, const char *spec);
int td_desired_set_plans(struct td_desired *dd, const int64_t *steps, char *const *specs, size_t n);

/*
 * Fault injection: every call the store makes that changes the state
 * directory goes through a hook first.  A test installs one that returns
 * an errno to make that call fail (without making it), or 0 to let it run.
 * file: the name (no directory) the call is about, or NULL.  NULL hook:
 * the production default.  The hook may be called from the thread pool and
 * the store's sync threads at once.
 */
enum td_store_op {
	TD_STORE_OPEN,     /* open or create a file for writing, mkdir */
	TD_STORE_WRITE,    /* write, pwrite */
	TD_STORE_SYNC,     /* fsync, fdatasync (files and directories) */
	TD_STORE_TRUNCATE, /* ftruncate */
	TD_STORE_RENAME,   /* rename */
	TD_STORE_UNLINK,   /* unlink */
	TD_STORE_N_OPS
};
typedef int td_store_fault_fn(enum td_store_op op, const char *file, void *arg);
void td_store_set_fault(td_store_fault_fn *fn, void *arg);

#endif
