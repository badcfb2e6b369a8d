// dev/cuda/hybrid_methods.cu — the kernels of the method table's rows other than the drift family (GPA,
// Linefit: their device_update and device_predict hooks) against their CPU passes, the reference: over a few
// steps on uneven blocks, the weights and the method's buffers to fp32 rounding (the same elements, the
// device's fma where the CPU's compiler may round apart), the floatX copy to its own rounding: against the device's
// master weights it was rounded from, not the CPU's (a jump's extrapolation carries the fp32 difference of the two
// up to the weights' own tolerance, which a relative bf16 bound on a tiny weight need not cover).
// make dev/cuda/hybrid_methods && ./dev/cuda/hybrid_methods
#include "dev/cuda/dev_common.cuh"
#include "hybrid/apply.cuh"
#include "hybrid/hybrid.h"  // the method table (and hybrid_table_shown, which its rows name)

#define NB 5
static const size_t SIZES[NB] = {1000003, 77, 4096, 250000, 3};  // uneven on purpose

typedef struct {
    size_t P, offsets[NB + 1];
    float wd[NB];
    HybridModel model;
    float *theta, *g, *m, *v;             // host, the CPU pass's
    float *d_theta, *d_g, *d_m, *d_v;     // device, the kernels'
    floatX* d_x;
    size_t* d_off;
    float* d_wd;
} Bench;

static void bench_init(Bench* b) {
    b->offsets[0] = 0;
    for (int k = 0; k < NB; k++) { b->offsets[k + 1] = b->offsets[k] + SIZES[k]; b->wd[k] = k % 2 ? 0.1f : 0.0f; }
    b->P = b->offsets[NB];
    HybridModel m = {b->P, NB, b->offsets, b->wd, 100, 1e-2f, 0.9f, 0.95f, 1e-8f, 1024.0};
    b->model = m;
    b->theta = make_random(b->P, 1.0f);
    b->g = make_random(b->P, 1e-2f);
    b->m = (float*)calloc(b->P, sizeof(float));
    b->v = (float*)calloc(b->P, sizeof(float));
    b->d_theta = to_device_f(b->theta, b->P);
    b->d_g = to_device_f(b->g, b->P);
    b->d_m = to_device_f(b->m, b->P);
    b->d_v = to_device_f(b->v, b->P);
    b->d_x = (floatX*)cudaMallocCheck(b->P * sizeof(floatX));
    b->d_off = (size_t*)cudaMallocCheck((NB + 1) * sizeof(size_t));
    cudaCheck(cudaMemcpy(b->d_off, b->offsets, (NB + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    b->d_wd = to_device_f(b->wd, NB);
}

static HybridDeviceStep bench_step(Bench* b, float* const* d_bufs, int t, float lr) {
    HybridDeviceStep s;
    s.master = b->d_theta; s.params = b->d_x; s.grads = b->d_g; s.m = b->d_m; s.v = b->d_v; s.bufs = d_bufs;
    s.block_offsets = b->d_off; s.block_wd = b->d_wd; s.nblocks = NB; s.lo = 0; s.hi = b->P;
    ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, b->wd, t, lr, 0.5f, NULL, 0, NULL, 0.0f, 0.0f};
    s.adam = st;
    s.seed = 42u + (uint32_t)t;
    s.stream = 0;
    return s;
}

int main(void) {
    int ok = 1;
    Bench b;
    bench_init(&b);
    size_t P = b.P;
    {   // GPA: five updates
        GpaConfig c = {0.7f, 0.98f};
        float* x = (float*)mallocCheck(P * sizeof(float));
        float* bufs[1] = {x};
        void* cpu = gpa_init(&b.model, &c, bufs, b.theta);
        float* d_xk = to_device_f(b.theta, P);
        float* d_bufs[1] = {d_xk};
        void* gpu = gpa_init(&b.model, &c, NULL, NULL);
        for (int t = 1; t <= 5; t++) {
            ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, b.wd, t, 1e-2f, 0.5f, NULL, 0, NULL, 0.0f, 0.0f};
            gpa_update(cpu, &b.model, &st, b.theta, b.g, b.m, b.v, bufs);
            HybridDeviceStep s = bench_step(&b, d_bufs, t, 1e-2f);
            gpa_device_update(gpu, &s);
        }
        float* y = from_device_f(b.d_theta, P);
        ok &= check_close("gpa: y (the weights) vs CPU", y, b.theta, P, 1e-7f, 1e-5f);
        ok &= check_close("gpa: x (kept) vs CPU", from_device_f(d_xk, P), x, P, 1e-7f, 1e-5f);
        ok &= check_close("gpa: floatX copy of y", from_device_x(b.d_x, P), y, P, 0.0f, 1.0f / 128);
        ok &= check_close("gpa: AdamW m vs CPU", from_device_f(b.d_m, P), b.m, P, 1e-9f, 1e-5f);
        gpa_free(cpu); gpa_free(gpu);
        free(x);
        cudaCheck(cudaFree(d_xk));
    }
    {   // Linefit: 3 states 2 steps apart (records after steps 1, 3, 4), its jump at step 5
        LinefitConfig c = {3, 2, 4.0f};
        float* s0 = (float*)calloc(P, sizeof(float));
        float* s1 = (float*)calloc(P, sizeof(float));
        float* bufs[2] = {s0, s1};
        float *d_s0 = to_device_f(s0, P), *d_s1 = to_device_f(s1, P);
        float* d_bufs[2] = {d_s0, d_s1};
        cudaCheck(cudaMemcpy(b.d_theta, b.theta, P * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(b.d_m, b.m, P * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(b.d_v, b.v, P * sizeof(float), cudaMemcpyHostToDevice));
        void* cpu = linefit_init(&b.model, &c, bufs, NULL);
        void* gpu = linefit_init(&b.model, &c, NULL, NULL);
        int jumped = 0;
        for (int step = 0; step < 6; step++) {
            HybridPlan pc, pg;
            memset(&pc, 0, sizeof(pc)); memset(&pg, 0, sizeof(pg));
            linefit_plan(cpu, step, 1e-2f, &pc);
            linefit_plan(gpu, step, 1e-2f, &pg);
            HybridDeviceStep s = bench_step(&b, d_bufs, step + 1, 1e-2f);
            if (pc.phase == HYBRID_PHASE_PREDICT) {
                linefit_predict(cpu, &b.model, &pc, b.theta, NULL, bufs);
                linefit_device_predict(gpu, &s);
                jumped++;
            } else {
                ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, b.wd, step + 1, 1e-2f, 0.5f, NULL, 0, NULL, 0.0f, 0.0f};
                linefit_update(cpu, &b.model, &st, b.theta, b.g, b.m, b.v, bufs);
                linefit_device_update(gpu, &s);
            }
            if (step == 4) {
                ok &= check_close("linefit: sum w vs CPU", from_device_f(d_s0, P), s0, P, 1e-6f, 1e-5f);
                ok &= check_close("linefit: sum tau w vs CPU", from_device_f(d_s1, P), s1, P, 1e-6f, 1e-5f);
            }
        }
        printf("%-34s %s\n", "linefit: one jump, at step 5", jumped == 1 ? "OK" : "FAIL");
        ok &= jumped == 1;
        float* w = from_device_f(b.d_theta, P);
        ok &= check_close("linefit: weights after the jump", w, b.theta, P, 1e-6f, 1e-5f);
        ok &= check_close("linefit: floatX copy after it", from_device_x(b.d_x, P), w, P, 0.0f, 1.0f / 128);
        linefit_free(cpu); linefit_free(gpu);
        free(s0); free(s1);
        cudaCheck(cudaFree(d_s0)); cudaCheck(cudaFree(d_s1));
    }
    printf("%s\n", ok ? "hybrid_methods: all OK" : "hybrid_methods: FAILED");
    return ok ? 0 : 1;
}
