# systemd.mk - the installed units' restrictions, mode by mode, and
# systemd-analyze verify (tests/systemd/run.sh).  Included by the top-level
# Makefile.  restrict_af: the seccomp stand-in for RestrictAddressFamilies=.
$(B)/tests/restrict_af: tests/systemd/restrict_af.c
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) -o $@ $<

.PHONY: check-systemd
check-systemd: all $(B)/tests/restrict_af $(B)/togglectl
	@B=$(B) MAKE="$(MAKE)" tests/systemd/run.sh
check-run: check-systemd
