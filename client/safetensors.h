/*
 * safetensors.h - writing safetensors files (togglectl record): an 8-byte
 * little-endian header length, a JSON header (per tensor its dtype, shape
 * and data_offsets, and a "__metadata__" map of strings), padded with
 * spaces to a multiple of 8, then the tensors' bytes back to back in header
 * order.  Written with jansson; the format is that of huggingface's
 * safetensors (docs/recording.md, Files).
 */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define ST_MAX_DIMS 8          /* dimensions of one tensor */
#define ST_MAX_HEADER (100u << 20) /* the reference reader's limit on the JSON header */

struct st_tensor {
	const char *name;      /* unique in the file, not "__metadata__" */
	const char *dtype;     /* a safetensors dtype name: st_dtype_size() knows it */
	size_t ndim;
	uint64_t shape[ST_MAX_DIMS];
	const void *data;
	uint64_t size;         /* bytes: the product of shape times the element size */
};

/* Bytes of one element of a safetensors dtype ("F32": 4), 0 if unknown. */
unsigned st_dtype_size(const char *dtype);

/*
 * Check one tensor: a known dtype, at most ST_MAX_DIMS dimensions and size
 * equal to the product of the shape and the element size, without
 * overflow.  0, or -1 with why in err.
 */
int st_tensor_check(const struct st_tensor *t, char *err, size_t errlen);

/*
 * Write n tensors and metadata (a JSON object of strings; NULL: none) to
 * path: first to path.tmp, then renamed over path, so a reader never sees
 * half a file.  0, or a TOGGLE_E* code (TOGGLE_EIO: a write, a full disk,
 * a rename, with the path and errno's text in err; TOGGLE_EINVAL: a tensor
 * that fails st_tensor_check; TOGGLE_ENOMEM).
 */
int st_write(const char *path, const struct st_tensor *t, size_t n, json_t *metadata, char *err,
	     size_t errlen);

#endif /* SAFETENSORS_H */
