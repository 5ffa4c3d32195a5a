/*
 * cu.h - the table of CUDA driver entry points libtoggle calls.
 *
 * Every driver call goes through this table.  The cuda backend fills it from
 * libcuda.so.1 (dlopen + cuGetProcAddress, never linked at build time); the
 * sim backend fills it with the simulator's functions.  Signatures are the
 * driver's own, so the hot path is one indirect call.
 */
#ifndef TG_CU_H
#define TG_CU_H

#include <stddef.h>

#include <cuda.h>

struct toggle_sim;

struct tg_cu {
	CUresult (*stream_get_capture_info)(CUstream, CUstreamCaptureStatus *, cuuint64_t *,
					    CUgraph *, const CUgraphNode **,
					    const CUgraphEdgeData **, size_t *);
	CUresult (*graph_node_get_type)(CUgraphNode, CUgraphNodeType *);
	CUresult (*graph_node_set_enabled)(CUgraphExec, CUgraphNode, unsigned);
	CUresult (*graph_node_get_enabled)(CUgraphExec, CUgraphNode, unsigned *);
	CUresult (*graph_launch)(CUgraphExec, CUstream);
	CUresult (*graph_upload)(CUgraphExec, CUstream);
	CUresult (*get_error_string)(CUresult, const char **);
	int driver_version; /* e.g. 13000 */
	void *dl;           /* dlopen handle, NULL for the simulator */
};

/* Fill from libcuda.so.1.  0, or TOGGLE_ENODRIVER with err filled. */
int tg_cu_load_driver(struct tg_cu *cu, char *err, size_t errlen);
/* Fill with the simulator's entry points. */
void tg_cu_load_sim(struct tg_cu *cu);
void tg_cu_unload(struct tg_cu *cu);
/* Driver error name for messages, never NULL. */
const char *tg_cu_errstr(const struct tg_cu *cu, CUresult r);

#endif /* TG_CU_H */
