/*
 * check_layout.c - toggle_layout equals the compiler's offsetof/sizeof, and
 * the version is the header's.  Split out of check_region.c (issue 29).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toggle.h"
#include "toggle_sim.h"

/* ---- layout and version -------------------------------------------------------------- */

struct want {
	const char *type, *field;
	size_t size, offset;
};

#define W_T(T) { #T, NULL, sizeof(struct T), 0 }
#define W_F(T, f) { #T, #f, sizeof(((struct T *)0)->f), offsetof(struct T, f) }

static const struct want wants[] = {
	W_T(toggle_hook), W_F(toggle_hook, type), W_F(toggle_hook, layer),
	W_T(toggle_set), W_F(toggle_set, bits),
	W_T(toggle_catalog), W_F(toggle_catalog, type_names), W_F(toggle_catalog, n_types),
	W_F(toggle_catalog, n_layers),
	W_T(toggle_config), W_F(toggle_config, name), W_F(toggle_config, group),
	W_F(toggle_config, catalog), W_F(toggle_config, mode), W_F(toggle_config, strict),
	W_F(toggle_config, backend), W_F(toggle_config, sim), W_F(toggle_config, socket_path),
	W_T(toggle_plan_entry), W_F(toggle_plan_entry, step), W_F(toggle_plan_entry, set),
	W_T(toggle_graph_status), W_F(toggle_graph_status, graph), W_F(toggle_graph_status, exec),
	W_F(toggle_graph_status, nodes), W_F(toggle_graph_status, hooks_covered),
	W_F(toggle_graph_status, applied_version), W_F(toggle_graph_status, replays),
	W_F(toggle_graph_status, last_step), W_F(toggle_graph_status, bound),
	W_F(toggle_graph_status, stale), W_F(toggle_graph_status, mode),
	W_F(toggle_graph_status, device_fallback), W_F(toggle_graph_status, uploaded),
	W_F(toggle_graph_status, note),
	W_T(toggle_anomalies), W_F(toggle_anomalies, record_outside_window),
	W_F(toggle_anomalies, record_not_capturing), W_F(toggle_anomalies, record_not_kernel),
	W_F(toggle_anomalies, launch_unbound), W_F(toggle_anomalies, launch_stale),
	W_F(toggle_anomalies, driver_errors), W_F(toggle_anomalies, late_plans),
	W_F(toggle_anomalies, device_fallbacks), W_F(toggle_anomalies, device_refused),
	W_F(toggle_anomalies, host_on_device_node),
	W_T(toggle_stats), W_F(toggle_stats, launches), W_F(toggle_stats, launches_unrelated),
	W_F(toggle_stats, launches_refused), W_F(toggle_stats, node_set_calls),
	W_F(toggle_stats, syncs), W_F(toggle_stats, rebinds), W_F(toggle_stats, uploads),
	W_F(toggle_stats, mask_writes), W_F(toggle_stats, mask_words),
	W_F(toggle_stats, stream_joins), W_F(toggle_stats, version), W_F(toggle_stats, step),
	W_T(toggle_copy), W_F(toggle_copy, dst), W_F(toggle_copy, src), W_F(toggle_copy, row_bytes),
	W_F(toggle_copy, rows), W_F(toggle_copy, dst_pitch), W_F(toggle_copy, src_pitch),
	W_T(toggle_device_counters), W_F(toggle_device_counters, planner_runs),
	W_F(toggle_device_counters, device_calls), W_F(toggle_device_counters, device_failures),
	W_T(toggle_registry_check), W_F(toggle_registry_check, graphs),
	W_F(toggle_registry_check, unbound), W_F(toggle_registry_check, complete),
	W_F(toggle_registry_check, uniform), W_F(toggle_registry_check, hooks_uncovered),
	W_F(toggle_config, no_bare_exec), W_F(toggle_config, no_full_exec),
	W_F(toggle_config, no_set_exec), W_F(toggle_config, clone_execs),
	W_F(toggle_graph_status, tainted_launches), W_F(toggle_graph_status, tainted_step),
	W_F(toggle_graph_status, tainted), W_F(toggle_graph_status, blocked),
	W_F(toggle_graph_status, bare_exec), W_F(toggle_graph_status, bare_running),
	W_F(toggle_graph_status, bare_replays), W_F(toggle_graph_status, full_exec),
	W_F(toggle_graph_status, full_running), W_F(toggle_graph_status, full_replays),
	W_F(toggle_graph_status, set_exec), W_F(toggle_graph_status, set_running),
	W_F(toggle_graph_status, set_replays),
	W_F(toggle_anomalies, device_tainted),
	W_F(toggle_stats, reuse_fences), W_F(toggle_stats, bare_builds),
	W_F(toggle_stats, bare_build_failures), W_F(toggle_stats, bare_switches),
	W_F(toggle_stats, full_builds), W_F(toggle_stats, full_build_failures),
	W_F(toggle_stats, full_switches), W_F(toggle_stats, set_builds),
	W_F(toggle_stats, set_build_failures), W_F(toggle_stats, set_switches),
	W_F(toggle_stats, assembled_builds), W_F(toggle_stats, assemble_fallbacks),
	W_T(toggle_taint), W_F(toggle_taint, launches), W_F(toggle_taint, lost),
	W_F(toggle_taint, calls_failed), W_F(toggle_taint, last_step), W_F(toggle_taint, last_graph),
	W_T(toggle_conn_info), W_F(toggle_conn_info, state), W_F(toggle_conn_info, agent_id),
	W_F(toggle_conn_info, sessions), W_F(toggle_conn_info, failures),
	W_F(toggle_conn_info, since_unix_ms), W_F(toggle_conn_info, last_error),
	W_F(toggle_layout_entry, type), W_F(toggle_layout_entry, field),
	W_F(toggle_layout_entry, size), W_F(toggle_layout_entry, offset),
	W_T(toggle_limit), W_F(toggle_limit, name), W_F(toggle_limit, value),
};

START_TEST(layout_matches_the_compiler)
{
	size_t n = 0;
	const struct toggle_layout_entry *e = toggle_layout(&n);
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_eq(toggle_layout(NULL), e);
	for (size_t w = 0; w < sizeof(wants) / sizeof(wants[0]); w++) {
		const struct want *x = &wants[w];
		size_t hits = 0;
		for (size_t i = 0; i < n; i++) {
			ck_assert_ptr_nonnull(e[i].type);
			if (strcmp(e[i].type, x->type) != 0 ||
			    (x->field ? !e[i].field || strcmp(e[i].field, x->field) != 0 : e[i].field != NULL))
				continue;
			hits++;
			ck_assert_msg(e[i].size == x->size && e[i].offset == x->offset,
				      "%s.%s: library says size %u offset %u, compiler %zu %zu", x->type,
				      x->field ? x->field : "", e[i].size, e[i].offset, x->size, x->offset);
		}
		ck_assert_msg(hits == 1, "%s.%s listed %zu times", x->type, x->field ? x->field : "",
			      hits);
	}
	/* And the other way: every entry the library lists is one of ours (a struct
	 * or field added to toggle_layout() must be added here too). */
	char missing[2048] = "";
	for (size_t i = 0; i < n; i++) {
		bool found = !e[i].field && strcmp(e[i].type, "toggle_layout_entry") == 0;
		for (size_t w = 0; !found && w < sizeof(wants) / sizeof(wants[0]); w++)
			found = strcmp(e[i].type, wants[w].type) == 0 &&
				(wants[w].field ? e[i].field && strcmp(e[i].field, wants[w].field) == 0
						: !e[i].field);
		if (!found) {
			size_t used = strlen(missing);
			snprintf(missing + used, sizeof(missing) - used, " %s.%s", e[i].type,
				 e[i].field ? e[i].field : "");
		}
	}
	ck_assert_msg(missing[0] == '\0', "toggle_layout() lists what this test does not check:%s",
		      missing);
	/* Every field of a struct lies inside it; a struct entry comes before its fields. */
	for (size_t i = 0; i < n; i++) {
		if (!e[i].field)
			continue;
		size_t t = i;
		while (t > 0 && e[t].field)
			t--;
		ck_assert_ptr_null(e[t].field);
		ck_assert_str_eq(e[t].type, e[i].type);
		ck_assert_uint_le((size_t)e[i].offset + e[i].size, e[t].size);
	}
	/* The layout entry describes itself too. */
	bool self = false;
	for (size_t i = 0; i < n; i++)
		self |= !e[i].field && strcmp(e[i].type, "toggle_layout_entry") == 0 &&
			e[i].size == sizeof(struct toggle_layout_entry);
	ck_assert(self);
}
END_TEST

START_TEST(version_is_the_header_s)
{
	ck_assert_uint_eq(toggle_version(), (TOGGLE_VERSION_MAJOR << 16) | TOGGLE_VERSION_MINOR);
	ck_assert_uint_eq(toggle_version() >> 16, TOGGLE_VERSION_MAJOR);
	ck_assert_uint_eq(toggle_version() & 0xffff, TOGGLE_VERSION_MINOR);
}
END_TEST

static Suite *layout_suite(void)
{
	Suite *s = suite_create("layout");
	TCase *tc3 = tcase_create("layout");
	tcase_add_test(tc3, layout_matches_the_compiler);
	tcase_add_test(tc3, version_is_the_header_s);
	suite_add_tcase(s, tc3);
	return s;
}

int main(void)
{
	return tu_run_suite(layout_suite());
}
