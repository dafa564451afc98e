/* latency-aware-c: the decisions, in plain C with no bindings, so that
 * test_latency.c can test them natively. component.c adapts the contract's
 * types to these functions. */
#ifndef LATENCY_H
#define LATENCY_H

#include <stddef.h>
#include <stdint.h>

#define LATENCY_NAME_MAX 128

typedef struct {
    char metric[LATENCY_NAME_MAX];     /* metric column to read; lower is better */
    char zone_label[LATENCY_NAME_MAX]; /* label compared with the requester's */
    uint32_t max_imbalance;            /* act when the gap exceeds this */
    uint32_t max_moves;                /* most shards moved per round */
} latency_settings;

/* What the decisions need to know of one region. */
typedef struct {
    int allocatable;  /* up, not proxy-only, not draining */
    const char *zone; /* the zone label's value, NULL when absent */
    size_t zone_len;
    double latency;   /* the metric; +INFINITY when not reported */
    uint32_t shards;  /* shards it owns */
} latency_region;

void latency_defaults(latency_settings *settings);

/* Parses a JSON object of settings. Returns 0 and fills *settings, or -1
 * with a message naming the problem in err. Empty text or `null` means the
 * defaults. *settings is left untouched on error. */
int latency_parse_config(const char *text, size_t len, latency_settings *settings, char *err, size_t err_len);

/* The region to place a shard on, or -1 when none is allocatable.
 * requester is a region index, or -1. */
int64_t latency_allocate(const latency_settings *settings, const latency_region *regions, size_t count,
                         int64_t requester);

/* How many shards to move this round, from the region *from (its oldest
 * shards that are not pinned: component.c picks them from its view).
 * in_progress is the number of hand-offs in progress. */
uint32_t latency_rebalance(const latency_settings *settings, const latency_region *regions, size_t count,
                           size_t in_progress, uint32_t *from);

/* Appends text (or a number) to the NUL-terminated buf of capacity cap,
 * cutting it short rather than overflowing: stdio's formatting would pull
 * WASI imports into the component. */
void latency_append(char *buf, size_t cap, const char *text);
void latency_append_u64(char *buf, size_t cap, uint64_t value);

#endif
