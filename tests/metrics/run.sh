#!/bin/sh
# run.sh - toggled --metrics end to end (tests/metrics/test_metrics.py): the
# ASan build of toggled, simulator agents, togglectl, prometheus_client's
# parser.  Uses $PYTHON, else the first python3 with pytest and prometheus_client
# (scripts/deps.sh installs python3-pytest and python3-prometheus-client).
set -eu
cd "$(dirname "$0")/../.."
B=${B:-build}
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import pytest, prometheus_client' 2>/dev/null; then
		py=$p
		break
	fi
done
if [ -z "$py" ]; then
	echo "tests/metrics/run.sh: no python3 with pytest and prometheus_client (scripts/deps.sh)" >&2
	exit 1
fi
echo "== tests/metrics ($py)"
B="$B" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	exec "$py" -m pytest -q -p no:cacheprovider tests/metrics
