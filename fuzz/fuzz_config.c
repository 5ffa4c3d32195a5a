/*
 * fuzz_config.c - libFuzzer target: toggled.conf (daemon/config.c, issue 16
 * item 7).  The input is the file.  It is read as toggled reads it at start
 * (td_config_read over the defaults), then, when that succeeded, read again
 * as SIGHUP reloads it (main.c on_hup: the running configuration with its
 * agent_group list emptied).  Must never crash or leak; what it accepts
 * must be within the documented bounds; reloading an unchanged file must
 * change nothing; every error names the file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_PATH "toggled.conf"

static bool text_ends(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

/* What was accepted: the bounds toggled(8) documents and the server relies on. */
static void check_config(const struct td_config *c)
{
	if (c->max_peers < 1 || c->max_peers > TD_MAX_PEERS_LIMIT ||
	    c->reserved_peers >= c->max_peers || c->max_peers_per_uid > TD_MAX_PEERS_LIMIT ||
	    c->frames_per_turn < 1 || c->max_queue < 65536 || c->n_group_rules > TD_MAX_GROUP_RULES ||
	    (c->verbose != 0 && c->verbose != 1))
		abort();
	if (!text_ends(c->operator_group, sizeof(c->operator_group)) ||
	    !text_ends(c->etcd, sizeof(c->etcd)) || !text_ends(c->cluster, sizeof(c->cluster)) ||
	    !text_ends(c->host_id, sizeof(c->host_id)))
		abort();
	for (size_t i = 0; i < c->n_group_rules; i++) {
		const struct td_group_rule *r = &c->group_rules[i];
		if (r->n < 1 || r->n > TD_GROUP_MEMBERS || !r->name[0] ||
		    !text_ends(r->name, sizeof(r->name)))
			abort();
		for (size_t k = 0; k < i; k++)
			if (strcmp(c->group_rules[k].name, r->name) == 0)
				abort(); /* a group is listed once */
	}
}

static int read_config(struct td_config *cfg, const uint8_t *data, size_t size)
{
	char err[512] = "";
	FILE *f = fmemopen((void *)(uintptr_t)data, size, "r");
	if (!f)
		abort();
	int rc = td_config_read(cfg, f, FZ_PATH, err, sizeof(err));
	fclose(f);
	if (rc != 0 && (rc != -1 || strncmp(err, FZ_PATH, strlen(FZ_PATH)) != 0))
		abort();
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct td_config cfg, next; /* 8 KiB and more: not on the stack */
	memset(&cfg, 0, sizeof(cfg));
	td_config_defaults(&cfg);
	if (read_config(&cfg, data, size) != 0)
		return 0;
	check_config(&cfg);
	memcpy(&next, &cfg, sizeof(next)); /* padding too: compared below */
	next.n_group_rules = 0; /* as on_hup: the file's list replaces the old one */
	if (read_config(&next, data, size) != 0 || memcmp(&next, &cfg, sizeof(cfg)) != 0)
		abort(); /* a reload of the same file is the same configuration */
	return 0;
}
