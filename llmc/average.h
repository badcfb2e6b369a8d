/*
 * llmc/average.h — the weights to evaluate and keep, where a run keeps them apart from the weights it trains.
 * A run may train one set of weights and keep another: an exponential moving average of the weights (--ema),
 * or what a method keeps beside the point where it takes its gradients. The kept set lives in one buffer of
 * P fp32 values allocated at start-up; no second model exists. Evaluation, samples and the model file see it
 * through an exact in-place swap of that buffer with the parameters (average_swap), and swapping back gives
 * the trained weights again bit for bit. What a trainer derives from the parameters (the CPU's bf16 copy,
 * the GPU's floatX copy) is a pure function of the fp32 weights: rebuilt after each swap, it is exact too.
 *
 * The EMA, fused into the AdamW pass: after update t (AdamW's 1-based count, so skipped steps do not count)
 *   e_t = w_t p_t + (1 - w_t) e_{t-1},   w_t = (1 - beta) / (1 - beta^t)
 * which is the bias-corrected average sum_s beta^(t-s) (1 - beta) p_s / (1 - beta^t) over the weights after
 * each update, kept normalised: w_1 = 1 makes the first update's weights its start (the initial weights get
 * no share), and it needs no division when it is read. The buffer holds the initial weights before that, so
 * the kept weights always exist. beta is a constant per update; 1 / (1 - beta) is the span it averages over.
 *
 * A checkpoint's model file holds the kept weights (the file a user keeps; llm.c loads it); the state file
 * carries the trained ones (llmc/checkpoint.h, slot 109). Plain C; the element compiles as device code too.
 */
#ifndef LLMC_AVERAGE_H
#define LLMC_AVERAGE_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#include "llmc/utils.h"

#ifdef __CUDACC__
#define AVERAGE_FN static __host__ __device__ __forceinline__
#else
#define AVERAGE_FN static inline __attribute__((always_inline))  // as ADAMW_FN (llmc/adamw.h)
#endif

typedef struct {
    float* weights;     // (P) the other set: the kept weights while training runs, the trained ones while
                        // swapped in (host memory on the CPU, device memory on the GPU); NULL: none kept apart
    size_t n;           // P
    float ema_decay;    // beta of the EMA the AdamW pass updates (0: its owner fills `weights` itself)
    const char* label;  // names the kept weights in the logs: "ema" -> val_loss_ema
    int swapped;        // 1 while the parameters hold the kept weights
} WeightAverage;

// whether the run keeps weights apart from those it trains
static inline int average_on(const WeightAverage* a) { return a != NULL && a->weights != NULL; }

// the EMA's coefficients for update t: e = w p + k e, w = (1 - beta) / (1 - beta^t), k = 1 - w (in double on
// the host, then rounded once: every pass, CPU or GPU, gets the same two floats)
static inline void average_ema_coefs(float decay, int t, float* w, float* k) {
    double wd = (1.0 - (double)decay) / (1.0 - pow((double)decay, (double)t));
    *w = (float)wd;
    *k = (float)(1.0 - wd);
}

// one element of the EMA: the new average of avg after the update wrote p. One fma, so that a pass on any
// device rounds alike; with w = 1 (k = 0) it is p exactly.
AVERAGE_FN float average_ema_element(float avg, float p, float w, float k) { return fmaf(w, p, k * avg); }

// exchanges the parameters (n) with the other set, element by element: exact, no scratch. Host memory only (a
// GPU trainer swaps with its own kernel and flips `swapped` itself).
static inline void average_swap(WeightAverage* a, float* params) {
    float* o = a->weights;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < a->n; i++) { float x = params[i]; params[i] = o[i]; o[i] = x; }
    a->swapped = !a->swapped;
}

// the EMA of --ema DECAY on host memory: the buffer starts as a copy of the weights (n)
static inline void average_init_ema(WeightAverage* a, const float* params, size_t n, float decay) {
    memset(a, 0, sizeof(*a));
    if (decay <= 0.0f) { return; }
    a->weights = (float*)mallocCheck(n * sizeof(float));
    memcpy(a->weights, params, n * sizeof(float));
    a->n = n;
    a->ema_decay = decay;
    a->label = "ema";
}

static inline void average_free(WeightAverage* a) {
    free(a->weights);
    a->weights = NULL;
}

#endif // LLMC_AVERAGE_H
