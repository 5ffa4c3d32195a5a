/*
 * toggle_version.h - graphtoggle's version, the one place it is written.
 * toggle.h (the library's API version, toggle_version()), toggled and
 * togglectl (-V, Hello, status) and the Makefile (libtoggle.pc) take it from
 * here; tests/check_version.c fails where a copy that cannot be generated
 * (the Python package, the man pages, docs/cli.md, the CLI's golden
 * output) says something else.  No other include: toggled and togglectl
 * read it without CUDA's headers.
 */
#ifndef TOGGLE_VERSION_H
#define TOGGLE_VERSION_H

#define TOGGLE_VERSION_MAJOR 0
#define TOGGLE_VERSION_MINOR 1
#define TOGGLE_VERSION_PATCH 0

#define TOGGLE_VERSION_STR_(x) #x
#define TOGGLE_VERSION_XSTR_(x) TOGGLE_VERSION_STR_(x)
/* "MAJOR.MINOR.PATCH": the release, as toggled and togglectl report it. */
#define TOGGLE_VERSION_STRING                                                  \
	TOGGLE_VERSION_XSTR_(TOGGLE_VERSION_MAJOR) "." TOGGLE_VERSION_XSTR_(   \
		TOGGLE_VERSION_MINOR) "." TOGGLE_VERSION_XSTR_(TOGGLE_VERSION_PATCH)

#endif
