/*
 * train_gpt2.c — GPT-2 training on the CPU in fp32, forward and backward written by hand (llm.c's model:
 * learned position embeddings, pre-LayerNorm blocks, tanh-GELU MLP, causal self-attention, lm_head tied
 * to wte, vocab padded to a multiple of 128).
 * Speed: every matrix multiply is a cblas_sgemm (OpenBLAS); everything else is OpenMP-parallel with static
 * schedules and loops written to vectorise. Deterministic: with the same thread count, the same run gives
 * the same bits (no atomics, no reductions whose order depends on timing).
 * Memory: one parameter buffer, one gradient buffer, AdamW's m and v, and one activation arena, all
 * allocated at start-up; the training loop allocates nothing.
 * Tests `#define TESTING` and `#include "../train_gpt2.c"` to reach the model API without main().
 */
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <cblas.h>
#include <omp.h>

#include "llmc/utils.h"
#include "llmc/args.h"
#include "llmc/rand.h"
#include "llmc/dataloader.h"
#include "llmc/schedulers.h"
#include "llmc/tokenizer.h"
#include "llmc/checkpoint.h"
#include "llmc/logger.h"
#include "hybrid/hybrid.h"

// ----------------------------------------------------------------------------
// exp and tanh that vectorise. libm's expf/tanhf are scalar calls, and the loss and the GELU would
// otherwise take a fifth of a step. expf_vec: range reduction x = n ln2 + r, |r| <= ln2/2, then a
// degree-7 polynomial (Cephes' expf coefficients); max error about 2 ulp. Inputs below -87.3 give 0,
// NaN gives NaN (the fault detector relies on it).

static inline float expf_vec(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    xc = xc == xc ? xc : 0.0f;  // NaN: keep the int conversion below defined; the result is NaN again
    // round(x / ln2) with the 1.5 * 2^23 trick: exact, branch-free, vectorisable
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return x < -87.3f ? 0.0f : (x == x ? p * scale : x);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits +-1, absolute error ~1e-7 near 0
static inline float tanhf_vec(float u) {
    return 1.0f - 2.0f / (expf_vec(2.0f * u) + 1.0f);
}

// ----------------------------------------------------------------------------
// matrix multiplies: one pool of threads. OpenBLAS runs single-threaded inside OpenMP's threads, each
// thread computing a fixed slice of the output, so no second pool of BLAS threads competes with
// OpenMP's for the cores, and results depend only on the thread count.

static int blas_single_threaded = 0;
static inline void blas_init(void) {
    if (!blas_single_threaded) { openblas_set_num_threads(1); blas_single_threaded = 1; }
}

// [lo, hi) of thread tid's share of n items, boundaries on multiples of 16 (whole cache lines)
static inline void split_range(int n, int tid, int nth, int* lo, int* hi) {
    int blocks = (n + 15) / 16;
    *lo = (int)((long)blocks * tid / nth) * 16;
    *hi = (int)((long)blocks * (tid + 1) / nth) * 16;
    if (*lo > n) { *lo = n; }
    if (*hi > n) { *hi = n; }
}

// C (M,N) = alpha op(A) op(B) + beta C, row-major; op(X) = X^T when transX. The larger of M and N is
// split over the threads.
void sgemm(int transA, int transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
    blas_init();
    enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
    int split_n = N > M;
    #pragma omp parallel
    {
        int lo, hi;
        split_range(split_n ? N : M, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo && split_n) {
            const float* b = transB ? B + (size_t)lo * ldb : B + lo;
            cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
        } else if (hi > lo) {
            const float* a = transA ? A + lo : A + (size_t)lo * lda;
            cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)lo * ldc, ldc);
        }
    }
}

// ----------------------------------------------------------------------------
// the layers, forward and backward. Shapes: B batch, T time, C channels, OC output channels,
// NH heads, Vp padded vocab. Backward functions accumulate (+=) into parameter gradients.

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// out: (B,T,C) = wte[inp] + wpe[t]; inp: (B,T)
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* we = wte + (size_t)inp[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) { o[c] = we[c] + pe[c]; }
        }
    }
}

// dwte: (Vp,C), dwpe: (maxT,C), dout: (B,T,C). Threads own channel ranges, so rows of repeated
// tokens are summed in a fixed order without atomics.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    #pragma omp parallel
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int c0 = C * tid / nth, c1 = C * (tid + 1) / nth;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float* d = dout + ((size_t)b * T + t) * C;
                float* we = dwte + (size_t)inp[b * T + t] * C;
                float* pe = dwpe + (size_t)t * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) { we[c] += d[c]; pe[c] += d[c]; }
            }
        }
    }
}

// out: (N,C) = (inp - mean) * rstd * weight + bias per row; mean, rstd: (N) saved for backward
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int c = 0; c < C; c++) { sum += x[c]; }
        float m = sum / C;
        float var = 0.0f;
        #pragma omp simd reduction(+:var)
        for (int c = 0; c < C; c++) { float d = x[c] - m; var += d * d; }
        float s = 1.0f / sqrtf(var / C + 1e-5f);
        float* o = out + (size_t)n * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) { o[c] = (x[c] - m) * s * weight[c] + bias[c]; }
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp: (N,C) +=, dweight/dbias: (C) +=; dout, inp: (N,C)
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    #pragma omp parallel
    {
        // input gradient: rows are independent
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            #pragma omp simd reduction(+:dnorm_mean, dnorm_norm_mean)
            for (int c = 0; c < C; c++) {
                float dnorm = weight[c] * d[c];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * (x[c] - m) * s;
            }
            dnorm_mean /= C;
            dnorm_norm_mean /= C;
            float* di = dinp + (size_t)n * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * s;
                di[c] += (weight[c] * d[c] - dnorm_mean - xhat * dnorm_norm_mean) * s;
            }
        }
        // weight gradients: threads own channel ranges and sum rows in order
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int c0 = C * tid / nth, c1 = C * (tid + 1) / nth;
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            #pragma omp simd
            for (int c = c0; c < c1; c++) {
                dweight[c] += d[c] * ((x[c] - m) * s);
                dbias[c] += d[c];
            }
        }
    }
}

// out: (N,OC) = inp (N,C) @ weight(OC,C)^T + bias(OC) [+ residual (N,OC) when not NULL]
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, const float* residual,
                    int N, int C, int OC) {
    // the bias (and residual) go in first, the GEMM accumulates on top (beta = 1)
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + (size_t)n * OC;
        if (residual != NULL) {
            const float* r = residual + (size_t)n * OC;
            #pragma omp simd
            for (int i = 0; i < OC; i++) { o[i] = r[i] + bias[i]; }
        } else {
            #pragma omp simd
            for (int i = 0; i < OC; i++) { o[i] = bias[i]; }
        }
    }
    sgemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
}

// out[c] += sum over rows of in (N,cols); threads own column ranges, rows are summed in order
void colsum_accumulate(float* out, const float* in, int N, int cols) {
    #pragma omp parallel
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int c0 = cols * tid / nth, c1 = cols * (tid + 1) / nth;
        for (int n = 0; n < N; n++) {
            const float* row = in + (size_t)n * cols;
            #pragma omp simd
            for (int c = c0; c < c1; c++) { out[c] += row[c]; }
        }
    }
}

// dinp: (N,C) = dout (N,OC) @ weight (OC,C) (overwritten); dweight (OC,C) += dout^T @ inp; dbias (OC) +=
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
    sgemm(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias != NULL) { colsum_accumulate(dbias, dout, N, OC); }
}

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over n
void gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf_vec(u));
    }
}

// d (n) holds dout on entry and dinp on exit; inp: the GELU's input
void gelu_backward_inplace(float* d, const float* inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf_vec(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        d[i] *= grad;
    }
}

// causal self-attention. qkv: (B,T,3C) with q, k, v each (NH heads of hs = C/NH);
// att: (B,NH,T,T) softmax probabilities, zero above the diagonal; out: (B,T,C).
// Parallel over (b, h); within a head, the products are single-threaded GEMMs on strided views of qkv.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    blas_init();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* a = att + ((size_t)b * NH + h) * T * T;
            // scores = scale * q @ k^T (T,T); the upper triangle is computed and then masked
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
            for (int t = 0; t < T; t++) {
                float* row = a + (size_t)t * T;
                float maxval = -FLT_MAX;
                for (int t2 = 0; t2 <= t; t2++) { maxval = row[t2] > maxval ? row[t2] : maxval; }
                float sum = 0.0f;
                #pragma omp simd reduction(+:sum)
                for (int t2 = 0; t2 <= t; t2++) { float e = expf_vec(row[t2] - maxval); row[t2] = e; sum += e; }
                float inv = 1.0f / sum;
                #pragma omp simd
                for (int t2 = 0; t2 <= t; t2++) { row[t2] *= inv; }
                for (int t2 = t + 1; t2 < T; t2++) { row[t2] = 0.0f; }
            }
            // out = att @ v (T,hs)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, C3, 0.0f,
                        out + (size_t)b * T * C + h * hs, C);
        }
    }
}

// dqkv: (B,T,3C) overwritten; dout: (B,T,C); scratch: (threads, T) one row of datt per thread.
// att holds the probabilities on entry and is overwritten with d(scores), which the last two GEMMs use.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, float* att,
                        int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    blas_init();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float* datt = scratch + (size_t)omp_get_thread_num() * T;
            const float* q = qkv + (size_t)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* dq = dqkv + (size_t)b * T * C3 + h * hs;
            float* dk = dq + C;
            float* dv = dq + 2 * C;
            const float* d = dout + (size_t)b * T * C + h * hs;
            float* a = att + ((size_t)b * NH + h) * T * T;
            // dv = att^T @ dout
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, d, C, 0.0f, dv, C3);
            // row by row: datt = dout[t] @ v^T, then through the softmax, in place
            for (int t = 0; t < T; t++) {
                float* row = a + (size_t)t * T;
                cblas_sgemv(CblasRowMajor, CblasNoTrans, t + 1, hs, 1.0f, v, C3, d + (size_t)t * C, 1, 0.0f, datt, 1);
                float dsum = 0.0f;
                #pragma omp simd reduction(+:dsum)
                for (int t2 = 0; t2 <= t; t2++) { dsum += row[t2] * datt[t2]; }
                #pragma omp simd
                for (int t2 = 0; t2 <= t; t2++) { row[t2] = row[t2] * (datt[t2] - dsum) * scale; }
            }
            // dq = dscores @ k, dk = dscores^T @ q (dscores is zero above the diagonal)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, k, C3, 0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, q, C3, 0.0f, dk, C3);
        }
    }
}

// the lm_head's loss, fused with the softmax: logits (N,Vp), only the first V columns are real.
// Writes lse (N) = log sum exp of each row and losses (N) = lse - logit[target]; the probabilities are
// never stored, the backward recomputes them in place as it turns logits into dlogits.
void crossentropy_forward(float* losses, float* lse, const float* logits, const int* targets, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = logits + (size_t)n * Vp;
        float maxval = -FLT_MAX;
        #pragma omp simd reduction(max:maxval)
        for (int i = 0; i < V; i++) { maxval = x[i] > maxval ? x[i] : maxval; }
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int i = 0; i < V; i++) { sum += expf_vec(x[i] - maxval); }
        lse[n] = maxval + logf(sum);
        losses[n] = lse[n] - x[targets[n]];
    }
}

// logits (N,Vp) -> dlogits in place: (softmax - onehot(target)) * dloss, padded columns 0
void crossentropy_softmax_backward_inplace(float* logits, const float* lse, const int* targets, float dloss,
                                           int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* x = logits + (size_t)n * Vp;
        float l = lse[n];
        #pragma omp simd
        for (int i = 0; i < V; i++) { x[i] = expf_vec(x[i] - l) * dloss; }
        for (int i = V; i < Vp; i++) { x[i] = 0.0f; }
        x[targets[n]] -= dloss;
    }
}

// ----------------------------------------------------------------------------
// GPT-2 model

// GPT2Config (max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels) and the
// parameter layout are part of the checkpoint format: llmc/checkpoint.h

typedef struct {
    float* wte;      // (Vp, C)
    float* wpe;      // (maxT, C)
    float* ln1w;     // (L, C)
    float* ln1b;     // (L, C)
    float* qkvw;     // (L, 3*C, C)
    float* qkvb;     // (L, 3*C)
    float* attprojw; // (L, C, C)
    float* attprojb; // (L, C)
    float* ln2w;     // (L, C)
    float* ln2b;     // (L, C)
    float* fcw;      // (L, 4*C, C)
    float* fcb;      // (L, 4*C)
    float* fcprojw;  // (L, C, 4*C)
    float* fcprojb;  // (L, C)
    float* lnfw;     // (C)
    float* lnfb;     // (C)
} ParameterTensors;

static void point_parameters(ParameterTensors* p, const size_t sizes[NUM_PARAMETER_TENSORS], float* memory) {
    float** ptrs[NUM_PARAMETER_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb,
        &p->attprojw, &p->attprojb, &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb,
        &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { *(ptrs[i]) = memory; memory += sizes[i]; }
}

// weight decay applies to the 2-D weights only (llm.c): wte, wpe, qkvw, attprojw, fcw, fcprojw
static const int PARAM_DECAYS[NUM_PARAMETER_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// Activations for (B, T) at allocation; per-layer tensors are strided by the allocated size so that
// a forward at smaller (B, T) (sampling) reuses the same arena. The backward needs only three
// scratch tensors because it walks the layers in reverse, accumulating into dresidual.
#define NUM_ACTIVATION_TENSORS 23
typedef struct {
    float* encoded;   // (B, T, C)
    float* ln1;       // (L, B, T, C)
    float* ln1_mean;  // (L, B, T)
    float* ln1_rstd;  // (L, B, T)
    float* qkv;       // (L, B, T, 3*C)
    float* att;       // (L, B, NH, T, T) softmax probabilities
    float* atty;      // (L, B, T, C)
    float* residual2; // (L, B, T, C)
    float* ln2;       // (L, B, T, C)
    float* ln2_mean;  // (L, B, T)
    float* ln2_rstd;  // (L, B, T)
    float* fch;       // (L, B, T, 4*C)
    float* fch_gelu;  // (L, B, T, 4*C)
    float* residual3; // (L, B, T, C)
    float* lnf;       // (B, T, C)
    float* lnf_mean;  // (B, T)
    float* lnf_rstd;  // (B, T)
    float* logits;    // (B, T, Vp); dlogits after the backward
    float* lse;       // (B, T) log-sum-exp of each logits row
    float* losses;    // (B, T)
    float* dresidual; // (B, T, C) backward: gradient of the residual stream
    float* dbuf_c;    // (B, T, C) backward scratch
    float* dbuf_4c;   // (B, T, 4*C) backward scratch (also dqkv, (B, T, 3*C))
    // not counted in NUM_ACTIVATION_TENSORS: per-thread attention scratch
    float* att_scratch; // (threads, T)
} ActivationTensors;

typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float* params_memory;
    size_t num_parameters;
    ParameterTensors grads;
    float* grads_memory;
    float* m_memory;
    float* v_memory;
    ActivationTensors acts;
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float* acts_memory;
    size_t num_activations;
    int batch_size;   // B of the allocation
    int seq_len;      // T of the allocation
    int cur_B, cur_T; // of the last forward
    const int* targets; // of the last forward (NULL: no loss)
    float mean_loss;  // of the last forward with targets, -1 otherwise
    int num_threads;
} GPT2;

static void gpt2_setup_params(GPT2* model) {
    GPT2Config* c = &model->config;
    if (c->channels % c->num_heads != 0) { fatal("model: channels %d not divisible by heads %d", c->channels, c->num_heads); }
    gpt2_param_sizes(model->param_sizes, c);
    model->num_parameters = gpt2_num_parameters(c);
    model->params_memory = (float*)mallocCheck(model->num_parameters * sizeof(float));
    point_parameters(&model->params, model->param_sizes, model->params_memory);
    model->grads_memory = NULL;
    model->m_memory = NULL;
    model->v_memory = NULL;
    model->acts_memory = NULL;
    model->batch_size = 0;
    model->seq_len = 0;
    model->mean_loss = -1.0f;
}

void gpt2_build_from_checkpoint(GPT2* model, const char* checkpoint_path) {
    model_read_header(checkpoint_path, &model->config);
    gpt2_setup_params(model);
    model_read_params(checkpoint_path, model->params_memory, model->num_parameters);
}

// llm.c's init: N(0, 0.02) for the 2-D weights, residual projections (attprojw, fcprojw) scaled by
// 1/sqrt(2L), LayerNorm weights 1, biases 0, padded wte rows 0. Tensors are drawn in file order from
// one xorshift* stream seeded with `seed`, through Box-Muller (llmc/rand.h).
void gpt2_build_from_random(GPT2* model, int depth, int vocab_size, uint64_t seed) {
    if (depth <= 0 || vocab_size <= 0) { fatal("model: depth %d and vocab %d must be positive", depth, vocab_size); }
    GPT2Config* c = &model->config;
    c->max_seq_len = 1024;
    c->vocab_size = vocab_size;
    c->padded_vocab_size = (vocab_size + 127) / 128 * 128;
    c->num_layers = depth;
    c->num_heads = depth;
    c->channels = 64 * depth;
    gpt2_setup_params(model);
    uint64_t rng = random_state(seed, 0);
    float residual_std = 0.02f / sqrtf(2.0f * depth);
    ParameterTensors* p = &model->params;
    size_t C = c->channels;
    memset(model->params_memory, 0, model->num_parameters * sizeof(float));
    normal_fill(p->wte, (size_t)vocab_size * C, 0.0f, 0.02f, &rng);
    normal_fill(p->wpe, model->param_sizes[1], 0.0f, 0.02f, &rng);
    for (size_t i = 0; i < model->param_sizes[2]; i++) { p->ln1w[i] = 1.0f; }
    normal_fill(p->qkvw, model->param_sizes[4], 0.0f, 0.02f, &rng);
    normal_fill(p->attprojw, model->param_sizes[6], 0.0f, residual_std, &rng);
    for (size_t i = 0; i < model->param_sizes[8]; i++) { p->ln2w[i] = 1.0f; }
    normal_fill(p->fcw, model->param_sizes[10], 0.0f, 0.02f, &rng);
    normal_fill(p->fcprojw, model->param_sizes[12], 0.0f, residual_std, &rng);
    for (size_t i = 0; i < C; i++) { p->lnfw[i] = 1.0f; }
}

// allocates gradients, AdamW state and activations for batches up to (B, T), once
void gpt2_allocate(GPT2* model, int B, int T) {
    GPT2Config* c = &model->config;
    if (B <= 0 || T <= 0 || T > c->max_seq_len || (size_t)B * T > (1u << 24)) {
        fatal("model: cannot allocate for B=%d T=%d (max sequence length %d)", B, T, c->max_seq_len);
    }
    if (model->acts_memory != NULL) { fatal("model: gpt2_allocate called twice"); }
    size_t L = c->num_layers, NH = c->num_heads, C = c->channels, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    size_t* s = model->act_sizes;
    s[0] = BT * C;            // encoded
    s[1] = L * BT * C;        // ln1
    s[2] = L * BT;            // ln1_mean
    s[3] = L * BT;            // ln1_rstd
    s[4] = L * BT * 3 * C;    // qkv
    s[5] = L * B * NH * (size_t)T * T; // att
    s[6] = L * BT * C;        // atty
    s[7] = L * BT * C;        // residual2
    s[8] = L * BT * C;        // ln2
    s[9] = L * BT;            // ln2_mean
    s[10] = L * BT;           // ln2_rstd
    s[11] = L * BT * 4 * C;   // fch
    s[12] = L * BT * 4 * C;   // fch_gelu
    s[13] = L * BT * C;       // residual3
    s[14] = BT * C;           // lnf
    s[15] = BT;               // lnf_mean
    s[16] = BT;               // lnf_rstd
    s[17] = BT * Vp;          // logits
    s[18] = BT;               // lse
    s[19] = BT;               // losses
    s[20] = BT * C;           // dresidual
    s[21] = BT * C;           // dbuf_c
    s[22] = BT * 4 * C;       // dbuf_4c
    model->num_threads = omp_get_max_threads();
    size_t scratch = (size_t)model->num_threads * T;
    size_t total = scratch;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { total += s[i]; }
    model->num_activations = total;
    model->acts_memory = (float*)mallocCheck(total * sizeof(float));
    // first touch in parallel, so pages land where the threads that use them run
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < total; i++) { model->acts_memory[i] = 0.0f; }
    float** ptrs[NUM_ACTIVATION_TENSORS] = {&model->acts.encoded, &model->acts.ln1, &model->acts.ln1_mean,
        &model->acts.ln1_rstd, &model->acts.qkv, &model->acts.att, &model->acts.atty, &model->acts.residual2,
        &model->acts.ln2, &model->acts.ln2_mean, &model->acts.ln2_rstd, &model->acts.fch, &model->acts.fch_gelu,
        &model->acts.residual3, &model->acts.lnf, &model->acts.lnf_mean, &model->acts.lnf_rstd,
        &model->acts.logits, &model->acts.lse, &model->acts.losses, &model->acts.dresidual,
        &model->acts.dbuf_c, &model->acts.dbuf_4c};
    float* mem = model->acts_memory;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { *(ptrs[i]) = mem; mem += s[i]; }
    model->acts.att_scratch = mem;
    model->grads_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    point_parameters(&model->grads, model->param_sizes, model->grads_memory);
    model->m_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    model->v_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    model->batch_size = B;
    model->seq_len = T;
}

// inputs, targets: (B, T) token ids; targets may be NULL (logits only, mean_loss = -1).
// After it: acts.logits (B,T,Vp) and, with targets, acts.losses (B,T) and mean_loss.
void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2Config* c = &model->config;
    if (model->acts_memory == NULL) { fatal("model: gpt2_forward before gpt2_allocate"); }
    if (B <= 0 || T <= 0 || B > model->batch_size || T > model->seq_len || (size_t)B * T > (size_t)model->batch_size * model->seq_len) {
        fatal("model: forward with B=%d T=%d, allocated for B=%d T=%d", B, T, model->batch_size, model->seq_len);
    }
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets != NULL && (targets[i] < 0 || targets[i] >= V))) {
            fatal("model: token id out of range [0, %d) at position %d", V, i);
        }
    }
    model->cur_B = B;
    model->cur_T = T;
    model->targets = targets;
    size_t BT = (size_t)B * T, ABT = (size_t)model->batch_size * model->seq_len;  // ABT: layer stride
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * ABT * C;
        float* ln1 = a.ln1 + l * ABT * C;
        float* qkv = a.qkv + l * ABT * 3 * C;
        float* att = a.att + l * ABT * NH * model->seq_len;
        float* atty = a.atty + l * ABT * C;
        float* residual2 = a.residual2 + l * ABT * C;
        float* ln2 = a.ln2 + l * ABT * C;
        float* fch = a.fch + l * ABT * 4 * C;
        float* fch_gelu = a.fch_gelu + l * ABT * 4 * C;
        float* residual3 = a.residual3 + l * ABT * C;
        layernorm_forward(ln1, a.ln1_mean + l * ABT, a.ln1_rstd + l * ABT, residual, p.ln1w + l * C, p.ln1b + l * C, BT, C);
        matmul_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, NULL, BT, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(residual2, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, residual, BT, C, C);
        layernorm_forward(ln2, a.ln2_mean + l * ABT, a.ln2_rstd + l * ABT, residual2, p.ln2w + l * C, p.ln2b + l * C, BT, C);
        matmul_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, NULL, BT, C, 4 * C);
        gelu_forward(fch_gelu, fch, BT * 4 * C);
        matmul_forward(residual3, fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, residual2, BT, 4 * C, C);
    }
    const float* last = a.residual3 + (L - 1) * ABT * C;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, last, p.lnfw, p.lnfb, BT, C);
    // lm_head tied to wte: logits (BT, Vp) = lnf @ wte^T
    sgemm(0, 1, BT, Vp, C, 1.0f, a.lnf, C, p.wte, C, 0.0f, a.logits, Vp);
    if (targets != NULL) {
        crossentropy_forward(a.losses, a.lse, a.logits, targets, BT, V, Vp);
        double sum = 0.0;  // in order: deterministic
        for (size_t i = 0; i < BT; i++) { sum += a.losses[i]; }
        model->mean_loss = (float)(sum / BT);
    } else {
        model->mean_loss = -1.0f;
    }
}

void gpt2_zero_grad(GPT2* model) {
    if (model->grads_memory == NULL) { return; }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < model->num_parameters; i++) { model->grads_memory[i] = 0.0f; }
}

// Accumulates (+=) into grads the gradient of dloss_scale * mean loss of the last forward, i.e. each
// position's loss gets weight dloss_scale / (B*T). With gradient accumulation over k micro batches,
// dloss_scale = 1/k gives the gradient of the mean loss over all of them. inputs and targets must be
// those of the last forward. Overwrites acts.logits with dlogits.
void gpt2_backward(GPT2* model, const int* inputs, const int* targets, float dloss_scale) {
    if (model->targets == NULL || targets == NULL) { fatal("model: gpt2_backward needs a forward with targets"); }
    GPT2Config* c = &model->config;
    int B = model->cur_B, T = model->cur_T;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, ABT = (size_t)model->batch_size * model->seq_len;
    ParameterTensors p = model->params;
    ParameterTensors g = model->grads;
    ActivationTensors a = model->acts;
    // fused softmax + cross-entropy backward, then the lm_head
    crossentropy_softmax_backward_inplace(a.logits, a.lse, targets, dloss_scale / (float)BT, BT, V, Vp);
    sgemm(0, 0, BT, C, Vp, 1.0f, a.logits, Vp, p.wte, C, 0.0f, a.dbuf_c, C);
    sgemm(1, 0, Vp, C, BT, 1.0f, a.logits, Vp, a.lnf, C, 1.0f, g.wte, C);
    memset(a.dresidual, 0, BT * C * sizeof(float));
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, a.dbuf_c, a.residual3 + (L - 1) * ABT * C, p.lnfw,
                       a.lnf_mean, a.lnf_rstd, BT, C);
    for (int l = L - 1; l >= 0; l--) {
        const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * ABT * C;
        const float* ln1 = a.ln1 + l * ABT * C;
        const float* qkv = a.qkv + l * ABT * 3 * C;
        float* att = a.att + l * ABT * NH * model->seq_len;
        const float* atty = a.atty + l * ABT * C;
        const float* residual2 = a.residual2 + l * ABT * C;
        const float* ln2 = a.ln2 + l * ABT * C;
        const float* fch = a.fch + l * ABT * 4 * C;
        const float* fch_gelu = a.fch_gelu + l * ABT * 4 * C;
        // dresidual holds d(residual3[l]) here
        matmul_backward(a.dbuf_4c, g.fcprojw + (size_t)l * C * 4 * C, g.fcprojb + l * C, a.dresidual, fch_gelu,
                        p.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C);
        gelu_backward_inplace(a.dbuf_4c, fch, BT * 4 * C);
        matmul_backward(a.dbuf_c, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, a.dbuf_4c, ln2,
                        p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
        layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, a.dbuf_c, residual2, p.ln2w + l * C,
                           a.ln2_mean + l * ABT, a.ln2_rstd + l * ABT, BT, C);
        // dresidual holds d(residual2[l]) here
        matmul_backward(a.dbuf_c, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, a.dresidual, atty,
                        p.attprojw + (size_t)l * C * C, BT, C, C);
        float* dqkv = a.dbuf_4c;  // (B, T, 3C)
        attention_backward(dqkv, a.att_scratch, a.dbuf_c, qkv, att, B, T, C, NH);
        matmul_backward(a.dbuf_c, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, dqkv, ln1,
                        p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
        layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, a.dbuf_c, residual, p.ln1w + l * C,
                           a.ln1_mean + l * ABT, a.ln1_rstd + l * ABT, BT, C);
    }
    encoder_backward(g.wte, g.wpe, a.dresidual, inputs, B, T, C);
}

// global L2 norm of the gradients: fixed chunks summed in double, chunk sums added in order,
// so the result does not depend on thread timing
#define NORM_CHUNKS 64
float gpt2_grad_norm(GPT2* model) {
    double partial[NORM_CHUNKS];
    size_t n = model->num_parameters;
    const float* g = model->grads_memory;
    #pragma omp parallel for schedule(static)
    for (int k = 0; k < NORM_CHUNKS; k++) {
        size_t i0 = n * k / NORM_CHUNKS, i1 = n * (k + 1) / NORM_CHUNKS;
        double acc = 0.0;
        #pragma omp simd reduction(+:acc)
        for (size_t i = i0; i < i1; i++) { acc += (double)g[i] * g[i]; }
        partial[k] = acc;
    }
    double total = 0.0;
    for (int k = 0; k < NORM_CHUNKS; k++) { total += partial[k]; }
    return (float)sqrt(total);
}

// AdamW step t (1-based) on every parameter with gradient grads * grad_scale (grad_scale < 1 clips).
// Decoupled weight decay on the 2-D weights only (PARAM_DECAYS).
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int t) {
    if (model->m_memory == NULL) { fatal("model: gpt2_update before gpt2_allocate"); }
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        float wd = PARAM_DECAYS[k] ? weight_decay : 0.0f;
        float* p = model->params_memory + offset;
        const float* g = model->grads_memory + offset;
        float* m = model->m_memory + offset;
        float* v = model->v_memory + offset;
        size_t n = model->param_sizes[k];
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float grad = g[i] * grad_scale;
            float mi = beta1 * m[i] + (1.0f - beta1) * grad;
            float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
            m[i] = mi;
            v[i] = vi;
            float mhat = mi / bc1, vhat = vi / bc2;
            p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
        }
        offset += n;
    }
}

void gpt2_free(GPT2* model) {
    free(model->params_memory);
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    free(model->acts_memory);
    model->params_memory = model->grads_memory = model->m_memory = model->v_memory = model->acts_memory = NULL;
}

// hybrid mode's parameter blocks: each tensor of each layer, 12 L + 4 blocks. offsets: (12L+5) in
// floats; weight_decay: (12L+4), the AdamW decay each block gets (wd on the 2-D weights, else 0)
void gpt2_hybrid_blocks(const GPT2* model, size_t* offsets, float* weight_decay, float wd) {
    int L = model->config.num_layers, nb = 0;
    size_t off = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        int per_layer = k >= 2 && k < NUM_PARAMETER_TENSORS - 2;  // wte, wpe, lnfw, lnfb are one block each
        int parts = per_layer ? L : 1;
        for (int l = 0; l < parts; l++) {
            offsets[nb] = off;
            weight_decay[nb] = PARAM_DECAYS[k] ? wd : 0.0f;
            off += model->param_sizes[k] / parts;
            nb++;
        }
    }
    offsets[nb] = off;
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// command line: one table gives the parser, the usage text and the defaults

typedef struct {
    const char* train_pattern; // -i
    const char* val_pattern;   // -j
    const char* init;          // -e: model file, or dN
    const char* output_dir;    // -o (NULL: no logs, no checkpoints)
    int B;                     // -b
    int T;                     // -t
    int total_batch;           // -d tokens per step (-1: B*T)
    int max_steps;             // -x (-1: one epoch)
    float lr;                  // -l peak learning rate
    int warmup;                // -u
    float final_frac;          // -q
    const char* schedule;      // -k
    float weight_decay;        // -c
    int val_every;             // -v (0: off)
    int val_batches;           // -m (-1: all)
    int sample_every;          // -s (0: off)
    int sample_tokens;         // -g
    int ckpt_every;            // -n (0: off)
    int ckpt_keep;             // -nk (0: all)
    int resume;                // -y
    int overfit;               // -a
    long long seed;            // --seed
    const char* tokenizer;     // --tokenizer
    HybridConfig hybrid;       // --hybrid, --predictor, ... (hybrid/hybrid.h)
} TrainConfig;

static TrainConfig default_config(void) {
    TrainConfig c;
    c.train_pattern = "data/default/train_*.bin";
    c.val_pattern = "data/default/val_*.bin";
    c.init = "d6";
    c.output_dir = NULL;
    c.B = 4;
    c.T = 64;
    c.total_batch = -1;
    c.max_steps = -1;
    c.lr = 3e-4f;
    c.warmup = 0;
    c.final_frac = 1.0f;
    c.schedule = "cosine";
    c.weight_decay = 0.0f;
    c.val_every = 20;
    c.val_batches = 20;
    c.sample_every = 20;
    c.sample_tokens = 64;
    c.ckpt_every = 0;
    c.ckpt_keep = 0;
    c.resume = 0;
    c.overfit = 0;
    c.seed = 1337;
    c.tokenizer = "data/gpt2_tokenizer.bin";
    hybrid_config_default(&c.hybrid);
    return c;
}


static const ArgSpec ARGS[] = {
    ARG("-i", ARG_STR, TrainConfig, train_pattern, 0, 0, 0, "train data shards (glob)"),
    ARG("-j", ARG_STR, TrainConfig, val_pattern, 0, 0, 0, "val data shards (glob)"),
    ARG("-e", ARG_STR, TrainConfig, init, 0, 0, 0, "init: llm.c model file (v3 fp32), or dN = random init, depth N (C=64N, N heads)"),
    ARG("-o", ARG_STR, TrainConfig, output_dir, 0, 0, 0, "output dir: main.log, metrics.jsonl, summary.json, checkpoints"),
    ARG("-b", ARG_INT, TrainConfig, B, 1, 1 << 20, 0, "micro batch size B"),
    ARG("-t", ARG_INT, TrainConfig, T, 1, 1 << 20, 0, "sequence length T (at most the model's max, 1024 for dN)"),
    ARG("-d", ARG_INT, TrainConfig, total_batch, 1, 1 << 30, 1, "total batch in tokens per step (multiple of B*T; -1: B*T)"),
    ARG("-x", ARG_INT, TrainConfig, max_steps, 1, 1 << 30, 1, "number of steps (-1: one epoch of the train data)"),
    ARG("-l", ARG_FLOAT, TrainConfig, lr, 0, 1e3, 0, "peak learning rate"),
    ARG("-u", ARG_INT, TrainConfig, warmup, 0, 1 << 30, 0, "warm-up steps"),
    ARG("-q", ARG_FLOAT, TrainConfig, final_frac, 0, 1, 0, "final learning rate as a fraction of the peak"),
    ARG("-k", ARG_STR, TrainConfig, schedule, 0, 0, 0, "learning rate schedule: cosine | linear | constant | wsd"),
    ARG("-c", ARG_FLOAT, TrainConfig, weight_decay, 0, 1e3, 0, "weight decay (2-D weights only)"),
    ARG("-v", ARG_INT, TrainConfig, val_every, 0, 1 << 30, 0, "val loss every N steps (0: off)"),
    ARG("-m", ARG_INT, TrainConfig, val_batches, 1, 1 << 30, 1, "val batches per evaluation (-1: all)"),
    ARG("-s", ARG_INT, TrainConfig, sample_every, 0, 1 << 30, 0, "sample text every N steps (0: off)"),
    ARG("-g", ARG_INT, TrainConfig, sample_tokens, 1, 1 << 20, 0, "tokens per sample (past T, the model sees the last T)"),
    ARG("-n", ARG_INT, TrainConfig, ckpt_every, 0, 1 << 30, 0, "checkpoint every N steps and at the end (0: off; needs -o)"),
    ARG("-nk", ARG_INT, TrainConfig, ckpt_keep, 0, 1 << 30, 0, "keep only the last K checkpoints (0: all)"),
    ARG("-y", ARG_INT, TrainConfig, resume, 0, 1, 0, "resume from the latest complete checkpoint in -o (0|1)"),
    ARG("-a", ARG_INT, TrainConfig, overfit, 0, 1, 0, "overfit a single batch (0|1)"),
    ARG("--seed", ARG_I64, TrainConfig, seed, 0, 9.2e18, 0, "seed of the random init, data order and sampling"),
    ARG("--tokenizer", ARG_STR, TrainConfig, tokenizer, 0, 0, 0, "tokenizer for decoding samples (missing: print ids)"),
};
#define NUM_ARGS ((int)(sizeof(ARGS) / sizeof(ARGS[0])))

static void print_usage(FILE* out) {
    TrainConfig d = default_config();
    fprintf(out, "usage: ./train_gpt2 [options]   (GPT-2 training on the CPU, fp32; llm.c's flags)\n");
    arg_print_usage(out, ARGS, NUM_ARGS, &d);
    hybrid_usage(out);
    fprintf(out, "  -h, --help            this text\n");
    fprintf(out, "Example: ./train_gpt2 -e d6 -b 8 -t 256 -x 50 -o out/d6\n");
}

static void parse_args(TrainConfig* c, int argc, char** argv) {
    *c = default_config();
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) { print_usage(stdout); exit(EXIT_SUCCESS); }
        // hybrid mode's flags (--hybrid, --predictor, ...) are matched here, by hybrid/hybrid.h's parser,
        // before the trainer's own table
        if (hybrid_parse_flag(&c->hybrid, argc, argv, &i)) { continue; }
        const ArgSpec* spec = arg_find(ARGS, NUM_ARGS, flag);
        if (spec == NULL) { fatal("unknown flag '%s' (./train_gpt2 -h lists the flags)", flag); }
        if (i + 1 >= argc) { fatal("flag %s: missing value", flag); }
        arg_parse_value(c, spec, argv[++i]);
    }
    LRScheduleKind kind;
    if (lr_schedule_parse(c->schedule, &kind) != 0) {
        fatal("flag -k: expected cosine, linear, constant or wsd, got '%s'", c->schedule);
    }
    if (c->resume && c->output_dir == NULL) { fatal("flag -y: resuming needs the checkpoint dir (-o)"); }
    if ((long long)c->B * c->T > (1 << 24)) {
        fatal("flag -b: B*T = %lld tokens per micro batch is more than this trainer supports (%d)",
              (long long)c->B * c->T, 1 << 24);
    }
    if (c->total_batch != -1 && c->total_batch % (c->B * c->T) != 0) {
        fatal("flag -d: total batch %d is not a multiple of B*T = %d", c->total_batch, c->B * c->T);
    }
}

// ----------------------------------------------------------------------------
// the trainer: model, data, schedule, logs, and the counters a checkpoint saves

// MFU reference: OpenBLAS SGEMM (2048^3, fp32) per core on the development machine (290 GFLOP/s on
// 2 threads). `make bench` measures the real peak next to the trainer.
#define CPU_PEAK_GFLOPS_PER_THREAD 145.0
#define MAX_FAULTS 5                 // consecutive NaN/Inf steps before giving up
#define GRAD_CLIP 1.0f
#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.95f
#define ADAM_EPS 1e-8f

typedef struct {
    TrainConfig cfg;
    GPT2 model;
    DataLoader train_loader;
    DataLoader val_loader;
    int has_val;
    LRScheduler scheduler;
    Tokenizer tokenizer;
    Logger logger;
    int grad_accum;           // micro batches per step
    int total_steps;
    // counters, saved in the state file
    int step;                 // steps completed
    int adam_steps;           // AdamW updates applied
    uint64_t sample_rng;
    uint64_t tokens;          // train tokens consumed
    uint64_t backward;        // backward passes (micro batches)
    double train_time_s;      // cumulative training seconds
    // run state
    int faults;               // consecutive non-finite steps
    float last_val_loss;      // -1 until computed
    float last_train_loss;
    unsigned char* loader_blob; // (dataloader_state_max_size) scratch for checkpoints
    // hybrid mode (--hybrid): its state and the direction buffer (P floats, --direction ema only)
    HybridState hybrid;
    float* direction;
    int* gen_tokens;          // (-g) sampling buffer
    double flops_per_token;
} Trainer;

typedef struct {
    float loss;       // mean over the step's micro batches
    float grad_norm;  // before clipping
    int skipped;      // non-finite loss or norm: no update
    double ms;
} StepResult;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int sig) { stop_signal = sig; }

// one Full step: forward and backward over grad_accum micro batches, global norm, clip, AdamW.
// A non-finite loss or norm never reaches the weights: the update is skipped.
// Hybrid mode: a Correct step first checks the loss at the predicted point (the first micro batch's)
// and may roll the Predict run back, while the gradient buffer still holds the pre-Predict weights;
// after the update, the hybrid pass measures the update against the direction (and updates it).
static StepResult train_full_step(Trainer* tr, float lr) {
    StepResult r = {0};
    double t0 = now_seconds();
    GPT2* model = &tr->model;
    DataLoader* loader = &tr->train_loader;
    int B = tr->cfg.B, T = tr->cfg.T;
    int hybrid = tr->cfg.hybrid.enabled;
    int correct = hybrid && tr->hybrid.phase == PHASE_CORRECT;
    if (!correct) { gpt2_zero_grad(model); }
    double loss_sum = 0.0;
    for (int k = 0; k < tr->grad_accum; k++) {
        if (!tr->cfg.overfit) { dataloader_next_batch(loader); }
        gpt2_forward(model, loader->inputs, loader->targets, B, T);
        if (correct && k == 0) {
            if (hybrid_correct_check(&tr->hybrid, model->mean_loss) == ACTION_ROLLBACK) {
                printf("step %d: rollback: loss %.6f at the predicted point vs predicted %.6f\n", tr->step + 1,
                       model->mean_loss, tr->hybrid.predicted_loss);
                hybrid_rollback(&tr->hybrid, model->params_memory, model->grads_memory);
                gpt2_forward(model, loader->inputs, loader->targets, B, T);
            }
            gpt2_zero_grad(model);
        }
        gpt2_backward(model, loader->inputs, loader->targets, 1.0f / tr->grad_accum);
        loss_sum += model->mean_loss;
    }
    r.loss = (float)(loss_sum / tr->grad_accum);
    r.grad_norm = gpt2_grad_norm(model);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        r.skipped = 1;
        if (hybrid) { memset(tr->hybrid.stats, 0, (size_t)tr->hybrid.nblocks * 3 * sizeof(double)); }
    } else {
        float grad_scale = r.grad_norm > GRAD_CLIP ? GRAD_CLIP / r.grad_norm : 1.0f;
        tr->adam_steps++;
        gpt2_update(model, lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, tr->cfg.weight_decay, grad_scale, tr->adam_steps);
        if (hybrid) {
            hybrid_observe(&tr->hybrid, tr->direction, model->params_memory, model->m_memory, model->v_memory,
                           model->grads_memory, grad_scale, tr->adam_steps);
        }
    }
    tr->tokens += (uint64_t)tr->grad_accum * B * T;
    tr->backward += (uint64_t)tr->grad_accum;
    r.ms = (now_seconds() - t0) * 1000.0;
    tr->train_time_s += r.ms / 1000.0;
    return r;
}

// one Predict step (hybrid mode): the predicted update, written in place; no forward, no backward,
// no batch. The run's first step keeps the weights in the gradient buffer (idle until the Correct
// step's backward) for an exact rollback. With --correction-interval, a forward-only check on the
// last batch may end the run early.
static StepResult train_predict_step(Trainer* tr) {
    StepResult r = {0};
    double t0 = now_seconds();
    GPT2* model = &tr->model;
    ApplyDirection dir = hybrid_direction(&tr->hybrid, tr->direction, model->m_memory, model->v_memory);
    hybrid_apply_predict(&tr->hybrid, model->params_memory, model->grads_memory, &dir);
    r.loss = NAN;
    r.grad_norm = NAN;
    if (hybrid_micro_due(&tr->hybrid)) {
        DataLoader* loader = &tr->train_loader;
        gpt2_forward(model, loader->inputs, loader->targets, tr->cfg.B, tr->cfg.T);
        hybrid_micro_result(&tr->hybrid, model->mean_loss);
    }
    r.ms = (now_seconds() - t0) * 1000.0;
    tr->train_time_s += r.ms / 1000.0;
    return r;
}

// mean loss over the first -m val batches (all with -m -1), always the same batches
static float evaluate(Trainer* tr) {
    DataLoader* val = &tr->val_loader;
    dataloader_reset(val, (uint64_t)tr->cfg.seed);
    size_t n = tr->cfg.val_batches == -1 || (size_t)tr->cfg.val_batches > val->total_batches
             ? val->total_batches : (size_t)tr->cfg.val_batches;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        dataloader_next_batch(val);
        gpt2_forward(&tr->model, val->inputs, val->targets, tr->cfg.B, tr->cfg.T);
        sum += tr->model.mean_loss;
    }
    return (float)(sum / n);
}

// -g tokens from an EOT prompt, sampled at temperature 1 with the sampling stream; printed decoded.
// The context is the last T tokens at most (a sliding window), so -g is not bounded by -t.
static void sample_text(Trainer* tr) {
    GPT2* model = &tr->model;
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int eot = tr->tokenizer.init_ok ? tr->tokenizer.eot_token : GPT2_EOT;
    if (eot < 0 || eot >= V) { eot = V > GPT2_EOT ? GPT2_EOT : 0; }
    tr->gen_tokens[0] = eot;
    printf("generating:\n---\n");
    for (int t = 1; t < tr->cfg.sample_tokens; t++) {
        int ctx = t < tr->cfg.T ? t : tr->cfg.T;
        gpt2_forward(model, tr->gen_tokens + (t - ctx), NULL, 1, ctx);
        const float* logits = model->acts.logits + (size_t)(ctx - 1) * Vp;
        float maxval = -FLT_MAX;
        for (int i = 0; i < V; i++) { maxval = logits[i] > maxval ? logits[i] : maxval; }
        double sum = 0.0;
        for (int i = 0; i < V; i++) { sum += expf_vec(logits[i] - maxval); }
        double coin = random_f32(&tr->sample_rng) * sum, cdf = 0.0;
        int next = V - 1;
        for (int i = 0; i < V; i++) {
            cdf += expf_vec(logits[i] - maxval);
            if (coin < cdf) { next = i; break; }
        }
        tr->gen_tokens[t] = next;
        tokenizer_print(&tr->tokenizer, (uint32_t)next, stdout);
        fflush(stdout);
    }
    printf("\n---\n");
}

// writes model, state (and, in hybrid mode, hybrid state) for the current step, then the DONE marker
static void save_checkpoint(Trainer* tr) {
    const char* dir = tr->cfg.output_dir;
    char path[4096];
    checkpoint_path(path, sizeof(path), dir, "model", tr->step);
    model_write(path, &tr->model.config, tr->model.params_memory, tr->model.num_parameters);
    TrainState s = {0};
    s.step = tr->step;
    s.shuffle = 1;
    s.sample_rng = tr->sample_rng;
    s.shard_index = dataloader_shard_index(&tr->train_loader);
    s.batch_index = dataloader_batch_index(&tr->train_loader);
    s.num_parameters = tr->model.num_parameters;
    s.tokens = tr->tokens;
    s.backward = tr->backward;
    s.train_time_s = tr->train_time_s;
    s.init_seed = (uint64_t)tr->cfg.seed;
    s.adam_steps = (uint64_t)tr->adam_steps;
    dataloader_state_save(&tr->train_loader, tr->loader_blob);
    checkpoint_path(path, sizeof(path), dir, "state", tr->step);
    state_write(path, &s, tr->model.m_memory, tr->model.v_memory, tr->loader_blob,
                dataloader_state_size(&tr->train_loader));
    // extra state of other modes (hybrid_%08d.bin) is written here, before the DONE marker
    if (tr->cfg.hybrid.enabled) {
        checkpoint_path(path, sizeof(path), dir, "hybrid", tr->step);
        AtomicFile af;
        atomic_open(&af, path);
        char err[200];
        if (hybrid_save(&tr->hybrid, af.fp, tr->direction, tr->model.grads_memory, err, sizeof(err)) != 0) {
            fclose(af.fp);
            unlink(af.tmp_path);
            fatal("%s: %s", path, err);
        }
        atomic_commit(&af);
    }
    checkpoint_write_done(dir, tr->step);
    checkpoint_prune(dir, tr->cfg.ckpt_keep);
    printf("checkpoint: step %d written to %s\n", tr->step, dir);
}

// restores the counters, AdamW state and data position of checkpoint `step` (the model is already loaded)
static void load_state(Trainer* tr, int step) {
    char path[4096];
    checkpoint_path(path, sizeof(path), tr->cfg.output_dir, "state", step);
    TrainState s;
    unsigned char* blob;
    size_t blob_bytes;
    state_read(path, &s, tr->model.num_parameters, tr->model.m_memory, tr->model.v_memory, &blob, &blob_bytes);
    if (s.step != step) { fatal("%s: state is for step %d, expected %d", path, s.step, step); }
    dataloader_state_load(&tr->train_loader, blob, blob_bytes, path);
    free(blob);
    tr->step = s.step;
    tr->adam_steps = (int)s.adam_steps;
    tr->sample_rng = s.sample_rng;
    tr->tokens = s.tokens;
    tr->backward = s.backward;
    tr->train_time_s = s.train_time_s;
    // extra state of other modes (hybrid_%08d.bin) is read here
    if (tr->cfg.hybrid.enabled) {
        checkpoint_path(path, sizeof(path), tr->cfg.output_dir, "hybrid", step);
        FILE* fp = fopen(path, "rb");
        if (fp == NULL) { fatal("%s: cannot open (%s); was the run saved without --hybrid?", path, strerror(errno)); }
        char err[200];
        if (hybrid_load(&tr->hybrid, fp, tr->direction, tr->model.grads_memory, err, sizeof(err)) != 0) {
            fatal("%s: %s", path, err);
        }
        fcloseCheck(fp, path);
    }
}

static void print_config(const Trainer* tr, int resume_step) {
    const GPT2Config* c = &tr->model.config;
    printf("+----------------------+----------------------------------------------------+\n");
    printf("| %-20s | %-50s |\n", "Parameter", "Value");
    printf("+----------------------+----------------------------------------------------+\n");
    for (int i = 0; i < NUM_ARGS; i++) {
        char v[256];
        arg_format_value(v, sizeof(v), &tr->cfg, &ARGS[i]);
        printf("| %-20s | %-50s |\n", ARGS[i].help[0] ? ARGS[i].flag : "", v);
    }
    printf("+----------------------+----------------------------------------------------+\n");
    printf("| %-20s | %-50d |\n", "max_seq_len", c->max_seq_len);
    printf("| %-20s | %-50d |\n", "vocab_size", c->vocab_size);
    printf("| %-20s | %-50d |\n", "padded_vocab_size", c->padded_vocab_size);
    printf("| %-20s | %-50d |\n", "num_layers", c->num_layers);
    printf("| %-20s | %-50d |\n", "num_heads", c->num_heads);
    printf("| %-20s | %-50d |\n", "channels", c->channels);
    printf("| %-20s | %-50zu |\n", "num_parameters", tr->model.num_parameters);
    printf("| %-20s | %-50zu |\n", "train batches/epoch", tr->train_loader.total_batches);
    printf("| %-20s | %-50zu |\n", "val batches", tr->has_val ? tr->val_loader.total_batches : 0);
    printf("| %-20s | %-50d |\n", "grad accumulation", tr->grad_accum);
    printf("| %-20s | %-50d |\n", "steps", tr->total_steps);
    printf("| %-20s | %-50d |\n", "threads", omp_get_max_threads());
    printf("| %-20s | %-50.0f |\n", "MFU peak GFLOP/s", CPU_PEAK_GFLOPS_PER_THREAD * omp_get_max_threads());
    printf("| %-20s | %-50.1f |\n", "activation MiB", tr->model.num_activations * 4.0 / 1048576.0);
    hybrid_config_table(&tr->cfg.hybrid, stdout, 20, 50);
    if (resume_step >= 0) { printf("| %-20s | %-50d |\n", "resumed from step", resume_step); }
    printf("+----------------------+----------------------------------------------------+\n");
}

static void write_summary(Trainer* tr) {
    char body[4096];
    char val[64];
    if (tr->last_val_loss >= 0.0f) { snprintf(val, sizeof(val), "%.9g", tr->last_val_loss); } else { snprintf(val, sizeof(val), "null"); }
    int n = snprintf(body, sizeof(body),
             "\"steps\": %d, \"train_time_s\": %.6f, \"val_loss\": %s, \"train_loss\": %.9g, \"backward\": %llu, "
             "\"tokens\": %llu",
             tr->step, tr->train_time_s, val, tr->last_train_loss, (unsigned long long)tr->backward,
             (unsigned long long)tr->tokens);
    if (tr->cfg.hybrid.enabled) {
        const int* ps = tr->hybrid.metrics.steps;
        n += snprintf(body + n, sizeof(body) - n,
                      ", \"phase_steps\": {\"warmup\": %d, \"full\": %d, \"predict\": %d, \"correct\": %d}, \"hybrid\": {",
                      ps[PHASE_WARMUP], ps[PHASE_FULL], ps[PHASE_PREDICT], ps[PHASE_CORRECT]);
        n += hybrid_summary_fields(&tr->hybrid, body + n, sizeof(body) - n - 2);
        snprintf(body + n, sizeof(body) - n, "}");
    } else {
        snprintf(body + n, sizeof(body) - n, ", \"phase_steps\": {\"full\": %d}", tr->step);
    }
    logger_write_summary(&tr->logger, body);
}

int main(int argc, char** argv) {
    // Idle OpenMP workers must sleep, not spin: between parallel regions OpenBLAS's own threads need the
    // cores, and on a small shared machine a spinning worker costs a time slice at every barrier (10-20x
    // slower steps measured on 2 cores). libgomp reads the policy at load time, hence the re-exec.
    // An explicit OMP_WAIT_POLICY in the environment wins.
    if (getenv("OMP_WAIT_POLICY") == NULL) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
    }
    Trainer tr;
    memset(&tr, 0, sizeof(tr));
    parse_args(&tr.cfg, argc, argv);
    TrainConfig* cfg = &tr.cfg;
    if (cfg->output_dir != NULL && mkdir(cfg->output_dir, 0755) != 0 && errno != EEXIST) {
        fatal("%s: cannot create output dir (%s)", cfg->output_dir, strerror(errno));
    }

    // the model: from the latest checkpoint when resuming, else from -e
    int resume_step = cfg->resume ? checkpoint_find_latest(cfg->output_dir) : -1;
    if (cfg->resume && resume_step < 0) {
        printf("note: no complete checkpoint in %s; starting from -e %s\n", cfg->output_dir, cfg->init);
    }
    int depth = 0;
    char tail;
    if (resume_step >= 0) {
        char path[4096];
        checkpoint_path(path, sizeof(path), cfg->output_dir, "model", resume_step);
        gpt2_build_from_checkpoint(&tr.model, path);
    } else if (sscanf(cfg->init, "d%d%c", &depth, &tail) == 1) {
        if (depth <= 0 || depth > 64) { fatal("flag -e: depth must be in [1, 64], got '%s'", cfg->init); }
        gpt2_build_from_random(&tr.model, depth, shard_vocab_size(cfg->train_pattern), (uint64_t)cfg->seed);
    } else {
        gpt2_build_from_checkpoint(&tr.model, cfg->init);
    }
    if (cfg->T > tr.model.config.max_seq_len) {
        fatal("flag -t: sequence length %d exceeds the model's maximum %d", cfg->T, tr.model.config.max_seq_len);
    }
    gpt2_allocate(&tr.model, cfg->B, cfg->T);

    // data, schedule, logs
    dataloader_init(&tr.train_loader, cfg->train_pattern, cfg->B, cfg->T, tr.model.config.vocab_size, 1, (uint64_t)cfg->seed);
    tr.has_val = cfg->val_every > 0;
    if (tr.has_val) {
        dataloader_init(&tr.val_loader, cfg->val_pattern, cfg->B, cfg->T, tr.model.config.vocab_size, 0, (uint64_t)cfg->seed);
    }
    tr.grad_accum = cfg->total_batch == -1 ? 1 : cfg->total_batch / (cfg->B * cfg->T);
    tr.total_steps = cfg->max_steps;
    if (tr.total_steps == -1) {
        tr.total_steps = (int)(tr.train_loader.total_batches / tr.grad_accum);
        if (tr.total_steps == 0) {
            fatal("%s: one epoch has %zu batches, fewer than one step needs (%d)", cfg->train_pattern,
                  tr.train_loader.total_batches, tr.grad_accum);
        }
    }
    LRScheduleKind kind;
    lr_schedule_parse(cfg->schedule, &kind);
    lr_scheduler_init(&tr.scheduler, kind, cfg->lr, cfg->warmup, tr.total_steps, cfg->final_frac);
    tr.sample_rng = random_state((uint64_t)cfg->seed, RNG_SAMPLE_SALT);
    tr.loader_blob = (unsigned char*)mallocCheck(dataloader_state_max_size(&tr.train_loader));
    tr.gen_tokens = (int*)mallocCheck((size_t)cfg->sample_tokens * sizeof(int));
    tr.last_val_loss = -1.0f;
    if (cfg->hybrid.enabled) {
        int L = tr.model.config.num_layers, nblocks = 12 * L + 4;
        size_t* offsets = (size_t*)mallocCheck((size_t)(nblocks + 1) * sizeof(size_t));
        float* block_wd = (float*)mallocCheck((size_t)nblocks * sizeof(float));
        gpt2_hybrid_blocks(&tr.model, offsets, block_wd, cfg->weight_decay);
        hybrid_init(&tr.hybrid, &cfg->hybrid, offsets, nblocks, tr.total_steps, cfg->lr, ADAM_BETA1, ADAM_BETA2,
                    ADAM_EPS, block_wd, (uint64_t)cfg->seed);
        hybrid_set_micro_batches(&tr.hybrid, tr.grad_accum);
        free(offsets);
        free(block_wd);
        if (cfg->hybrid.direction == DIRECTION_EMA) {
            tr.direction = (float*)callocCheck(tr.model.num_parameters, sizeof(float));
        }
    }
    if (resume_step >= 0) { load_state(&tr, resume_step); }
    if (cfg->overfit) {  // the same first batch on every step, also after a resume
        dataloader_reset(&tr.train_loader, (uint64_t)cfg->seed);
        dataloader_next_batch(&tr.train_loader);
    }
    if (cfg->sample_every > 0) {
        tokenizer_init(&tr.tokenizer, cfg->tokenizer);
        if (!tr.tokenizer.init_ok) { printf("note: no tokenizer at %s; samples print token ids\n", cfg->tokenizer); }
    }
    logger_init(&tr.logger, cfg->output_dir, resume_step);
    const GPT2Config* mc = &tr.model.config;
    tr.flops_per_token = 6.0 * tr.model.num_parameters + 6.0 * mc->num_layers * mc->channels * cfg->T;
    print_config(&tr, resume_step);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (tr.has_val && tr.step == 0) {
        tr.last_val_loss = evaluate(&tr);
        printf("val loss %.6f\n", tr.last_val_loss);
        logger_log_init_val(&tr.logger, tr.last_val_loss);
    }
    double peak_flops = CPU_PEAK_GFLOPS_PER_THREAD * 1e9 * omp_get_max_threads();
    while (tr.step < tr.total_steps) {
        // the phase of this step: Full, or in hybrid mode whatever the controller decides
        const char* phase = "full";
        float lr = lr_scheduler_get(&tr.scheduler, tr.step);
        StepResult r;
        char hybrid_json[256] = "";
        if (cfg->hybrid.enabled) {
            double h0 = now_seconds();
            HybridPhase ph = hybrid_begin_step(&tr.hybrid, tr.step, lr);
            double decide_ms = (now_seconds() - h0) * 1000.0;
            r = ph == PHASE_PREDICT ? train_predict_step(&tr) : train_full_step(&tr, lr);
            h0 = now_seconds();
            hybrid_end_step(&tr.hybrid, r.skipped ? NAN : r.loss, r.skipped ? NAN : r.grad_norm, r.ms + decide_ms);
            double hybrid_ms = decide_ms + (now_seconds() - h0) * 1000.0;  // the controller's own work is training time
            r.ms += hybrid_ms;
            tr.train_time_s += hybrid_ms / 1000.0;
            phase = hybrid_phase_name(&tr.hybrid);
            hybrid_step_json(&tr.hybrid, hybrid_json, sizeof(hybrid_json));
            char event[160];
            if (hybrid_take_event(&tr.hybrid, event, sizeof(event))) { printf("%s\n", event); }
        } else {
            r = train_full_step(&tr, lr);
        }
        int predict = cfg->hybrid.enabled && tr.hybrid.phase == PHASE_PREDICT;
        tr.step++;
        if (!predict) { tr.last_train_loss = r.loss; }
        double tokens_per_step = (double)tr.grad_accum * cfg->B * cfg->T;
        if (predict) {
            printf("step %4d/%d | predict | predicted loss %.6f | lr %.2e | %.2f ms\n",
                   tr.step, tr.total_steps, tr.hybrid.metrics.predicted_loss, lr, r.ms);
        } else {
            printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.1f%% MFU | %.0f tok/s%s%s\n",
                   tr.step, tr.total_steps, r.loss, r.grad_norm, lr, r.ms,
                   100.0 * tr.flops_per_token * tokens_per_step / (r.ms / 1000.0) / peak_flops,
                   tokens_per_step / (r.ms / 1000.0), cfg->hybrid.enabled ? " | " : "",
                   cfg->hybrid.enabled ? phase : "");
        }
        // per-step metrics: val loss (after the update) joins the step's line
        StepMetrics m = {0};
        m.step = tr.step;
        m.phase = phase;
        m.has_loss = !predict;
        m.loss = r.loss;
        m.lr = lr;
        m.has_norm = !predict;
        m.grad_norm = r.grad_norm;
        m.extra = cfg->hybrid.enabled ? hybrid_json : NULL;
        m.ms = r.ms;
        m.train_time_s = tr.train_time_s;
        m.tokens = tr.tokens;
        m.backward = tr.backward;
        m.skipped = r.skipped;
        if (tr.has_val && (tr.step % cfg->val_every == 0 || tr.step == tr.total_steps)) {
            tr.last_val_loss = evaluate(&tr);
            printf("val loss %.6f\n", tr.last_val_loss);
            m.has_val = 1;
            m.val_loss = tr.last_val_loss;
        }
        logger_log_step(&tr.logger, &m);
        if (r.skipped) {
            tr.faults++;
            printf("step %d: non-finite loss %f or grad norm %f; update skipped (%d/%d in a row)\n",
                   tr.step, r.loss, r.grad_norm, tr.faults, MAX_FAULTS);
            fflush(stdout);
            if (tr.faults >= MAX_FAULTS) {
                fatal("%d consecutive steps with NaN/Inf loss or grad norm (step %d); stopping with the weights "
                      "of the last good step (lower -l?)", MAX_FAULTS, tr.step);
            }
        } else {
            tr.faults = 0;
        }
        if (cfg->sample_every > 0 && tr.step % cfg->sample_every == 0) { sample_text(&tr); }
        int last = tr.step == tr.total_steps;
        if (cfg->output_dir != NULL &&
            ((cfg->ckpt_every > 0 && (tr.step % cfg->ckpt_every == 0 || last)) || stop_signal)) {
            save_checkpoint(&tr);
        }
        if (stop_signal && !last) {
            printf("stopped by signal %d after step %d.", (int)stop_signal, tr.step);
            if (cfg->output_dir != NULL) {
                printf(" Resume with the same flags plus -y 1:\n ");
                for (int i = 0; i < argc; i++) {
                    if (strcmp(argv[i], "-y") == 0) { i++; continue; }
                    printf(" %s", argv[i]);
                }
                printf(" -y 1\n");
            } else {
                printf(" No -o given: nothing saved.\n");
            }
            break;
        }
    }
    write_summary(&tr);
    if (cfg->hybrid.enabled) { hybrid_print_summary(&tr.hybrid, stdout); }
    printf("done: %d steps, %.2f s training time, %llu backward passes\n", tr.step, tr.train_time_s,
           (unsigned long long)tr.backward);
    if (cfg->hybrid.enabled) {
        hybrid_free(&tr.hybrid);
        free(tr.direction);
    }

    logger_free(&tr.logger);
    tokenizer_free(&tr.tokenizer);
    dataloader_free(&tr.train_loader);
    if (tr.has_val) { dataloader_free(&tr.val_loader); }
    free(tr.loader_blob);
    free(tr.gen_tokens);
    gpt2_free(&tr.model);
    return EXIT_SUCCESS;
}
#endif // TESTING
