/*
 * probe_userobj.cu - when does the driver drop the user-object reference an
 * exec holds?  (issue #28: gpu_lifetime's stranger leg once saw a stranger's
 * exec behind a dead exec's handle while libtoggle still took that exec for
 * alive.)  Plain CUDA, no libtoggle.  For each case, N trials:
 *
 *  exec_idle   graph retains U, exec instantiated (copies U), graph releases
 *              U, one launch, stream synchronised, cudaGraphExecDestroy: is U
 *              dead when the call returns; if not, after which later call?
 *  exec_busy   the same without the synchronise (a launch still pending).
 *  graph_last  the record's order in the stranger leg (exec first, then the
 *              graph, which holds another object V): U and V when each call
 *              returns, and whether a new exec got the dead exec's handle while
 *              U was still alive (the window libtoggle cannot see).
 *
 * Prints "probe-userobj: <case> ..." lines with counts; exit 0 unless a CUDA
 * call fails or there is no device (SKIPPED).
 */
#define GPU_TAG "probe-userobj"
#include "gpu_common.h"

#include <sched.h>
#include <atomic>
#define atomic_int std::atomic<int>
#define atomic_load(p) (p)->load()
#define atomic_fetch_add(p, v) (p)->fetch_add(v)

#define TRIALS 400

__global__ void tick(int *p) { atomicAdd(p, 1); }

static atomic_int deaths[3];

static void CUDART_CB died(void *arg) { atomic_fetch_add(&deaths[(intptr_t)arg], 1); }

static cudaGraph_t capture(cudaStream_t s, int *d, int n)
{
	cudaGraph_t g;

	CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < n; i++) {
		tick<<<1, 32, 0, s>>>(d);
		CUDA_LAUNCHED();
	}
	CUDA_CHECK(cudaStreamEndCapture(s, &g));
	return g;
}

static cudaUserObject_t object(int slot)
{
	cudaUserObject_t u;

	CUDA_CHECK(cudaUserObjectCreate(&u, (void *)(intptr_t)slot, died, 1,
					cudaUserObjectNoDestructorSync));
	return u;
}

/* After the destroy: which step first shows U dead (0 at once .. 5 never). */
static int late_step(cudaStream_t s, int *d, int before)
{
	if (atomic_load(&deaths[0]) > before)
		return 0;
	for (int i = 0; i < 1000 && atomic_load(&deaths[0]) == before; i++)
		sched_yield();
	if (atomic_load(&deaths[0]) > before)
		return 1;
	(void)cudaStreamQuery(s);
	if (atomic_load(&deaths[0]) > before)
		return 2;
	{
		cudaGraph_t g = capture(s, d, 2);
		cudaGraphExec_t x;

		CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
		CUDA_CHECK(cudaGraphLaunch(x, s));
		CUDA_CHECK(cudaGraphExecDestroy(x));
		CUDA_CHECK(cudaGraphDestroy(g));
	}
	if (atomic_load(&deaths[0]) > before)
		return 3;
	CUDA_CHECK(cudaStreamSynchronize(s));
	CUDA_CHECK(cudaDeviceSynchronize());
	if (atomic_load(&deaths[0]) > before)
		return 4;
	usleep(100000);
	return atomic_load(&deaths[0]) > before ? 4 : 5;
}

static void exec_case(const char *name, cudaStream_t s, int *d, bool busy)
{
	unsigned at[6] = {0};
	static double late_us[TRIALS];

	for (int t = 0; t < TRIALS; t++) {
		cudaGraph_t g = capture(s, d, 8);
		cudaGraphExec_t x;
		cudaUserObject_t u = object(0);

		CUDA_CHECK(cudaGraphRetainUserObject(g, u, 1, cudaGraphUserObjectMove));
		CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
		CUDA_CHECK(cudaGraphReleaseUserObject(g, u, 1));
		CUDA_CHECK(cudaGraphLaunch(x, s));
		if (!busy)
			CUDA_CHECK(cudaStreamSynchronize(s));
		int before = atomic_load(&deaths[0]);
		CUDA_CHECK(cudaGraphExecDestroy(x));
		double t0 = gpu_now_us();
		while (atomic_load(&deaths[0]) == before && gpu_now_us() - t0 < 1e5)
			;
		late_us[t] = gpu_now_us() - t0;
		at[atomic_load(&deaths[0]) > before ? 1 : late_step(s, d, before)]++;
		CUDA_CHECK(cudaStreamSynchronize(s));
		CUDA_CHECK(cudaGraphDestroy(g));
	}
	qsort(late_us, TRIALS, sizeof late_us[0], gpu_cmp_double);
	printf("probe-userobj: %s: after cudaGraphExecDestroy returned, U's destructor came in "
	       "median %.1f us, p99 %.1f us, max %.1f us (spinning)\n", name, late_us[TRIALS / 2],
	       late_us[TRIALS * 99 / 100], late_us[TRIALS - 1]);
	printf("probe-userobj: %s: %d trials: U dead as cudaGraphExecDestroy returned %u, "
	       "after spinning %u, after cudaStreamQuery %u, after another graph's "
	       "instantiate+launch+destroy %u, after synchronise %u, never (100 ms) %u\n",
	       name, TRIALS, at[0], at[1], at[2], at[3], at[4], at[5]);
}

static void graph_last_case(cudaStream_t s, int *d)
{
	unsigned u_late = 0, v_late = 0, x_reused = 0, x_reused_u_alive = 0, g_reused = 0;

	for (int t = 0; t < TRIALS; t++) {
		cudaGraph_t g = capture(s, d, 8), g2;
		cudaGraphExec_t x, x2;
		cudaUserObject_t u = object(0), v = object(1);

		CUDA_CHECK(cudaGraphRetainUserObject(g, u, 1, cudaGraphUserObjectMove));
		CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
		CUDA_CHECK(cudaGraphReleaseUserObject(g, u, 1));
		CUDA_CHECK(cudaGraphRetainUserObject(g, v, 1, cudaGraphUserObjectMove));
		CUDA_CHECK(cudaGraphLaunch(x, s));
		CUDA_CHECK(cudaStreamSynchronize(s));
		int u0 = atomic_load(&deaths[0]), v0 = atomic_load(&deaths[1]);
		CUDA_CHECK(cudaGraphExecDestroy(x));
		CUDA_CHECK(cudaGraphDestroy(g));
		u_late += atomic_load(&deaths[0]) == u0;
		v_late += atomic_load(&deaths[1]) == v0;
		g2 = capture(s, d, 32);
		CUDA_CHECK(cudaGraphInstantiate(&x2, g2, 0));
		g_reused += g2 == g;
		x_reused += x2 == x;
		x_reused_u_alive += x2 == x && atomic_load(&deaths[0]) == u0;
		CUDA_CHECK(cudaGraphLaunch(x2, s));
		CUDA_CHECK(cudaStreamSynchronize(s));
		CUDA_CHECK(cudaGraphExecDestroy(x2));
		CUDA_CHECK(cudaGraphDestroy(g2));
		(void)late_step(s, d, u0);
	}
	printf("probe-userobj: graph_last: %d trials: U (the exec's) alive after both destroys "
	       "%u, V (the graph's) alive %u; graph handle reused %u, exec handle reused %u, "
	       "of which with U still alive %u\n",
	       TRIALS, u_late, v_late, g_reused, x_reused, x_reused_u_alive);
}

int main(void)
{
	cudaStream_t s;
	int *d;

	(void)gpu_device_or_skip();
	CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
	exec_case("exec_idle", s, d, false);
	exec_case("exec_busy", s, d, true);
	graph_last_case(s, d);
	CUDA_CHECK(cudaStreamSynchronize(s));
	printf("probe-userobj: done\n");
	return 0;
}
