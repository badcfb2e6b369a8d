// dev/cuda/adamw.cu — AdamW on fp32 master weights with the stochastically rounded floatX copy, vs the
// CPU formula; checks that the rounding is unbiased and that a ZeRO shard rounds like the whole buffer.
// make dev/cuda/adamw && ./dev/cuda/adamw
#include "dev/cuda/dev_common.cuh"
#include "llmc/adamw.cuh"

int main(void) {
    int ok = 1;
    size_t n = 1 << 24;
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = make_random(n, 1.0f), *g = make_random(n, 1.0f), *m = make_random(n, 0.1f), *v = make_random(n, 0.1f);
    for (size_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); }
    float *d_p = to_device_f(p, n), *d_g = to_device_f(g, n), *d_m = to_device_f(m, n), *d_v = to_device_f(v, n);
    floatX* d_x = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    int t = 3;
    adamw_update(d_p, d_x, d_g, d_m, d_v, n, 0, lr, b1, b2, t, eps, wd, gs, 1234u, 0);
    for (size_t i = 0; i < n; i++) {  // the CPU path's update
        float gi = g[i] * gs;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        float mh = m[i] / (1.0f - powf(b1, t)), vh = v[i] / (1.0f - powf(b2, t));
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
    ok &= check_close("master", from_device_f(d_p, n), p, n, 1e-6f, 1e-6f);
    ok &= check_close("m", from_device_f(d_m, n), m, n, 1e-7f, 1e-6f);
    ok &= check_close("v", from_device_f(d_v, n), v, n, 1e-7f, 1e-6f);
    float* x = from_device_x(d_x, n);
    ok &= check_close("floatX copy", x, p, n, 0.0f, 1.0f / 128);  // within one bf16 ulp
    // unbiased rounding: the mean rounding error is far below the mean |error|
    double err = 0.0, abs_err = 0.0;
    for (size_t i = 0; i < n; i++) { err += x[i] - p[i]; abs_err += fabs(x[i] - p[i]); }
    printf("stochastic rounding: mean error %.3g, mean |error| %.3g\n", err / n, abs_err / n);
#if !defined(ENABLE_FP32)
    if (!(fabs(err) < 0.05 * abs_err)) { printf("FAIL: rounding looks biased\n"); ok = 0; }
#endif
    // a shard [n/2, n) with idx_base n/2 must round exactly as the full update did
    floatX* d_x2 = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    float* master = from_device_f(d_p, n);
    float *d_p2 = to_device_f(master, n), *d_zero = (float*)cudaMallocCheck(n * sizeof(float));
    cudaCheck(cudaMemset(d_zero, 0, n * sizeof(float)));
    // lr 0 and wd 0: master unchanged, so the copy is round(p) with the same seed and indices
    adamw_update(d_p2, d_x2, d_zero, d_zero, d_zero, n / 2, 0, 0.0f, b1, b2, t, eps, 0.0f, gs, 1234u, 0);
    adamw_update(d_p2 + n / 2, d_x2 + n / 2, d_zero, d_zero, d_zero, n / 2, n / 2, 0.0f, b1, b2, t, eps, 0.0f, gs, 1234u, 0);
    float* x2 = from_device_x(d_x2, n);
    ok &= check_close("sharded rounding", x2, x, n, 0.0f, 0.0f);

    printf("\n%10s %10s %10s\n", "params", "ms", "GB/s");
    for (size_t k = 1 << 20; k <= n; k <<= 1) {
        float ms = time_ms([&] { adamw_update(d_p, d_x, d_g, d_m, d_v, k, 0, lr, b1, b2, t, eps, wd, gs, 1u, 0); }, 20);
        printf("%10zu %10.4f %10.1f\n", k, ms, (double)k * (4 * 4 + 3 * 4 + sizeof(floatX)) / (ms * 1e-3) / 1e9);
    }
    printf("%s\n", ok ? "adamw: all checks passed" : "adamw: FAILED");
    return ok ? 0 : 1;
}
