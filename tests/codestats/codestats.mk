# codestats.mk - calls between libtoggle's files run one way (issue 29;
# docs/architecture.md, "Inside libtoggle"): make check fails on a loop
# between them.  tests/codestats/run.sh first proves that the check
# (scripts/code-stats.sh --fail-on-cycles) sees a loop where there is one;
# api.sh fails where one file calls another's public entry point of toggle.h.
.PHONY: check-cycles-libtoggle
check-cycles-libtoggle: $(LIB_OBJ)
	@CC=$(CC) tests/codestats/run.sh
	@B=$(B) scripts/code-stats.sh --fail-on-cycles libtoggle/src
	@tests/codestats/api.sh $(B)
check-run: check-cycles-libtoggle
