# docs.mk - the documentation's code, run by make check.
.PHONY: check-docs
check-docs: $(B)/libtoggle.a
	@B=$(B) CC=$(CC) tests/docs/run.sh
check-run: check-docs
