# alerts.mk - the example Prometheus rules under promtool (tests/alerts/run.sh).
.PHONY: check-alerts
check-alerts:
	@B=$(B) tests/alerts/run.sh
check-run: check-alerts
