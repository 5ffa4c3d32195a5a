/*
 * layout.c - toggle_layout(), toggle_limits() and toggle_version(): what a
 * binding in another language (the Python package) checks its mirrors of the
 * public structs, of the limits and its expectation of the library against,
 * from the compiler's own sizeof/offsetof and the headers' values rather
 * than by eye.
 */
#include <stddef.h>

#include "toggle.h"
#include "toggle_proto.h"

#define TG_TYPE(T) { #T, NULL, sizeof(struct T), 0 }
#define TG_FIELD(T, f) { #T, #f, sizeof(((struct T *)0)->f), offsetof(struct T, f) }
#define TG_ANOMALY_FIELD(f) TG_FIELD(toggle_anomalies, f),

/* struct toggle_anomalies is TOGGLE_ANOMALY_MAP's list, field by field: the
 * n-th counter of the list at offset 8 n, and nothing else in the struct. */
enum tg_anomaly_index {
#define TG_ANOMALY_INDEX(f) TG_ANOMALY_##f,
	TOGGLE_ANOMALY_MAP(TG_ANOMALY_INDEX)
#undef TG_ANOMALY_INDEX
	TG_ANOMALY_COUNT
};
#define TG_ANOMALY_AT(f)                                                                    \
	_Static_assert(offsetof(struct toggle_anomalies, f) == TG_ANOMALY_##f * sizeof(uint64_t) && \
			       sizeof(((struct toggle_anomalies *)0)->f) == sizeof(uint64_t),      \
		       "struct toggle_anomalies: " #f " is not where TOGGLE_ANOMALY_MAP puts it");
TOGGLE_ANOMALY_MAP(TG_ANOMALY_AT)
#undef TG_ANOMALY_AT
_Static_assert(sizeof(struct toggle_anomalies) == TG_ANOMALY_COUNT * sizeof(uint64_t),
	       "struct toggle_anomalies has a field TOGGLE_ANOMALY_MAP does not list");

static const struct toggle_layout_entry tg_layout[] = {
	TG_TYPE(toggle_hook),
	TG_FIELD(toggle_hook, type),
	TG_FIELD(toggle_hook, layer),

	TG_TYPE(toggle_set),
	TG_FIELD(toggle_set, bits),

	TG_TYPE(toggle_catalog),
	TG_FIELD(toggle_catalog, type_names),
	TG_FIELD(toggle_catalog, n_types),
	TG_FIELD(toggle_catalog, n_layers),

	TG_TYPE(toggle_config),
	TG_FIELD(toggle_config, name),
	TG_FIELD(toggle_config, group),
	TG_FIELD(toggle_config, catalog),
	TG_FIELD(toggle_config, mode),
	TG_FIELD(toggle_config, strict),
	TG_FIELD(toggle_config, backend),
	TG_FIELD(toggle_config, sim),
	TG_FIELD(toggle_config, socket_path),
	TG_FIELD(toggle_config, no_bare_exec),
	TG_FIELD(toggle_config, no_full_exec),
	TG_FIELD(toggle_config, no_set_exec),
	TG_FIELD(toggle_config, clone_execs),

	TG_TYPE(toggle_plan_entry),
	TG_FIELD(toggle_plan_entry, step),
	TG_FIELD(toggle_plan_entry, set),

	TG_TYPE(toggle_graph_status),
	TG_FIELD(toggle_graph_status, graph),
	TG_FIELD(toggle_graph_status, exec),
	TG_FIELD(toggle_graph_status, nodes),
	TG_FIELD(toggle_graph_status, hooks_covered),
	TG_FIELD(toggle_graph_status, applied_version),
	TG_FIELD(toggle_graph_status, replays),
	TG_FIELD(toggle_graph_status, last_step),
	TG_FIELD(toggle_graph_status, bound),
	TG_FIELD(toggle_graph_status, stale),
	TG_FIELD(toggle_graph_status, mode),
	TG_FIELD(toggle_graph_status, device_fallback),
	TG_FIELD(toggle_graph_status, uploaded),
	TG_FIELD(toggle_graph_status, note),
	TG_FIELD(toggle_graph_status, tainted_launches),
	TG_FIELD(toggle_graph_status, tainted_step),
	TG_FIELD(toggle_graph_status, tainted),
	TG_FIELD(toggle_graph_status, blocked),
	TG_FIELD(toggle_graph_status, bare_exec),
	TG_FIELD(toggle_graph_status, bare_running),
	TG_FIELD(toggle_graph_status, bare_replays),
	TG_FIELD(toggle_graph_status, full_exec),
	TG_FIELD(toggle_graph_status, full_running),
	TG_FIELD(toggle_graph_status, full_replays),
	TG_FIELD(toggle_graph_status, set_exec),
	TG_FIELD(toggle_graph_status, set_running),
	TG_FIELD(toggle_graph_status, set_replays),

	TG_TYPE(toggle_anomalies),
	TOGGLE_ANOMALY_MAP(TG_ANOMALY_FIELD)

	TG_TYPE(toggle_stats),
	TG_FIELD(toggle_stats, launches),
	TG_FIELD(toggle_stats, launches_unrelated),
	TG_FIELD(toggle_stats, launches_refused),
	TG_FIELD(toggle_stats, node_set_calls),
	TG_FIELD(toggle_stats, syncs),
	TG_FIELD(toggle_stats, rebinds),
	TG_FIELD(toggle_stats, uploads),
	TG_FIELD(toggle_stats, mask_writes),
	TG_FIELD(toggle_stats, mask_words),
	TG_FIELD(toggle_stats, stream_joins),
	TG_FIELD(toggle_stats, reuse_fences),
	TG_FIELD(toggle_stats, version),
	TG_FIELD(toggle_stats, step),
	TG_FIELD(toggle_stats, bare_builds),
	TG_FIELD(toggle_stats, bare_build_failures),
	TG_FIELD(toggle_stats, bare_switches),
	TG_FIELD(toggle_stats, full_builds),
	TG_FIELD(toggle_stats, full_build_failures),
	TG_FIELD(toggle_stats, full_switches),
	TG_FIELD(toggle_stats, set_builds),
	TG_FIELD(toggle_stats, set_build_failures),
	TG_FIELD(toggle_stats, set_switches),
	TG_FIELD(toggle_stats, assembled_builds),
	TG_FIELD(toggle_stats, assemble_fallbacks),

	TG_TYPE(toggle_copy),
	TG_FIELD(toggle_copy, dst),
	TG_FIELD(toggle_copy, src),
	TG_FIELD(toggle_copy, row_bytes),
	TG_FIELD(toggle_copy, rows),
	TG_FIELD(toggle_copy, dst_pitch),
	TG_FIELD(toggle_copy, src_pitch),

	TG_TYPE(toggle_device_counters),
	TG_FIELD(toggle_device_counters, planner_runs),
	TG_FIELD(toggle_device_counters, device_calls),
	TG_FIELD(toggle_device_counters, device_failures),

	TG_TYPE(toggle_registry_check),
	TG_FIELD(toggle_registry_check, graphs),
	TG_FIELD(toggle_registry_check, unbound),
	TG_FIELD(toggle_registry_check, complete),
	TG_FIELD(toggle_registry_check, uniform),
	TG_FIELD(toggle_registry_check, hooks_uncovered),

	TG_TYPE(toggle_taint),
	TG_FIELD(toggle_taint, launches),
	TG_FIELD(toggle_taint, lost),
	TG_FIELD(toggle_taint, calls_failed),
	TG_FIELD(toggle_taint, last_step),
	TG_FIELD(toggle_taint, last_graph),

	TG_TYPE(toggle_conn_info),
	TG_FIELD(toggle_conn_info, state),
	TG_FIELD(toggle_conn_info, agent_id),
	TG_FIELD(toggle_conn_info, sessions),
	TG_FIELD(toggle_conn_info, failures),
	TG_FIELD(toggle_conn_info, since_unix_ms),
	TG_FIELD(toggle_conn_info, last_error),

	TG_TYPE(toggle_layout_entry),
	TG_FIELD(toggle_layout_entry, type),
	TG_FIELD(toggle_layout_entry, field),
	TG_FIELD(toggle_layout_entry, size),
	TG_FIELD(toggle_layout_entry, offset),

	TG_TYPE(toggle_limit),
	TG_FIELD(toggle_limit, name),
	TG_FIELD(toggle_limit, value),
};

#define TG_LIMIT(name) { #name, name }

static const struct toggle_limit tg_limits[] = {
	TG_LIMIT(TOGGLE_MAX_HOOK_TYPES),
	TG_LIMIT(TOGGLE_MAX_LAYERS),
	TG_LIMIT(TOGGLE_MAX_NAME),
	TG_LIMIT(TOGGLE_MAX_PLAN),
	TG_LIMIT(TGP_PROTOCOL_VERSION),
	TG_LIMIT(TGP_MAX_FRAME),
	TG_LIMIT(TGP_MAX_PLAN_ENTRIES),
};

const struct toggle_layout_entry *toggle_layout(size_t *count)
{
	if (count)
		*count = sizeof(tg_layout) / sizeof(tg_layout[0]);
	return tg_layout;
}

unsigned toggle_version(void)
{
	return ((unsigned)TOGGLE_VERSION_MAJOR << 16) | TOGGLE_VERSION_MINOR;
}

const struct toggle_limit *toggle_limits(size_t *count)
{
	if (count)
		*count = sizeof(tg_limits) / sizeof(tg_limits[0]);
	return tg_limits;
}
