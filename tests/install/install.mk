# install.mk - make install into a staging directory, then an external build
# from it alone (tests/install/run.sh).  Included by the top-level Makefile.
.PHONY: check-install
check-install: all
	@B=$(B) CC=$(CC) MAKE="$(MAKE)" tests/install/run.sh
check-run: check-install
