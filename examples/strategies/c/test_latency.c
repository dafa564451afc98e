/* Native, table-driven tests of latency.c: `cargo xtask c-example` builds
 * and runs them with clang (undefined behaviour traps). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "latency.h"

static int failures;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                 \
            fprintf(stderr, "\n");                        \
            failures++;                                   \
        }                                                 \
    } while (0)

#define R(zone, latency, shards) {1, zone, zone ? strlen(zone) : 0, latency, shards}

static void test_config(void) {
    struct { const char *text; const char *error; } cases[] = {
        {"", NULL},
        {"null", NULL},
        {" { } ", NULL},
        {"{\"metric\":\"cpu\",\"max_moves\":3}", NULL},
        {"{\"metrc\":\"x\"}", "unknown field `metrc`"},
        {"{\"metric\":\"\"}", "metric must be a non-empty string"},
        {"{\"zone_label\":\"\"}", "zone_label must be a non-empty string"},
        {"{\"max_imbalance\":0}", "max_imbalance must be at least 1"},
        {"{\"max_moves\":\"3\"}", "max_moves must be an integer"},
        {"{\"max_moves\":1.5}", "max_moves must be an integer"},
        {"{\"max_moves\":99999999999}", "max_moves is too large"},
        {"{\"metric\":3}", "metric must be a string"},
        {"[1]", "config must be a JSON object"},
        {"{\"metric\":\"a\"", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        latency_settings s;
        char err[256] = "";
        latency_defaults(&s);
        int rc = latency_parse_config(cases[i].text, strlen(cases[i].text), &s, err, sizeof err);
        if (cases[i].error == NULL)
            CHECK(rc == 0, "%s: unexpected error %s", cases[i].text, err);
        else
            CHECK(rc != 0 && strstr(err, cases[i].error), "%s: got \"%s\", want \"%s\"", cases[i].text, err, cases[i].error);
    }
    latency_settings s;
    const char *text = "{\"metric\":\"cpu\",\"max_moves\":3}";
    latency_parse_config(text, strlen(text), &s, NULL, 0);
    CHECK(strcmp(s.metric, "cpu") == 0 && s.max_moves == 3 && s.max_imbalance == 2, "settings read");
}

static void test_allocate(void) {
    latency_settings defaults;
    latency_defaults(&defaults);
    latency_region regions[] = {R("eu", 5, 2), R("eu", 9, 1), R("us", 7, 0), R("us", 3, 1)};
    struct { const char *name; int64_t requester; int64_t expected; } cases[] = {
        {"no requester: lowest latency", -1, 3},
        {"requester in eu", 1, 0},
        {"requester in us", 2, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t got = latency_allocate(&defaults, regions, 4, cases[i].requester);
        CHECK(got == cases[i].expected, "%s: got %lld", cases[i].name, (long long)got);
    }
    regions[3].allocatable = 0;
    CHECK(latency_allocate(&defaults, regions, 4, 2) == 2, "draining us-2: us-1");
    regions[2].allocatable = 0;
    CHECK(latency_allocate(&defaults, regions, 4, 2) == 0, "no allocatable region in us: anywhere");
    latency_region unreported[] = {R(NULL, INFINITY, 1), R(NULL, INFINITY, 0), R(NULL, INFINITY, 0)};
    CHECK(latency_allocate(&defaults, unreported, 3, -1) == 1, "no metric: fewest shards, then index");
    latency_region crowded[] = {R(NULL, 1, 9), R(NULL, 5, 6), R(NULL, 9, 5)};
    CHECK(latency_allocate(&defaults, crowded, 3, -1) == 1, "latency among those within max_imbalance of the emptiest");
    latency_region none[] = {{0, NULL, 0, 1, 0}};
    CHECK(latency_allocate(&defaults, none, 1, -1) == -1, "nothing allocatable");
}

static void test_rebalance(void) {
    latency_settings defaults;
    latency_defaults(&defaults);
    uint32_t from = 999;
    latency_region balanced[] = {R(NULL, 1, 3), R(NULL, 1, 1)};
    CHECK(latency_rebalance(&defaults, balanced, 2, 0, &from) == 0, "balanced enough");
    latency_region gap4[] = {R(NULL, 1, 5), R(NULL, 1, 1)};
    CHECK(latency_rebalance(&defaults, gap4, 2, 0, &from) == 2 && from == 0, "gap 4: two moves");
    CHECK(latency_rebalance(&defaults, gap4, 2, 1, &from) == 0, "waits for hand-offs in progress");
    latency_region middle[] = {R(NULL, 1, 1), R(NULL, 1, 6), R(NULL, 1, 0)};
    CHECK(latency_rebalance(&defaults, middle, 3, 0, &from) == 3 && from == 1, "from the fullest region");
    latency_region held[] = {{0, NULL, 0, 1, 4}, R(NULL, 1, 9), R(NULL, 1, 0)};
    CHECK(latency_rebalance(&defaults, held, 3, 0, &from) == 4 && from == 1, "counts a draining region's shards");
    latency_settings one = defaults;
    one.max_moves = 1;
    latency_region big[] = {R(NULL, 1, 8), R(NULL, 1, 0)};
    CHECK(latency_rebalance(&one, big, 2, 0, &from) == 1, "capped by max_moves");
}

int main(void) {
    test_config();
    test_allocate();
    test_rebalance();
    if (failures) {
        fprintf(stderr, "%d C test(s) failed\n", failures);
        return 1;
    }
    printf("C tests: all passed\n");
    return 0;
}
