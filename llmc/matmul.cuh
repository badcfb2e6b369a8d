/*
 * llmc/matmul.cuh — the linear layers through cuBLASLt, and GELU.
 * Forward: out = inp @ weight^T + bias with the bias added in the cuBLASLt epilogue (one pass over out).
 * Backward: dinp = dout @ weight (floatX), dweight += dout^T @ inp accumulated in fp32 straight from the
 * floatX operands (cuBLASLt's mixed-precision output), dbias += column sums (reduce.cuh, deterministic).
 * Each distinct shape's algorithm is chosen once (cuBLASLt's heuristic, told the operands' real alignment).
 * GELU forward is a separate elementwise kernel with the CPU path's tanh formula (tanh through the fast
 * exponential), so that -r 1 recomputes exactly what the forward stored (an epilogue would apply GELU before
 * rounding to floatX: -r 0 and -r 1 would differ in the last bit). Its backward is fused into the dinp
 * matmul of the layer after it: cuBLASLt's DGELU epilogue multiplies the fp32 product by GELU'(pre-activation)
 * before rounding, which saves a pass over (N, 4C) twice; where cuBLASLt has no algorithm for it, the matmul
 * runs plain and gelu_backward follows.
 * Row-major (rows, cols) matrices are column-major (cols, rows) to cuBLAS; shapes below are row-major.
 */
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/reduce.cuh"

#define CUBLASLT_WORKSPACE_BYTES (32u << 20)

// the algorithm for each distinct matmul, found once: descriptors live on the stack (Init, no heap) and
// the heuristic runs only the first time a shape is seen, so the training loop allocates nothing here
typedef struct {
    int m, n, k, trans_a, trans_b, bias, dgelu, d_type;
    int found;  // 0: cuBLASLt has no algorithm for this matmul (only asked with dgelu: the caller falls back)
    uint32_t align[4];
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

#define MATMUL_PLANS 128
static MatmulPlan matmul_plans[MATMUL_PLANS];
static int matmul_num_plans = 0;

typedef struct {
    cublasLtHandle_t handle;
    void* workspace;  // CUBLASLT_WORKSPACE_BYTES on the device
} MatmulContext;

static MatmulContext matmul_ctx;

void matmul_init(void) {
    cublasCheck(cublasLtCreate(&matmul_ctx.handle));
    matmul_ctx.workspace = cudaMallocCheck(CUBLASLT_WORKSPACE_BYTES);
}

void matmul_free(void) {
    matmul_num_plans = 0;
    cublasCheck(cublasLtDestroy(matmul_ctx.handle));
    cudaCheck(cudaFree(matmul_ctx.workspace));
}

// the alignment of a pointer in bytes (a power of two, at most 256), for cuBLASLt's algorithm choice:
// by default its heuristic may pick algorithms that need 256-byte aligned operands, and per-layer slices
// of the parameter buffer are not always that aligned
static uint32_t alignment_of(const void* ptr) {
    uintptr_t x = (uintptr_t)ptr;
    uint32_t a = 256;
    while (a > 1 && x % a != 0) { a >>= 1; }
    return a;
}

// column-major D(m,n) = alpha * op(A) op(B) + beta * C, with C == D; op(A) is (m,k), op(B) is (k,n).
// d_type is CUBLAS_LOWP (floatX output) or CUDA_R_32F (fp32 gradient accumulation); bias (m) optional.
// dgelu (m,n), optional: D = (op(A) op(B)) * GELU'(dgelu) (the DGELU epilogue). Returns false, having done
// nothing, when cuBLASLt has no algorithm for that epilogue; every other matmul without one is fatal.
static bool matmul_lt(void* d, cudaDataType_t d_type, const floatX* a, const floatX* b, const floatX* bias,
                      const floatX* dgelu, int m, int n, int k, bool trans_a, bool trans_b, float beta,
                      cudaStream_t stream) {
    cublasLtMatmulDescOpaque_t desc_mem;
    cublasLtMatmulDesc_t desc = &desc_mem;
    cublasCheck(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    if (bias != NULL) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bias_type = CUBLAS_LOWP;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    } else if (dgelu != NULL) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DGELU;
        int64_t aux_ld = m;
        cudaDataType_t aux_type = CUBLAS_LOWP;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dgelu, sizeof(dgelu)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    }
    // layouts describe the matrices as stored: a transposed operand is stored (k,m) / (n,k)
    cublasLtMatrixLayoutOpaque_t la_mem, lb_mem, ld_mem;
    cublasLtMatrixLayout_t la = &la_mem, lb = &lb_mem, ld = &ld_mem;
    cublasCheck(cublasLtMatrixLayoutInit(la, CUBLAS_LOWP, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutInit(lb, CUBLAS_LOWP, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutInit(ld, d_type, m, n, m));
    uint32_t align[4] = {alignment_of(a), alignment_of(b), alignment_of(d), alignment_of(d)};
    MatmulPlan* plan = NULL;
    for (int i = 0; i < matmul_num_plans && plan == NULL; i++) {
        MatmulPlan* p = &matmul_plans[i];
        if (p->m == m && p->n == n && p->k == k && p->trans_a == trans_a && p->trans_b == trans_b &&
            p->bias == (bias != NULL) && p->dgelu == (dgelu != NULL) && p->d_type == (int)d_type &&
            memcmp(p->align, align, sizeof(align)) == 0) {
            plan = p;
        }
    }
    if (plan == NULL) {
        if (matmul_num_plans == MATMUL_PLANS) { fatal("cuBLASLt: more than %d distinct matmuls", MATMUL_PLANS); }
        cublasLtMatmulPreferenceOpaque_t pref_mem;
        cublasLtMatmulPreference_t pref = &pref_mem;
        cublasCheck(cublasLtMatmulPreferenceInit(pref));
        size_t ws = CUBLASLT_WORKSPACE_BYTES;
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4; i++) {
            cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof(align[i])));
        }
        cublasLtMatmulHeuristicResult_t heuristic;
        int found = 0;
        cublasCheck(cublasLtMatmulAlgoGetHeuristic(matmul_ctx.handle, desc, la, lb, ld, ld, pref, 1, &heuristic, &found));
        if (found == 0 && dgelu == NULL) {
            fatal("cuBLASLt: no algorithm for m=%d n=%d k=%d trans_a=%d trans_b=%d bias=%d", m, n, k,
                  (int)trans_a, (int)trans_b, bias != NULL);
        }
        plan = &matmul_plans[matmul_num_plans++];
        plan->m = m; plan->n = n; plan->k = k; plan->trans_a = trans_a; plan->trans_b = trans_b;
        plan->bias = bias != NULL; plan->dgelu = dgelu != NULL; plan->d_type = (int)d_type;
        memcpy(plan->align, align, sizeof(align));
        plan->found = found > 0;
        if (plan->found) { plan->algo = heuristic.algo; }
    }
    if (!plan->found) { return false; }
    const float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(matmul_ctx.handle, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld,
                               &plan->algo, matmul_ctx.workspace, CUBLASLT_WORKSPACE_BYTES, stream));
    return true;
}

void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                    int N, int C, int OC, cudaStream_t stream) {
    // out: (N,OC) = inp: (N,C) @ weight^T: (OC,C)^T + bias: (OC) or NULL
    matmul_lt(out, CUBLAS_LOWP, weight, inp, bias, NULL, OC, N, C, true, false, 0.0f, stream);
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrtf(2/pi)

// tanh(u) = 1 - 2 / (exp(2u) + 1) with the fast exponential: tanhf's exact evaluation made the GELU kernels
// compute-bound; this is within a few fp32 ulps of it (far below bf16's rounding). |u| <= 15 keeps exp
// finite; tanh(15) is 1 in fp32.
__device__ __forceinline__ float gelu_tanh(float u) {
    u = fminf(fmaxf(u, -15.0f), 15.0f);
    return 1.0f - __fdividef(2.0f, __expf(2.0f * u) + 1.0f);
}

// out = gelu(inp), W values per thread
template <int W>
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= n) { return; }
    Vec<W> vx = load_vec<W>(inp + i), vo;
    for (int k = 0; k < W; k++) {
        float x = to_float(vx.v[k]);
        float cube = 0.044715f * x * x * x;
        vo.v[k] = (floatX)(0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube))));
    }
    store_vec<W>(out + i, vo);
}

// dinp = gelu'(inp) * dout; dinp may alias dout
template <int W>
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= n) { return; }
    Vec<W> vx = load_vec<W>(inp + i), vd = load_vec<W>(dout + i), vo;
    for (int k = 0; k < W; k++) {
        float x = to_float(vx.v[k]);
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
        float tanh_out = gelu_tanh(tanh_arg);
        float sech2 = 1.0f - tanh_out * tanh_out;
        float local_grad = 0.5f * (1.0f + tanh_out) +
                           x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        vo.v[k] = (floatX)(local_grad * to_float(vd.v[k]));
    }
    store_vec<W>(dinp + i, vo);
}

void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    const int block = 256;
    if (n % PACK == 0 && aligned16(out) && aligned16(inp)) {
        gelu_forward_kernel<PACK><<<ceil_div((long)(n / PACK), block), block, 0, stream>>>(out, inp, n);
    } else {
        gelu_forward_kernel<1><<<ceil_div((long)n, block), block, 0, stream>>>(out, inp, n);
    }
    cudaCheck(cudaGetLastError());
}

void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t stream) {
    // dinp, inp, dout: (n); dinp may alias dout
    const int block = 256;
    if (n % PACK == 0 && aligned16(dinp) && aligned16(inp) && aligned16(dout)) {
        gelu_backward_kernel<PACK><<<ceil_div((long)(n / PACK), block), block, 0, stream>>>(dinp, inp, dout, n);
    } else {
        gelu_backward_kernel<1><<<ceil_div((long)n, block), block, 0, stream>>>(dinp, inp, dout, n);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// backward

void matmul_backward(floatX* dinp, float* dweight, float* dbias, float* scratch, const floatX* dout,
                     const floatX* inp, const floatX* weight, const floatX* pre_gelu, int N, int C, int OC,
                     cudaStream_t stream) {
    // dinp: (N,C) overwritten; dweight: (OC,C) and dbias: (OC) fp32, accumulated (dbias may be NULL);
    // dout: (N,OC), inp: (N,C), weight: (OC,C), scratch: REDUCE_CHUNKS*OC floats. pre_gelu: (N,C) or NULL:
    // inp was gelu(pre_gelu), and dinp is then the gradient with respect to pre_gelu
    if (!matmul_lt(dinp, CUBLAS_LOWP, weight, dout, NULL, pre_gelu, C, N, OC, false, false, 0.0f, stream)) {
        matmul_lt(dinp, CUBLAS_LOWP, weight, dout, NULL, NULL, C, N, OC, false, false, 0.0f, stream);
        gelu_backward(dinp, pre_gelu, dinp, (size_t)N * C, stream);
    }
    matmul_lt(dweight, CUDA_R_32F, inp, dout, NULL, NULL, C, OC, N, false, true, 1.0f, stream);
    if (dbias != NULL) { bias_backward(dbias, dout, scratch, N, OC, stream); }
}

// whether matmul_backward with pre_gelu fused GELU's backward for this shape (the check prints it)
bool matmul_dgelu_fused(int N, int C, int OC, const floatX* weight, const floatX* dout, floatX* dinp) {
    for (int i = 0; i < matmul_num_plans; i++) {
        MatmulPlan* p = &matmul_plans[i];
        if (p->dgelu && p->m == C && p->n == N && p->k == OC && p->align[0] == alignment_of(weight) &&
            p->align[1] == alignment_of(dout) && p->align[2] == alignment_of(dinp)) {
            return p->found;
        }
    }
    return false;
}

#endif // LLMC_MATMUL_CUH
