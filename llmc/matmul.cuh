/*
 * llmc/matmul.cuh — the linear layers through cuBLASLt, and GELU.
 * Forward: out = inp @ weight^T + bias with the bias added in the cuBLASLt epilogue (one pass over out).
 * Backward: dinp = dout @ weight (floatX), dweight += dout^T @ inp accumulated in fp32 straight from the
 * floatX operands (cuBLASLt's mixed-precision output), dbias += column sums (reduce.cuh, deterministic).
 * GELU is a separate elementwise kernel with the CPU path's tanh formula, so that -r 1 can recompute it
 * and its math is pinned by the CPU tests (cuBLASLt's GELU epilogue does not document its formula).
 * Row-major (rows, cols) matrices are column-major (cols, rows) to cuBLAS; shapes below are row-major.
 */
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/reduce.cuh"

#define CUBLASLT_WORKSPACE_BYTES (32u << 20)

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
    cublasCheck(cublasLtDestroy(matmul_ctx.handle));
    cudaCheck(cudaFree(matmul_ctx.workspace));
}

// column-major D(m,n) = alpha * op(A) op(B) + beta * C, with C == D; op(A) is (m,k), op(B) is (k,n).
// d_type is CUBLAS_LOWP (floatX output) or CUDA_R_32F (fp32 gradient accumulation); bias (m) optional.
static void matmul_lt(void* d, cudaDataType_t d_type, const floatX* a, const floatX* b, const floatX* bias,
                      int m, int n, int k, bool trans_a, bool trans_b, float beta, cudaStream_t stream) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
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
    }
    // layouts describe the matrices as stored: a transposed operand is stored (k,m) / (n,k)
    cublasLtMatrixLayout_t la, lb, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUBLAS_LOWP, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUBLAS_LOWP, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, d_type, m, n, m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(matmul_ctx.handle, desc, la, lb, ld, ld, pref, 1, &heuristic, &found));
    if (found == 0) {
        fatal("cuBLASLt: no algorithm for m=%d n=%d k=%d trans_a=%d trans_b=%d bias=%d", m, n, k,
              (int)trans_a, (int)trans_b, bias != NULL);
    }
    const float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(matmul_ctx.handle, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld,
                               &heuristic.algo, matmul_ctx.workspace, ws, stream));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                    int N, int C, int OC, cudaStream_t stream) {
    // out: (N,OC) = inp: (N,C) @ weight^T: (OC,C)^T + bias: (OC) or NULL
    matmul_lt(out, CUBLAS_LOWP, weight, inp, bias, OC, N, C, true, false, 0.0f, stream);
}

void matmul_backward(floatX* dinp, float* dweight, float* dbias, float* scratch, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC, cudaStream_t stream) {
    // dinp: (N,C) overwritten; dweight: (OC,C) and dbias: (OC) fp32, accumulated (dbias may be NULL);
    // dout: (N,OC), inp: (N,C), weight: (OC,C), scratch: REDUCE_CHUNKS*OC floats
    matmul_lt(dinp, CUBLAS_LOWP, weight, dout, NULL, C, N, OC, false, false, 0.0f, stream);
    matmul_lt(dweight, CUDA_R_32F, inp, dout, NULL, C, OC, N, false, true, 1.0f, stream);
    if (dbias != NULL) { bias_backward(dbias, dout, scratch, N, OC, stream); }
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrtf(2/pi)

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float x = to_float(inp[i]);
    float cube = 0.044715f * x * x * x;
    out[i] = (floatX)(0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube))));
}

// dinp = gelu'(inp) * dout; dinp may alias dout
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float x = to_float(inp[i]);
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
    float tanh_out = tanhf(tanh_arg);
    float cosh_out = coshf(tanh_arg);
    float sech2 = 1.0f / (cosh_out * cosh_out);
    float local_grad = 0.5f * (1.0f + tanh_out) +
                       x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = (floatX)(local_grad * to_float(dout[i]));
}

void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    const int block = 256;
    gelu_forward_kernel<<<ceil_div((long)n, block), block, 0, stream>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}

void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t stream) {
    const int block = 256;
    gelu_backward_kernel<<<ceil_div((long)n, block), block, 0, stream>>>(dinp, inp, dout, n);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_MATMUL_CUH
