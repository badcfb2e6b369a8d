/*
 * llmc/cudnn_att.cpp — cuDNN flash attention through the backend (graph) API; see llmc/cudnn_att.h.
 *
 * The graphs are the composite pattern that cuDNN's fused flash-attention engines recognise: each is built
 * operation by operation as cudnn-frontend (github.com/NVIDIA/cudnn-frontend, include/cudnn_frontend/node/
 * scaled_dot_product_flash_attention.h) lowers its SDPA nodes for cuDNN 9 before 9.21, with the same data
 * types on every edge, since the engines match the types as well as the operations:
 *   forward (CompositeSDPANode::expand_node): S = Q K^T (fp32) ; S *= scale ; causal mask (INT32 row and
 *             column indices, row >= col, else -inf) ; M = rowmax S ; E = exp(S - M) ; Z = rowsum E ;
 *             stats = M + log Z ; P = E / Z as bf16 ; O = P V
 *   backward (CompositeSDPABackwardNode::expand_node): delta = rowsum(dO * O) * 1 ; S = Q K^T * scale ;
 *             P = exp(causal mask(S - stats)) ; dV = P^T (bf16) dO ; dP = dO V^T ;
 *             dS = (dP - delta) * P * scale ; dK = dS^T (bf16) Q ; dQ = dS K (fp32 dS)
 * The dedicated SDPA operation descriptors of the backend are not used: the composite graph is what the
 * frontend itself builds for this cuDNN, and it needs no cudnn-frontend headers (this machine has none).
 * Tensors are 4-d (b, h, s, d). Q, K, V are read in place from qkv (B,T,3C): dims (B,NH,T,HS), strides
 * (3CT, HS, 3C, 1) at offsets 0, C, 2C; O and dO (B,T,C) have strides (CT, HS, C, 1); stats and delta are
 * (B,NH,T,1), which is the (B,NH,T) layout of llmc/attention.cuh's lse and delta.
 */
#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "llmc/cudnn_att.h"
#include "llmc/utils.h"

typedef cudnnBackendDescriptor_t Desc;

// tensor ids of the variant packs; virtual tensors are numbered from VIRTUAL_UID up
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_MASKED, UID_DO, UID_DQ, UID_DK, UID_DV,
       UID_DELTA, UID_ONE, UID_DQ_ACCUM, VIRTUAL_UID = 100 };
// the tensors of each graph that the variant packs bind, in the order of the pointers passed (the accumulator
// last: only the backward graph with the fp32 dQ accumulator has it)
static const int64_t FWD_UIDS[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_MASKED};
static const int64_t BWD_UIDS[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_MASKED, UID_DO, UID_DQ,
                                   UID_DK, UID_DV, UID_DELTA, UID_ONE, UID_DQ_ACCUM};

// ----------------------------------------------------------------------------
// descriptor building: every descriptor made is kept in `made` and destroyed with the builder; the first
// failure is recorded (as a one-line reason) and makes every later step a no-op

struct Builder {
    std::vector<Desc> made;
    std::vector<int64_t> bound;  // uids of the non-virtual tensors made, which the variant pack must bind
    int64_t next_virtual = VIRTUAL_UID;
    bool failed = false;
    char err[256] = {0};

    ~Builder() { for (size_t i = made.size(); i-- > 0;) { cudnnBackendDestroyDescriptor(made[i]); } }

    void fail(const char* what, cudnnStatus_t st) {
        if (!failed) { snprintf(err, sizeof(err), "%s: %s", what, cudnnGetErrorString(st)); }
        failed = true;
    }
    Desc make(cudnnBackendDescriptorType_t type, const char* what) {
        Desc d = NULL;
        if (failed) { return NULL; }
        cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
        if (st != CUDNN_STATUS_SUCCESS) { fail(what, st); return NULL; }
        made.push_back(d);
        return d;
    }
    void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
             const void* value, const char* what) {
        if (failed) { return; }
        cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, value);
        if (st != CUDNN_STATUS_SUCCESS) { fail(what, st); }
    }
    void finalize(Desc d, const char* what) {
        if (failed) { return; }
        cudnnStatus_t st = cudnnBackendFinalize(d);
        if (st != CUDNN_STATUS_SUCCESS) { fail(what, st); }
    }

    // a 4-d tensor; uid 0 makes a virtual tensor (an intermediate that never reaches memory)
    Desc tensor(int64_t uid, cudnnDataType_t type, const int64_t dims[4], const int64_t strides[4],
                bool by_value = false, cudnnBackendTensorReordering_t reorder = CUDNN_TENSOR_REORDERING_NONE) {
        Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
        bool is_virtual = uid == 0;
        if (is_virtual) { uid = next_virtual++; } else { bound.push_back(uid); }
        int64_t align = 16;
        set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
        set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
        set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
        set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
        if (by_value) { set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value"); }
        if (reorder != CUDNN_TENSOR_REORDERING_NONE) {
            set(t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &reorder, "tensor reordering");
        }
        finalize(t, "tensor");
        return t;
    }
    // a virtual tensor with the dims of a (b,h,r,c) block, densely strided
    Desc virt(cudnnDataType_t type, int64_t b, int64_t h, int64_t r, int64_t c) {
        int64_t dims[4] = {b, h, r, c}, strides[4] = {h * r * c, r * c, c, 1};
        return tensor(0, type, dims, strides);
    }

    // y = mode(x [, b] [, t]); axis only for GEN_INDEX
    Desc pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc t, Desc y, int64_t axis = -1,
                   cudnnDataType_t prec = CUDNN_DATA_FLOAT) {
        Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
        set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
        if (axis >= 0) { set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis"); }
        finalize(pw, "pointwise");
        Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op mode");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise op x");
        if (b) { set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise op b"); }
        if (t) { set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise op t"); }
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise op y");
        finalize(op, "pointwise op");
        return op;
    }
    // y (..,1) = reduce x over the last dimension
    Desc reduction(cudnnReduceTensorOp_t mode, Desc x, Desc y) {
        Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
        cudnnDataType_t prec = CUDNN_DATA_FLOAT;
        set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
        set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "reduction precision");
        finalize(r, "reduction");
        Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction op mode");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction op x");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction op y");
        finalize(op, "reduction op");
        return op;
    }
    // c = a b, batched over the two leading dimensions, fp32 accumulation
    Desc matmul(Desc a, Desc b, Desc c) {
        Desc m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
        cudnnDataType_t prec = CUDNN_DATA_FLOAT;
        set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "matmul precision");
        finalize(m, "matmul");
        Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul op desc");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul op a");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul op b");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul op c");
        finalize(op, "matmul op");
        return op;
    }
    // y = x viewed with y's dims and strides (here: a transpose of the last two dimensions)
    Desc reshape(Desc x, Desc y) {
        Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape op x");
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape op y");
        finalize(op, "reshape op");
        return op;
    }
    Desc graph(const std::vector<Desc>& ops, cudnnHandle_t handle) {
        Desc g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
        if (handle) { set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle"); }
        set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)ops.size(), ops.data(), "graph ops");
        finalize(g, "operation graph");
        return g;
    }
};

// k or v of qkv (B,T,3C), seen as (B,NH,HS,T)
static Desc transposed(Builder& bld, int64_t uid, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    int64_t C = NH * HS;
    int64_t dims[4] = {B, NH, HS, T}, strides[4] = {3 * C * T, HS, 1, 3 * C};
    return bld.tensor(uid, CUDNN_DATA_BFLOAT16, dims, strides);
}

// the tensors both graphs share. Each memory tensor has one descriptor per graph, so K enters as K^T
// (B,NH,HS,T), the layout of the Q K^T matmul's B, and the backward's V as V^T; the backward gets K back as
// a reshape of K^T (cudnn-frontend maps K and V the same way)
struct Common {
    Desc q, k_t, o, stats, scale, masked;
};

static Common common_tensors(Builder& bld, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    int64_t C = NH * HS;
    Common c;
    int64_t dims[4] = {B, NH, T, HS}, strides[4] = {3 * C * T, HS, 3 * C, 1};
    int64_t o_strides[4] = {C * T, HS, C, 1};
    int64_t stat_dims[4] = {B, NH, T, 1}, stat_strides[4] = {NH * T, T, 1, 1};
    int64_t one[4] = {1, 1, 1, 1};
    c.q = bld.tensor(UID_Q, CUDNN_DATA_BFLOAT16, dims, strides);
    c.k_t = transposed(bld, UID_K, B, T, NH, HS);
    c.o = bld.tensor(UID_O, CUDNN_DATA_BFLOAT16, dims, o_strides);
    c.stats = bld.tensor(UID_STATS, CUDNN_DATA_FLOAT, stat_dims, stat_strides);
    c.scale = bld.tensor(UID_SCALE, CUDNN_DATA_FLOAT, one, one, true);
    c.masked = bld.tensor(UID_MASKED, CUDNN_DATA_FLOAT, one, one, true);
    return c;
}

// S = scale * Q K^T (virtual fp32 (B,NH,T,T)); appends the operations to ops
static Desc scaled_scores(Builder& bld, std::vector<Desc>& ops, const Common& c, int64_t B, int64_t T, int64_t NH) {
    Desc s = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.matmul(c.q, c.k_t, s));
    Desc scaled = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_MUL, s, c.scale, NULL, scaled));
    return scaled;
}

// the causal mask as the frontend lowers attn::score_modifiers::causal_mask (a top-left diagonal band with
// right bound 0) for cuDNN before 9.21 (CompositeDiagonalBandMaskNode): INT32 row and column indices of x,
// row >= col as a BOOLEAN, and x where it holds, else the by-value masked value
static Desc causal_mask(Builder& bld, std::vector<Desc>& ops, const Common& c, Desc x, int64_t B, int64_t T,
                        int64_t NH) {
    Desc row = bld.virt(CUDNN_DATA_INT32, B, NH, T, T), col = bld.virt(CUDNN_DATA_INT32, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, NULL, NULL, row, 2));
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, NULL, NULL, col, 3));
    Desc keep = bld.virt(CUDNN_DATA_BOOLEAN, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, NULL, keep, -1, CUDNN_DATA_BOOLEAN));
    Desc masked = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, c.masked, keep, masked));
    return masked;
}

// mirrors cudnn-frontend's CompositeSDPANode::expand_node (node/scaled_dot_product_flash_attention.h) for
// our case (no bias, dropout, padding or paging; causal; stats generated), with its Softmax node (softmax.h):
//   bmm1 S = Q K^T ; attn_scale ; causal mask ; M = max S ; E = exp(S - M) ; Z = sum E ; stats = M + log Z ;
//   P = E / Z, typed bf16 (the I/O type: "bmm2 aType" must be it) ; bmm2 O = P V
static Desc forward_graph(Builder& bld, cudnnHandle_t handle, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    int64_t C = NH * HS;
    Common c = common_tensors(bld, B, T, NH, HS);
    std::vector<Desc> ops;
    int64_t dims[4] = {B, NH, T, HS}, strides[4] = {3 * C * T, HS, 3 * C, 1};
    Desc v = bld.tensor(UID_V, CUDNN_DATA_BFLOAT16, dims, strides);
    Desc s = causal_mask(bld, ops, c, scaled_scores(bld, ops, c, B, T, NH), B, T, NH);
    Desc m = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, 1);
    ops.push_back(bld.reduction(CUDNN_REDUCE_TENSOR_MAX, s, m));
    Desc centred = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_SUB, s, m, NULL, centred));
    Desc e = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_EXP, centred, NULL, NULL, e));
    Desc z = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, 1);
    ops.push_back(bld.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z));
    Desc logz = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, 1);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_LOG, z, NULL, NULL, logz));
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_ADD, m, logz, NULL, c.stats));
    Desc p = bld.virt(CUDNN_DATA_BFLOAT16, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_DIV, e, z, NULL, p));
    ops.push_back(bld.matmul(p, v, c.o));
    return bld.graph(ops, handle);
}

// mirrors cudnn-frontend's CompositeSDPABackwardNode::expand_node (same file), MHA, no dropout or bias:
//   softmax_sum = sum(dO * O) * 1 (the frontend's dropout_scale_inv, 1 without dropout) -> delta (memory) ;
//   S = Q K^T * attn_scale ; S - stats ; causal mask (after the stats, as the frontend) ; P = exp ;
//   dV = reshape(P)^T (bf16) dO ; dP = dO V^T ; dS = (dP - softmax_sum) * P * attn_scale ;
//   dK = reshape(dS)^T (bf16) Q ; dQ = dS reshape(K^T), written directly or through the fp32 dQ_accum
//   (BHSD-dense, then an IDENTITY into dQ) as the frontend does when it has no dP workspace
static Desc backward_graph(Builder& bld, cudnnHandle_t handle, int64_t B, int64_t T, int64_t NH, int64_t HS,
                           bool dq_accum) {
    int64_t C = NH * HS;
    Common c = common_tensors(bld, B, T, NH, HS);
    int64_t qkv_dims[4] = {B, NH, T, HS}, qkv_strides[4] = {3 * C * T, HS, 3 * C, 1}, o_strides[4] = {C * T, HS, C, 1};
    int64_t stat_dims[4] = {B, NH, T, 1}, stat_strides[4] = {NH * T, T, 1, 1};
    int64_t one_dims[4] = {1, 1, 1, 1};
    Desc dout = bld.tensor(UID_DO, CUDNN_DATA_BFLOAT16, qkv_dims, o_strides);
    Desc dq = bld.tensor(UID_DQ, CUDNN_DATA_BFLOAT16, qkv_dims, qkv_strides);
    Desc dk = bld.tensor(UID_DK, CUDNN_DATA_BFLOAT16, qkv_dims, qkv_strides);
    Desc dv = bld.tensor(UID_DV, CUDNN_DATA_BFLOAT16, qkv_dims, qkv_strides);
    Desc delta = bld.tensor(UID_DELTA, CUDNN_DATA_FLOAT, stat_dims, stat_strides);
    Desc one = bld.tensor(UID_ONE, CUDNN_DATA_FLOAT, one_dims, one_dims, true);
    std::vector<Desc> ops;
    // the "dO * O => softmax_sum" chain
    Desc dout_o = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, HS);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_MUL, dout, c.o, NULL, dout_o));
    Desc dout_o_sum = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, 1);
    ops.push_back(bld.reduction(CUDNN_REDUCE_TENSOR_ADD, dout_o, dout_o_sum));
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_MUL, dout_o_sum, one, NULL, delta));
    // the "Q @ K^T => exp_softmax => dV" chain: P recomputed from the forward's log-sum-exp
    Desc s = scaled_scores(bld, ops, c, B, T, NH);
    Desc centred = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_SUB, s, c.stats, NULL, centred));
    Desc p = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_EXP, causal_mask(bld, ops, c, centred, B, T, NH), NULL, NULL, p));
    int64_t tt_dims[4] = {B, NH, T, T}, tt_strides[4] = {NH * T * T, T * T, 1, T};
    Desc p_t = bld.tensor(0, CUDNN_DATA_BFLOAT16, tt_dims, tt_strides);
    ops.push_back(bld.reshape(p, p_t));
    ops.push_back(bld.matmul(p_t, dout, dv));
    // the "dO @ V^T => dS => dK" chain
    Desc v_t = transposed(bld, UID_V, B, T, NH, HS);
    Desc dp = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.matmul(dout, v_t, dp));
    Desc dp_c = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_SUB, dp, delta, NULL, dp_c));
    Desc ds_p = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_MUL, dp_c, p, NULL, ds_p));
    Desc ds = bld.virt(CUDNN_DATA_FLOAT, B, NH, T, T);
    ops.push_back(bld.pointwise(CUDNN_POINTWISE_MUL, ds_p, c.scale, NULL, ds));
    Desc ds_t = bld.tensor(0, CUDNN_DATA_BFLOAT16, tt_dims, tt_strides);
    ops.push_back(bld.reshape(ds, ds_t));
    ops.push_back(bld.matmul(ds_t, c.q, dk));
    // the "dS @ K => dQ" chain
    Desc k = bld.tensor(0, CUDNN_DATA_BFLOAT16, qkv_dims, qkv_strides);
    ops.push_back(bld.reshape(c.k_t, k));
    if (dq_accum) {
        int64_t acc_strides[4] = {NH * T * HS, T * HS, HS, 1};
        Desc acc = bld.tensor(UID_DQ_ACCUM, CUDNN_DATA_FLOAT, qkv_dims, acc_strides);
        ops.push_back(bld.matmul(ds, k, acc));
        ops.push_back(bld.pointwise(CUDNN_POINTWISE_IDENTITY, acc, NULL, NULL, dq));
    } else {
        ops.push_back(bld.matmul(ds, k, dq));
    }
    return bld.graph(ops, handle);
}

// ----------------------------------------------------------------------------
// execution plans: the heuristics' engine configurations in order, the first that finalizes wins, preferring
// engines without the non-deterministic note (the trainer promises bit-reproducible runs)

static bool deterministic(Desc cfg) {
    Desc engine = NULL;
    int64_t n = 0;
    bool det = false;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) { return false; }
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS) {
        det = true;
        for (int64_t i = 0; i < n; i++) { det &= notes[i] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC; }
    }
    cudnnBackendDestroyDescriptor(engine);
    return det;
}

// the first plan that finalizes among the configurations of heuristics `mode`; NULL if none (`tried` says how many)
static Desc plan_from(Builder& bld, cudnnHandle_t handle, Desc graph, cudnnBackendHeurMode_t mode, int64_t* workspace,
                      bool* is_deterministic, int64_t* tried) {
    Desc heur = bld.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    bld.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics graph");
    bld.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    bld.finalize(heur, "heuristics");
    if (bld.failed) { return NULL; }
    int64_t count = 0;
    cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                0, &count, NULL);
    if (st != CUDNN_STATUS_SUCCESS) { bld.fail("heuristics results", st); return NULL; }
    std::vector<Desc> cfgs;
    for (int64_t i = 0; i < count; i++) { cfgs.push_back(bld.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config")); }
    if (bld.failed) { return NULL; }
    int64_t got = 0;
    st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                  cfgs.data());
    if (st != CUDNN_STATUS_SUCCESS) { bld.fail("heuristics results", st); return NULL; }
    for (int pass = 0; pass < 2; pass++)  // deterministic engines first, then any
    for (int64_t i = 0; i < got; i++) {
        bool det = deterministic(cfgs[i]);
        if (pass == 0 ? !det : det) { continue; }
        Desc plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) {
            continue;
        }
        if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                     workspace) == CUDNN_STATUS_SUCCESS) {
            bld.made.push_back(plan);
            *is_deterministic = det;
            return plan;
        }
        cudnnBackendDestroyDescriptor(plan);
    }
    *tried += got;
    return NULL;
}

static Desc choose_plan(Builder& bld, cudnnHandle_t handle, Desc graph, int64_t* workspace, const char* which,
                        bool* is_deterministic) {
    int64_t tried = 0;
    Desc plan = plan_from(bld, handle, graph, CUDNN_HEUR_MODE_A, workspace, is_deterministic, &tried);
    if (!plan && !bld.failed) {
        plan = plan_from(bld, handle, graph, CUDNN_HEUR_MODE_FALLBACK, workspace, is_deterministic, &tried);
    }
    if (!plan && !bld.failed) {
        snprintf(bld.err, sizeof(bld.err), "no cuDNN engine runs the %s attention graph (%lld configurations tried)",
                 which, (long long)tried);
        bld.failed = true;
    }
    return plan;
}

// ----------------------------------------------------------------------------
// the cache: one entry per shape, holding its plans, and the variant packs met so far (one per set of data
// pointers: the trainer calls each layer with its own activations, so after the first step every call
// finds its variant pack here and creates no descriptor)

#define MAX_PACKS 512

#define PACK_KEY 16

struct Pack {
    void* ptrs[PACK_KEY];  // the data pointers, then the plan and the workspace
    Desc vp;
};

struct Shape {
    int B, T, NH, HS;
    Builder* bld;            // owns the forward's descriptors
    Builder* bwd_bld;        // owns the backward's
    Desc fwd_plan, bwd_plan;
    float* dq_accum;         // (B,T,C) fp32 device, when the backward plan needs it, else NULL
    float scale, masked, one; // by-value scalars of the variant packs (their addresses must stay valid)
    std::vector<Pack> packs; // reserved once: no reallocation, no allocation after the first step
};

static cudnnHandle_t g_handle = NULL;
static int g_users = 0;  // cudnn_att_init calls not yet matched by cudnn_att_destroy
static std::vector<Shape*> g_shapes;
static void* g_workspace = NULL;
static size_t g_workspace_size = 0;

static void cudnn_check(cudnnStatus_t st, const char* what) {
    if (st != CUDNN_STATUS_SUCCESS) { fatal("cuDNN attention: %s: %s", what, cudnnGetErrorString(st)); }
}

extern "C" void cudnn_att_init(void) {
    if (!g_handle) { cudnn_check(cudnnCreate(&g_handle), "cudnnCreate"); }
    g_users++;
}

extern "C" void cudnn_att_destroy(void) {
    if (g_users > 0 && --g_users > 0) { return; }
    for (Shape* s : g_shapes) {
        for (Pack& p : s->packs) { cudnnBackendDestroyDescriptor(p.vp); }
        delete s->bld;
        delete s->bwd_bld;
        if (s->dq_accum) { cudaFree(s->dq_accum); }
        delete s;
    }
    g_shapes.clear();
    if (g_workspace) { cudaFree(g_workspace); }
    g_workspace = NULL;
    g_workspace_size = 0;
    if (g_handle) { cudnnDestroy(g_handle); }
    g_handle = NULL;
}

static Shape* find_shape(int B, int T, int NH, int HS) {
    for (Shape* s : g_shapes) {
        if (s->B == B && s->T == T && s->NH == NH && s->HS == HS) { return s; }
    }
    return NULL;
}

extern "C" int cudnn_att_prepare(int B, int T, int NH, int HS, char* err, size_t errlen) {
    if (find_shape(B, T, NH, HS)) { return 0; }
    if (!g_handle) { fatal("cuDNN attention: cudnn_att_prepare before cudnn_att_init"); }
    Shape* s = new Shape();
    s->B = B; s->T = T; s->NH = NH; s->HS = HS;
    s->bld = new Builder();
    s->bwd_bld = NULL;
    s->fwd_plan = s->bwd_plan = NULL;
    s->dq_accum = NULL;
    s->scale = 1.0f / sqrtf((float)HS);
    // the frontend's mask value (get_negative_inf_value): the lowest float before cuDNN 9.10, -inf since; the
    // diagonal is never masked, so a row's max is finite and exp(masked - max) is 0
    s->masked = cudnnGetVersion() < 91000 ? -FLT_MAX : -INFINITY;
    s->one = 1.0f;
    Builder& bld = *s->bld;
    int64_t ws_fwd = 0, ws_bwd = 0;
    Desc fg = forward_graph(bld, g_handle, B, T, NH, HS);
    bool fwd_det = true, bwd_det = true;
    if (!bld.failed) { s->fwd_plan = choose_plan(bld, g_handle, fg, &ws_fwd, "forward", &fwd_det); }
    // the backward with dQ written directly, else through the fp32 accumulator
    for (int accum = 0; accum < 2 && !bld.failed && !s->bwd_plan; accum++) {
        delete s->bwd_bld;
        s->bwd_bld = new Builder();
        Desc bg = backward_graph(*s->bwd_bld, g_handle, B, T, NH, HS, accum == 1);
        if (!s->bwd_bld->failed) { s->bwd_plan = choose_plan(*s->bwd_bld, g_handle, bg, &ws_bwd, "backward", &bwd_det); }
        if (s->bwd_plan && accum == 1) {
            cudaError_t e = cudaMalloc((void**)&s->dq_accum, (size_t)B * T * NH * HS * sizeof(float));
            if (e != cudaSuccess) { fatal("cuDNN attention: dQ accumulator: %s", cudaGetErrorString(e)); }
        }
    }
    if (bld.failed || !s->bwd_plan) {
        snprintf(err, errlen, "%s", bld.failed ? bld.err : s->bwd_bld->err);
        delete s->bld;
        delete s->bwd_bld;
        delete s;
        return -1;
    }
    size_t need = (size_t)(ws_fwd > ws_bwd ? ws_fwd : ws_bwd);
    if (need > g_workspace_size) {
        cudaError_t e = g_workspace ? cudaFree(g_workspace) : cudaSuccess;
        if (e != cudaSuccess) { fatal("cuDNN attention: cudaFree: %s", cudaGetErrorString(e)); }
        e = cudaMalloc(&g_workspace, need);
        if (e != cudaSuccess) { fatal("cuDNN attention: workspace of %zu bytes: %s", need, cudaGetErrorString(e)); }
        g_workspace_size = need;
    }
    if (!fwd_det || !bwd_det) {
        fprintf(stderr, "cuDNN attention (B=%d T=%d NH=%d HS=%d): only a non-deterministic %s engine: runs will not "
                "repeat bit for bit (USE_CUDNN=0 builds the deterministic kernels)\n", B, T, NH, HS,
                fwd_det ? "backward" : "forward");
    }
    s->packs.reserve(MAX_PACKS);
    g_shapes.push_back(s);
    return 0;
}

static Shape* shape_for(int B, int T, int NH, int HS) {
    Shape* s = find_shape(B, T, NH, HS);
    if (s) { return s; }
    char err[256];
    if (cudnn_att_prepare(B, T, NH, HS, err, sizeof(err)) != 0) {
        fatal("cuDNN attention (B=%d T=%d NH=%d HS=%d): %s", B, T, NH, HS, err);
    }
    return find_shape(B, T, NH, HS);
}

// the variant pack for these uids and pointers, made on first use and kept
static Desc variant_pack(Shape* s, const int64_t* uids, void* const* ptrs, int n, void* const* key, bool* kept) {
    for (Pack& p : s->packs) {
        if (memcmp(p.ptrs, key, sizeof(p.ptrs)) == 0) { *kept = true; return p.vp; }
    }
    Desc vp = NULL;
    cudnn_check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp), "variant pack");
    cudnn_check(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids),
                "variant pack ids");
    cudnn_check(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs),
                "variant pack pointers");
    cudnn_check(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &g_workspace),
                "variant pack workspace");
    cudnn_check(cudnnBackendFinalize(vp), "variant pack");
    *kept = s->packs.size() < MAX_PACKS;
    if (*kept) {
        Pack p;
        memcpy(p.ptrs, key, sizeof(p.ptrs));
        p.vp = vp;
        s->packs.push_back(p);
    }
    return vp;
}

static void execute(Shape* s, Desc plan, const int64_t* uids, void* const* ptrs, int n, cudaStream_t stream) {
    void* key[PACK_KEY];
    memset(key, 0, sizeof(key));
    memcpy(key, ptrs, n * sizeof(void*));
    key[PACK_KEY - 2] = plan;  // forward and backward packs never collide
    key[PACK_KEY - 1] = g_workspace;
    bool kept = false;
    Desc vp = variant_pack(s, uids, ptrs, n, key, &kept);
    cudnn_check(cudnnSetStream(g_handle, stream), "cudnnSetStream");
    cudnn_check(cudnnBackendExecute(g_handle, plan, vp), "execute");
    if (!kept) { cudnnBackendDestroyDescriptor(vp); }  // the cache is full: a pack for this call only
}

extern "C" void cudnn_att_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int HS,
                                  cudaStream_t stream) {
    Shape* s = shape_for(B, T, NH, HS);
    size_t C = (size_t)NH * HS;
    const uint16_t* x = (const uint16_t*)qkv;  // bf16
    void* ptrs[7] = {(void*)x, (void*)(x + C), (void*)(x + 2 * C), out, lse, &s->scale, &s->masked};
    execute(s, s->fwd_plan, FWD_UIDS, ptrs, 7, stream);
}

extern "C" void cudnn_att_backward(void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                                   const float* lse, int B, int T, int NH, int HS, cudaStream_t stream) {
    Shape* s = shape_for(B, T, NH, HS);
    size_t C = (size_t)NH * HS;
    const uint16_t* x = (const uint16_t*)qkv;
    uint16_t* dx = (uint16_t*)dqkv;
    void* ptrs[14] = {(void*)x, (void*)(x + C), (void*)(x + 2 * C), (void*)out, (void*)lse, &s->scale, &s->masked,
                      (void*)dout, dx, dx + C, dx + 2 * C, delta, &s->one, s->dq_accum};
    if (s->dq_accum) {
        cudaError_t e = cudaMemsetAsync(s->dq_accum, 0, (size_t)B * T * C * sizeof(float), stream);
        if (e != cudaSuccess) { fatal("cuDNN attention: zeroing the dQ accumulator: %s", cudaGetErrorString(e)); }
    }
    execute(s, s->bwd_plan, BWD_UIDS, ptrs, s->dq_accum ? 14 : 13, stream);
}

// 1 when the graph's non-virtual tensors are exactly uids[0..n) (each once), which the variant pack binds
static bool binds_exactly(const Builder& bld, const int64_t* uids, int n) {
    std::vector<int64_t> a(bld.bound), b(uids, uids + n);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    return a == b;
}

extern "C" int cudnn_att_check_graphs(int B, int T, int NH, int HS, char* err, size_t errlen) {
    // the negative control: the library must refuse a matmul whose inner dimensions differ (Q Q with HS != T),
    // or finalizing proves nothing
    if (HS != T) {
        Builder bad;
        Common c = common_tensors(bad, B, T, NH, HS);
        bad.matmul(c.q, c.q, bad.virt(CUDNN_DATA_FLOAT, B, NH, T, T));
        if (!bad.failed) { snprintf(err, errlen, "a matmul with mismatched shapes finalized: the check is blind"); return -1; }
    }
    Builder fwd, bwd, bwd_accum;
    forward_graph(fwd, NULL, B, T, NH, HS);
    if (fwd.failed) { snprintf(err, errlen, "forward graph: %s", fwd.err); return -1; }
    backward_graph(bwd, NULL, B, T, NH, HS, false);
    if (bwd.failed) { snprintf(err, errlen, "backward graph: %s", bwd.err); return -1; }
    backward_graph(bwd_accum, NULL, B, T, NH, HS, true);
    if (bwd_accum.failed) { snprintf(err, errlen, "backward graph (dQ accumulator): %s", bwd_accum.err); return -1; }
    if (!binds_exactly(fwd, FWD_UIDS, 7) || !binds_exactly(bwd, BWD_UIDS, 13) || !binds_exactly(bwd_accum, BWD_UIDS, 14)) {
        snprintf(err, errlen, "a graph's memory tensors differ from what its variant pack binds");
        return -1;
    }
    return 0;
}
