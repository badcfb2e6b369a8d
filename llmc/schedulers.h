/*
 * llmc/schedulers.h — learning-rate schedules: cosine, linear, constant, wsd (warmup-stable-decay).
 * Semantics of llm.c's train_gpt2cu, with `step` 0-based (the first training step is step 0):
 *   warm-up (all four): lr = peak * (step+1) / warmup for step < warmup;
 *   then, with p = (step - warmup) / (total - warmup) in [0, 1] and min = peak * final_frac,
 *   cosine:   min + 0.5 * (1 + cos(pi p)) * (peak - min)
 *   linear:   peak - p * (peak - min)
 *   constant: peak
 *   wsd:      peak until 80% of total, then min + (1 - sqrt(q)) * (peak - min), q the fraction of the last 20%.
 * Steps past `total` keep the final value. The only deviation from llm.c: constant also warms up.
 */
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>

typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD } LRScheduleKind;

typedef struct {
    LRScheduleKind kind;
    float peak_lr;
    int warmup;          // steps
    int total;           // steps in the schedule
    float final_frac;    // final lr = peak_lr * final_frac
} LRScheduler;

// parses "cosine" | "linear" | "constant" | "wsd"; returns 0 on success, -1 otherwise
static inline int lr_schedule_parse(const char* name, LRScheduleKind* kind) {
    if (strcmp(name, "cosine") == 0) { *kind = LR_COSINE; return 0; }
    if (strcmp(name, "linear") == 0) { *kind = LR_LINEAR; return 0; }
    if (strcmp(name, "constant") == 0) { *kind = LR_CONSTANT; return 0; }
    if (strcmp(name, "wsd") == 0) { *kind = LR_WSD; return 0; }
    return -1;
}

static inline const char* lr_schedule_name(LRScheduleKind kind) {
    switch (kind) {
        case LR_COSINE: return "cosine";
        case LR_LINEAR: return "linear";
        case LR_CONSTANT: return "constant";
        default: return "wsd";
    }
}

static inline void lr_scheduler_init(LRScheduler* s, LRScheduleKind kind, float peak_lr, int warmup, int total,
                                     float final_frac) {
    s->kind = kind;
    s->peak_lr = peak_lr;
    s->warmup = warmup;
    s->total = total;
    s->final_frac = final_frac;
}

static inline float clamp01(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// learning rate of 0-based step `step`
static inline float lr_scheduler_get(const LRScheduler* s, int step) {
    float peak = s->peak_lr;
    float min_lr = peak * s->final_frac;
    if (step < s->warmup) {
        return peak * ((float)(step + 1) / (float)s->warmup);
    }
    switch (s->kind) {
        case LR_CONSTANT:
            return peak;
        case LR_COSINE: {
            float p = s->total > s->warmup ? clamp01((float)(step - s->warmup) / (float)(s->total - s->warmup)) : 1.0f;
            return min_lr + 0.5f * (1.0f + cosf((float)M_PI * p)) * (peak - min_lr);
        }
        case LR_LINEAR: {
            float p = s->total > s->warmup ? clamp01((float)(step - s->warmup) / (float)(s->total - s->warmup)) : 1.0f;
            return peak - p * (peak - min_lr);
        }
        default: {  // LR_WSD
            int decay_start = (int)(0.8f * (float)s->total);
            if (decay_start < s->warmup) { decay_start = s->warmup; }
            if (step < decay_start) { return peak; }
            float q = s->total > decay_start ? clamp01((float)(step - decay_start) / (float)(s->total - decay_start)) : 1.0f;
            return min_lr + (1.0f - sqrtf(q)) * (peak - min_lr);
        }
    }
}

#endif // LLMC_SCHEDULERS_H
