/*
 * hybrid/rssm.h — RSSM-lite: the recurrent predictor of docs/hybrid.md §4.
 * Each ensemble member is a GRU deterministic state h (advanced once per measured step) plus a
 * small Gaussian stochastic latent z ~ N(mu(h), sigma(h)^2) and a linear read-out from [h; z; x] to
 * the per-block scales and the loss change (the skip from the features x makes it at least as good
 * as the linear predictor; the recurrent part adds what the history explains). Trained online, one Adam step per observation, truncated
 * back-propagation of one step (h_prev is an input). To predict k steps into a Predict run it
 * rolls h forward k times with the latest features and reads out at z = mu. The members start from
 * different seeds; their disagreement (spread) is one of the confidence signals.
 * All memory is allocated in rssm_init.
 */
#ifndef HYBRID_RSSM_H
#define HYBRID_RSSM_H

#include <stdlib.h>
#include "hybrid/hmath.h"
#include "hybrid/hio.h"

#define RSSM_HIDDEN 16
#define RSSM_LATENT 4
#define RSSM_ENSEMBLE 3

// offsets of one member's tensors inside its flat parameter vector
typedef struct {
    int Wr, Ur, br, Wz, Uz, bz, Wn, Un, bn, bnh; // GRU gates: W* (G,in), U* (G,G), b* (G)
    int Wmu, bmu, Ws, bs;                        // latent mean and log-std: (Z,G), (Z)
    int Wo, bo;                                  // read-out: (out, G+Z+in), (out)
    int total;
} RssmLayout;

typedef struct {
    int in_dim, out_dim, t;  // t: Adam steps taken
    RssmLayout lay;
    float* params;           // (E, total)
    float* m;                // (E, total) Adam first moment
    float* v;                // (E, total) Adam second moment
    float* grads;            // (total) scratch
    float* h;                // (E, G) deterministic state
    float* scratch;          // (8*G + 2*Z + out + G+Z+in) forward/backward intermediates
    uint64_t rng;            // latent noise
    float kl_weight;
} Rssm;

static inline void rssm_layout(RssmLayout* l, int in, int out) {
    const int G = RSSM_HIDDEN, Z = RSSM_LATENT;
    int o = 0;
    l->Wr = o; o += G * in; l->Ur = o; o += G * G; l->br = o; o += G;
    l->Wz = o; o += G * in; l->Uz = o; o += G * G; l->bz = o; o += G;
    l->Wn = o; o += G * in; l->Un = o; o += G * G; l->bn = o; o += G; l->bnh = o; o += G;
    l->Wmu = o; o += Z * G; l->bmu = o; o += Z; l->Ws = o; o += Z * G; l->bs = o; o += Z;
    l->Wo = o; o += out * (G + Z + in); l->bo = o; o += out;
    l->total = o;
}

static inline void rssm_init(Rssm* r, int in_dim, int out_dim, uint64_t seed) {
    memset(r, 0, sizeof(*r));
    r->in_dim = in_dim; r->out_dim = out_dim; r->kl_weight = 1e-3f;
    rssm_layout(&r->lay, in_dim, out_dim);
    const int G = RSSM_HIDDEN, Z = RSSM_LATENT, E = RSSM_ENSEMBLE, n = r->lay.total;
    r->params = (float*)calloc((size_t)E * n, sizeof(float));
    r->m = (float*)calloc((size_t)E * n, sizeof(float));
    r->v = (float*)calloc((size_t)E * n, sizeof(float));
    r->grads = (float*)calloc((size_t)n, sizeof(float));
    r->h = (float*)calloc((size_t)E * G, sizeof(float));
    r->scratch = (float*)calloc((size_t)(8 * G + 2 * Z + out_dim + G + Z + in_dim), sizeof(float));
    r->rng = seed ^ 0x5DEECE66Dull;
    for (int e = 0; e < E; e++) {
        float* p = r->params + (size_t)e * n;
        const RssmLayout* l = &r->lay;
        float sx = 1.0f / sqrtf((float)in_dim), sh = 1.0f / sqrtf((float)G);
        for (int i = 0; i < G * in_dim; i++) {
            p[l->Wr + i] = sx * hmath_normal(&r->rng);
            p[l->Wz + i] = sx * hmath_normal(&r->rng);
            p[l->Wn + i] = sx * hmath_normal(&r->rng);
        }
        for (int i = 0; i < G * G; i++) {
            p[l->Ur + i] = sh * hmath_normal(&r->rng);
            p[l->Uz + i] = sh * hmath_normal(&r->rng);
            p[l->Un + i] = sh * hmath_normal(&r->rng);
        }
        for (int i = 0; i < Z * G; i++) {
            p[l->Wmu + i] = sh * hmath_normal(&r->rng);
            p[l->Ws + i] = 0.1f * sh * hmath_normal(&r->rng);
        }
        for (int i = 0; i < Z; i++) { p[l->bs + i] = -2.0f; } // start nearly deterministic
        for (int i = 0; i < G; i++) { p[l->bz + i] = 1.0f; }  // update gate biased to keep state
        // read-out starts at zero: an untrained RSSM predicts s = 0 (no movement)
    }
}

static inline void rssm_free(Rssm* r) {
    free(r->params); free(r->m); free(r->v); free(r->grads); free(r->h); free(r->scratch);
    memset(r, 0, sizeof(*r));
}

// one GRU cell: hn = (1-z)*n + z*h, n = tanh(Wn x + bn + r*(Un h + bnh)); keeps r, z, n, u for backward
static inline void rssm_gru(const float* p, const RssmLayout* l, int in, const float* x, const float* h,
                            float* r, float* z, float* n, float* u, float* hn) {
    const int G = RSSM_HIDDEN;
    for (int i = 0; i < G; i++) {
        float ar = p[l->br + i], az = p[l->bz + i], an = p[l->bn + i], au = p[l->bnh + i];
        for (int j = 0; j < in; j++) {
            ar += p[l->Wr + i * in + j] * x[j];
            az += p[l->Wz + i * in + j] * x[j];
            an += p[l->Wn + i * in + j] * x[j];
        }
        for (int j = 0; j < G; j++) {
            ar += p[l->Ur + i * G + j] * h[j];
            az += p[l->Uz + i * G + j] * h[j];
            au += p[l->Un + i * G + j] * h[j];
        }
        r[i] = hmath_sigmoid(ar);
        z[i] = hmath_sigmoid(az);
        u[i] = au;
        n[i] = tanhf(an + r[i] * au);
    }
    for (int i = 0; i < G; i++) { hn[i] = (1.0f - z[i]) * n[i] + z[i] * h[i]; }
}

// read-out of one member at hz = [h; z; x]
static inline void rssm_readout(const float* p, const RssmLayout* l, int in, int out, const float* hz, float* y) {
    const int D = RSSM_HIDDEN + RSSM_LATENT + in;
    for (int o = 0; o < out; o++) {
        float a = p[l->bo + o];
        for (int j = 0; j < D; j++) { a += p[l->Wo + o * D + j] * hz[j]; }
        y[o] = a;
    }
}

static inline void rssm_latent_mean(const float* p, const RssmLayout* l, const float* h, float* mu, float* logs) {
    const int G = RSSM_HIDDEN, Z = RSSM_LATENT;
    for (int k = 0; k < Z; k++) {
        float a = p[l->bmu + k], b = p[l->bs + k];
        for (int j = 0; j < G; j++) { a += p[l->Wmu + k * G + j] * h[j]; b += p[l->Ws + k * G + j] * h[j]; }
        mu[k] = a;
        logs[k] = hmath_clampf(b, -6.0f, 2.0f);
    }
}

// observe features x (in) and target y (out): train every member one step, advance its state
static inline void rssm_update(Rssm* R, const float* x, const float* y, float lr) {
    const int G = RSSM_HIDDEN, Z = RSSM_LATENT, in = R->in_dim, D = G + Z + in, out = R->out_dim;
    const RssmLayout* l = &R->lay;
    float* s = R->scratch;
    float *r = s, *z = s + G, *n = s + 2 * G, *u = s + 3 * G, *hn = s + 4 * G, *dh = s + 5 * G;
    float *dn = s + 6 * G, *tmp = s + 7 * G, *mu = s + 8 * G, *logs = mu + Z, *yh = logs + Z, *hz = yh + out;
    R->t++;
    for (int e = 0; e < RSSM_ENSEMBLE; e++) {
        float* p = R->params + (size_t)e * l->total;
        float* h = R->h + e * G;
        float* g = R->grads;
        memset(g, 0, (size_t)l->total * sizeof(float));
        rssm_gru(p, l, in, x, h, r, z, n, u, hn);
        rssm_latent_mean(p, l, hn, mu, logs);
        float eps[RSSM_LATENT];
        for (int k = 0; k < Z; k++) {
            eps[k] = hmath_normal(&R->rng);
            hz[G + k] = mu[k] + expf(logs[k]) * eps[k];
        }
        for (int j = 0; j < G; j++) { hz[j] = hn[j]; }
        for (int j = 0; j < in; j++) { hz[G + Z + j] = x[j]; }
        rssm_readout(p, l, in, out, hz, yh);
        // read-out backward: mean squared error over the outputs
        float dhz[RSSM_HIDDEN + RSSM_LATENT] = {0}; // the x part needs no gradient
        for (int o = 0; o < out; o++) {
            float dy = 2.0f * (yh[o] - y[o]) / (float)out;
            g[l->bo + o] += dy;
            for (int j = 0; j < D; j++) {
                g[l->Wo + o * D + j] += dy * hz[j];
                if (j < G + Z) { dhz[j] += dy * p[l->Wo + o * D + j]; }
            }
        }
        for (int j = 0; j < G; j++) { dh[j] = dhz[j]; }
        // latent backward, with a KL(N(mu, sigma) || N(0, 1)) regulariser
        for (int k = 0; k < Z; k++) {
            float sg = expf(logs[k]);
            float dmu = dhz[G + k] + R->kl_weight * mu[k];
            float dls = dhz[G + k] * sg * eps[k] + R->kl_weight * (sg * sg - 1.0f);
            g[l->bmu + k] += dmu;
            g[l->bs + k] += dls;
            for (int j = 0; j < G; j++) {
                g[l->Wmu + k * G + j] += dmu * hn[j];
                g[l->Ws + k * G + j] += dls * hn[j];
                dh[j] += dmu * p[l->Wmu + k * G + j] + dls * p[l->Ws + k * G + j];
            }
        }
        // GRU backward (h is an input: truncated after one step)
        for (int i = 0; i < G; i++) {
            dn[i] = dh[i] * (1.0f - z[i]) * (1.0f - n[i] * n[i]);  // through tanh
            float dz = dh[i] * (h[i] - n[i]) * z[i] * (1.0f - z[i]);
            float dr = dn[i] * u[i] * r[i] * (1.0f - r[i]);
            float du = dn[i] * r[i];
            tmp[i] = du;
            g[l->bn + i] += dn[i]; g[l->bnh + i] += du; g[l->bz + i] += dz; g[l->br + i] += dr;
            for (int j = 0; j < in; j++) {
                g[l->Wn + i * in + j] += dn[i] * x[j];
                g[l->Wz + i * in + j] += dz * x[j];
                g[l->Wr + i * in + j] += dr * x[j];
            }
            for (int j = 0; j < G; j++) {
                g[l->Un + i * G + j] += du * h[j];
                g[l->Uz + i * G + j] += dz * h[j];
                g[l->Ur + i * G + j] += dr * h[j];
            }
        }
        hmath_adam(p, g, R->m + (size_t)e * l->total, R->v + (size_t)e * l->total, l->total, R->t, lr);
        memcpy(h, hn, G * sizeof(float));
    }
}

// predict k >= 1 steps ahead: ensemble mean in y (out), mean ensemble std over outputs in *spread
static inline void rssm_predict(Rssm* R, const float* x, int k, float* y, float* spread) {
    const int G = RSSM_HIDDEN, Z = RSSM_LATENT, out = R->out_dim;
    const RssmLayout* l = &R->lay;
    float* s = R->scratch;
    float *r = s, *z = s + G, *n = s + 2 * G, *u = s + 3 * G, *hn = s + 4 * G, *hc = s + 5 * G;
    float *mu = s + 8 * G, *logs = mu + Z, *yh = logs + Z, *hz = yh + out;
    double sum2 = 0.0;
    memset(y, 0, (size_t)out * sizeof(float));
    // first pass: mean; the spread needs the mean, so members are evaluated twice (cheap: G=16)
    for (int pass = 0; pass < 2; pass++) {
        for (int e = 0; e < RSSM_ENSEMBLE; e++) {
            const float* p = R->params + (size_t)e * l->total;
            memcpy(hc, R->h + e * G, G * sizeof(float));
            for (int step = 0; step < k; step++) {
                rssm_gru(p, l, R->in_dim, x, hc, r, z, n, u, hn);
                memcpy(hc, hn, G * sizeof(float));
            }
            rssm_latent_mean(p, l, hc, mu, logs);
            memcpy(hz, hc, G * sizeof(float));
            memcpy(hz + G, mu, Z * sizeof(float));
            memcpy(hz + G + Z, x, (size_t)R->in_dim * sizeof(float));
            rssm_readout(p, l, R->in_dim, out, hz, yh);
            for (int o = 0; o < out; o++) {
                if (pass == 0) { y[o] += yh[o] / RSSM_ENSEMBLE; }
                else { double d = yh[o] - y[o]; sum2 += d * d; }
            }
        }
    }
    if (spread != NULL) { *spread = (float)sqrt(sum2 / ((double)RSSM_ENSEMBLE * out)); }
}

static inline void rssm_io(HybridIO* io, Rssm* R) {
    size_t n = (size_t)RSSM_ENSEMBLE * R->lay.total;
    hio_expect_i32(io, R->lay.total, "rssm parameter count");
    hio_i32(io, &R->t);
    hio_f32s(io, R->params, n);
    hio_f32s(io, R->m, n);
    hio_f32s(io, R->v, n);
    hio_f32s(io, R->h, (size_t)RSSM_ENSEMBLE * RSSM_HIDDEN);
    hio_u64(io, &R->rng);
}

#endif // HYBRID_RSSM_H
