/*
 * etcd.c - the etcd v3 client of the cluster layer: the JSON gateway of
 * etcd 3.4 (POST /v3/kv/range, /v3/kv/txn, /v3/kv/put, /v3/watch,
 * /v3/lease/grant, /v3/lease/keepalive; keys and values base64) over
 * libcurl, parsed with jansson.
 *
 * Everything etcd sends is untrusted: every response is bounded
 * (ETCD_MAX_RESPONSE), every key and value too, every field is type-checked
 * before use.  The watch is one long-lived chunked POST whose body is read
 * as it arrives, one JSON message per line: never polled.  Its thread and
 * the status thread block only on etcd; what they learn goes to the libuv
 * loop through a mutex-guarded queue and uv_async_send.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "etcd.h"
#include "log.h"
#include "util.h"

#define ETCD_BACKOFF_MIN_MS 100
#define ETCD_BACKOFF_MAX_MS 2000
#define ETCD_STATUS_TICK_MS 1000
#define ETCD_PROBE_EVERY_MS   2000 /* the watch's liveness check (watch_probe) */
#define ETCD_PROBE_TIMEOUT_MS 2000
#define ETCD_REQUIRE_LEADER   "Grpc-Metadata-hasleader: true"

/* ---- base64 and keys ---------------------------------------------------- */

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *etcd_b64_encode(const void *data, size_t len)
{
	const unsigned char *p = data;
	if (len > SIZE_MAX / 2)
		return NULL;
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		*o++ = b64chars[(v >> 18) & 63];
		*o++ = b64chars[(v >> 12) & 63];
		*o++ = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
		*o++ = i + 2 < len ? b64chars[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

static int b64val(int c)
{
	const char *p = c ? strchr(b64chars, c) : NULL;
	return p ? (int)(p - b64chars) : -1;
}

int etcd_b64_decode(const char *s, char **out, size_t *outlen, size_t max)
{
	size_t n = strlen(s);
	if (n % 4 || n / 4 * 3 > max + 2)
		return -1;
	char *buf = malloc(n / 4 * 3 + 1);
	if (!buf)
		return -1;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		for (int k = 0; k < 4; k++)
			v[k] = s[i + k] == '=' ? -2 : b64val((unsigned char)s[i + k]);
		/* '=' only as the last one or two characters of the text. */
		bool last = i + 4 == n;
		if (v[0] < 0 || v[1] < 0 || (v[2] == -2 && (v[3] != -2 || !last)) ||
		    (v[3] == -2 && !last) || v[2] == -1 || v[3] == -1 ||
		    /* bits past the end must be zero: one text per value */
		    (v[2] == -2 && (v[1] & 15)) || (v[2] >= 0 && v[3] == -2 && (v[2] & 3))) {
			free(buf);
			return -1;
		}
		uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
			     (uint32_t)(v[2] < 0 ? 0 : v[2]) << 6 | (uint32_t)(v[3] < 0 ? 0 : v[3]);
		buf[o++] = (char)(x >> 16);
		if (v[2] >= 0)
			buf[o++] = (char)(x >> 8);
		if (v[3] >= 0)
			buf[o++] = (char)x;
	}
	if (o > max) {
		free(buf);
		return -1;
	}
	buf[o] = '\0';
	*out = buf;
	*outlen = o;
	return 0;
}

int etcd_prefix_end(const char *prefix, char *out, size_t outlen)
{
	size_t n = strlen(prefix);
	if (n == 0 || n >= outlen)
		return -1;
	memcpy(out, prefix, n + 1);
	/* Our prefixes end in '/', never 0xff: the last byte + 1 ends the range. */
	if ((unsigned char)out[n - 1] == 0xff)
		return -1;
	out[n - 1] = (char)((unsigned char)out[n - 1] + 1);
	return 0;
}

int etcd_endpoints_parse(const char *text, char urls[][ETCD_MAX_URL], size_t *n, char *err,
			 size_t errlen)
{
	*n = 0;
	const char *p = text;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (*n == ETCD_MAX_ENDPOINTS) {
			snprintf(err, errlen, "more than %d etcd endpoints", ETCD_MAX_ENDPOINTS);
			return -1;
		}
		if (len < 8 || len >= ETCD_MAX_URL ||
		    (strncmp(p, "http://", 7) != 0 && strncmp(p, "https://", 8) != 0)) {
			snprintf(err, errlen, "bad etcd endpoint '%.*s' (expected http://HOST:PORT, "
				 "under %d bytes)", (int)(len > 80 ? 80 : len), p, ETCD_MAX_URL);
			return -1;
		}
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)p[i] <= ' ' || p[i] == '"' || p[i] == '\\') {
				snprintf(err, errlen, "bad character in etcd endpoint");
				return -1;
			}
		memcpy(urls[*n], p, len);
		urls[*n][len] = '\0';
		p = e ? e + 1 : p + len;
		while (len > 0 && urls[*n][len - 1] == '/')
			urls[*n][--len] = '\0';
		(*n)++;
	}
	if (*n == 0) {
		snprintf(err, errlen, "no etcd endpoint given");
		return -1;
	}
	return 0;
}

/* ---- kvs and batches ---------------------------------------------------- */

void etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(kvs[i].key);
		free(kvs[i].value);
	}
	free(kvs);
}

void etcd_batch_free(struct etcd_batch *b)
{
	if (!b)
		return;
	etcd_kvs_free(b->kvs, b->n);
	free(b);
}

/* The gateway writes 64-bit numbers as JSON strings; absent means 0. */
static int json_i64(const json_t *o, const char *name, int64_t *out)
{
	const json_t *v = json_object_get(o, name);
	*out = 0;
	if (!v)
		return 0;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -1;
	const char *s = json_string_value(v);
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return -1;
	*out = x;
	return 0;
}

/*
 * A key we skip, shown in reports: the first ETCD_MAX_SHOWN_KEY bytes of
 * what it decodes to, every byte outside printable ASCII (a NUL, a newline,
 * an escape) as '?', "..." when cut; "(not base64)" if it is not.
 */
static char *shown_key(const char *b64)
{
	char *raw = NULL, *out = malloc(ETCD_MAX_SHOWN_KEY + 16);
	size_t len = 0;
	if (!out)
		return NULL;
	if (etcd_b64_decode(b64, &raw, &len, ETCD_MAX_RESPONSE)) {
		snprintf(out, ETCD_MAX_SHOWN_KEY + 16, "(not base64)");
		return out;
	}
	size_t k = len < ETCD_MAX_SHOWN_KEY ? len : ETCD_MAX_SHOWN_KEY;
	for (size_t i = 0; i < k; i++) {
		unsigned char c = (unsigned char)raw[i];
		out[i] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
	}
	snprintf(out + k, 16, "%s", k < len ? "..." : "");
	free(raw);
	return out;
}

/*
 * One kv object ({"key","value","mod_revision"}); deleted: value stays
 * NULL.  -1 only when the object or its revision is malformed (then nothing
 * says where the watch stands); a key or value we do not take is a bad kv.
 */
_Static_assert(ETCD_MAX_KEY == 512, "kv_parse's message names the key limit");

static int kv_parse(const json_t *j, bool deleted, size_t max_value, struct etcd_kv *kv)
{
	memset(kv, 0, sizeof(*kv));
	kv->deleted = deleted;
	const json_t *k = json_object_get(j, "key"), *v = json_object_get(j, "value");
	size_t klen;
	if (!json_is_object(j) || !json_is_string(k) || (v && !json_is_string(v)) ||
	    json_i64(j, "mod_revision", &kv->mod_revision) || kv->mod_revision < 0 ||
	    kv->mod_revision == INT64_MAX) /* the watch goes on from mod_revision + 1 */
		return -1;
	const char *kt = json_string_value(k);
	if (etcd_b64_decode(kt, &kv->key, &klen, ETCD_MAX_KEY) || strlen(kv->key) != klen) {
		char *raw = NULL;
		size_t rlen = 0;
		int notb64 = etcd_b64_decode(kt, &raw, &rlen, ETCD_MAX_RESPONSE);
		kv->bad = notb64 ? "key is not base64"
			  : rlen > ETCD_MAX_KEY ? "key over 512 bytes"
						: "key with a NUL byte";
		free(raw);
		free(kv->key);
		kv->key = shown_key(kt);
		kv->bad_key = true;
		return kv->key ? 0 : -1;
	}
	if (!deleted) {
		const char *vt = v ? json_string_value(v) : "";
		size_t vn = strlen(vt);
		if (vn / 4 * 3 > max_value + 2 || vn % 4) {
			kv->bad = vn % 4 ? "value is not base64" : "value over the size limit";
		} else if (etcd_b64_decode(vt, &kv->value, &kv->value_len, max_value)) {
			kv->bad = "value is not base64 or over the size limit";
		} else if (strlen(kv->value) != kv->value_len) {
			kv->bad = "value with a NUL byte";
			free(kv->value);
			kv->value = NULL;
			kv->value_len = 0;
		}
	}
	return 0;
}

/* ---- credentials ---------------------------------------------------------- */

int etcd_creds_load(const char *path, struct etcd_creds *cr, char *err, size_t errlen)
{
	memset(cr, 0, sizeof(*cr));
	FILE *f = fopen(path, "re");
	struct stat st;
	if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "etcd credentials %s: %s", path,
			 f ? "not a regular file" : strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	char line[8192];
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		lineno++;
		size_t n = strlen(line);
		if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
			snprintf(err, errlen, "etcd credentials %s:%d: line too long", path, lineno);
			rc = -1;
			break;
		}
		while (n && (line[n - 1] == '\n' || line[n - 1] == ' ' || line[n - 1] == '\t'))
			line[--n] = '\0';
		char *k = line;
		while (*k == ' ' || *k == '\t')
			k++;
		if (!*k || *k == '#')
			continue;
		char *eq = strchr(k, '=');
		if (!eq) {
			snprintf(err, errlen, "etcd credentials %s:%d: expected NAME = VALUE", path, lineno);
			rc = -1;
			break;
		}
		char *v = eq + 1, *ke = eq;
		while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t'))
			ke--;
		*ke = '\0';
		while (*v == ' ' || *v == '\t')
			v++;
		struct {
			const char *name;
			char *dst;
			size_t len;
		} keys[] = {{"ca", cr->ca, sizeof(cr->ca)}, {"cert", cr->cert, sizeof(cr->cert)},
			    {"key", cr->key, sizeof(cr->key)}, {"user", cr->user, sizeof(cr->user)},
			    {"password", cr->password, sizeof(cr->password)}};
		size_t i;
		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (!strcmp(k, keys[i].name))
				break;
		if (i == sizeof(keys) / sizeof(keys[0]) || strlen(v) >= keys[i].len || !*v) {
			/* The value is not shown: it may be the password. */
			snprintf(err, errlen, "etcd credentials %s:%d: unknown name, empty or too long "
				 "value (names: ca, cert, key, user, password)", path, lineno);
			rc = -1;
			break;
		}
		snprintf(keys[i].dst, keys[i].len, "%s", v);
	}
	fclose(f);
	if (rc == 0 && !cr->user[0] != !cr->password[0]) {
		snprintf(err, errlen, "etcd credentials %s: user and password go together", path);
		rc = -1;
	}
	if (rc == 0 && cr->password[0] && (st.st_mode & 077)) {
		snprintf(err, errlen, "etcd credentials %s hold a password and may be read by group or "
			 "others (chmod 600 it)", path);
		rc = -1;
	}
	if (rc == 0 && !cr->cert[0] != !cr->key[0]) {
		snprintf(err, errlen, "etcd credentials %s: cert and key go together", path);
		rc = -1;
	}
	for (const char *p = cr->user; rc == 0 && *p; p++)
		if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || (unsigned char)*p >= 0x7f) {
			snprintf(err, errlen, "etcd credentials %s: bad character in user", path);
			rc = -1;
		}
	if (rc)
		memset(cr, 0, sizeof(*cr));
	return rc;
}

/*
 * What every request of one client carries: the credentials (or NULL) and
 * the token etcd gave for them, shared by the watcher's two threads (mu).
 * A token etcd no longer takes (expired: --auth-token-ttl) is dropped and
 * the call authenticates again, once.
 */
struct etcd_session {
	const struct etcd_creds *cr;
	pthread_mutex_t mu;
	char token[ETCD_MAX_TOKEN];
};

static void session_init(struct etcd_session *s, const struct etcd_creds *cr)
{
	memset(s, 0, sizeof(*s));
	s->cr = cr && (cr->ca[0] || cr->cert[0] || cr->user[0]) ? cr : NULL;
	pthread_mutex_init(&s->mu, NULL);
}

static void session_destroy(struct etcd_session *s)
{
	explicit_bzero(s->token, sizeof(s->token));
	pthread_mutex_destroy(&s->mu);
}

/* ---- HTTP --------------------------------------------------------------- */

struct http_buf {
	char *data;
	size_t len, cap;
	bool too_big;
	atomic_bool *stop; /* abort the transfer when set (NULL: never) */
	/* Streaming: called for each complete line; nonzero stops the transfer. */
	int (*on_line)(void *arg, char *line, size_t len);
	/* Called about once a second while the transfer runs; nonzero stops it. */
	int (*on_tick)(void *arg);
	void *arg;
	const char *header; /* one more request header, or NULL */
	struct etcd_session *sess; /* TLS files and the token; NULL: none */
	bool no_token;             /* the authentication request itself */
};

static size_t http_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct http_buf *b = userdata;
	size_t n = size * nmemb;
	if (b->len + n > ETCD_MAX_RESPONSE) {
		b->too_big = true;
		return 0;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->data, cap);
		if (!p)
			return 0;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	if (b->on_line) {
		/* Hand every complete line over; keep the partial tail. */
		size_t start = 0;
		for (size_t i = 0; i < b->len; i++) {
			if (b->data[i] != '\n')
				continue;
			b->data[i] = '\0';
			int stop = i > start ? b->on_line(b->arg, b->data + start, i - start) : 0;
			start = i + 1;
			if (stop) {
				b->len = 0;
				return 0;
			}
		}
		memmove(b->data, b->data + start, b->len - start);
		b->len -= start;
		b->data[b->len] = '\0';
	}
	return n;
}

static int http_progress(void *userdata, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct http_buf *b = userdata;
	(void)dt, (void)dn, (void)ut, (void)un;
	if (b->stop && atomic_load(b->stop))
		return 1;
	return b->on_tick ? b->on_tick(b->arg) : 0;
}

/*
 * POST body to base + path.  timeout_ms 0: no overall limit (the watch);
 * TCP keepalive then finds a dead peer.  0 with the HTTP status in *status,
 * or -1 with err.
 */
static int http_post_on(CURL *c, const char *base, const char *path, const char *body,
			long timeout_ms, struct http_buf *b, long *status, char *err, size_t errlen)
{
	char url[ETCD_MAX_URL + 64];
	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_reset(c); /* options back to defaults; the connection stays cached */
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	if (hdr && b->header) {
		struct curl_slist *more = curl_slist_append(hdr, b->header);
		if (more)
			hdr = more;
	}
	const struct etcd_creds *cr = b->sess ? b->sess->cr : NULL;
	char auth[ETCD_MAX_TOKEN + 32] = "";
	if (cr && cr->user[0] && !b->no_token) {
		pthread_mutex_lock(&b->sess->mu);
		if (b->sess->token[0])
			snprintf(auth, sizeof(auth), "Authorization: %s", b->sess->token);
		pthread_mutex_unlock(&b->sess->mu);
	}
	if (hdr && auth[0]) {
		struct curl_slist *more = curl_slist_append(hdr, auth);
		if (more)
			hdr = more;
	}
	explicit_bzero(auth, sizeof(auth));
	char cerr[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, http_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, b);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	/* One thread, one connection: a handle that must reach another member
	 * closes the one it kept instead of keeping both (idle hosts hold the
	 * watch's connection and the status thread's, no more). */
	curl_easy_setopt(c, CURLOPT_MAXCONNECTS, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	if (cr && cr->ca[0])
		curl_easy_setopt(c, CURLOPT_CAINFO, cr->ca);
	if (cr && cr->cert[0]) {
		curl_easy_setopt(c, CURLOPT_SSLCERT, cr->cert);
		curl_easy_setopt(c, CURLOPT_SSLKEY, cr->key);
	}
	CURLcode rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	for (struct curl_slist *h = hdr; h; h = h->next) /* the token's copy */
		if (!strncmp(h->data, "Authorization:", 14))
			explicit_bzero(h->data, strlen(h->data));
	curl_slist_free_all(hdr);
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "%s: %s", url,
			 b->too_big ? "response over the size limit" : cerr[0] ? cerr : curl_easy_strerror(rc));
		return -1;
	}
	return 0;
}

static int http_post(const char *base, const char *path, const char *body, long timeout_ms,
		     struct http_buf *b, long *status, char *err, size_t errlen)
{
	CURL *c = curl_easy_init();
	if (!c) {
		snprintf(err, errlen, "curl_easy_init failed");
		return -1;
	}
	int rc = http_post_on(c, base, path, body, timeout_ms, b, status, err, errlen);
	curl_easy_cleanup(c);
	return rc;
}

/*
 * POST and parse one JSON response; a gateway error ({"error": ...}) is an
 * error.  On handle c if not NULL (its connection kept for the next call),
 * with one more header if not NULL, within timeout_ms.
 */
static json_t *etcd_call_raw(struct etcd_session *sess, bool no_token, CURL *c, const char *header,
			     long timeout_ms, const char *base, const char *path, json_t *req,
			     atomic_bool *stop, char *err, size_t errlen)
{
	char *body = json_dumps(req, JSON_COMPACT);
	if (!body) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	struct http_buf b = {.stop = stop, .header = header, .sess = sess, .no_token = no_token};
	long status = 0;
	int rc = c ? http_post_on(c, base, path, body, timeout_ms, &b, &status, err, errlen)
		   : http_post(base, path, body, timeout_ms, &b, &status, err, errlen);
	if (no_token)
		explicit_bzero(body, strlen(body)); /* it held the password */
	free(body);
	json_t *j = NULL;
	if (rc == 0) {
		json_error_t je;
		j = b.data ? json_loadb(b.data, b.len, 0, &je) : NULL;
		const json_t *e = json_object_get(j, "error");
		if (!json_is_object(j)) {
			snprintf(err, errlen, "%s%s: HTTP %ld, not a JSON object", base, path, status);
			json_decref(j);
			j = NULL;
		} else if (e || status != 200) {
			const json_t *m = json_object_get(j, "message");
			char shown[161];
			snprintf(err, errlen, "%s%s: HTTP %ld: %s", base, path, status,
				 util_clean(shown, sizeof(shown), json_is_string(m) ? json_string_value(m)
						   : json_is_string(e) ? json_string_value(e) : "error",
					    UTIL_CLEAN_ASCII));
			json_decref(j);
			j = NULL;
		}
	}
	free(b.data);
	return j;
}

/* etcd's words for a token it does not take (or none where one is needed). */
static bool auth_error(const char *err)
{
	return strstr(err, "invalid auth token") || strstr(err, "user name is empty") ||
	       strstr(err, "HTTP 401");
}

/*
 * A token for the session's user from etcd at base (POST /v3/auth/
 * authenticate); 0, or -1 with err (etcd's reason, never the password).
 */
static int session_authenticate(struct etcd_session *sess, const char *base, atomic_bool *stop,
				char *err, size_t errlen)
{
	json_t *req = json_pack("{s:s, s:s}", "name", sess->cr->user, "password",
				sess->cr->password);
	char why[512];
	json_t *j = req ? etcd_call_raw(sess, true, NULL, NULL, ETCD_TIMEOUT_MS, base,
					"/v3/auth/authenticate", req, stop, why, sizeof(why))
			: NULL;
	json_decref(req); /* jansson's copy of the password: freed, not wiped (a known limit) */
	const json_t *t = json_object_get(j, "token");
	int rc = -1;
	if (!j) {
		snprintf(err, errlen, "etcd authentication as '%s' failed: %s", sess->cr->user, why);
	} else if (!json_is_string(t) || json_string_length(t) == 0 ||
		   json_string_length(t) >= ETCD_MAX_TOKEN) {
		snprintf(err, errlen, "%s/v3/auth/authenticate: no usable token in the answer", base);
	} else {
		rc = 0;
		for (const char *p = json_string_value(t); *p; p++)
			if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
				rc = -1; /* it goes into a header */
		if (rc)
			snprintf(err, errlen, "%s/v3/auth/authenticate: a token with bad bytes", base);
		else {
			pthread_mutex_lock(&sess->mu);
			snprintf(sess->token, sizeof(sess->token), "%s", json_string_value(t));
			pthread_mutex_unlock(&sess->mu);
		}
	}
	json_decref(j);
	return rc;
}

/* A token, if the session has a user and none yet: 0, or -1 with err. */
static int session_ready(struct etcd_session *sess, const char *base, atomic_bool *stop, char *err,
			 size_t errlen)
{
	if (!sess || !sess->cr || !sess->cr->user[0])
		return 0;
	pthread_mutex_lock(&sess->mu);
	bool have = sess->token[0] != '\0';
	pthread_mutex_unlock(&sess->mu);
	return have ? 0 : session_authenticate(sess, base, stop, err, errlen);
}

static void session_drop_token(struct etcd_session *sess)
{
	if (!sess)
		return;
	pthread_mutex_lock(&sess->mu);
	explicit_bzero(sess->token, sizeof(sess->token));
	pthread_mutex_unlock(&sess->mu);
}

/* One call with the session's token; a token etcd refuses is renewed once. */
static json_t *etcd_call_on(struct etcd_session *sess, CURL *c, const char *header,
			    long timeout_ms, const char *base, const char *path, json_t *req,
			    atomic_bool *stop, char *err, size_t errlen)
{
	for (int attempt = 0;; attempt++) {
		if (session_ready(sess, base, stop, err, errlen))
			return NULL;
		json_t *j = etcd_call_raw(sess, false, c, header, timeout_ms, base, path, req, stop,
					  err, errlen);
		if (j || attempt > 0 || !sess || !sess->cr || !sess->cr->user[0] || !auth_error(err))
			return j;
		session_drop_token(sess);
	}
}


/*
 * An error that every member would give alike: the request is wrong
 * (HTTP 400: a bad argument, a compacted or future revision).  Anything
 * else may be this member's own trouble (no leader: 503, a timeout: 504,
 * overloaded: 429, not reachable, not answering): the next member is tried.
 */
static bool etcd_error_is_final(const char *err)
{
	return strstr(err, "HTTP 400") || strstr(err, "compacted") || strstr(err, "future revision");
}

/*
 * Try each endpoint from *cur on; *cur keeps the one that answered, or the
 * one after the last that failed (the next call starts there, so a failed
 * member is not the first one tried again).  once: a write that must not be
 * retried elsewhere after any answer (a timed-out put may have been
 * committed: a plan would then be written twice).
 */
static json_t *etcd_call_any_ex(struct etcd_session *sess, CURL *c, char urls[][ETCD_MAX_URL],
				size_t n, size_t *cur, const char *path, json_t *req,
				atomic_bool *stop, bool once, char *err, size_t errlen)
{
	for (size_t k = 0; k < n; k++) {
		size_t i = (*cur + k) % n;
		json_t *j = etcd_call_on(sess, c, NULL, ETCD_TIMEOUT_MS, urls[i], path, req, stop, err,
					 errlen);
		if (j || etcd_error_is_final(err) || (once && strstr(err, ": HTTP "))) {
			*cur = i;
			return j;
		}
		if (stop && atomic_load(stop))
			break;
	}
	*cur = (*cur + 1) % n;
	return NULL;
}

/* c: the thread's handle, whose connection is kept for its next request (NULL: a new one). */
static json_t *etcd_call_any(struct etcd_session *sess, CURL *c, char urls[][ETCD_MAX_URL],
			     size_t n, size_t *cur, const char *path, json_t *req, atomic_bool *stop,
			     char *err, size_t errlen)
{
	return etcd_call_any_ex(sess, c, urls, n, cur, path, req, stop, false, err, errlen);
}

static json_t *range_request(const char *prefix, int64_t at)
{
	char end[ETCD_MAX_KEY + 1];
	if (etcd_prefix_end(prefix, end, sizeof(end)))
		return NULL;
	char *k = etcd_b64_encode(prefix, strlen(prefix)), *e = etcd_b64_encode(end, strlen(end));
	json_t *req = k && e ? json_pack("{s:s, s:s}", "key", k, "range_end", e) : NULL;
	if (req && at > 0)
		json_object_set_new(req, "revision", json_integer(at));
	free(k);
	free(e);
	return req;
}

/* A range response into kvs; -1 on anything malformed. */
static int range_parse(const json_t *j, size_t max_value, struct etcd_kv **kvs, size_t *n,
		       int64_t *revision)
{
	const json_t *arr = json_object_get(j, "kvs");
	*kvs = NULL;
	*n = 0;
	if (json_i64(json_object_get(j, "header"), "revision", revision) || *revision <= 0)
		return -1;
	if (!arr)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > ETCD_MAX_KVS)
		return -1;
	size_t cnt = json_array_size(arr);
	struct etcd_kv *v = calloc(cnt ? cnt : 1, sizeof(*v));
	if (!v)
		return -1;
	for (size_t i = 0; i < cnt; i++) {
		if (kv_parse(json_array_get(arr, i), false, max_value, &v[i])) {
			etcd_kvs_free(v, i);
			return -1;
		}
	}
	*kvs = v;
	*n = cnt;
	return 0;
}

int etcd_range_parse_text(const char *text, size_t len, size_t max_value, struct etcd_kv **kvs,
			  size_t *n, int64_t *revision)
{
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	*kvs = NULL;
	*n = 0;
	*revision = 0;
	int rc = j ? range_parse(j, max_value, kvs, n, revision) : -1;
	json_decref(j);
	return rc;
}

int etcd_range(const char *endpoints, const struct etcd_creds *cr, const char *prefix,
	       size_t max_value, struct etcd_kv **kvs, size_t *n, int64_t *revision, char *err,
	       size_t errlen)
{
	char urls[ETCD_MAX_ENDPOINTS][ETCD_MAX_URL];
	size_t nu, cur = 0;
	if (etcd_endpoints_parse(endpoints, urls, &nu, err, errlen))
		return -1;
	json_t *req = range_request(prefix, 0);
	if (!req) {
		snprintf(err, errlen, "bad prefix or out of memory");
		return -1;
	}
	struct etcd_session sess;
	session_init(&sess, cr);
	json_t *j = etcd_call_any(&sess, NULL, urls, nu, &cur, "/v3/kv/range", req, NULL, err, errlen);
	session_destroy(&sess);
	json_decref(req);
	if (!j)
		return -1;
	int rc = range_parse(j, max_value, kvs, n, revision);
	if (rc)
		snprintf(err, errlen, "malformed range response from etcd");
	json_decref(j);
	return rc;
}

int etcd_txn_put(const char *endpoints, const struct etcd_creds *cr, const char *const *keys,
		 const char *const *values, size_t n, const char *const *must_be_new, size_t n_new,
		 int64_t *revision, char *err, size_t errlen)
{
	return etcd_txn_put_ttl(endpoints, cr, keys, values, n, must_be_new, n_new, 0, revision,
				err, errlen);
}

int etcd_txn_put_ttl(const char *endpoints, const struct etcd_creds *cr, const char *const *keys,
		     const char *const *values, size_t n, const char *const *must_be_new,
		     size_t n_new, int64_t ttl_s, int64_t *revision, char *err, size_t errlen)
{
	char urls[ETCD_MAX_ENDPOINTS][ETCD_MAX_URL];
	size_t nu, cur = 0;
	if (etcd_endpoints_parse(endpoints, urls, &nu, err, errlen))
		return -1;
	struct etcd_session sess;
	session_init(&sess, cr);
	/* A lease of its own, never kept alive: etcd deletes the keys after ttl_s.
	 * Granted before the transaction; if the transaction is not written, the
	 * lease expires holding nothing. */
	char sid[32] = "";
	if (ttl_s > 0) {
		json_t *lr = json_pack("{s:I}", "TTL", (json_int_t)ttl_s);
		json_t *lj = lr ? etcd_call_any(&sess, NULL, urls, nu, &cur, "/v3/lease/grant", lr,
						NULL, err, errlen)
				: NULL;
		json_decref(lr);
		int64_t id = 0;
		if (lj && (json_i64(lj, "ID", &id) || id <= 0))
			snprintf(err, errlen, "malformed lease grant response from etcd");
		json_decref(lj);
		if (id <= 0) {
			session_destroy(&sess);
			return -1;
		}
		snprintf(sid, sizeof(sid), "%" PRId64, id);
	}
	json_t *req = json_object(), *cmp = json_array(), *ops = json_array();
	int rc = req && cmp && ops ? 0 : -1;
	for (size_t i = 0; rc == 0 && i < n_new; i++) {
		char *k = etcd_b64_encode(must_be_new[i], strlen(must_be_new[i]));
		json_t *c = k ? json_pack("{s:s, s:s, s:s, s:s}", "key", k, "target", "CREATE",
					  "result", "EQUAL", "create_revision", "0") : NULL;
		rc = c ? json_array_append_new(cmp, c) : -1;
		free(k);
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *k = etcd_b64_encode(keys[i], strlen(keys[i]));
		char *v = etcd_b64_encode(values[i], strlen(values[i]));
		json_t *op = k && v ? json_pack("{s:{s:s, s:s}}", "request_put", "key", k, "value", v)
				    : NULL;
		if (op && sid[0])
			json_object_set_new(json_object_get(op, "request_put"), "lease", json_string(sid));
		rc = op ? json_array_append_new(ops, op) : -1;
		free(k);
		free(v);
	}
	if (rc == 0) {
		json_object_set(req, "compare", cmp);
		json_object_set(req, "success", ops);
	}
	json_decref(cmp);
	json_decref(ops);
	if (rc) {
		json_decref(req);
		session_destroy(&sess);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	json_t *j = etcd_call_any_ex(&sess, NULL, urls, nu, &cur, "/v3/kv/txn", req, NULL, true,
				     err, errlen);
	session_destroy(&sess);
	json_decref(req);
	if (!j)
		return -1;
	rc = json_i64(json_object_get(j, "header"), "revision", revision) ? -1 : 0;
	if (rc)
		snprintf(err, errlen, "malformed transaction response from etcd");
	else if (!json_is_true(json_object_get(j, "succeeded")))
		rc = 1;
	json_decref(j);
	return rc;
}

/* ---- the watcher -------------------------------------------------------- */

struct etcd_watcher {
	uv_loop_t *loop;
	struct etcd_creds creds;   /* a copy: the caller's may go */
	struct etcd_session sess;  /* shared by both threads */
	uv_async_t async;
	char urls[ETCD_MAX_ENDPOINTS][ETCD_MAX_URL];
	size_t n_urls, cur_watch, cur_status;
	char prefix[ETCD_MAX_KEY + 1];
	char status_key[ETCD_MAX_KEY + 1];
	int64_t start_rev;
	etcd_batch_fn *on_batch;
	void *arg;
	pthread_t watch_thr, status_thr;
	bool watch_started, status_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct etcd_batch *head, *tail; /* guarded by mu */
	char *status_value;             /* guarded by mu */
	bool status_dirty;              /* guarded by mu */
	atomic_bool stop;
	CURL *scurl;          /* the status thread's requests and the watch's liveness checks */
	/* The watch's stream, seen by the status thread: which member it reads
	 * (-1: none open) and its generation; a failed liveness check of that
	 * generation stops it (probe_err, guarded by mu, says why). */
	atomic_int watch_member;
	atomic_uint stream_gen, probe_fail_gen;
	char probe_err[384];
	uint64_t last_probe;  /* status thread: util_mono_ms of the last check */
	/* Watch thread only. */
	int64_t next_rev;
	bool up;
	int64_t compacted;
	CURL *wcurl;          /* its range reads and its stream: one connection */
	bool stream_failed;   /* why the stream ended is in stream_err */
	char stream_err[384];
};

static void push(struct etcd_watcher *w, struct etcd_batch *b)
{
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = b;
	else
		w->head = b;
	w->tail = b;
	pthread_mutex_unlock(&w->mu);
	uv_async_send(&w->async);
}

static void push_state(struct etcd_watcher *w, enum etcd_batch_kind kind, const char *why)
{
	struct etcd_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return; /* the next state change says it again */
	b->kind = kind;
	snprintf(b->err, sizeof(b->err), "%.200s", why ? why : "");
	push(w, b);
}

/* Sleep up to ms, or less when stopping. */
static void nap(struct etcd_watcher *w, unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->mu);
	if (!atomic_load(&w->stop))
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
	pthread_mutex_unlock(&w->mu);
}

/*
 * Why the stream ends, for the disconnection the loop logs once per
 * episode: etcd's error message ({"error": {"message": "etcdserver: no
 * leader"}}) or the line's first 120 bytes, cleaned: what the server sent
 * is not ours to print raw.
 */
static void watch_stream_error(struct etcd_watcher *w, const char *what, const char *line,
			       size_t len)
{
	char head[121], shown[161];
	json_error_t je;
	json_t *j = line ? json_loadb(line, len, 0, &je) : NULL;
	const json_t *m = json_object_get(json_object_get(j, "error"), "message");
	if (json_is_string(m)) {
		util_clean(shown, sizeof(shown), json_string_value(m), UTIL_CLEAN_ASCII);
	} else if (line) {
		size_t k = len < sizeof(head) - 1 ? len : sizeof(head) - 1;
		memcpy(head, line, k);
		head[k] = '\0';
		util_clean(shown, sizeof(shown), head, UTIL_CLEAN_ASCII);
	} else {
		shown[0] = '\0';
	}
	json_decref(j);
	snprintf(w->stream_err, sizeof(w->stream_err), "%s: %s%s%s%s", w->urls[w->cur_watch], what,
		 shown[0] ? " (" : "", shown, shown[0] ? ")" : "");
	w->stream_failed = true;
}

/* One line of the watch stream: {"result": {...}} or {"error": {...}}. */
/* The events array of a watch result, each at or after next_rev. */
static enum etcd_watch_outcome watch_events(const json_t *evs, int64_t next_rev,
					    struct etcd_batch **out)
{
	if (!json_is_array(evs) || json_array_size(evs) > ETCD_MAX_KVS)
		return ETCD_WATCH_BAD;
	size_t n = json_array_size(evs);
	if (!n)
		return ETCD_WATCH_GO_ON;
	struct etcd_batch *b = calloc(1, sizeof(*b));
	if (b)
		b->kvs = calloc(n, sizeof(*b->kvs));
	if (!b || !b->kvs) {
		free(b);
		return ETCD_WATCH_BAD;
	}
	b->kind = ETCD_EVENTS;
	for (size_t i = 0; i < n; i++) {
		const json_t *ev = json_array_get(evs, i), *t = json_object_get(ev, "type");
		bool del = json_is_string(t) && strcmp(json_string_value(t), "DELETE") == 0;
		if ((t && !json_is_string(t)) ||
		    kv_parse(json_object_get(ev, "kv"), del, ETCD_MAX_VALUE, &b->kvs[i])) {
			b->n = i;
			etcd_batch_free(b);
			return ETCD_WATCH_BAD_EVENT;
		}
		b->n = i + 1; /* parsed: freed with the batch (an old event leaked its key) */
		/* In revision order, at or after where the watch stands: the watch
		 * then goes on after the last one and has seen all before it. */
		if (b->kvs[i].mod_revision < next_rev ||
		    (i > 0 && b->kvs[i].mod_revision < b->kvs[i - 1].mod_revision)) {
			etcd_batch_free(b);
			return ETCD_WATCH_BAD_EVENT;
		}
	}
	*out = b;
	return ETCD_WATCH_GO_ON;
}

enum etcd_watch_outcome etcd_watch_parse(const char *line, size_t len, int64_t next_rev,
					 struct etcd_watch_msg *msg)
{
	memset(msg, 0, sizeof(*msg));
	json_error_t je;
	json_t *j = json_loadb(line, len, 0, &je);
	const json_t *r = json_object_get(j, "result");
	enum etcd_watch_outcome o = ETCD_WATCH_GO_ON;
	const json_t *evs;
	if (!json_is_object(r))
		o = ETCD_WATCH_NOT_RESULT;
	else if (json_i64(r, "compact_revision", &msg->compacted))
		o = ETCD_WATCH_BAD;
	else if (msg->compacted > 0)
		o = ETCD_WATCH_COMPACTED;
	else if (json_is_true(json_object_get(r, "canceled")))
		o = ETCD_WATCH_CANCELED;
	else {
		msg->created = json_is_true(json_object_get(r, "created"));
		if ((evs = json_object_get(r, "events")))
			o = watch_events(evs, next_rev, &msg->events);
	}
	json_decref(j);
	return o;
}

static int watch_line(void *arg, char *line, size_t len)
{
	struct etcd_watcher *w = arg;
	struct etcd_watch_msg m;
	enum etcd_watch_outcome o = etcd_watch_parse(line, len, w->next_rev, &m);
	if (m.created) {
		w->up = true;
		push_state(w, ETCD_CONNECTED, w->urls[w->cur_watch]);
	}
	switch (o) {
	case ETCD_WATCH_GO_ON:
		if (m.events) {
			w->next_rev = m.events->kvs[m.events->n - 1].mod_revision + 1;
			push(w, m.events);
		}
		return 0;
	case ETCD_WATCH_NOT_RESULT:
		watch_stream_error(w, "etcd ended the watch", line, len);
		break;
	case ETCD_WATCH_COMPACTED:
		w->compacted = m.compacted;
		break;
	case ETCD_WATCH_CANCELED:
		watch_stream_error(w, "etcd canceled the watch", NULL, 0);
		break;
	case ETCD_WATCH_BAD_EVENT:
		watch_stream_error(w, "malformed or out-of-order watch event", NULL, 0);
		break;
	case ETCD_WATCH_BAD:
		watch_stream_error(w, "malformed watch message", NULL, 0);
		break;
	}
	return 1;
}

/*
 * The newest mod revision under the prefix now (a range sorted by mod
 * revision, one key, keys only), at least at; at when it cannot be read
 * (the catch-up is then judged by the events alone).
 */
static int64_t newest_revision(struct etcd_watcher *w, int64_t at)
{
	json_t *req = range_request(w->prefix, 0);
	if (!req)
		return at;
	json_object_set_new(req, "limit", json_integer(1));
	json_object_set_new(req, "keys_only", json_true());
	json_object_set_new(req, "sort_order", json_string("DESCEND"));
	json_object_set_new(req, "sort_target", json_string("MOD"));
	char err[320];
	json_t *j = etcd_call_any(&w->sess, w->wcurl, w->urls, w->n_urls, &w->cur_watch,
				  "/v3/kv/range", req, &w->stop, err, sizeof(err));
	json_decref(req);
	const json_t *kv = json_array_get(json_object_get(j, "kvs"), 0);
	int64_t rev = 0;
	if (!kv || json_i64(kv, "mod_revision", &rev) || rev < at)
		rev = at;
	json_decref(j);
	return rev;
}

/* Range read: 0, 1 when `at` is compacted, -1 on other errors. */
static int watcher_snapshot(struct etcd_watcher *w, int64_t at, bool resync, int64_t compacted,
			    char *err, size_t errlen)
{
	json_t *req = range_request(w->prefix, at);
	if (!req) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	json_t *j = etcd_call_any(&w->sess, w->wcurl, w->urls, w->n_urls, &w->cur_watch, "/v3/kv/range", req, &w->stop,
				  err, errlen);
	json_decref(req);
	/* Compacted, or ahead of this etcd (its data was replaced): read it all. */
	if (!j)
		return strstr(err, "compacted") || strstr(err, "future revision") ? 1 : -1;
	struct etcd_batch *b = calloc(1, sizeof(*b));
	int rc = b ? range_parse(j, ETCD_MAX_VALUE, &b->kvs, &b->n, &b->revision) : -1;
	json_decref(j);
	if (rc) {
		free(b);
		snprintf(err, errlen, "malformed range response from etcd");
		return -1;
	}
	/* The header says etcd's revision now; a read at `at` shows the keys as
	 * they were at `at`, and the watch must go on from there.  How far the
	 * catch-up goes: the newest key's revision now (one key, keys only). */
	if (at > 0) {
		b->latest = b->revision > at ? newest_revision(w, at) : at;
		b->revision = at;
	} else {
		b->latest = b->revision;
	}
	b->kind = ETCD_SNAPSHOT;
	b->resync = resync;
	b->compacted = compacted;
	w->next_rev = b->revision + 1;
	push(w, b);
	return 0;
}

/*
 * The watch's liveness check, every ETCD_PROBE_EVERY_MS while its stream is
 * open, made by the status thread on its own connection (the watch's is
 * busy with the stream; a third connection per host for the checks alone
 * is what 50 hosts on one etcd should not pay): a linearizable count-only
 * range read of the prefix on the member the watch reads from, with the
 * leader required, within ETCD_PROBE_TIMEOUT_MS.  A member that is hung
 * (SIGSTOP: its kernel still holds the connection), cut from its peers or
 * without a leader fails it, and the watch is restarted on the next
 * member; a watch never stays silent on a member that could not serve a
 * change.  (Progress notifications would come from the same member, every
 * 10 minutes by default: not a check of it.)
 */
static int watch_probe(struct etcd_watcher *w, int member, char *err, size_t errlen)
{
	json_t *req = range_request(w->prefix, 0);
	if (!req || !w->scurl) {
		json_decref(req);
		return 0; /* out of memory: not the member's fault */
	}
	json_object_set_new(req, "count_only", json_true());
	json_t *j = etcd_call_on(&w->sess, w->scurl, ETCD_REQUIRE_LEADER, ETCD_PROBE_TIMEOUT_MS,
				 w->urls[member], "/v3/kv/range", req, &w->stop, err, errlen);
	json_decref(req);
	int rc = j ? 0 : -1;
	json_decref(j);
	return rc;
}

/* Status thread: the stream of generation gen on member failed a check (or a request). */
static void watch_unfit(struct etcd_watcher *w, unsigned gen, int member, const char *what,
			const char *err)
{
	pthread_mutex_lock(&w->mu);
	snprintf(w->probe_err, sizeof(w->probe_err), "%s %s (%.300s)", w->urls[member], what, err);
	pthread_mutex_unlock(&w->mu);
	atomic_store(&w->probe_fail_gen, gen);
}

/* Status thread: check the watched member when a check is due. */
static void watch_check(struct etcd_watcher *w)
{
	int member = atomic_load(&w->watch_member);
	unsigned gen = atomic_load(&w->stream_gen);
	uint64_t now = util_mono_ms();
	if (member < 0 || now - w->last_probe < ETCD_PROBE_EVERY_MS)
		return;
	char err[320];
	int rc = watch_probe(w, member, err, sizeof(err));
	w->last_probe = util_mono_ms();
	if (rc && !atomic_load(&w->stop))
		watch_unfit(w, gen, member, "failed its liveness check", err);
}

/* Watch thread, from curl's progress callback (about once a second, also
 * while the stream is silent): stop a stream the status thread found unfit. */
static int watch_tick(void *arg)
{
	struct etcd_watcher *w = arg;
	if (atomic_load(&w->probe_fail_gen) != atomic_load(&w->stream_gen))
		return 0;
	pthread_mutex_lock(&w->mu);
	snprintf(w->stream_err, sizeof(w->stream_err), "%s", w->probe_err);
	pthread_mutex_unlock(&w->mu);
	w->stream_failed = true;
	return 1;
}

/* One watch stream from w->next_rev until it breaks: 0 compacted, -1 otherwise. */
static int watcher_stream(struct etcd_watcher *w, char *err, size_t errlen)
{
	char end[ETCD_MAX_KEY + 1];
	etcd_prefix_end(w->prefix, end, sizeof(end));
	char *k = etcd_b64_encode(w->prefix, strlen(w->prefix)), *e = etcd_b64_encode(end, strlen(end));
	json_t *req = k && e ? json_pack("{s:{s:s, s:s, s:I}}", "create_request", "key", k, "range_end",
					 e, "start_revision", (json_int_t)w->next_rev)
			     : NULL;
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	free(k);
	free(e);
	json_decref(req);
	if (!body) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	w->compacted = 0;
	w->stream_failed = false;
	/* The leader required (etcd's WithRequireLeader, through the gateway's
	 * metadata header): a member that loses its leader ends the stream
	 * ("etcdserver: no leader") instead of serving it silently. */
	struct http_buf b = {.stop = &w->stop, .on_line = watch_line, .on_tick = watch_tick,
			     .arg = w, .header = ETCD_REQUIRE_LEADER, .sess = &w->sess};
	long status = 0;
	int rc = session_ready(&w->sess, w->urls[w->cur_watch], &w->stop, err, errlen);
	if (rc == 0) {
		/* A new generation (never the failed one's: 0 is no failure). */
		unsigned gen = atomic_load(&w->stream_gen) + 1;
		if (gen == 0 || gen == atomic_load(&w->probe_fail_gen))
			gen += 2;
		atomic_store(&w->stream_gen, gen);
		atomic_store(&w->watch_member, (int)w->cur_watch);
		/* On the handle of the range read just made: the same connection. */
		rc = w->wcurl ? http_post_on(w->wcurl, w->urls[w->cur_watch], "/v3/watch", body, 0, &b,
					     &status, err, errlen)
			      : http_post(w->urls[w->cur_watch], "/v3/watch", body, 0, &b, &status,
					  err, errlen);
		atomic_store(&w->watch_member, -1);
	} else {
		snprintf(w->stream_err, sizeof(w->stream_err), "%.380s", err);
		w->stream_failed = true;
	}
	free(body);
	free(b.data);
	if (w->compacted)
		return 0;
	if (w->stream_failed)
		snprintf(err, errlen, "%s", w->stream_err);
	if (auth_error(err))
		session_drop_token(&w->sess); /* expired: the next stream authenticates again */
	else if (rc == 0)
		snprintf(err, errlen, "%s: the watch stream ended (HTTP %ld)", w->urls[w->cur_watch],
			 status);
	w->cur_watch = (w->cur_watch + 1) % w->n_urls; /* next try: the next endpoint */
	return -1;
}

static void *watch_main(void *arg)
{
	struct etcd_watcher *w = arg;
	char err[512];
	/* First: the snapshot at our saved revision (not applied), or one to apply. */
	int64_t snap_at = w->start_rev;
	bool need_snap = true, resync = w->start_rev <= 0;
	int64_t compacted = 0;
	unsigned backoff = ETCD_BACKOFF_MIN_MS;
	w->wcurl = curl_easy_init(); /* NULL: each request on a new connection */
	while (!atomic_load(&w->stop)) {
		int rc = 0;
		if (need_snap) {
			rc = watcher_snapshot(w, snap_at, resync, compacted, err, sizeof(err));
			if (rc == 1) { /* our revision is compacted: read everything now */
				snap_at = 0;
				resync = true;
				compacted = -1; /* unknown: the range error does not say */
				continue;
			}
			if (rc == 0)
				need_snap = false;
		}
		if (rc == 0) {
			rc = watcher_stream(w, err, sizeof(err));
			if (rc == 0) { /* compacted under us */
				need_snap = true;
				snap_at = 0;
				resync = true;
				compacted = w->compacted;
				backoff = ETCD_BACKOFF_MIN_MS;
				continue;
			}
			if (w->up)
				backoff = ETCD_BACKOFF_MIN_MS;
		}
		if (atomic_load(&w->stop))
			break;
		push_state(w, ETCD_DISCONNECTED, err);
		w->up = false;
		nap(w, backoff);
		backoff = backoff * 2 > ETCD_BACKOFF_MAX_MS ? ETCD_BACKOFF_MAX_MS : backoff * 2;
	}
	if (w->wcurl)
		curl_easy_cleanup(w->wcurl);
	w->wcurl = NULL;
	return NULL;
}

/* ---- the status thread: a lease, kept alive, and the value under it ---- */

/*
 * A status-thread request: on the member the watch reads from (the one
 * connection this thread keeps is then to that member, and the liveness
 * check shares it), else from cur_status on.  A request that the watched
 * member does not answer (a timeout, a refused connection, 5xx) stops the
 * watch there too: the next check would find the same.  timeout_ms: the
 * lease's requests are small, and get the check's bound (2 s), so that a
 * hung member is left as soon as by the check; a status put may be big.
 */
static json_t *status_call(struct etcd_watcher *w, const char *path, json_t *req, long timeout_ms,
			   char *err, size_t errlen)
{
	int member = atomic_load(&w->watch_member);
	unsigned gen = atomic_load(&w->stream_gen);
	if (member >= 0 && w->scurl) {
		json_t *j = etcd_call_on(&w->sess, w->scurl, NULL, timeout_ms, w->urls[member],
					 path, req, &w->stop, err, errlen);
		if (j || etcd_error_is_final(err) || atomic_load(&w->stop))
			return j;
		watch_unfit(w, gen, member, "failed a status request", err);
		w->cur_status = ((size_t)member + 1) % w->n_urls;
	}
	return etcd_call_any(&w->sess, w->scurl, w->urls, w->n_urls, &w->cur_status, path, req,
			     &w->stop, err, errlen);
}

static int64_t lease_grant(struct etcd_watcher *w, char *err, size_t errlen)
{
	json_t *req = json_pack("{s:I}", "TTL", (json_int_t)ETCD_LEASE_TTL_S);
	json_t *j = req ? status_call(w, "/v3/lease/grant", req, ETCD_PROBE_TIMEOUT_MS, err, errlen)
			: NULL;
	json_decref(req);
	int64_t id = 0;
	if (j && (json_i64(j, "ID", &id) || id <= 0)) {
		snprintf(err, errlen, "malformed lease grant response");
		id = 0;
	}
	json_decref(j);
	return id;
}

/* 0 alive, -1 gone or unreachable. */
static int lease_keepalive(struct etcd_watcher *w, int64_t id, char *err, size_t errlen)
{
	char sid[32];
	snprintf(sid, sizeof(sid), "%" PRId64, id);
	json_t *req = json_pack("{s:s}", "ID", sid);
	json_t *j = req ? status_call(w, "/v3/lease/keepalive", req, ETCD_PROBE_TIMEOUT_MS, err, errlen)
			: NULL;
	json_decref(req);
	int64_t ttl = 0;
	int rc = -1;
	if (j && json_i64(json_object_get(j, "result"), "TTL", &ttl) == 0 && ttl > 0)
		rc = 0;
	else if (j)
		snprintf(err, errlen, "lease %s expired", sid);
	json_decref(j);
	return rc;
}

static int status_put(struct etcd_watcher *w, int64_t lease, const char *value, char *err,
		      size_t errlen)
{
	char *k = etcd_b64_encode(w->status_key, strlen(w->status_key));
	char *v = etcd_b64_encode(value, strlen(value));
	char sid[32];
	snprintf(sid, sizeof(sid), "%" PRId64, lease);
	json_t *req = k && v ? json_pack("{s:s, s:s, s:s}", "key", k, "value", v, "lease", sid) : NULL;
	free(k);
	free(v);
	json_t *j = req ? status_call(w, "/v3/kv/put", req, ETCD_TIMEOUT_MS, err, errlen)
			: NULL;
	json_decref(req);
	int rc = j ? 0 : -1;
	json_decref(j);
	return rc;
}

static void *status_main(void *arg)
{
	struct etcd_watcher *w = arg;
	char err[512];
	int64_t lease = 0;
	uint64_t last_ka = 0;
	bool warned = false;
	w->scurl = curl_easy_init(); /* NULL: each request on a new connection */
	while (!atomic_load(&w->stop)) {
		char *value = NULL;
		pthread_mutex_lock(&w->mu);
		if (!w->status_dirty && lease && !atomic_load(&w->stop)) {
			/* A second, or until the next liveness check is due (a check
			 * every 2 s, not every 3 s of whole-second naps). */
			uint64_t since = util_mono_ms() - w->last_probe;
			long ms = 1000;
			if (atomic_load(&w->watch_member) >= 0 && since < ETCD_PROBE_EVERY_MS &&
			    ETCD_PROBE_EVERY_MS - since < (uint64_t)ms)
				ms = (long)(ETCD_PROBE_EVERY_MS - since) + 1;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += ms * 1000000L;
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
		if (w->status_value && (w->status_dirty || !lease))
			value = strdup(w->status_value);
		w->status_dirty = false;
		pthread_mutex_unlock(&w->mu);
		if (atomic_load(&w->stop)) {
			free(value);
			break;
		}
		watch_check(w); /* before the status: a hung member is found first */
		int rc = 0;
		uint64_t now = util_mono_ms();
		if (!lease) {
			lease = lease_grant(w, err, sizeof(err));
			rc = lease ? 0 : -1;
			last_ka = now;
		} else if (now - last_ka >= ETCD_LEASE_TTL_S * 1000 / 3) {
			rc = lease_keepalive(w, lease, err, sizeof(err));
			last_ka = now;
			if (rc)
				lease = 0;
		}
		if (rc == 0 && value && status_put(w, lease, value, err, sizeof(err)) != 0) {
			rc = -1;
			lease = 0; /* a new lease at the next try; the old one expires */
		}
		if (rc) {
			if (!warned)
				log_warnx("cluster: cannot publish status: %s (retrying)", err);
			warned = true;
			pthread_mutex_lock(&w->mu);
			w->status_dirty = w->status_dirty || value != NULL;
			pthread_mutex_unlock(&w->mu);
			nap(w, 500);
		} else if (value && warned) {
			log_info("cluster: status published again");
			warned = false;
		}
		free(value);
	}
	if (w->scurl)
		curl_easy_cleanup(w->scurl);
	w->scurl = NULL;
	return NULL;
}

/* ---- loop side ---------------------------------------------------------- */

static void on_async(uv_async_t *h)
{
	struct etcd_watcher *w = h->data;
	pthread_mutex_lock(&w->mu);
	struct etcd_batch *b = w->head;
	w->head = w->tail = NULL;
	pthread_mutex_unlock(&w->mu);
	while (b) {
		struct etcd_batch *next = b->next;
		b->next = NULL;
		w->on_batch(w->arg, b);
		b = next;
	}
}

int etcd_watcher_start(struct etcd_watcher **out, uv_loop_t *loop, const char *endpoints,
		       const struct etcd_creds *cr, const char *prefix, int64_t start_rev,
		       const char *status_key, etcd_batch_fn *on_batch, void *arg, char *err,
		       size_t errlen)
{
	static bool curl_ready; /* curl_global_init: once, before any thread */
	*out = NULL;
	if (strlen(prefix) > ETCD_MAX_KEY || strlen(status_key) > ETCD_MAX_KEY) {
		snprintf(err, errlen, "etcd key prefix too long");
		return -1;
	}
	struct etcd_watcher *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (etcd_endpoints_parse(endpoints, w->urls, &w->n_urls, err, errlen)) {
		free(w);
		return -1;
	}
	if (!curl_ready && curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		snprintf(err, errlen, "curl_global_init failed");
		free(w);
		return -1;
	}
	curl_ready = true;
	snprintf(w->prefix, sizeof(w->prefix), "%s", prefix);
	snprintf(w->status_key, sizeof(w->status_key), "%s", status_key);
	if (cr)
		w->creds = *cr;
	session_init(&w->sess, &w->creds);
	w->loop = loop;
	w->start_rev = start_rev;
	w->on_batch = on_batch;
	w->arg = arg;
	atomic_init(&w->stop, false);
	atomic_init(&w->watch_member, -1);
	atomic_init(&w->stream_gen, 0);
	atomic_init(&w->probe_fail_gen, 0);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = uv_async_init(loop, &w->async, on_async);
	if (rc) {
		snprintf(err, errlen, "uv_async_init: %s", uv_strerror(rc));
		free(w);
		return -1;
	}
	w->async.data = w;
	*out = w;
	rc = pthread_create(&w->watch_thr, NULL, watch_main, w);
	w->watch_started = rc == 0;
	if (rc == 0) {
		rc = pthread_create(&w->status_thr, NULL, status_main, w);
		w->status_started = rc == 0;
	}
	if (rc) {
		snprintf(err, errlen, "pthread_create: %s", strerror(rc));
		etcd_watcher_stop(w);
		*out = NULL;
		return -1;
	}
	return 0;
}

void etcd_watcher_publish(struct etcd_watcher *w, const char *value)
{
	char *v = strdup(value);
	if (!v)
		return; /* the next publish carries it */
	pthread_mutex_lock(&w->mu);
	free(w->status_value);
	w->status_value = v;
	w->status_dirty = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void on_async_closed(uv_handle_t *h)
{
	struct etcd_watcher *w = h->data;
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	session_destroy(&w->sess);
	explicit_bzero(&w->creds, sizeof(w->creds));
	free(w->status_value);
	free(w);
}

void etcd_watcher_stop(struct etcd_watcher *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	atomic_store(&w->stop, true);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	/* Every transfer polls the stop flag at least once a second. */
	if (w->watch_started)
		pthread_join(w->watch_thr, NULL);
	if (w->status_started)
		pthread_join(w->status_thr, NULL);
	struct etcd_batch *b = w->head;
	while (b) {
		struct etcd_batch *next = b->next;
		etcd_batch_free(b);
		b = next;
	}
	w->head = w->tail = NULL;
	uv_close((uv_handle_t *)&w->async, on_async_closed);
}
