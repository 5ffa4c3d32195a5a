/*
 * check_cluster.c - the pure parts of the cluster layer: names, selectors,
 * the etcd key layout and the values under it (daemon/cluster_key.c), which
 * host a selector concerns, the saved revision's file (daemon/cluster.c),
 * and the etcd client's base64, range ends and endpoint lists
 * (daemon/etcd.c).  The cluster end to end: tests/cluster/run.sh.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "etcd.h"
#include "testutil.h"

/* ---- names and selectors -------------------------------------------------- */

START_TEST(test_names)
{
	ck_assert(cluster_name_ok("h1"));
	ck_assert(cluster_name_ok("gpu-node_07.rack2"));
	ck_assert(!cluster_name_ok(""));
	ck_assert(!cluster_name_ok(NULL));
	ck_assert(!cluster_name_ok("."));
	ck_assert(!cluster_name_ok(".."));
	ck_assert(!cluster_name_ok("a/b"));
	ck_assert(!cluster_name_ok("a b"));
	ck_assert(!cluster_name_ok("h\xc3\xa9"));
	char longname[CLUSTER_MAX_NAME + 1];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[CLUSTER_MAX_NAME] = '\0';
	ck_assert(!cluster_name_ok(longname));
	longname[CLUSTER_MAX_NAME - 1] = '\0';
	ck_assert(cluster_name_ok(longname));
}
END_TEST

START_TEST(test_selector_parse)
{
	struct cluster_sel s;
	char err[256], text[200];
	ck_assert_int_eq(cluster_sel_parse("all", &s, err, sizeof(err)), 0);
	ck_assert_int_eq(s.kind, CLUSTER_SEL_ALL);
	ck_assert_int_eq(cluster_sel_parse("host:h2", &s, err, sizeof(err)), 0);
	ck_assert_int_eq(s.kind, CLUSTER_SEL_HOST);
	ck_assert_str_eq(s.host, "h2");
	ck_assert_int_eq(cluster_sel_parse("group:tp0", &s, err, sizeof(err)), 0);
	ck_assert_int_eq(s.kind, CLUSTER_SEL_GROUP);
	ck_assert_str_eq(s.group, "tp0");
	ck_assert_int_eq(cluster_sel_parse("agent:h3/17", &s, err, sizeof(err)), 0);
	ck_assert_int_eq(s.kind, CLUSTER_SEL_AGENT);
	ck_assert_str_eq(s.host, "h3");
	ck_assert_uint_eq(s.id, 17);
	ck_assert_int_eq(cluster_sel_parse("pid:h3/4294967295", &s, err, sizeof(err)), 0);
	ck_assert_int_eq(s.kind, CLUSTER_SEL_PID);
	ck_assert_uint_eq(s.id, 4294967295u);
	cluster_sel_text(&s, text, sizeof(text));
	ck_assert_str_eq(text, "pid:h3/4294967295");

	static const char *const bad[] = {
		"", "All", "host:", "host:a/b", "group:", "group:x y", "agent:h1", "agent:h1/",
		"agent:h1/0", "agent:/5", "agent:h1/5x", "agent:h1/-5", "pid:h1/4294967296",
		"pid:h1/0", "agent:h1/99999999999999999999999", "bogus", "host:..",
		"pid:h1/04", "agent:h1/007", /* one text per selector (fuzz_cluster) */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_msg(cluster_sel_parse(bad[i], &s, err, sizeof(err)) == -1, "accepted '%s'",
			      bad[i]);
		ck_assert_msg(strstr(err, "bad cluster selector") != NULL, "no message for '%s'", bad[i]);
	}
	ck_assert_int_eq(cluster_sel_parse(NULL, &s, err, sizeof(err)), -1);
}
END_TEST

/* Every selector kind: key -> parse -> the same selector, and its text round trip. */
START_TEST(test_key_roundtrip)
{
	static const char *const sels[] = {"all", "host:h1", "group:g2", "agent:h1/5", "pid:h9/1234"};
	static const char *const keys[] = {
		"/graphtoggle/c/desired/set/all", "/graphtoggle/c/desired/set/host/h1",
		"/graphtoggle/c/desired/set/group/g2", "/graphtoggle/c/desired/set/agent/h1/5",
		"/graphtoggle/c/desired/set/pid/h9/1234",
	};
	char err[256], key[512], desired[512], text[200];
	ck_assert_int_eq(cluster_prefix("c", "desired/", desired, sizeof(desired)), 0);
	ck_assert_str_eq(desired, "/graphtoggle/c/desired/");
	for (size_t i = 0; i < sizeof(sels) / sizeof(sels[0]); i++) {
		struct cluster_sel s, back;
		enum cluster_key_kind kind;
		ck_assert_int_eq(cluster_sel_parse(sels[i], &s, err, sizeof(err)), 0);
		ck_assert_int_eq(cluster_set_key("c", &s, key, sizeof(key)), 0);
		ck_assert_str_eq(key, keys[i]);
		ck_assert_int_eq(cluster_key_parse(desired, key, &kind, &back, err, sizeof(err)), 0);
		ck_assert_int_eq(kind, CLUSTER_KEY_SET);
		cluster_sel_text(&back, text, sizeof(text));
		ck_assert_str_eq(text, sels[i]);
	}
}
END_TEST

START_TEST(test_key_parse)
{
	const char *desired = "/graphtoggle/c/desired/";
	char err[256];
	struct cluster_sel s;
	enum cluster_key_kind kind;
	/* Plans: a name after plan/. */
	ck_assert_int_eq(cluster_key_parse(desired, "/graphtoggle/c/desired/plan/18ecf7-00ab", &kind, &s,
					   err, sizeof(err)), 0);
	ck_assert_int_eq(kind, CLUSTER_KEY_PLAN);
	ck_assert_int_eq(cluster_key_parse(desired, "/graphtoggle/c/desired/plan/a/b", &kind, &s, err,
					   sizeof(err)), -1);
	ck_assert_int_eq(cluster_key_parse(desired, "/graphtoggle/c/desired/plan/", &kind, &s, err,
					   sizeof(err)), -1);
	/* Not ours, or not a kind we know: ignored, not an error. */
	static const char *const other[] = {
		"/graphtoggle/c/status/h1", "/graphtoggle/c2/desired/set/all",
		"/graphtoggle/c/desired/other/x", "/graphtoggle/c/desired/settings",
	};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		ck_assert_int_eq(cluster_key_parse(desired, other[i], &kind, &s, err, sizeof(err)), 0);
		ck_assert_int_eq(kind, CLUSTER_KEY_OTHER);
	}
	/* Malformed set keys, and spellings that are not the canonical one. */
	static const char *const bad[] = {
		"/graphtoggle/c/desired/set/", "/graphtoggle/c/desired/set/nope",
		"/graphtoggle/c/desired/set/agent/h1/007", "/graphtoggle/c/desired/set/agent/h1",
		"/graphtoggle/c/desired/set/host/h1/extra", "/graphtoggle/c/desired/set/all/x",
		"/graphtoggle/c/desired/set/group/a:b",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(cluster_key_parse(desired, bad[i], &kind, &s, err, sizeof(err)) == -1,
			      "accepted %s", bad[i]);
	char longkey[2048];
	memset(longkey, 'x', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	memcpy(longkey, "/graphtoggle/c/desired/set/", strlen("/graphtoggle/c/desired/set/"));
	ck_assert_int_eq(cluster_key_parse(desired, longkey, &kind, &s, err, sizeof(err)), -1);
	/* Bad cluster names make no key. */
	char key[256];
	struct cluster_sel all = {.kind = CLUSTER_SEL_ALL};
	ck_assert_int_eq(cluster_set_key("a/b", &all, key, sizeof(key)), -1);
	ck_assert_int_eq(cluster_prefix("", "desired/", key, sizeof(key)), -1);
	ck_assert_int_eq(cluster_set_key("c", &all, key, 10), -1); /* does not fit */
}
END_TEST

/* Which host's agents a selector concerns, and the local rule it becomes. */
START_TEST(test_selector_local)
{
	struct cluster_sel s;
	char err[256];
	int kind;
	uint64_t id;
	const char *group;
	ck_assert_int_eq(cluster_sel_parse("all", &s, err, sizeof(err)), 0);
	ck_assert(cluster_sel_local(&s, "h1", &kind, &id, &group));
	ck_assert_int_eq(kind, 0);
	ck_assert_int_eq(cluster_sel_parse("host:h1", &s, err, sizeof(err)), 0);
	ck_assert(cluster_sel_local(&s, "h1", &kind, &id, &group));
	ck_assert_int_eq(kind, 0);
	ck_assert(!cluster_sel_local(&s, "h2", &kind, &id, &group));
	ck_assert(!cluster_sel_local(&s, "h10", &kind, &id, &group));
	ck_assert_int_eq(cluster_sel_parse("group:g", &s, err, sizeof(err)), 0);
	ck_assert(cluster_sel_local(&s, "h7", &kind, &id, &group));
	ck_assert_int_eq(kind, 3);
	ck_assert_str_eq(group, "g");
	ck_assert_int_eq(cluster_sel_parse("agent:h2/9", &s, err, sizeof(err)), 0);
	ck_assert(!cluster_sel_local(&s, "h1", &kind, &id, &group));
	ck_assert(cluster_sel_local(&s, "h2", &kind, &id, &group));
	ck_assert_int_eq(kind, 1);
	ck_assert_uint_eq(id, 9);
	ck_assert_int_eq(cluster_sel_parse("pid:h2/321", &s, err, sizeof(err)), 0);
	ck_assert(!cluster_sel_local(&s, "h", &kind, &id, &group));
	ck_assert(cluster_sel_local(&s, "h2", &kind, &id, &group));
	ck_assert_int_eq(kind, 2);
	ck_assert_uint_eq(id, 321);
}
END_TEST

/* ---- values ---------------------------------------------------------------- */

START_TEST(test_set_value)
{
	char err[256], *spec = NULL;
	ck_assert_int_eq(cluster_set_value_parse("{\"hooks\": \"resid_post:0-7\"}", &spec, err,
						 sizeof(err)), 0);
	ck_assert_str_eq(spec, "resid_post:0-7");
	free(spec);
	static const char *const bad[] = {
		"", "[]", "\"x\"", "{}", "{\"hooks\": 1}", "{\"hooks\": \"\"}",
		"{\"hooks\": \"all\", \"op\": \"add\"}", "{\"hooks\": \"a\", \"hooks\": \"b\"}",
		"{\"hooks\": \"a\\u0000b\"}", "{\"hooks\": \"all\"", "{\"hooks\": null}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		spec = (char *)1;
		ck_assert_msg(cluster_set_value_parse(bad[i], &spec, err, sizeof(err)) == -1,
			      "accepted %s", bad[i]);
		ck_assert_ptr_null(spec);
	}
	/* The hook spec bound of the wire protocol. */
	size_t n = TGP_MAX_SPEC + 1;
	char *big = malloc(n + 32);
	ck_assert_ptr_nonnull(big);
	strcpy(big, "{\"hooks\": \"");
	memset(big + strlen(big), 'a', n);
	strcpy(big + strlen("{\"hooks\": \"") + n, "\"}");
	ck_assert_int_eq(cluster_set_value_parse(big, &spec, err, sizeof(err)), -1);
	/* One byte less fits. */
	memmove(big + strlen("{\"hooks\": \"") + n - 1, big + strlen("{\"hooks\": \"") + n, 3);
	ck_assert_int_eq(cluster_set_value_parse(big, &spec, err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(spec), TGP_MAX_SPEC);
	free(spec);
	free(big);
}
END_TEST

START_TEST(test_plan_value)
{
	char err[256];
	struct cluster_plan p;
	ck_assert_int_eq(cluster_plan_value_parse(
				 "{\"target\": \"host:h1\", \"entries\": [{\"step\": 0, \"hooks\": \"all\"},"
				 " {\"step\": 12, \"hooks\": \"none\"}]}", &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.n, 2);
	ck_assert_int_eq(p.target.kind, CLUSTER_SEL_HOST);
	ck_assert(!p.e[0].relative);
	ck_assert_int_eq(p.e[1].n, 12);
	ck_assert_str_eq(p.e[1].spec, "none");
	cluster_plan_free(&p);
	ck_assert_int_eq(cluster_plan_value_parse(
				 "{\"target\": \"all\", \"entries\": [{\"after\": 200, \"hooks\": \"all\"}]}",
				 &p, err, sizeof(err)), 0);
	ck_assert(p.e[0].relative);
	ck_assert_int_eq(p.e[0].n, 200);
	cluster_plan_free(&p);

	static const char *const bad[] = {
		"{\"target\": \"all\", \"entries\": []}",
		"{\"target\": \"all\"}",
		"{\"entries\": [{\"step\": 1, \"hooks\": \"all\"}]}",
		"{\"target\": \"nope\", \"entries\": [{\"step\": 1, \"hooks\": \"all\"}]}",
		"{\"target\": \"all\", \"entries\": [{\"step\": -1, \"hooks\": \"all\"}]}",
		"{\"target\": \"all\", \"entries\": [{\"after\": 0, \"hooks\": \"all\"}]}",
		"{\"target\": \"all\", \"entries\": [{\"after\": 1099511627777, \"hooks\": \"all\"}]}",
		"{\"target\": \"all\", \"entries\": [{\"step\": 1, \"after\": 2, \"hooks\": \"all\"}]}",
		"{\"target\": \"all\", \"entries\": [{\"step\": 1}]}",
		"{\"target\": \"all\", \"entries\": [{\"step\": \"1\", \"hooks\": \"all\"}]}",
		"{\"target\": \"all\", \"entries\": [{\"step\": 1, \"hooks\": \"all\"}, 5]}",
		"{\"target\": \"all\", \"entries\": [{\"step\": 1, \"hooks\": \"all\"}], \"x\": 1}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(cluster_plan_value_parse(bad[i], &p, err, sizeof(err)) == -1, "accepted %s",
			      bad[i]);
		ck_assert_uint_eq(p.n, 0); /* nothing half parsed is left */
	}
	/* At most CLUSTER_MAX_PLANS entries. */
	size_t cap = 64 + (CLUSTER_MAX_PLANS + 1) * 40;
	char *big = malloc(cap);
	ck_assert_ptr_nonnull(big);
	for (int total = CLUSTER_MAX_PLANS; total <= CLUSTER_MAX_PLANS + 1; total++) {
		size_t o = (size_t)snprintf(big, cap, "{\"target\": \"all\", \"entries\": [");
		for (int i = 0; i < total; i++)
			o += (size_t)snprintf(big + o, cap - o, "%s{\"step\": %d, \"hooks\": \"all\"}",
					      i ? "," : "", i);
		snprintf(big + o, cap - o, "]}");
		int rc = cluster_plan_value_parse(big, &p, err, sizeof(err));
		ck_assert_int_eq(rc, total <= CLUSTER_MAX_PLANS ? 0 : -1);
		cluster_plan_free(&p);
	}
	free(big);
}
END_TEST

/* ---- the saved revision -------------------------------------------------- */

START_TEST(test_rev_file)
{
	char dir[64], path[128], tmp[160];
	snprintf(dir, sizeof(dir), "/tmp/check_cluster.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cluster-c.rev", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int64_t rev = -1;
	ck_assert_int_eq(cluster_rev_load(path, &rev), 0); /* missing: 0 */
	ck_assert_int_eq(rev, 0);
	ck_assert_int_eq(cluster_rev_save(path, 123456789012345LL), 0);
	ck_assert_int_eq(cluster_rev_load(path, &rev), 0);
	ck_assert_int_eq(rev, 123456789012345LL);
	ck_assert_int_eq(access(tmp, F_OK), -1); /* renamed, not left behind */
	ck_assert_int_eq(cluster_rev_save(path, 7), 0);
	ck_assert_int_eq(cluster_rev_load(path, &rev), 0);
	ck_assert_int_eq(rev, 7);
	/* Not a revision: an error, never a silent 0 (that would replay everything). */
	static const char *const bad[] = {"", "x\n", "-5\n", "12x\n", "99999999999999999999\n"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fputs(bad[i], f);
		fclose(f);
		ck_assert_msg(cluster_rev_load(path, &rev) == -1, "accepted '%s'", bad[i]);
	}
	/* A directory it cannot write: an error, the old file kept. */
	ck_assert_int_eq(cluster_rev_save(path, 11), 0);
	char sub[160];
	snprintf(sub, sizeof(sub), "%s/missing/cluster-c.rev", dir);
	ck_assert_int_eq(cluster_rev_save(sub, 12), -1);
	ck_assert_int_eq(cluster_rev_load(path, &rev), 0);
	ck_assert_int_eq(rev, 11);
	unlink(path);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* ---- etcd client helpers --------------------------------------------------- */

START_TEST(test_base64)
{
	static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		char *e = etcd_b64_encode(plain[i], strlen(plain[i]));
		ck_assert_str_eq(e, enc[i]);
		char *d;
		size_t n;
		ck_assert_int_eq(etcd_b64_decode(e, &d, &n, 100), 0);
		ck_assert_uint_eq(n, strlen(plain[i]));
		ck_assert_str_eq(d, plain[i]);
		free(d);
		free(e);
	}
	/* Binary, every byte value. */
	unsigned char all[256];
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	char *e = etcd_b64_encode(all, sizeof(all)), *d;
	size_t n;
	ck_assert_int_eq(etcd_b64_decode(e, &d, &n, 256), 0);
	ck_assert_uint_eq(n, 256);
	ck_assert_int_eq(memcmp(d, all, 256), 0);
	free(d);
	ck_assert_int_eq(etcd_b64_decode(e, &d, &n, 255), -1); /* over max */
	free(e);
	/* ... and non-canonical texts: bits past the end set (fuzz_cluster found "II=="). */
	static const char *const bad[] = {"Zg=", "Z===", "Zg==Zg==", "Z!==", "Zm9v\n", "=Zm9",
					   "Zm=v", "Zm 9", "II==", "Zh==", "Zm9=", "Zm8B="};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(etcd_b64_decode(bad[i], &d, &n, 100) == -1, "accepted '%s'", bad[i]);
}
END_TEST

START_TEST(test_prefix_end)
{
	char out[64];
	ck_assert_int_eq(etcd_prefix_end("/graphtoggle/c/desired/", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/graphtoggle/c/desired0");
	ck_assert_int_eq(etcd_prefix_end("", out, sizeof(out)), -1);
	ck_assert_int_eq(etcd_prefix_end("abc", out, 3), -1);
	ck_assert_int_eq(etcd_prefix_end("a\xff", out, sizeof(out)), -1);
}
END_TEST

START_TEST(test_endpoints)
{
	char urls[ETCD_MAX_ENDPOINTS][ETCD_MAX_URL], err[256];
	size_t n;
	ck_assert_int_eq(etcd_endpoints_parse("http://127.0.0.1:2379", urls, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(etcd_endpoints_parse("http://a:1/,https://b:2,http://c:3//", urls, &n, err,
					      sizeof(err)), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_str_eq(urls[0], "http://a:1");
	ck_assert_str_eq(urls[1], "https://b:2");
	ck_assert_str_eq(urls[2], "http://c:3");
	static const char *const bad[] = {"", ",", "127.0.0.1:2379", "ftp://a:1", "http://a:1,,http://b:2",
					   "http://a b:1", "http://a\":1", "file:///etc/passwd"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(etcd_endpoints_parse(bad[i], urls, &n, err, sizeof(err)) == -1,
			      "accepted '%s'", bad[i]);
	char many[1024] = "";
	for (int i = 0; i <= ETCD_MAX_ENDPOINTS; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%shttp://h%d:1", i ? "," : "", i);
	ck_assert_int_eq(etcd_endpoints_parse(many, urls, &n, err, sizeof(err)), -1);
	char toolong[ETCD_MAX_URL + 16] = "http://";
	memset(toolong + 7, 'a', ETCD_MAX_URL);
	toolong[ETCD_MAX_URL + 7] = '\0';
	ck_assert_int_eq(etcd_endpoints_parse(toolong, urls, &n, err, sizeof(err)), -1);
}
END_TEST

/*
 * One watch message whose events hold a key over 512 bytes, a key with a
 * NUL, a value over the limit, a value with a NUL and text that is not
 * base64, between two good keys: each bad one is a skipped kv (why, a
 * cleaned key, no value), the good ones come through, the message is read
 * on (the watch moves past the bad revisions).  Before, any of them made
 * the whole message ETCD_WATCH_BAD_EVENT: reconnect at the same revision,
 * forever.
 */
static char *b64(const void *p, size_t n)
{
	char *e = etcd_b64_encode(p, n);
	ck_assert_ptr_nonnull(e);
	return e;
}

static void append_event(char **line, size_t *len, const char *type, const char *k64,
			 const char *v64, int rev)
{
	size_t need = strlen(k64) + strlen(v64) + 200;
	*line = realloc(*line, *len + need);
	ck_assert_ptr_nonnull(*line);
	*len += (size_t)snprintf(*line + *len, need, "%s{%s\"kv\":{\"key\":\"%s\",\"value\":\"%s\","
				 "\"mod_revision\":\"%d\"}}", rev == 10 ? "" : ",", type, k64, v64, rev);
}

START_TEST(test_watch_bad_keys)
{
	const char *good = "/graphtoggle/c/desired/set/all", *val = "{\"hooks\":\"all\"}";
	char longkey[ETCD_MAX_KEY + 2];
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	const char nulkey[] = "/graphtoggle/c/desired/set/a\0ll\nforged";
	size_t big = ETCD_MAX_VALUE + 1;
	char *bigval = malloc(big);
	ck_assert_ptr_nonnull(bigval);
	memset(bigval, 'v', big);
	char *g = b64(good, strlen(good)), *v = b64(val, strlen(val));
	char *lk = b64(longkey, strlen(longkey)), *nk = b64(nulkey, sizeof(nulkey) - 1);
	char *bv = b64(bigval, big), *nv = b64("{}\0x", 4);
	char *line = strdup("{\"result\":{\"header\":{\"revision\":\"20\"},\"events\":[");
	size_t len = strlen(line);
	append_event(&line, &len, "", g, v, 10);
	append_event(&line, &len, "", lk, v, 11);
	append_event(&line, &len, "", nk, v, 12);
	append_event(&line, &len, "", g, bv, 13);
	append_event(&line, &len, "", g, nv, 14);
	append_event(&line, &len, "", "!!!!", v, 15);
	append_event(&line, &len, "\"type\":\"DELETE\",", nk, "", 16);
	append_event(&line, &len, "", g, v, 17);
	line = realloc(line, len + 8);
	strcpy(line + len, "]}}");
	len += 3;

	struct etcd_watch_msg m;
	ck_assert_int_eq(etcd_watch_parse(line, len, 10, &m), ETCD_WATCH_GO_ON);
	ck_assert_ptr_nonnull(m.events);
	ck_assert_uint_eq(m.events->n, 8);
	const struct etcd_kv *kv = m.events->kvs;
	ck_assert_ptr_null(kv[0].bad);
	ck_assert_str_eq(kv[0].value, val);
	ck_assert_str_eq(kv[1].bad, "key over 512 bytes");
	ck_assert(kv[1].bad_key);
	ck_assert_uint_le(strlen(kv[1].key), ETCD_MAX_SHOWN_KEY + 3);
	ck_assert_ptr_null(kv[1].value);
	ck_assert_str_eq(kv[2].bad, "key with a NUL byte");
	ck_assert_str_eq(kv[2].key, "/graphtoggle/c/desired/set/a?ll?forged"); /* cleaned */
	ck_assert_ptr_nonnull(kv[3].bad);
	ck_assert(!kv[3].bad_key);
	ck_assert_str_eq(kv[3].key, good); /* the key is fine: a set held under it is forgotten */
	ck_assert_ptr_null(kv[3].value);
	ck_assert_str_eq(kv[4].bad, "value with a NUL byte");
	ck_assert_str_eq(kv[5].bad, "key is not base64");
	ck_assert(kv[6].deleted && kv[6].bad_key);
	ck_assert_ptr_null(kv[7].bad);
	ck_assert_int_eq(kv[7].mod_revision, 17);
	etcd_batch_free(m.events);

	/* The same kvs in a range response: the snapshot holds them all too. */
	char *rr = malloc(len + 100);
	ck_assert_ptr_nonnull(rr);
	char *evs = strstr(line, "[");
	/* a range response lists kvs, not events: strip the {"kv": ...} wrappers */
	size_t o = (size_t)sprintf(rr, "{\"header\":{\"revision\":\"20\"},\"kvs\":[");
	for (const char *p = evs + 1; (p = strstr(p, "\"kv\":")); ) {
		p += 5;
		const char *end = strchr(p, '}');
		o += (size_t)sprintf(rr + o, "%s%.*s", rr[o - 1] == '[' ? "" : ",", (int)(end - p + 1), p);
	}
	o += (size_t)sprintf(rr + o, "]}");
	struct etcd_kv *kvs;
	size_t n;
	int64_t rev;
	ck_assert_int_eq(etcd_range_parse_text(rr, o, ETCD_MAX_VALUE, &kvs, &n, &rev), 0);
	ck_assert_uint_eq(n, 8);
	ck_assert_ptr_null(kvs[0].bad);
	ck_assert_ptr_nonnull(kvs[1].bad);
	ck_assert_ptr_nonnull(kvs[3].bad);
	ck_assert_ptr_null(kvs[7].bad);
	etcd_kvs_free(kvs, n);
	/* A reader with a larger bound (togglectl's view of big host status values) takes it. */
	ck_assert_int_eq(etcd_range_parse_text(rr, o, 2 * ETCD_MAX_VALUE, &kvs, &n, &rev), 0);
	ck_assert_ptr_null(kvs[3].bad);
	ck_assert_uint_eq(kvs[3].value_len, big);
	etcd_kvs_free(kvs, n);

	/* What still ends the stream: an event without a usable revision. */
	const char *norev = "{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\"}}]}}";
	ck_assert_int_eq(etcd_watch_parse(norev, strlen(norev), 0, &m), ETCD_WATCH_GO_ON);
	etcd_batch_free(m.events);
	const char *badrev = "{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"x\"}}]}}";
	ck_assert_int_eq(etcd_watch_parse(badrev, strlen(badrev), 0, &m), ETCD_WATCH_BAD_EVENT);
	free(rr);
	free(line);
	free(g);
	free(v);
	free(lk);
	free(nk);
	free(bv);
	free(nv);
	free(bigval);
}
END_TEST

/* The credentials file: its names, pairs, and a password only in a 0600 file,
 * never in an error message. */
static void write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(test_creds_file)
{
	char dir[] = "/tmp/tgcredsXXXXXX", path[128], err[512];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/creds", dir);
	struct etcd_creds cr;
	write_file(path, "# a comment\nca = /etc/ca.crt\n  user = tg \npassword = s3cret word\n"
		   "cert = /c.crt\nkey = /c.key\n", 0600);
	ck_assert_int_eq(etcd_creds_load(path, &cr, err, sizeof(err)), 0);
	ck_assert_str_eq(cr.ca, "/etc/ca.crt");
	ck_assert_str_eq(cr.user, "tg");
	ck_assert_str_eq(cr.password, "s3cret word");
	ck_assert_str_eq(cr.key, "/c.key");
	/* Readable by others: refused (a password in it). */
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(etcd_creds_load(path, &cr, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "chmod 600"));
	ck_assert_ptr_null(strstr(err, "s3cret"));
	ck_assert_str_eq(cr.password, ""); /* nothing half-loaded */
	/* Without a password it may be (TLS files only). */
	write_file(path, "ca = /etc/ca.crt\n", 0644);
	ck_assert_int_eq(etcd_creds_load(path, &cr, err, sizeof(err)), 0);
	static const char *const bad[] = {
		"user = tg\n",                       /* no password */
		"password = s3cret\n",               /* no user */
		"cert = /c.crt\n",                   /* no key */
		"pasword = s3cret\n",                /* unknown name: the value is not shown */
		"user = t g\npassword = s3cret\n",   /* a space in the user */
		"ca\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(path, bad[i], 0600);
		ck_assert_msg(etcd_creds_load(path, &cr, err, sizeof(err)) == -1, "accepted '%s'", bad[i]);
		ck_assert_msg(!strstr(err, "s3cret"), "the password in '%s'", err);
	}
	ck_assert_int_eq(etcd_creds_load(dir, &cr, err, sizeof(err)), -1); /* a directory */
	unlink(path);
	ck_assert_int_eq(etcd_creds_load(path, &cr, err, sizeof(err)), -1); /* missing */
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *cluster_suite(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc = tcase_create("keys");
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_selector_parse);
	tcase_add_test(tc, test_key_roundtrip);
	tcase_add_test(tc, test_key_parse);
	tcase_add_test(tc, test_selector_local);
	tcase_add_test(tc, test_set_value);
	tcase_add_test(tc, test_plan_value);
	tcase_add_test(tc, test_rev_file);
	suite_add_tcase(s, tc);
	tc = tcase_create("etcd");
	tcase_add_test(tc, test_base64);
	tcase_add_test(tc, test_prefix_end);
	tcase_add_test(tc, test_endpoints);
	tcase_add_test(tc, test_watch_bad_keys);
	tcase_add_test(tc, test_creds_file);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(cluster_suite());
}
