// dev/cuda/layernorm.cu — fused residual + LayerNorm forward and LayerNorm backward vs a CPU reference.
// make dev/cuda/layernorm && ./dev/cuda/layernorm
#include "dev/cuda/dev_common.cuh"
#include "llmc/layernorm.cuh"

static void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                  const float* b, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* x = inp + (size_t)r * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) { m += x[c]; }
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { v += (x[c] - m) * (x[c] - m); }
        v /= C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        for (int c = 0; c < C; c++) { out[(size_t)r * C + c] = (x[c] - m) * s * w[c] + b[c]; }
        mean[r] = m;
        rstd[r] = s;
    }
}

static void layernorm_backward_cpu(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                   const float* w, const float* mean, const float* rstd, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* dy = dout + (size_t)r * C;
        const float* x = inp + (size_t)r * C;
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[r]) * rstd[r];
            dnorm_mean += w[c] * dy[c];
            dnorm_norm_mean += w[c] * dy[c] * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[r]) * rstd[r];
            db[c] += dy[c];
            dw[c] += norm * dy[c];
            dinp[(size_t)r * C + c] += (w[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[r];
        }
    }
}

// forward and backward of N rows of width C against the CPU loops, then (sweep) their timing
static int check_layernorm(int N, int C, int sweep) {
    int ok = 1;
    printf("-- N %d, C %d (%s kernels)\n", N, C, C % PACK == 0 ? "packed" : "W = 1");
    size_t n = (size_t)N * C;
    float *a = make_random(n, 1.0f), *b = make_random(n, 1.0f), *w = make_random(C, 1.0f), *bias = make_random(C, 0.5f);
    float* dout = make_random(n, 1.0f);
    floatX *d_a = to_device_x(a, n), *d_b = to_device_x(b, n), *d_w = to_device_x(w, C), *d_bias = to_device_x(bias, C);
    floatX* d_dout = to_device_x(dout, n);
    floatX* d_res = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    floatX* d_out = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    floatX* d_dinp = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    float* d_mean = (float*)cudaMallocCheck(N * sizeof(float));
    float* d_rstd = (float*)cudaMallocCheck(N * sizeof(float));
    float* d_dw = (float*)cudaMallocCheck(C * sizeof(float));
    float* d_db = (float*)cudaMallocCheck(C * sizeof(float));
    float* d_scratch = (float*)cudaMallocCheck((size_t)REDUCE_CHUNKS * 2 * C * sizeof(float));

    // forward: residual = a + b rounded to floatX, then LN of the stored residual
    fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0);
    float* res = from_device_x(d_res, n);
    float* res_ref = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { res_ref[i] = a[i] + b[i]; }
    ok &= check_close("residual", res, res_ref, n, DEV_ATOL, DEV_RTOL);
    float* out_ref = (float*)mallocCheck(n * sizeof(float));
    float* mean_ref = (float*)mallocCheck(N * sizeof(float));
    float* rstd_ref = (float*)mallocCheck(N * sizeof(float));
    layernorm_forward_cpu(out_ref, mean_ref, rstd_ref, res, w, bias, N, C);
    float* out = from_device_x(d_out, n);
    ok &= check_close("layernorm out", out, out_ref, n, DEV_ATOL, DEV_RTOL);
    ok &= check_close("mean", from_device_f(d_mean, N), mean_ref, N, 1e-5f, 1e-4f);
    ok &= check_close("rstd", from_device_f(d_rstd, N), rstd_ref, N, 1e-5f, 1e-4f);

    // backward on the same row data (dinp starts at zero here; the trainer accumulates into it)
    cudaCheck(cudaMemset(d_dinp, 0, n * sizeof(floatX)));
    cudaCheck(cudaMemset(d_dw, 0, C * sizeof(float)));
    cudaCheck(cudaMemset(d_db, 0, C * sizeof(float)));
    layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_res, d_w, d_mean, d_rstd, N, C, 0);
    float* dinp_ref = (float*)callocCheck(n, sizeof(float));
    float* dw_ref = (float*)callocCheck(C, sizeof(float));
    float* db_ref = (float*)callocCheck(C, sizeof(float));
    layernorm_backward_cpu(dinp_ref, dw_ref, db_ref, dout, res, w, mean_ref, rstd_ref, N, C);
    ok &= check_close("dinp", from_device_x(d_dinp, n), dinp_ref, n, DEV_ATOL, DEV_RTOL);
    ok &= check_close("dweight", from_device_f(d_dw, C), dw_ref, C, 1e-2f, 1e-3f);
    ok &= check_close("dbias", from_device_f(d_db, C), db_ref, C, 1e-2f, 1e-3f);

    if (sweep) {  // timing over the row count at this C, on the same buffers
        printf("\n%8s %8s %12s %12s\n", "N", "C", "fwd ms", "bwd ms");
        for (int rows = 1024; rows <= N; rows *= 2) {
            float f = time_ms([&] { fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, rows, C, 0); }, 20);
            float g = time_ms([&] { layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_res, d_w, d_mean, d_rstd, rows, C, 0); }, 20);
            printf("%8d %8d %12.4f %12.4f\n", rows, C, f, g);
        }
    }
    return ok;
}

int main(void) {
    int ok = check_layernorm(8 * 1024, 768, 1);
    ok &= check_layernorm(300, 100, 0);  // a width that does not split into packs: the W = 1 kernels
    ok &= check_layernorm(700, 1600, 0);  // wider than one column group of the backward (GPT-2 XL's width)
    printf("%s\n", ok ? "layernorm: all checks passed" : "layernorm: FAILED");
    return ok ? 0 : 1;
}
