# util.mk - the shared helpers (util/util.c, util.h) in $(B)/libtgutil.a and,
# for the tests, the ASan/UBSan $(B)/libtgutil-san.a.  Included by the
# top-level Makefile; uses its B, CC, ALL_CFLAGS and SAN.  libc only: link
# it after the archives that use it (toggled, togglectl, libtgclient, tests).

UTIL_SRC := $(wildcard util/*.c)
UTIL_OBJ := $(UTIL_SRC:%.c=$(B)/%.o)
UTIL_SAN_OBJ := $(UTIL_SRC:%.c=$(B)/san/%.o)
# Every C object may include "util.h" (the recipes expand ALL_CFLAGS and
# HOST_CFLAGS when they run).
ALL_CFLAGS += -Iutil
HOST_CFLAGS += -Iutil

all: $(B)/libtgutil.a

$(B)/libtgutil.a: $(UTIL_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libtgutil-san.a: $(UTIL_SAN_OBJ)
	@rm -f $@
	ar rcs $@ $^
