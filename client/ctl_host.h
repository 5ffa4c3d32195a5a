/*
 * ctl_host.h - one host's published status in a cluster (the value of
 * /graphtoggle/NAME/status/HOST in etcd): its decoder, for togglectl's
 * cluster view and fuzz/fuzz_hosts.c.  The value comes from etcd, so from
 * whoever may write there: every field is checked, and text from it is
 * cleaned before it reaches a terminal.
 */
#ifndef CTL_HOST_H
#define CTL_HOST_H

#include <stdio.h>

#include <jansson.h>

#include "proto/toggle.pb-c.h"

struct ctl_host {
	json_t *doc;                    /* the published JSON */
	const char *host;               /* a valid host id (cluster_name_ok) */
	Toggle__ListAgentsReply *agents;
	Toggle__ListGraphsReply *graphs;
	Toggle__StatusReply *status;
};

/* 0, or -1 when the value is not a host's status (h is then empty). */
int ctl_host_parse(const char *value, struct ctl_host *h);
void ctl_host_free(struct ctl_host *h);
/* One entry of the document's "rejections", printed as a line, its text cleaned. */
void ctl_host_print_rejection(FILE *f, const json_t *x);
/* The document's "etcd" object (the member watched, since, failovers, last error) as a line. */
void ctl_host_print_etcd(FILE *f, const json_t *e);

#endif
