/* latency-aware-c: the contract's exports (bindings generated into
 * build/bindings/ by `cargo xtask c-example`), adapted to latency.c.
 *
 * Ownership, as wit-bindgen's C bindings define it: every argument of an
 * export belongs to the callee (free it, or keep it), and every string or
 * list returned must be malloc'd (the bindings free it after the call). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "latency.h"
#include "strategy.h"

static const char SCHEMA[] =
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
    "\"additionalProperties\":false,\"properties\":{"
    "\"metric\":{\"type\":\"string\",\"minLength\":1,\"default\":\"latency_ms\"},"
    "\"zone_label\":{\"type\":\"string\",\"minLength\":1,\"default\":\"zone\"},"
    "\"max_imbalance\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":4294967295,\"default\":2},"
    "\"max_moves\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":4294967295,\"default\":5}}}";

/* State between calls: the settings and the latest topology. */
static latency_settings settings;
static int configured;
static shardalloc_strategy_types_topology_t topology;
static int have_topology;

static void error_text(strategy_string_t *err, const char *message) {
    strategy_string_dup(err, message);
}

void exports_shardalloc_strategy_allocator_describe(exports_shardalloc_strategy_allocator_info_t *ret) {
    strategy_string_dup(&ret->name, "latency-aware-c");
    strategy_string_dup(&ret->version, "0.1.0");
    strategy_string_dup(&ret->description,
                        "Places a shard on the lowest-latency region, in the requester's zone when it can; "
                        "evens out shard counts a few shards per round.");
    strategy_string_dup(&ret->config_schema, SCHEMA);
    ret->needs_shard_names = false;
}

bool exports_shardalloc_strategy_allocator_configure(strategy_string_t *config, strategy_string_t *err) {
    char message[256];
    int rc = latency_parse_config((const char *)config->ptr, config->len, &settings, message, sizeof message);
    strategy_string_free(config);
    if (rc != 0) {
        error_text(err, message);
        return false;
    }
    configured = 1;
    return true;
}

void exports_shardalloc_strategy_allocator_set_topology(exports_shardalloc_strategy_allocator_topology_t *new_topology) {
    if (have_topology) shardalloc_strategy_types_topology_free(&topology);
    topology = *new_topology; /* kept: ours to free later */
    have_topology = 1;
}

static int equals(const strategy_string_t *s, const char *text) {
    size_t n = strlen(text);
    return s->len == n && memcmp(s->ptr, text, n) == 0;
}

/* Checks the loads against the topology and describes every region.
 * Returns NULL, or an error to return (malloc'd into err). */
static latency_region *regions_for(exports_shardalloc_strategy_allocator_loads_t *loads, strategy_string_t *err) {
    char message[160];
    if (!have_topology) {
        error_text(err, "no topology yet");
        return NULL;
    }
    if (loads->generation != topology.generation) {
        message[0] = '\0';
        latency_append(message, sizeof message, "loads are for generation ");
        latency_append_u64(message, sizeof message, loads->generation);
        latency_append(message, sizeof message, " but the topology is generation ");
        latency_append_u64(message, sizeof message, topology.generation);
        error_text(err, message);
        return NULL;
    }
    if (!configured) latency_defaults(&settings);
    size_t count = topology.regions.len;
    size_t columns = topology.metric_names.len;
    int64_t column = -1;
    for (size_t c = 0; c < columns; c++)
        if (equals(&topology.metric_names.ptr[c], settings.metric)) column = (int64_t)c;
    latency_region *regions = calloc(count ? count : 1, sizeof *regions);
    if (!regions) abort();
    for (size_t i = 0; i < count; i++) {
        const shardalloc_strategy_types_region_t *r = &topology.regions.ptr[i];
        regions[i].allocatable = r->status == SHARDALLOC_STRATEGY_TYPES_REGION_STATUS_UP && !r->proxy_only && !r->draining;
        for (size_t l = 0; l < r->labels.len; l++) {
            if (equals(&r->labels.ptr[l].key, settings.zone_label)) {
                regions[i].zone = (const char *)r->labels.ptr[l].value.ptr;
                regions[i].zone_len = r->labels.ptr[l].value.len;
            }
        }
        double value = column >= 0 && i * columns + (size_t)column < loads->metrics.len
                           ? loads->metrics.ptr[i * columns + (size_t)column]
                           : NAN;
        regions[i].latency = isnan(value) ? INFINITY : value;
        regions[i].shards = i < loads->shard_counts.len ? loads->shard_counts.ptr[i] : 0;
    }
    return regions;
}

bool exports_shardalloc_strategy_allocator_allocate(exports_shardalloc_strategy_allocator_shard_key_t *shard,
                                                    exports_shardalloc_strategy_allocator_region_index_t *maybe_requester,
                                                    exports_shardalloc_strategy_allocator_loads_t *loads,
                                                    exports_shardalloc_strategy_allocator_region_index_t *ret,
                                                    strategy_string_t *err) {
    latency_region *regions = regions_for(loads, err);
    int64_t best = -1;
    if (regions) {
        best = latency_allocate(&settings, regions, topology.regions.len, maybe_requester ? (int64_t)*maybe_requester : -1);
        if (best < 0) error_text(err, "no allocatable region");
    }
    free(regions);
    exports_shardalloc_strategy_allocator_shard_key_free(shard);
    exports_shardalloc_strategy_allocator_loads_free(loads);
    if (best < 0) return false;
    *ret = (uint32_t)best;
    return true;
}

bool exports_shardalloc_strategy_allocator_rebalance(exports_shardalloc_strategy_allocator_loads_t *loads,
                                                     exports_shardalloc_strategy_allocator_allocations_t *allocations,
                                                     exports_shardalloc_strategy_allocator_list_shard_handle_t *ret,
                                                     strategy_string_t *err) {
    latency_region *regions = regions_for(loads, err);
    bool ok = regions != NULL;
    if (ok) {
        uint32_t first = 0;
        uint32_t moves = latency_rebalance(&settings, regions, topology.regions.len, allocations->in_progress.len, &first);
        ret->len = moves;
        ret->ptr = moves ? malloc(moves * sizeof *ret->ptr) : NULL;
        for (uint32_t i = 0; i < moves; i++) ret->ptr[i] = first + i;
        if (moves > 0) {
            char count[24] = "";
            latency_append_u64(count, sizeof count, moves);
            strategy_string_t message, key, value;
            strategy_string_set(&message, "moving shards");
            strategy_string_set(&key, "count");
            strategy_string_set(&value, count);
            strategy_tuple2_string_string_t field = {key, value};
            strategy_list_tuple2_string_string_t fields = {&field, 1};
            shardalloc_strategy_host_log(SHARDALLOC_STRATEGY_HOST_LEVEL_DEBUG, &message, &fields);
        }
    }
    free(regions);
    exports_shardalloc_strategy_allocator_loads_free(loads);
    exports_shardalloc_strategy_allocator_allocations_free(allocations);
    return ok;
}
