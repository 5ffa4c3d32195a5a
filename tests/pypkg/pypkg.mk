# pypkg.mk - the Python package as pip users get it: make wheel, and its test
# (tests/pypkg/run.sh).  Included by the top-level Makefile.
#
# make wheel: build/dist/ gets the wheel (py3-none-PLATFORM: libtoggle.so
# and the generated messages inside; python/setup.py) and the sdist (C
# sources and .proto, no binary); where auditwheel exists, the wheel is
# checked and retagged manylinux (auditwheel repair).
.PHONY: wheel check-pypkg
wheel:
	@scripts/deps.sh build
	rm -rf $(B)/dist && mkdir -p $(B)/dist
	cd python && /usr/bin/python3 -m pip wheel --no-deps --no-build-isolation -w ../$(B)/dist .
	cd python && /usr/bin/python3 -m build --sdist --no-isolation -o ../$(B)/dist .
	@if command -v auditwheel >/dev/null; then \
	  auditwheel repair -w $(B)/dist $(B)/dist/graphtoggle-*-linux_*.whl && \
	  rm -f $(B)/dist/graphtoggle-*-linux_*.whl; \
	else echo "wheel: no auditwheel here: $(B)/dist's wheel keeps its linux_* tag"; fi
	@ls $(B)/dist

check-pypkg: $(B)/toggled $(B)/togglectl
	@B=$(B) tests/pypkg/run.sh
check-run: check-pypkg
