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

// ARG_CHOICE: an int field holding the index of its value's name in `choices` ("a|b|c")
typedef enum { ARG_STR, ARG_INT, ARG_FLOAT, ARG_I64, ARG_CHOICE } ArgType;
typedef struct {
    const char* flag;
    ArgType type;
    size_t offset;      // into the trainer's config struct
    double min, max;    // valid range (numbers)
    int allow_minus1;   // -1 is a valid special value
    const char* help;
    const char* choices; // ARG_CHOICE only
    const char* bare;    // value when the flag is given without one (next argument missing or a flag), or NULL
    int fixed;           // fixed on resume: recorded in each checkpoint, and a resume with another value is refused
} ArgSpec;

// one table row: ARG(flag, type, Config, field, min, max, allow_minus1, help); ARG_FIXED: fixed on resume
#define ARG(f, t, Config, field, lo, hi, m1, h) {f, t, offsetof(Config, field), lo, hi, m1, h, NULL, NULL, 0}
#define ARG_FIXED(f, t, Config, field, lo, hi, m1, h) {f, t, offsetof(Config, field), lo, hi, m1, h, NULL, NULL, 1}

// the name of choice `k` in "a|b|c" into out; 0 when there is no such choice
static inline int arg_choice_name(char* out, size_t size, const char* choices, int k) {
    const char* p = choices;
    for (int i = 0; i < k && p != NULL; i++) { p = strchr(p, '|'); if (p != NULL) { p++; } }
    if (p == NULL || k < 0) { snprintf(out, size, "?"); return 0; }
    const char* end = strchr(p, '|');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    snprintf(out, size, "%.*s", (int)n, p);
    return 1;
}

static inline const ArgSpec* arg_find(const ArgSpec* specs, int n, const char* flag) {
    for (int k = 0; k < n; k++) {
        if (strcmp(flag, specs[k].flag) == 0) { return &specs[k]; }
    }
    return NULL;
}

// the value as the usage text and the start-up table show it; arg_format_exact: every bit of a float (the
// record a resume is checked against)
static inline void arg_format(char* out, size_t size, const void* config, const ArgSpec* a, int exact) {
    const char* base = (const char*)config + a->offset;
    switch (a->type) {
        case ARG_STR: { const char* s = *(const char* const*)base; snprintf(out, size, "%s", s ? s : "(none)"); break; }
        case ARG_INT: snprintf(out, size, "%d", *(const int*)base); break;
        case ARG_FLOAT: snprintf(out, size, exact ? "%.9g" : "%g", *(const float*)base); break;
        case ARG_CHOICE: arg_choice_name(out, size, a->choices, *(const int*)base); break;
        default: snprintf(out, size, "%lld", *(const long long*)base); break;
    }
}
static inline void arg_format_value(char* out, size_t size, const void* config, const ArgSpec* a) {
    arg_format(out, size, config, a, 0);
}
static inline void arg_format_exact(char* out, size_t size, const void* config, const ArgSpec* a) {
    arg_format(out, size, config, a, 1);
}

// stores `value` into the field of `config`, or exits with one line naming the flag and the valid range
static inline void arg_parse_value(void* config, const ArgSpec* a, const char* value) {
    char* base = (char*)config + a->offset;
    char* end = NULL;
    errno = 0;
    if (a->type == ARG_STR) {
        if (value[0] == '\0') { fatal("flag %s: expected a non-empty string", a->flag); }
        *(const char**)base = value;
    } else if (a->type == ARG_CHOICE) {
        char name[64];
        for (int k = 0; arg_choice_name(name, sizeof(name), a->choices, k); k++) {
            if (strcmp(name, value) == 0) { *(int*)base = k; return; }
        }
        fatal("flag %s: expected %s, got '%s'", a->flag, a->choices, value);
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
        char type[64];
        snprintf(type, sizeof(type), "<%s>", specs[i].type == ARG_STR ? "string" : specs[i].type == ARG_FLOAT ? "float"
                 : specs[i].type == ARG_CHOICE ? specs[i].choices : "int");
        char head[160];
        snprintf(head, sizeof(head), "%s %s", specs[i].flag, type);
        fprintf(out, "  %-30s %s (default %s%s)\n", head, specs[i].help, def, specs[i].fixed ? "; fixed on resume" : "");
    }
}

// If argv[*i] is a flag of the table, stores its value (advancing *i past it) and returns 1; else 0.
static inline int arg_parse_one(void* config, const ArgSpec* specs, int n, int argc, char** argv, int* i) {
    const ArgSpec* spec = arg_find(specs, n, argv[*i]);
    if (spec == NULL) { return 0; }
    const char* value = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (spec->bare != NULL && (value == NULL || (value[0] == '-' && value[1] != '\0'))) {
        arg_parse_value(config, spec, spec->bare);
        return 1;
    }
    if (value == NULL) { fatal("flag %s: missing value", spec->flag); }
    arg_parse_value(config, spec, value);
    (*i)++;
    return 1;
}

#endif // LLMC_ARGS_H
