// dev/cuda/matmul.cu — cuBLASLt linear layer (bias epilogue), its backward (fp32 weight-gradient
// accumulation, deterministic bias reduction) and GELU, vs a CPU reference; then a timing sweep over
// GPT-2 124M's four projection shapes.  make dev/cuda/matmul && ./dev/cuda/matmul
#include "dev/cuda/dev_common.cuh"
#include "llmc/matmul.cuh"

static void matmul_forward_cpu(float* out, const float* inp, const float* w, const float* b, int N, int C, int OC) {
    for (int r = 0; r < N; r++) {
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++) { s += (double)inp[(size_t)r * C + c] * w[(size_t)o * C + c]; }
            out[(size_t)r * OC + o] = (float)s;
        }
    }
}

int main(void) {
    int ok = 1;
    matmul_init();
    int N = 256, C = 192, OC = 576;  // small enough for an O(N*C*OC) reference
    float *inp = make_random((size_t)N * C, 1.0f), *w = make_random((size_t)OC * C, 0.1f), *b = make_random(OC, 0.1f);
    float* dout = make_random((size_t)N * OC, 1.0f);
    floatX *d_inp = to_device_x(inp, (size_t)N * C), *d_w = to_device_x(w, (size_t)OC * C), *d_b = to_device_x(b, OC);
    floatX* d_dout = to_device_x(dout, (size_t)N * OC);
    floatX* d_out = (floatX*)cudaMallocCheck((size_t)N * OC * sizeof(floatX));
    floatX* d_dinp = (floatX*)cudaMallocCheck((size_t)N * C * sizeof(floatX));
    float* d_dw = (float*)cudaMallocCheck((size_t)OC * C * sizeof(float));
    float* d_db = (float*)cudaMallocCheck(OC * sizeof(float));
    float* d_scratch = (float*)cudaMallocCheck((size_t)REDUCE_CHUNKS * OC * sizeof(float));

    matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC, 0);
    float* ref = (float*)mallocCheck((size_t)N * OC * sizeof(float));
    matmul_forward_cpu(ref, inp, w, b, N, C, OC);
    ok &= check_close("forward", from_device_x(d_out, (size_t)N * OC), ref, (size_t)N * OC, DEV_ATOL, DEV_RTOL);

    // backward twice: dweight/dbias must accumulate (2x the single-pass value)
    cudaCheck(cudaMemset(d_dw, 0, (size_t)OC * C * sizeof(float)));
    cudaCheck(cudaMemset(d_db, 0, OC * sizeof(float)));
    for (int k = 0; k < 2; k++) { matmul_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_inp, d_w, NULL, N, C, OC, 0); }
    float* dinp_ref = (float*)callocCheck((size_t)N * C, sizeof(float));
    float* dw_ref = (float*)callocCheck((size_t)OC * C, sizeof(float));
    float* db_ref = (float*)callocCheck(OC, sizeof(float));
    for (int r = 0; r < N; r++) {
        for (int o = 0; o < OC; o++) {
            float d = dout[(size_t)r * OC + o];
            db_ref[o] += 2.0f * d;
            for (int c = 0; c < C; c++) {
                dinp_ref[(size_t)r * C + c] += d * w[(size_t)o * C + c];
                dw_ref[(size_t)o * C + c] += 2.0f * d * inp[(size_t)r * C + c];
            }
        }
    }
    ok &= check_close("dinp", from_device_x(d_dinp, (size_t)N * C), dinp_ref, (size_t)N * C, DEV_ATOL, DEV_RTOL);
    ok &= check_close("dweight (x2)", from_device_f(d_dw, (size_t)OC * C), dw_ref, (size_t)OC * C, 1e-3f, 1e-3f);
    ok &= check_close("dbias (x2)", from_device_f(d_db, OC), db_ref, OC, 1e-3f, 1e-3f);

    // GELU forward/backward against the CPU formula
    size_t n = (size_t)N * OC;
    gelu_forward(d_out, d_dout, n, 0);
    float* gelu_ref = (float*)mallocCheck(n * sizeof(float));
    float* dgelu_ref = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float x = dout[i], cube = 0.044715f * x * x * x, t = tanhf(GELU_SCALING_FACTOR * (x + cube));
        gelu_ref[i] = 0.5f * x * (1.0f + t);
        float sech = 1.0f / coshf(GELU_SCALING_FACTOR * (x + cube));
        dgelu_ref[i] = (0.5f * (1.0f + t) + x * 0.5f * sech * sech * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x)) * x;
    }
    ok &= check_close("gelu forward", from_device_x(d_out, n), gelu_ref, n, DEV_ATOL, DEV_RTOL);
    // one element in, the buffers are not 16-byte aligned: the W = 1 kernels
    gelu_forward(d_out + 1, d_dout + 1, n - 1, 0);
    ok &= check_close("gelu forward (W = 1)", from_device_x(d_out, n) + 1, gelu_ref + 1, n - 1, DEV_ATOL, DEV_RTOL);
    gelu_backward(d_out, d_dout, d_dout, n, 0);  // dout = x itself: local_grad(x) * x
    ok &= check_close("gelu backward", from_device_x(d_out, n), dgelu_ref, n, DEV_ATOL, DEV_RTOL);
    gelu_backward(d_out + 1, d_dout + 1, d_dout + 1, n - 1, 0);
    ok &= check_close("gelu backward (W = 1)", from_device_x(d_out, n) + 1, dgelu_ref + 1, n - 1, DEV_ATOL, DEV_RTOL);

    // GELU's backward fused into the dinp matmul: dinp = (dout @ w) * gelu'(pre), against the CPU formula;
    // dweight must still accumulate the plain product with inp (the GELU output)
    float* pre = make_random((size_t)N * C, 2.0f);
    floatX* d_pre = to_device_x(pre, (size_t)N * C);
    cudaCheck(cudaMemset(d_dw, 0, (size_t)OC * C * sizeof(float)));
    matmul_backward(d_dinp, d_dw, NULL, d_scratch, d_dout, d_inp, d_w, d_pre, N, C, OC, 0);
    int fused = matmul_dgelu_fused(N, C, OC, d_w, d_dout, d_dinp);
    printf("GELU backward %s\n", fused ? "fused into the matmul (cuBLASLt DGELU epilogue)" : "not fused: cuBLASLt has no algorithm, gelu_backward ran");
    float* dpre_ref = (float*)mallocCheck((size_t)N * C * sizeof(float));
    for (size_t i = 0; i < (size_t)N * C; i++) {
        float x = pre[i], cube = 0.044715f * x * x * x, t = tanhf(GELU_SCALING_FACTOR * (x + cube));
        float sech = 1.0f / coshf(GELU_SCALING_FACTOR * (x + cube));
        float local = 0.5f * (1.0f + t) + x * 0.5f * sech * sech * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dpre_ref[i] = dinp_ref[i] * local;
    }
    ok &= check_close("dinp through GELU", from_device_x(d_dinp, (size_t)N * C), dpre_ref, (size_t)N * C, DEV_ATOL, DEV_RTOL);
    for (size_t i = 0; i < (size_t)OC * C; i++) { dw_ref[i] *= 0.5f; }
    ok &= check_close("dweight (with pre_gelu)", from_device_f(d_dw, (size_t)OC * C), dw_ref, (size_t)OC * C, 1e-3f, 1e-3f);

    // bias gradient at a width that does not split into packs (the W = 1 column sum), rows not a multiple of
    // the chunks; accumulated onto a non-zero start
    {
        int n1 = 1000, c1 = 100;
        float* g1 = make_random((size_t)n1 * c1, 1.0f);
        floatX* d_g1 = to_device_x(g1, (size_t)n1 * c1);
        float* db1 = (float*)callocCheck(c1, sizeof(float));
        for (int c = 0; c < c1; c++) { db1[c] = 1.0f; }
        float* d_db1 = to_device_f(db1, c1);
        bias_backward(d_db1, d_g1, d_scratch, n1, c1, 0);
        for (int r = 0; r < n1; r++) {
            for (int c = 0; c < c1; c++) { db1[c] += g1[(size_t)r * c1 + c]; }
        }
        ok &= check_close("dbias (W = 1, C = 100)", from_device_f(d_db1, c1), db1, c1, 1e-3f, 1e-3f);
    }

    // timing: GPT-2 124M shapes at B*T = 8192 tokens
    int BT = 8192, Cm = 768;
    int shapes[4][2] = {{Cm, 3 * Cm}, {Cm, Cm}, {Cm, 4 * Cm}, {4 * Cm, Cm}};
    floatX* x = (floatX*)cudaMallocCheck((size_t)BT * 4 * Cm * sizeof(floatX));
    floatX* y = (floatX*)cudaMallocCheck((size_t)BT * 4 * Cm * sizeof(floatX));
    floatX* dx = (floatX*)cudaMallocCheck((size_t)BT * 4 * Cm * sizeof(floatX));
    floatX* wt = (floatX*)cudaMallocCheck((size_t)4 * Cm * Cm * sizeof(floatX));
    floatX* bt = (floatX*)cudaMallocCheck((size_t)4 * Cm * sizeof(floatX));
    float* gw = (float*)cudaMallocCheck((size_t)4 * Cm * Cm * sizeof(float));
    float* gb = (float*)cudaMallocCheck((size_t)4 * Cm * sizeof(float));
    float* scr = (float*)cudaMallocCheck((size_t)REDUCE_CHUNKS * 4 * Cm * sizeof(float));
    cudaCheck(cudaMemset(x, 0, (size_t)BT * 4 * Cm * sizeof(floatX)));
    cudaCheck(cudaMemset(wt, 0, (size_t)4 * Cm * Cm * sizeof(floatX)));
    cudaCheck(cudaMemset(bt, 0, (size_t)4 * Cm * sizeof(floatX)));
    printf("\n%6s %6s %6s %10s %10s %10s\n", "N", "C", "OC", "fwd ms", "bwd ms", "fwd TFLOPS");
    for (int k = 0; k < 4; k++) {
        int c = shapes[k][0], oc = shapes[k][1];
        float f = time_ms([&] { matmul_forward(y, x, wt, bt, BT, c, oc, 0); }, 20);
        float g = time_ms([&] { matmul_backward(dx, gw, gb, scr, y, x, wt, c == 4 * Cm ? y : NULL, BT, c, oc, 0); }, 20);
        printf("%6d %6d %6d %10.4f %10.4f %10.1f\n", BT, c, oc, f, g, 2.0 * BT * c * oc / (f * 1e-3) / 1e12);
    }
    matmul_free();
    printf("%s\n", ok ? "matmul: all checks passed" : "matmul: FAILED");
    return ok ? 0 : 1;
}
