/* The decisions of latency-aware-c; see latency.h and README.md. */
#include "latency.h"

#include <string.h>

void latency_defaults(latency_settings *settings) {
    memset(settings, 0, sizeof *settings);
    strcpy(settings->metric, "latency_ms");
    strcpy(settings->zone_label, "zone");
    settings->max_imbalance = 2;
    settings->max_moves = 5;
}

/* A tiny reader for one flat JSON object of strings and integers. */
typedef struct {
    const char *at;
    const char *end;
    char *err;
    size_t err_len;
} reader;

static void skip_space(reader *r) {
    while (r->at < r->end && (*r->at == ' ' || *r->at == '\t' || *r->at == '\n' || *r->at == '\r')) r->at++;
}

void latency_append(char *buf, size_t cap, const char *text) {
    size_t used = strlen(buf);
    while (*text && used + 1 < cap) buf[used++] = *text++;
    buf[used] = '\0';
}

void latency_append_u64(char *buf, size_t cap, uint64_t value) {
    char digits[21];
    size_t n = sizeof digits - 1;
    digits[n] = '\0';
    do {
        digits[--n] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    latency_append(buf, cap, digits + n);
}

/* Writes "invalid config: [key ]message" into err. */
static int fail(reader *r, const char *message, const char *key) {
    if (!r->err || r->err_len == 0) return -1;
    r->err[0] = '\0';
    latency_append(r->err, r->err_len, "invalid config: ");
    if (key) {
        latency_append(r->err, r->err_len, key);
        latency_append(r->err, r->err_len, " ");
    }
    latency_append(r->err, r->err_len, message);
    return -1;
}

/* Reads a JSON string into out (NUL-terminated, at most cap-1 bytes). */
static int read_string(reader *r, char *out, size_t cap, const char *key) {
    size_t n = 0;
    if (r->at >= r->end || *r->at != '"') return fail(r, "must be a string", key);
    r->at++;
    while (r->at < r->end && *r->at != '"') {
        char c = *r->at++;
        if (c == '\\') {
            if (r->at >= r->end) break;
            char e = *r->at++;
            switch (e) {
                case '"': case '\\': case '/': c = e; break;
                case 'n': c = '\n'; break;
                case 't': c = '\t'; break;
                case 'r': c = '\r'; break;
                case 'b': c = '\b'; break;
                case 'f': c = '\f'; break;
                default: return fail(r, "uses an escape this strategy does not read (\\u)", key ? key : "a key");
            }
        }
        if (n + 1 >= cap) return fail(r, "is too long", key ? key : "a key");
        out[n++] = c;
    }
    if (r->at >= r->end) return fail(r, "is not valid JSON (an unterminated string)", NULL);
    r->at++;
    out[n] = '\0';
    return 0;
}

/* Reads a JSON integer in [1, UINT32_MAX]. */
static int read_positive(reader *r, uint32_t *out, const char *key) {
    uint64_t value = 0;
    int digits = 0;
    if (r->at < r->end && *r->at == '-') return fail(r, "must be at least 1", key);
    while (r->at < r->end && *r->at >= '0' && *r->at <= '9') {
        value = value * 10 + (uint64_t)(*r->at++ - '0');
        if (value > UINT32_MAX) return fail(r, "is too large", key);
        digits++;
    }
    if (digits == 0) return fail(r, "must be an integer", key);
    if (r->at < r->end && (*r->at == '.' || *r->at == 'e' || *r->at == 'E')) return fail(r, "must be an integer", key);
    if (value < 1) return fail(r, "must be at least 1", key);
    *out = (uint32_t)value;
    return 0;
}

int latency_parse_config(const char *text, size_t len, latency_settings *settings, char *err, size_t err_len) {
    reader r = {text, text + len, err, err_len};
    latency_settings parsed;
    latency_defaults(&parsed);
    skip_space(&r);
    if (r.at == r.end || (r.end - r.at == 4 && memcmp(r.at, "null", 4) == 0)) {
        *settings = parsed;
        return 0;
    }
    if (*r.at != '{') return fail(&r, "config must be a JSON object", NULL);
    r.at++;
    skip_space(&r);
    if (r.at < r.end && *r.at == '}') {
        r.at++;
    } else {
        for (;;) {
            char key[LATENCY_NAME_MAX];
            skip_space(&r);
            if (read_string(&r, key, sizeof key, NULL) != 0) return -1;
            skip_space(&r);
            if (r.at >= r.end || *r.at != ':') return fail(&r, "is not valid JSON (expected ':')", NULL);
            r.at++;
            skip_space(&r);
            int rc;
            if (strcmp(key, "metric") == 0) {
                rc = read_string(&r, parsed.metric, sizeof parsed.metric, "metric");
                if (rc == 0 && parsed.metric[0] == '\0') rc = fail(&r, "must be a non-empty string", "metric");
            } else if (strcmp(key, "zone_label") == 0) {
                rc = read_string(&r, parsed.zone_label, sizeof parsed.zone_label, "zone_label");
                if (rc == 0 && parsed.zone_label[0] == '\0') rc = fail(&r, "must be a non-empty string", "zone_label");
            } else if (strcmp(key, "max_imbalance") == 0) {
                rc = read_positive(&r, &parsed.max_imbalance, "max_imbalance");
            } else if (strcmp(key, "max_moves") == 0) {
                rc = read_positive(&r, &parsed.max_moves, "max_moves");
            } else {
                char message[LATENCY_NAME_MAX + 96] = "unknown field `";
                latency_append(message, sizeof message, key);
                latency_append(message, sizeof message, "`, expected one of metric, zone_label, max_imbalance, max_moves");
                return fail(&r, message, NULL);
            }
            if (rc != 0) return -1;
            skip_space(&r);
            if (r.at < r.end && *r.at == ',') {
                r.at++;
                continue;
            }
            if (r.at < r.end && *r.at == '}') {
                r.at++;
                break;
            }
            return fail(&r, "is not valid JSON (expected ',' or '}')", NULL);
        }
    }
    skip_space(&r);
    if (r.at != r.end) return fail(&r, "is not valid JSON (text after the object)", NULL);
    *settings = parsed;
    return 0;
}

static int same_zone(const latency_region *a, const latency_region *b) {
    return a->zone && b->zone && a->zone_len == b->zone_len && memcmp(a->zone, b->zone, a->zone_len) == 0;
}

/* Whether region a is a better home than region b (b may be NULL). */
static int better(const latency_region *a, size_t ia, const latency_region *b, size_t ib) {
    if (!b) return 1;
    if (a->latency != b->latency) return a->latency < b->latency;
    if (a->shards != b->shards) return a->shards < b->shards;
    return ia < ib;
}

static int candidate(const latency_region *region, const latency_region *zone_of) {
    return region->allocatable && (!zone_of || same_zone(region, zone_of));
}

/* Latency decides only among candidates within max_imbalance shards of the
 * emptiest, so allocation never undoes what rebalance evens out. */
static int64_t best_of(const latency_region *regions, size_t count, const latency_region *zone_of,
                       uint32_t max_imbalance) {
    int64_t best = -1;
    uint64_t floor = UINT64_MAX;
    for (size_t i = 0; i < count; i++)
        if (candidate(&regions[i], zone_of) && regions[i].shards < floor) floor = regions[i].shards;
    for (size_t i = 0; i < count; i++) {
        if (!candidate(&regions[i], zone_of) || regions[i].shards > floor + max_imbalance) continue;
        if (better(&regions[i], i, best < 0 ? NULL : &regions[best], (size_t)best)) best = (int64_t)i;
    }
    return best;
}

int64_t latency_allocate(const latency_settings *settings, const latency_region *regions, size_t count,
                         int64_t requester) {
    if (requester >= 0 && (size_t)requester < count && regions[requester].zone) {
        int64_t in_zone = best_of(regions, count, &regions[requester], settings->max_imbalance);
        if (in_zone >= 0) return in_zone;
    }
    return best_of(regions, count, NULL, settings->max_imbalance);
}

uint32_t latency_rebalance(const latency_settings *settings, const latency_region *regions, size_t count,
                           size_t in_progress, uint32_t *from) {
    int64_t fullest = -1, emptiest = -1;
    if (in_progress > 0) return 0;
    for (size_t i = 0; i < count; i++) {
        if (!regions[i].allocatable) continue;
        if (fullest < 0 || regions[i].shards > regions[fullest].shards) fullest = (int64_t)i;
        if (emptiest < 0 || regions[i].shards < regions[emptiest].shards) emptiest = (int64_t)i;
    }
    if (fullest < 0) return 0;
    uint32_t gap = regions[fullest].shards - regions[emptiest].shards;
    if (gap <= settings->max_imbalance) return 0;
    *from = (uint32_t)fullest;
    return gap / 2 < settings->max_moves ? gap / 2 : settings->max_moves;
}
