// dev/cuda/cudnn_graph_check.cu — host-only check of llmc/cudnn_att.cpp: builds the cuDNN forward and
// backward attention graphs for a few shapes, finalizes every descriptor (tensors, operations, the
// operation graphs: the forward and both backward variants, with the frontend's data types on every edge)
// and checks that each graph's memory tensors are the ones its variant pack binds. Needs libcudnn but no
// GPU, so it runs where the trainer can only be compiled; choosing
// an engine and executing need a GPU (dev/cuda/attention does that, against our kernel and the CPU path).
// make cudnn-graph-check
#include <stdio.h>
#include "llmc/cudnn_att.h"

int main(void) {
    // GPT-2 124M at B=4 T=1024, a d2 test model, T not a multiple of any tile, head size 128, and shapes whose
    // B*NH*T is odd (the log-sum-exp slices the trainer pads to 16 bytes)
    int shapes[][4] = {{4, 1024, 12, 64}, {4, 64, 2, 64}, {2, 100, 3, 64}, {2, 100, 3, 128}, {1, 1024, 8, 128},
                       {1, 7, 1, 64}, {3, 33, 5, 128}};
    int ok = 1;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        int* s = shapes[i];
        char err[256];
        int rc = cudnn_att_check_graphs(s[0], s[1], s[2], s[3], err, sizeof(err));
        printf("cudnn graphs B=%d T=%d NH=%d HS=%d: %s%s\n", s[0], s[1], s[2], s[3], rc == 0 ? "ok" : "FAILED: ",
               rc == 0 ? "" : err);
        ok &= rc == 0;
    }
    return ok ? 0 : 1;
}
