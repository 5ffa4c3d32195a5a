/*
 * etcd.h - a small etcd v3 client over etcd's JSON gateway (/v3/, keys and
 * values in base64), libcurl and jansson.  Two threads of its own: one
 * reads the desired-state prefix (a range read, then one long-lived,
 * streamed POST /v3/watch read incrementally), one keeps a lease and puts
 * this host's status under it.  Results reach the libuv loop as batches
 * through uv_async; the loop never waits on etcd.
 *
 * Also the blocking one-shot calls togglectl --etcd uses (range, txn).
 */
#ifndef TD_ETCD_H
#define TD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define ETCD_MAX_ENDPOINTS  8
#define ETCD_MAX_URL        256
#define ETCD_MAX_KEY        512          /* bytes of a key we accept */
#define ETCD_MAX_VALUE      (256u << 10) /* bytes of a desired-state value we accept */
#define ETCD_MAX_STATUS     (8u << 20)   /* bytes of a host's status value togglectl reads */
#define ETCD_MAX_SHOWN_KEY  160          /* bytes of a bad key kept for reports */
#define ETCD_MAX_RESPONSE   (64u << 20)  /* bytes of one JSON response or watch message */
#define ETCD_MAX_KVS        100000       /* keys of one range read */
#define ETCD_LEASE_TTL_S    10
#define ETCD_TIMEOUT_MS     5000         /* connect and one-shot requests */

/*
 * One key.  A key or value over the limits, a key with a NUL byte, a value
 * with one, text that is not base64: not an error of the whole response but
 * a key to skip and report (bad says why; the watch moves past it).  Then
 * value is NULL, and key is etcd's key if it was fine (a bad value), or a
 * cleaned, shortened copy for reports (bad_key).
 */
struct etcd_kv {
	char *key;
	char *value;        /* NUL-terminated copy; NULL for a delete or a bad kv */
	size_t value_len;
	int64_t mod_revision;
	const char *bad;    /* NULL, or why this key is skipped (static text) */
	bool bad_key;       /* key is a display copy, not etcd's key */
	bool deleted;       /* a DELETE event */
};

enum etcd_batch_kind {
	ETCD_SNAPSHOT,     /* a range read: kvs is the whole prefix at revision */
	ETCD_EVENTS,       /* watch events in revision order (value NULL: deleted) */
	ETCD_CONNECTED,    /* the watch stream is up */
	ETCD_DISCONNECTED, /* lost; retrying */
};

struct etcd_batch {
	struct etcd_batch *next;
	enum etcd_batch_kind kind;
	int64_t revision;  /* SNAPSHOT: the read's revision */
	bool resync;       /* SNAPSHOT after a compaction (or a first start): apply it */
	int64_t compacted; /* SNAPSHOT after a compaction: the compact revision */
	int64_t latest;    /* SNAPSHOT: the newest mod revision under the prefix when it was
			    * read (the events up to it are the catch-up); 0: unknown */
	struct etcd_kv *kvs;
	size_t n;
	char err[256];     /* DISCONNECTED: why */
};

void etcd_batch_free(struct etcd_batch *b);

/*
 * The decoders of what etcd sends, from its bytes (fuzz/fuzz_cluster.c):
 * a range response's kvs and revision (0, or -1 if malformed), and one line
 * of the watch stream, whose outcome says what the watcher does with it.
 */
int etcd_range_parse_text(const char *text, size_t len, size_t max_value, struct etcd_kv **kvs,
			  size_t *n, int64_t *revision);

enum etcd_watch_outcome {
	ETCD_WATCH_GO_ON,      /* events (if any) in msg->events; read on */
	ETCD_WATCH_NOT_RESULT, /* not {"result": {...}}: log it, reconnect */
	ETCD_WATCH_BAD,        /* a bad field or no memory: reconnect */
	ETCD_WATCH_COMPACTED,  /* msg->compacted: resync from a range read */
	ETCD_WATCH_CANCELED,   /* etcd canceled the watch: reconnect */
	ETCD_WATCH_BAD_EVENT,  /* malformed or before next_rev: reconnect */
};

struct etcd_watch_msg {
	bool created;               /* the line said the watch is set up */
	int64_t compacted;
	struct etcd_batch *events;  /* ETCD_EVENTS, n >= 1, revisions >= next_rev; caller frees */
};

enum etcd_watch_outcome etcd_watch_parse(const char *line, size_t len, int64_t next_rev,
					 struct etcd_watch_msg *msg);

/* Parse "http://h:p[,http://h:p...]" into endpoints. 0, or -1 with err. */
int etcd_endpoints_parse(const char *text, char urls[][ETCD_MAX_URL], size_t *n, char *err,
			 size_t errlen);

/*
 * How to reach a secured etcd (docs/cluster.md, "Hardening"): the CA that
 * signed its certificates, this client's certificate and key, a user and
 * its password.  Read from a credentials file (`--etcd-credentials FILE`),
 * never from the command line: lines `ca = PATH`, `cert = PATH`, `key =
 * PATH`, `user = NAME`, `password = SECRET`; '#' starts a comment.  A file
 * holding a password must not be readable by group or others.
 */
#define ETCD_MAX_USER     128
#define ETCD_MAX_PASSWORD 256
#define ETCD_MAX_TOKEN    512
struct etcd_creds {
	char ca[4096], cert[4096], key[4096]; /* "": libcurl's default CA store, no client cert */
	char user[ETCD_MAX_USER];             /* "": no authentication */
	char password[ETCD_MAX_PASSWORD];
};
/* 0, or -1 with err (which never holds the password). */
int etcd_creds_load(const char *path, struct etcd_creds *cr, char *err, size_t errlen);

struct etcd_watcher;
typedef void etcd_batch_fn(void *arg, struct etcd_batch *b);

/*
 * Start watching prefix: if start_rev > 0, a snapshot at start_rev (not to
 * apply; resync when compacted) and then events from start_rev + 1; else a
 * snapshot to apply, then events.  on_batch runs on the loop's thread and
 * owns the batch.  status_key: where publish() puts its value, under a
 * lease of ETCD_LEASE_TTL_S.  cr: NULL, or credentials (copied).
 */
int etcd_watcher_start(struct etcd_watcher **out, uv_loop_t *loop, const char *endpoints,
		       const struct etcd_creds *cr, const char *prefix, int64_t start_rev,
		       const char *status_key, etcd_batch_fn *on_batch, void *arg, char *err,
		       size_t errlen);
/* Hand the status thread a new value (copied); it puts it when it can. */
void etcd_watcher_publish(struct etcd_watcher *w, const char *value);
/* Stop both threads (bounded: every request has a timeout), close the async. */
void etcd_watcher_stop(struct etcd_watcher *w);

/* ---- blocking one-shot calls (togglectl) ---- */

/* Every key under prefix: kvs (free with etcd_kvs_free), n, revision; a
 * value over max_value is a bad kv (skipped and reported, not an error). */
int etcd_range(const char *endpoints, const struct etcd_creds *cr, const char *prefix,
	       size_t max_value, struct etcd_kv **kvs, size_t *n, int64_t *revision, char *err,
	       size_t errlen);
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);
/*
 * One transaction: put every (key, value) if each key in must_be_new does
 * not exist yet (create_revision == 0).  0; 1 when a compare failed (nothing
 * written); -1 with err.  *revision: the transaction's revision.
 */
int etcd_txn_put(const char *endpoints, const struct etcd_creds *cr, const char *const *keys,
		 const char *const *values, size_t n, const char *const *must_be_new, size_t n_new,
		 int64_t *revision, char *err, size_t errlen);

/* The same, the keys put under a new lease of ttl_s seconds (> 0) that is
 * never kept alive: etcd deletes them after ttl_s (plans: docs/cluster.md). */
int etcd_txn_put_ttl(const char *endpoints, const struct etcd_creds *cr, const char *const *keys,
		     const char *const *values, size_t n, const char *const *must_be_new,
		     size_t n_new, int64_t ttl_s, int64_t *revision, char *err, size_t errlen);

/* Pure helpers (tests/check_cluster.c). */
/* The end of the range of every key starting with prefix (last byte + 1). */
int etcd_prefix_end(const char *prefix, char *out, size_t outlen);
char *etcd_b64_encode(const void *data, size_t len);                   /* malloc'd, NUL-terminated */
int etcd_b64_decode(const char *s, char **out, size_t *outlen, size_t max); /* NUL-terminated copy */

#endif
