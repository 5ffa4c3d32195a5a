/*
 * config.h - toggled.conf (config.c): read at start-up and on SIGHUP.
 */
#ifndef TD_CONFIG_H
#define TD_CONFIG_H

#include <stdio.h>

#include "toggled.h"

/* The values before any file or option: what main() starts from. */
void td_config_defaults(struct td_config *cfg);
/* Parse the file at path into cfg (a regular file); 0, or -1 with err set. */
int td_config_load(struct td_config *cfg, const char *path, char *err, size_t errlen);
/* The same from an open stream (path names it in err): td_config_load's
 * decoder, which fuzz/fuzz_config.c calls on bytes. */
int td_config_read(struct td_config *cfg, FILE *f, const char *path, char *err, size_t errlen);

#endif
