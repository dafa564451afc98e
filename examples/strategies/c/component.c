/* latency-aware-c: the contract's exports (bindings generated into
 * build/bindings/ by `cargo xtask c-example`), adapted to latency.c.
 *
 * Contract 0.3: the host sends the whole view once (`load-view`) and then
 * batches of changes (`apply`); this file keeps its copy of the view by
 * shard handle, with each region's count and the view checksum, kept as
 * the batches arrive. A batch that does not fit the copy (a handle that is
 * not there, a generation out of turn) aborts: a trap, after which the
 * host falls back for that call and sends a fresh instance the whole view.
 * It asks for no shard ids and no attributes (`describe`), so `named` and
 * `attributes` come empty; `since` is checked and the smoothed metrics are
 * freed unread: this strategy decides without them.
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

#define PINNED 1
#define MOVING 2

/* One shard of the copy, at its handle. */
typedef struct {
    uint8_t present;
    uint8_t flags;  /* PINNED | MOVING */
    uint32_t home;  /* region index + 1; 0 when homeless */
    uint64_t hash;
    double load;
    uint64_t order; /* when it was homed: a region's shards in allocation order */
} kept_shard;

/* State between calls: the settings and the copy of the view. */
static latency_settings settings;
static int configured;
static shardalloc_strategy_types_topology_t topology;
static strategy_list_f64_t metrics;
static uint32_t *counts; /* shards homed on each region */
static kept_shard *shards;
static size_t capacity; /* entries in shards */
static size_t moving;   /* shards whose hand-off is in progress */
static uint64_t generation, checksum, next_order;
static int loaded;
static char last_error[256];

/* The contract's mixing function (splitmix64's finalizer) and one shard's
 * part of the view checksum, as wit/0.3/strategy.wit defines them (the same
 * as 0.2's). */
static uint64_t mix(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t term(uint32_t handle) {
    const kept_shard *s = &shards[handle];
    uint64_t load_bits;
    memcpy(&load_bits, &s->load, sizeof load_bits);
    return mix(s->hash ^ ((uint64_t)handle << 32) ^ ((uint64_t)s->home << 2) ^ s->flags) +
           mix(load_bits ^ (uint64_t)handle);
}

static void *grown(void *ptr, size_t size) {
    void *p = realloc(ptr, size);
    if (!p && size) abort();
    return p;
}

/* The shard at handle, which must be in the view. */
static kept_shard *present(uint32_t handle) {
    if (handle >= capacity || !shards[handle].present) abort();
    return &shards[handle];
}

/* Adds a shard new to the view, without a home. */
static void arrive(uint32_t handle, uint64_t hash) {
    if (handle >= capacity) {
        size_t more = capacity ? capacity : 64;
        while (capacity + more <= handle) more *= 2;
        shards = grown(shards, (capacity + more) * sizeof *shards);
        memset(shards + capacity, 0, more * sizeof *shards);
        capacity += more;
    }
    if (shards[handle].present) abort();
    shards[handle] = (kept_shard){.present = 1, .hash = hash};
    checksum += term(handle);
}

static void unhome(kept_shard *s) {
    if (s->home) counts[s->home - 1]--;
    s->home = 0;
}

static void retire(uint32_t handle) {
    kept_shard *s = present(handle);
    checksum -= term(handle);
    unhome(s);
    if (s->flags & MOVING) moving--;
    memset(s, 0, sizeof *s);
}

static void home(uint32_t handle, uint64_t hash, uint32_t region) {
    if (region >= topology.regions.len) abort();
    if (handle >= capacity || !shards[handle].present) arrive(handle, hash);
    kept_shard *s = &shards[handle];
    checksum -= term(handle);
    unhome(s);
    s->hash = hash;
    s->home = region + 1;
    s->order = next_order++;
    counts[region]++;
    checksum += term(handle);
}

static void flag(uint32_t handle, uint8_t which, int on) {
    kept_shard *s = present(handle);
    if (!(s->flags & which) == !on) return;
    checksum -= term(handle);
    s->flags = on ? (uint8_t)(s->flags | which) : (uint8_t)(s->flags & ~which);
    if (which == MOVING) moving = on ? moving + 1 : moving - 1;
    checksum += term(handle);
}

static void set_load(uint32_t handle, double load) {
    kept_shard *s = present(handle);
    checksum -= term(handle);
    s->load = load;
    checksum += term(handle);
}

static int same(const strategy_string_t *a, const strategy_string_t *b) {
    return a->len == b->len && memcmp(a->ptr, b->ptr, a->len) == 0;
}

/* Takes a new topology (ours to keep) and metric matrix: regions are
 * matched by address, so every home moves to its region's new index. */
static void replace_topology(shardalloc_strategy_types_topology_t *next) {
    size_t n = next->regions.len;
    uint32_t *index = grown(NULL, (topology.regions.len + 1) * sizeof *index);
    for (size_t old = 0; old < topology.regions.len; old++) {
        index[old] = 0;
        for (size_t i = 0; i < n; i++)
            if (same(&topology.regions.ptr[old].address, &next->regions.ptr[i].address)) index[old] = (uint32_t)i + 1;
    }
    free(counts);
    counts = calloc(n ? n : 1, sizeof *counts);
    if (!counts) abort();
    checksum = 0;
    for (uint32_t h = 0; h < capacity; h++) {
        kept_shard *s = &shards[h];
        if (!s->present) continue;
        if (s->home) {
            s->home = index[s->home - 1];
            if (!s->home) abort(); /* its region left, yet it was not unhomed */
            counts[s->home - 1]++;
        }
        checksum += term(h);
    }
    free(index);
    shardalloc_strategy_types_topology_free(&topology);
    topology = *next;
    memset(next, 0, sizeof *next);
}

static void replace_metrics(strategy_list_f64_t *next) {
    strategy_list_f64_free(&metrics);
    metrics = *next;
    memset(next, 0, sizeof *next);
}

static void error_text(const char *message) {
    size_t n = strlen(message);
    if (n >= sizeof last_error) n = sizeof last_error - 1;
    memcpy(last_error, message, n);
    last_error[n] = '\0';
}

void exports_shardalloc_strategy_allocator_describe(exports_shardalloc_strategy_allocator_info_t *ret) {
    strategy_string_dup(&ret->name, "latency-aware-c");
    strategy_string_dup(&ret->version, "0.3.0");
    strategy_string_dup(&ret->description,
                        "Places a shard on the lowest-latency region, in the requester's zone when it can; "
                        "evens out shard counts a few shards per round.");
    strategy_string_dup(&ret->config_schema, SCHEMA);
    /* It reads no shard id and no attribute: the host sends neither. */
    ret->needs_shard_ids = false;
    ret->needs_shard_attributes = false;
}

bool exports_shardalloc_strategy_allocator_configure(strategy_string_t *config, strategy_string_t *err) {
    char message[256];
    int rc = latency_parse_config((const char *)config->ptr, config->len, &settings, message, sizeof message);
    strategy_string_free(config);
    if (rc != 0) {
        strategy_string_dup(err, message);
        return false;
    }
    configured = 1;
    return true;
}

uint64_t exports_shardalloc_strategy_allocator_load_view(exports_shardalloc_strategy_allocator_view_t *view) {
    free(shards);
    shards = NULL;
    capacity = 0;
    moving = 0;
    free(counts);
    counts = NULL;
    shardalloc_strategy_types_topology_free(&topology);
    memset(&topology, 0, sizeof topology);
    checksum = 0;
    replace_topology(&view->topology);
    replace_metrics(&view->metrics);
    const shardalloc_strategy_types_homed_t *homed = &view->homed;
    if (homed->hashes.len != homed->shards.len || homed->regions.len != homed->shards.len ||
        homed->since.len != homed->shards.len)
        abort();
    for (size_t i = 0; i < homed->shards.len; i++) home(homed->shards.ptr[i], homed->hashes.ptr[i], homed->regions.ptr[i]);
    if (view->homeless_hashes.len != view->homeless.len) abort();
    for (size_t i = 0; i < view->homeless.len; i++) arrive(view->homeless.ptr[i], view->homeless_hashes.ptr[i]);
    for (size_t i = 0; i < view->moving.len; i++) flag(view->moving.ptr[i], MOVING, 1);
    for (size_t i = 0; i < view->pinned.len; i++) flag(view->pinned.ptr[i], PINNED, 1);
    if (view->loads.loads.len != view->loads.shards.len) abort();
    for (size_t i = 0; i < view->loads.shards.len; i++) set_load(view->loads.shards.ptr[i], view->loads.loads.ptr[i]);
    generation = view->generation;
    loaded = 1;
    exports_shardalloc_strategy_allocator_view_free(view);
    return checksum;
}

uint64_t exports_shardalloc_strategy_allocator_apply(exports_shardalloc_strategy_allocator_changes_t *c) {
    if (!loaded || c->generation != generation + 1) abort();
    for (size_t i = 0; i < c->retired.len; i++) retire(c->retired.ptr[i]);
    for (size_t i = 0; i < c->unhomed.len; i++) {
        uint32_t h = c->unhomed.ptr[i];
        kept_shard *s = present(h);
        checksum -= term(h);
        unhome(s);
        checksum += term(h);
    }
    if (c->arrived_hashes.len != c->arrived_homeless.len) abort();
    for (size_t i = 0; i < c->arrived_homeless.len; i++) arrive(c->arrived_homeless.ptr[i], c->arrived_hashes.ptr[i]);
    if (c->topology.is_some) {
        if (!c->metrics.is_some) abort();
        replace_topology(&c->topology.val);
    }
    if (c->metrics.is_some) replace_metrics(&c->metrics.val);
    const shardalloc_strategy_types_homed_t *homed = &c->homed;
    if (homed->hashes.len != homed->shards.len || homed->regions.len != homed->shards.len ||
        homed->since.len != homed->shards.len)
        abort();
    for (size_t i = 0; i < homed->shards.len; i++) home(homed->shards.ptr[i], homed->hashes.ptr[i], homed->regions.ptr[i]);
    for (size_t i = 0; i < c->moving.len; i++) flag(c->moving.ptr[i], MOVING, 1);
    for (size_t i = 0; i < c->settled.len; i++) flag(c->settled.ptr[i], MOVING, 0);
    for (size_t i = 0; i < c->pinned.len; i++) flag(c->pinned.ptr[i], PINNED, 1);
    for (size_t i = 0; i < c->unpinned.len; i++) flag(c->unpinned.ptr[i], PINNED, 0);
    if (c->loads.loads.len != c->loads.shards.len) abort();
    for (size_t i = 0; i < c->loads.shards.len; i++) set_load(c->loads.shards.ptr[i], c->loads.loads.ptr[i]);
    generation = c->generation;
    exports_shardalloc_strategy_allocator_changes_free(c);
    return checksum;
}

static int equals(const strategy_string_t *s, const char *text) {
    size_t n = strlen(text);
    return s->len == n && memcmp(s->ptr, text, n) == 0;
}

/* Describes every region of the copy for latency.c (calloc'd). */
static latency_region *regions_now(void) {
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
        double value = column >= 0 && i * columns + (size_t)column < metrics.len
                           ? metrics.ptr[i * columns + (size_t)column]
                           : NAN;
        regions[i].latency = isnan(value) ? INFINITY : value;
        regions[i].shards = counts[i];
    }
    return regions;
}

/* Why the shard needs a home (`cause`) and the host's time (`now`) do not
 * change this strategy's choice. */
int64_t exports_shardalloc_strategy_allocator_allocate(exports_shardalloc_strategy_allocator_shard_handle_t shard,
                                                       uint64_t hash,
                                                       exports_shardalloc_strategy_allocator_region_index_t *maybe_requester,
                                                       exports_shardalloc_strategy_allocator_allocation_cause_t cause,
                                                       uint64_t now) {
    (void)shard;
    (void)hash;
    (void)cause;
    (void)now;
    if (!loaded) {
        error_text("no view yet");
        return -1;
    }
    latency_region *regions = regions_now();
    int64_t best = latency_allocate(&settings, regions, topology.regions.len, maybe_requester ? (int64_t)*maybe_requester : -1);
    free(regions);
    if (best < 0) error_text("no allocatable region");
    return best;
}

void exports_shardalloc_strategy_allocator_last_error(strategy_string_t *ret) {
    strategy_string_dup(ret, last_error);
}

/* Orders handles by when they were homed. */
static int by_order(const void *a, const void *b) {
    uint64_t x = shards[*(const uint32_t *)a].order, y = shards[*(const uint32_t *)b].order;
    return (x > y) - (x < y);
}

/* The shards to move, each without a destination: `allocate` places it
 * again once it stopped. */
bool exports_shardalloc_strategy_allocator_rebalance(uint64_t now,
                                                     exports_shardalloc_strategy_allocator_list_move_t *ret,
                                                     strategy_string_t *err) {
    (void)now;
    if (!loaded) {
        strategy_string_dup(err, "no view yet");
        return false;
    }
    latency_region *regions = regions_now();
    uint32_t from = 0;
    uint32_t moves = latency_rebalance(&settings, regions, topology.regions.len, moving, &from);
    free(regions);
    ret->len = 0;
    ret->ptr = NULL;
    if (moves == 0) return true;
    /* The region's oldest shards that are not pinned. */
    uint32_t *candidates = grown(NULL, (counts[from] + 1) * sizeof *candidates);
    size_t found = 0;
    for (uint32_t h = 0; h < capacity; h++) {
        const kept_shard *s = &shards[h];
        if (s->present && s->home == from + 1 && !(s->flags & PINNED)) candidates[found++] = h;
    }
    qsort(candidates, found, sizeof *candidates, by_order);
    ret->len = found < moves ? found : moves;
    ret->ptr = grown(NULL, (ret->len + 1) * sizeof *ret->ptr);
    for (size_t i = 0; i < ret->len; i++) {
        ret->ptr[i].shard = candidates[i];
        ret->ptr[i].to.is_some = false;
    }
    free(candidates);
    char count[24] = "";
    latency_append_u64(count, sizeof count, ret->len);
    strategy_string_t message, key, value;
    strategy_string_set(&message, "moving shards");
    strategy_string_set(&key, "count");
    strategy_string_set(&value, count);
    strategy_tuple2_string_string_t field = {key, value};
    strategy_list_tuple2_string_string_t fields = {&field, 1};
    shardalloc_strategy_host_log(SHARDALLOC_STRATEGY_HOST_LEVEL_DEBUG, &message, &fields);
    return true;
}
