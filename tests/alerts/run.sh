#!/bin/bash
# run.sh - examples/prometheus/graphtoggle.rules.yml: `promtool check rules`
# and the unit test tests/alerts/rules_test.yml (`promtool test rules`);
# skipped, and listed, where promtool is not installed (Debian: prometheus).
set -u
TL_NAME=alerts/run.sh
# shellcheck source=tests/lib.sh
. "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
PROMTOOL=${PROMTOOL:-promtool}
if ! command -v "$PROMTOOL" >/dev/null 2>&1; then
	skip "alerts/run.sh (promtool check rules, test rules): no promtool here (Debian: prometheus)"
	exit 0
fi
tl_tmpdir tgalerts
trap tl_rm_tmpdir EXIT
if "$PROMTOOL" check rules "$TOP/examples/prometheus/graphtoggle.rules.yml" >"$T/check.log" 2>&1; then
	echo "ok: promtool check rules: $(grep -o '[0-9]* rules found' "$T/check.log")"
else
	fail "promtool check rules: $(cat "$T/check.log")"
fi
if (cd "$TOP/tests/alerts" && "$PROMTOOL" test rules rules_test.yml) >"$T/test.log" 2>&1; then
	echo "ok: promtool test rules: every alert fires where it must, and only there"
else
	fail "promtool test rules: $(cat "$T/test.log")"
fi
[ "$FAILS" -eq 0 ] || exit 1
echo "$TL_NAME: the example rules pass promtool"
