/*
 * safetensors.c - the safetensors writer of togglectl record (format:
 * safetensors.h).  The file is written whole to PATH.tmp and renamed: a
 * full disk or a failed write leaves no file that looks complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "toggle_error.h"
#include "util.h"

static const struct {
	const char *name;
	unsigned size;
} st_dtypes[] = {
	{"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
	{"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
	{"I32", 4}, {"U32", 4}, {"F32", 4},
	{"I64", 8}, {"U64", 8}, {"F64", 8},
};

unsigned st_dtype_size(const char *dtype)
{
	for (size_t i = 0; dtype && i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++)
		if (!strcmp(st_dtypes[i].name, dtype))
			return st_dtypes[i].size;
	return 0;
}

int st_tensor_check(const struct st_tensor *t, char *err, size_t errlen)
{
	unsigned es = st_dtype_size(t->dtype);
	if (!es) {
		util_seterr(err, errlen, "unknown dtype");
		return -1;
	}
	if (t->ndim > ST_MAX_DIMS) {
		util_seterr(err, errlen, "%zu dimensions (at most %d)", t->ndim, ST_MAX_DIMS);
		return -1;
	}
	uint64_t n = es;
	for (size_t i = 0; i < t->ndim; i++) {
		if (t->shape[i] && n > UINT64_MAX / t->shape[i]) {
			util_seterr(err, errlen, "shape overflows 64 bits");
			return -1;
		}
		n *= t->shape[i];
	}
	if (n != t->size) {
		util_seterr(err, errlen, "%llu bytes where the shape and dtype make %llu",
			    (unsigned long long)t->size, (unsigned long long)n);
		return -1;
	}
	return 0;
}

/* The JSON header, padded with spaces to a multiple of 8 (malloc'd). */
static char *st_header(const struct st_tensor *t, size_t n, json_t *metadata, size_t *len,
		       char *err, size_t errlen)
{
	json_t *root = json_object();
	uint64_t off = 0;
	bool ok = root != NULL;
	if (ok && metadata)
		ok = json_object_set(root, "__metadata__", metadata) == 0;
	for (size_t i = 0; ok && i < n; i++) {
		json_t *shape = json_array();
		for (size_t k = 0; shape && k < t[i].ndim; k++)
			json_array_append_new(shape, json_integer((json_int_t)t[i].shape[k]));
		json_t *o = json_pack("{s:s,s:o,s:[I,I]}", "dtype", t[i].dtype, "shape", shape,
				      "data_offsets", (json_int_t)off, (json_int_t)(off + t[i].size));
		ok = o && json_object_set_new(root, t[i].name, o) == 0;
		off += t[i].size;
	}
	char *text = ok ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(root);
	if (!text) {
		util_seterr(err, errlen, "out of memory building the header");
		return NULL;
	}
	size_t tl = strlen(text), pad = (8 - tl % 8) % 8;
	char *h = realloc(text, tl + pad + 1);
	if (!h) {
		free(text);
		util_seterr(err, errlen, "out of memory building the header");
		return NULL;
	}
	memset(h + tl, ' ', pad);
	h[tl + pad] = 0;
	*len = tl + pad;
	return h;
}

static int st_write_all(int fd, const void *buf, uint64_t len)
{
	const char *p = buf;
	while (len) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t k = write(fd, p, chunk);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0) {
			errno = ENOSPC;
			return -1;
		}
		p += k;
		len -= (uint64_t)k;
	}
	return 0;
}

int st_write(const char *path, const struct st_tensor *t, size_t n, json_t *metadata, char *err,
	     size_t errlen)
{
	char why[160];
	for (size_t i = 0; i < n; i++) {
		if (!t[i].name || !strcmp(t[i].name, "__metadata__") ||
		    st_tensor_check(&t[i], why, sizeof(why))) {
			util_seterr(err, errlen, "tensor %zu (%s): %s", i, t[i].name ? t[i].name : "?",
				    t[i].name ? why : "no name");
			return TOGGLE_EINVAL;
		}
	}
	size_t hlen = 0;
	char *h = st_header(t, n, metadata, &hlen, err, errlen);
	if (!h)
		return TOGGLE_ENOMEM;
	char tmp[4096];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		free(h);
		util_seterr(err, errlen, "path too long: %s", path);
		return TOGGLE_EINVAL;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		util_seterr(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
		free(h);
		return TOGGLE_EIO;
	}
	uint8_t lenle[8];
	for (int i = 0; i < 8; i++)
		lenle[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
	int rc = st_write_all(fd, lenle, 8) || st_write_all(fd, h, hlen);
	for (size_t i = 0; !rc && i < n; i++)
		rc = st_write_all(fd, t[i].data, t[i].size);
	int e = errno;
	free(h);
	if (close(fd) != 0 && !rc) {
		rc = -1;
		e = errno;
	}
	if (!rc && rename(tmp, path) != 0) {
		rc = -1;
		e = errno;
	}
	if (rc) {
		unlink(tmp);
		util_seterr(err, errlen, "cannot write %s: %s", path, strerror(e));
		return TOGGLE_EIO;
	}
	return 0;
}
