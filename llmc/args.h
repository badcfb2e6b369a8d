/*
 * llmc/args.h — the command line as one table. Each trainer lists its flags once (flag, type, field
 * offset into its config struct, valid range, help); parsing, range errors, the usage text and the
 * config table all come from that list, so both trainers accept and reject values the same way.
 */
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

typedef enum { ARG_STR, ARG_INT, ARG_FLOAT, ARG_I64 } ArgType;
typedef struct {
    const char* flag;
    ArgType type;
    size_t offset;      // into the trainer's config struct
    double min, max;    // valid range (numbers)
    int allow_minus1;   // -1 is a valid special value
    const char* help;
} ArgSpec;

// one table row: ARG(flag, type, Config, field, min, max, allow_minus1, help)
#define ARG(f, t, Config, field, lo, hi, m1, h) {f, t, offsetof(Config, field), lo, hi, m1, h}

static inline const ArgSpec* arg_find(const ArgSpec* specs, int n, const char* flag) {
    for (int k = 0; k < n; k++) {
        if (strcmp(flag, specs[k].flag) == 0) { return &specs[k]; }
    }
    return NULL;
}

static inline void arg_format_value(char* out, size_t size, const void* config, const ArgSpec* a) {
    const char* base = (const char*)config + a->offset;
    switch (a->type) {
        case ARG_STR: { const char* s = *(const char* const*)base; snprintf(out, size, "%s", s ? s : "(none)"); break; }
        case ARG_INT: snprintf(out, size, "%d", *(const int*)base); break;
        case ARG_FLOAT: snprintf(out, size, "%g", *(const float*)base); break;
        default: snprintf(out, size, "%lld", *(const long long*)base); break;
    }
}

// stores `value` into the field of `config`, or exits with one line naming the flag and the valid range
static inline void arg_parse_value(void* config, const ArgSpec* a, const char* value) {
    char* base = (char*)config + a->offset;
    char* end = NULL;
    errno = 0;
    if (a->type == ARG_STR) {
        if (value[0] == '\0') { fatal("flag %s: expected a non-empty string", a->flag); }
        *(const char**)base = value;
    } else if (a->type == ARG_FLOAT) {
        double x = strtod(value, &end);
        if (end == value || *end != '\0' || errno != 0 || !isfinite(x) || x < a->min || x > a->max) {
            fatal("flag %s: expected a number in [%g, %g], got '%s'", a->flag, a->min, a->max, value);
        }
        *(float*)base = (float)x;
    } else {
        long long x = strtoll(value, &end, 10);
        int ok = end != value && *end == '\0' && errno == 0 &&
                 ((x >= a->min && x <= a->max) || (a->allow_minus1 && x == -1));
        if (!ok) {
            fatal("flag %s: expected an integer in [%.0f, %.0f]%s, got '%s'", a->flag, a->min, a->max,
                  a->allow_minus1 ? " or -1" : "", value);
        }
        if (a->type == ARG_INT) { *(int*)base = (int)x; } else { *(long long*)base = x; }
    }
}

// the usage lines of the table, each with its default taken from `defaults`
static inline void arg_print_usage(FILE* out, const ArgSpec* specs, int n, const void* defaults) {
    for (int i = 0; i < n; i++) {
        char def[256];
        arg_format_value(def, sizeof(def), defaults, &specs[i]);
        fprintf(out, "  %-12s %-8s %s (default %s)\n", specs[i].flag,
                specs[i].type == ARG_STR ? "<string>" : specs[i].type == ARG_FLOAT ? "<float>" : "<int>",
                specs[i].help, def);
    }
}

#endif // LLMC_ARGS_H
