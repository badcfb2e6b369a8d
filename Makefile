# hybrid-llmc build. `make` builds the CPU trainer and tools; `make test` runs the fast tier of the tests
# (every unit, under ~2 minutes on 2 cores); `make check` runs everything, as CI does.
CC ?= gcc
CFLAGS ?= -O3 -march=native -fopenmp -Wall -Wextra -I.
LDLIBS ?= -lopenblas -lm
TEST_LDLIBS = -lcriterion
BUILD = build

# every section below appends its binaries and tests to these; SLOW_TESTS run in `make check` only
PROGRAMS =
TESTS =
SLOW_TESTS =

# Header dependencies come from the compiler: every C/C++ rule adds $(DEPFLAGS), which writes the headers the
# target included to build/.deps/<target>.d (-MP: a deleted header does not break the build); they are
# included at the end. So rules list only their sources, and editing any header rebuilds what includes it.
DEPDIR := build/.deps
DEPFLAGS = -MMD -MP -MT $@ -MF $(DEPDIR)/$(subst /,_,$@).d
$(shell mkdir -p $(DEPDIR))

.PHONY: all test bench fuzz clean
.DEFAULT_GOAL := all

# ---- section: CPU trainer (train_gpt2.c) ----
# -fno-math-errno lets sqrtf vectorise; -fno-trapping-math lets GCC if-convert the selects in expf_vec, so
# the loops of softmax, cross-entropy and GELU vectorise (scalar otherwise: a sixth of a d6 step). Neither
# is -ffast-math: NaN/Inf, rounding and the order of operations stay IEEE.
TRAINER_CFLAGS = -fno-math-errno -fno-trapping-math
# oneDNN (libdnnl-dev) is optional: with its header found, LLMC_DNNL turns on --precision bf16 (llmc/cpu_dnnl.h)
# and everything that includes train_gpt2.c links -ldnnl; without it the build and every fp32 feature work
# and --precision bf16 says what is missing. DNNL=0 builds without it where it is installed.
DNNL ?= $(shell echo '\#include <oneapi/dnnl/dnnl.h>' | $(CC) -E - >/dev/null 2>&1 && echo 1)
ifeq ($(DNNL),1)
DNNL_CFLAGS = -DLLMC_DNNL
LDLIBS += -ldnnl
endif
TRAINER_CFLAGS += $(DNNL_CFLAGS)
PROGRAMS += train_gpt2
train_gpt2: train_gpt2.c
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ train_gpt2.c $(LDLIBS) -fopenmp

# the trainer without oneDNN, as DNNL=0 builds ./train_gpt2 (test/test_no_dnnl.sh: the optional dependency stays
# optional); in make check
$(BUILD)/nodnnl/train_gpt2: train_gpt2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(filter-out -DLLMC_DNNL,$(TRAINER_CFLAGS)) $(DEPFLAGS) -o $@ train_gpt2.c $(filter-out -ldnnl,$(LDLIBS)) -fopenmp
SLOW_TESTS += test/test_no_dnnl.sh
test/test_no_dnnl.sh: $(BUILD)/nodnnl/train_gpt2 train_gpt2

TRAINER_TESTS = $(BUILD)/test_dataloader $(BUILD)/test_schedulers $(BUILD)/test_checkpoint \
                $(BUILD)/test_trainer_cli $(BUILD)/test_resume $(BUILD)/test_train_step $(BUILD)/test_bf16 \
                $(BUILD)/test_kvcache
TESTS += $(TRAINER_TESTS)
$(TRAINER_TESTS): $(BUILD)/%: test/%.c | $(BUILD) train_gpt2 tokenize
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS) -fopenmp

# ---- section: PyTorch reference, gradient checks, benchmark (scripts/train_gpt2.py, test/test_gpt2.c,
#      test/test_gradcheck.c, dev/bench_*.c, scripts/bench.py) ----
PYTHON = /usr/bin/python3
REF_THREADS ?= 2
TESTS += $(BUILD)/test_gpt2 $(BUILD)/test_gradcheck

# the comparison fixture: a random-init d2 checkpoint and the reference's float64 debug state for it
$(BUILD)/ref_d2.bin: scripts/train_gpt2.py | $(BUILD)
	$(PYTHON) scripts/train_gpt2.py --write-init $@ --depth 2 --seed 42 --threads $(REF_THREADS)
$(BUILD)/ref_d2_state.bin: $(BUILD)/ref_d2.bin
	$(PYTHON) scripts/train_gpt2.py --write-debug-state $@ -e $< -b 4 -t 64 --double --seed 42 --threads $(REF_THREADS)

$(BUILD)/ref_d2_state_odd.bin: $(BUILD)/ref_d2.bin
	$(PYTHON) scripts/train_gpt2.py --write-debug-state $@ -e $< -b 3 -t 17 --double --seed 43 --threads $(REF_THREADS)

$(BUILD)/test_gpt2: test/test_gpt2.c $(BUILD)/ref_d2_state.bin $(BUILD)/ref_d2_state_odd.bin | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS)
$(BUILD)/test_gradcheck: test/test_gradcheck.c | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS)

$(BUILD)/bench_sgemm: dev/bench_sgemm.c | $(BUILD)
	$(CC) $(CFLAGS) $(DNNL_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/bench_gpt2: dev/bench_gpt2.c | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -DLLMC_PROFILE $(DEPFLAGS) -o $@ $< $(LDLIBS)

# the benches run on the kernels a user who sets nothing gets: without what overrides the choice
# (scripts/bench.py's KERNEL_VARS, which says so and measures the override's peaks too)
BENCH_ENV = env -u OPENBLAS_CORETYPE -u LLMC_BLAS_REEXEC -u LLMC_BLAS_TEST_CORE -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA -u LLMC_BF16_TEST_REFERENCE -u LLMC_PRECISION_TEST_PROBE

# tokens/s of generation with and without the KV cache (llmc/kvcache.h), 256 new tokens: the quick start's
# checkpoint (where it exists) and a random-init d4 at GPT-2's vocabulary
.PHONY: bench-generate
bench: bench-generate
bench-generate: $(BUILD)/bench_generate
	@if [ -f out/small/model_00002800.bin ]; then $(BENCH_ENV) OMP_NUM_THREADS=$(BENCH_THREADS) ./$(BUILD)/bench_generate out/small/model_00002800.bin 256 3; fi
	$(BENCH_ENV) OMP_NUM_THREADS=$(BENCH_THREADS) ./$(BUILD)/bench_generate d4 256 3
$(BUILD)/bench_generate: dev/bench_generate.c | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS)

# the data loader's cost per micro batch, --rows random against contiguous, at make bench's shapes
.PHONY: bench-loader
bench: bench-loader
bench-loader: $(BUILD)/bench_loader
	./$(BUILD)/bench_loader
$(BUILD)/bench_loader: dev/bench_loader.c | $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS)

# llmc/cpu_blas.h: the OpenBLAS core and wait policy chosen before main (runs ./train_gpt2 and bench_sgemm)
TESTS += $(BUILD)/test_cpu_blas
$(BUILD)/test_cpu_blas: test/test_cpu_blas.c train_gpt2 $(BUILD)/bench_sgemm | $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS)

# tok/s and MFU of train_gpt2 vs PyTorch vs the SGEMM peak, and where the step goes against each phase's floor
# (bytes / measured bandwidth, FLOPs / peak) (BENCH_THREADS threads; see scripts/bench.py)
BENCH_THREADS ?= 2
bench: $(BUILD)/bench_sgemm $(BUILD)/bench_gpt2 train_gpt2
	$(PYTHON) scripts/bench.py --threads $(BENCH_THREADS)

# the bf16 tests with the products by the test reference (llmc/cpu_dnnl.h): the bf16 path runs on every CPU,
# with or without native bf16; the trainer's bf16 runs of test_resume and test_hybrid_train under it (about as
# long again as those two) are the slow tier's
TESTS += test/test_bf16_reference.sh
SLOW_TESTS += test/test_bf16_reference_runs.sh
test/test_bf16_reference.sh: $(BUILD)/test_bf16 $(BUILD)/test_train_step
test/test_bf16_reference_runs.sh: test/test_bf16_reference.sh $(BUILD)/test_resume $(BUILD)/test_hybrid_train

# what scripts/bench.py says about the kernels, auto's pick and its profile's floors (tiny sizes; a minute or more)
SLOW_TESTS += test/test_bench.py
test/test_bench.py: $(BUILD)/bench_sgemm $(BUILD)/bench_gpt2 train_gpt2

# scripts/same_bits.py (two trainers' metrics and checkpoints, byte for byte) finds what differs; about 2 min
SLOW_TESTS += test/test_same_bits.py
test/test_same_bits.py: train_gpt2

# the OpenMP wait policies, quiet and with one busy process per core (d6 B8 T256; a few minutes)
.PHONY: bench-threads
bench-threads: $(BUILD)/bench_gpt2
	scripts/bench_threads.sh 6 8 256 5 $(BENCH_THREADS)

# the bf16 products shape by shape, alone and inside their layer calls, each against the bf16 peak probed
# beside it (make bench's three configs: d12 at B=4 T=64 and B=8 T=256, d6 at B=8 T=256; about a minute)
.PHONY: bench-products
bench-products: $(BUILD)/bench_gpt2
	OMP_NUM_THREADS=$(BENCH_THREADS) $(BUILD)/bench_gpt2 products 12 4 64
	OMP_NUM_THREADS=$(BENCH_THREADS) $(BUILD)/bench_gpt2 products 12 8 256
	OMP_NUM_THREADS=$(BENCH_THREADS) $(BUILD)/bench_gpt2 products 6 8 256

# ---- section: data / tokenizer ----
# ./tokenize (GPT-2 BPE: encode/decode/ids/vocab), its tests, and `make bench-tokenizer`
PROGRAMS += tokenize
TESTS += $(BUILD)/test_tokenizer

tokenize: data/tokenize.c
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ data/tokenize.c

# ./tokenize learn, JSON Lines and val bits per byte against references written in the test
TESTS += test/test_bpe_learn.py
test/test_bpe_learn.py: tokenize train_gpt2
# generation never guesses a vocabulary: a checkpoint's own, found without flags; another refused; EOT = V - 1
TESTS += test/test_vocab.py
test/test_vocab.py: tokenize train_gpt2

$(BUILD)/test_tokenizer: test/test_tokenizer.c tokenize | $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ test/test_tokenizer.c $(TEST_LDLIBS)

$(BUILD)/bench_tokenizer: data/bench_tokenizer.c | $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ data/bench_tokenizer.c

.PHONY: bench-tokenizer
bench: bench-tokenizer
bench-tokenizer: $(BUILD)/bench_tokenizer
	./$(BUILD)/bench_tokenizer data/default/train_000000.bin

# the default corpus at small learned vocabularies (data/smallN: shards + vocab/), about a second each: the
# quick start's N = 4096 (chosen by the vocabulary sweep, docs/results.md) and the study model's 1024
# (configs/studies/study_model.json); `make data-small SMALL_VOCAB=N` for another N
SMALL_VOCAB ?= 4096
.PHONY: data-small
data-small: data/small$(SMALL_VOCAB)/train_000000.bin data/small1024/train_000000.bin
data/small%/train_000000.bin: data/prepare_small.sh data/default/train_000000.bin data/default/val_000000.bin tokenize
	data/prepare_small.sh $* data/small$*
TESTS += test/test_data_small.sh
test/test_data_small.sh: tokenize

# the tokenizer's fuzzers (test/fuzz/fuzz_bpe.c, fuzz_vocab.c, fuzz_tokenizer.c) run with the others: `make fuzz`
FUZZ_SECONDS ?= 60

# ---- section: hybrid ----
# hybrid/ is header-only; each header has its own Criterion test binary
HYBRID_TESTS = $(BUILD)/test_hybrid_apply $(BUILD)/test_hybrid_state
TESTS += $(HYBRID_TESTS)

$(HYBRID_TESTS): $(BUILD)/test_hybrid_%: test/test_hybrid_%.c | $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) $< -o $@ $(LDLIBS) $(TEST_LDLIBS)

# the CPU trainer compiles hybrid/ in (--hybrid); test_hybrid_train and test_hybrid_methods (the method table,
# GPA, Linefit) include it and drive the binary
TESTS += $(BUILD)/test_hybrid_train $(BUILD)/test_hybrid_methods
$(BUILD)/test_hybrid_train $(BUILD)/test_hybrid_methods: $(BUILD)/test_hybrid_%: test/test_hybrid_%.c train_gpt2 | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) $< -o $@ $(LDLIBS) $(TEST_LDLIBS) -fopenmp

# `make bench` also times hybrid mode next to the baseline: Full/Correct/Predict step times of the trainer,
# and its per-element passes against the measured memory bandwidth (scripts/bench_hybrid_overhead.py)
.PHONY: bench-hybrid
bench: bench-hybrid
bench-hybrid: $(BUILD)/bench_hybrid train_gpt2
	$(PYTHON) scripts/bench_hybrid_overhead.py --threads $(BENCH_THREADS)
$(BUILD)/bench_hybrid: dev/bench_hybrid.c | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS)

# ---- section: CUDA ----
# GPU trainer train_gpt2cu and its test test_gpt2cu. Everything is found by its header and library;
# nothing is linked that was not found. Knobs:
#   GPU_COMPUTE_CAPABILITY=90   build for one architecture (default: sm_80 and sm_90)
#   PRECISION=FP32              fp32 activations/weights instead of bf16 (default BF16)
#   USE_MPI=1                   initialise multi-GPU through MPI (default off: shared file or TCP)
#   USE_CUDNN=0                 attention by our own kernels (llmc/attention.cuh) even where cuDNN is found
# Attention goes through cuDNN's fused flash attention (llmc/cudnn_att.cpp, cuDNN's backend graph API, built
# into $(BUILD)/cudnn_att.o on its own) when cudnn.h and libcudnn are found and the build is bf16; otherwise
# through llmc/attention.cuh, which is also the reference the cuDNN path is checked against. Switching
# USE_CUDNN or PRECISION: rebuild with `make -B`.
# `make cuda-check` compiles the trainer in fp32, both binaries in bf16 without cuDNN, then in bf16 with it
# (where found), and runs the host-only check of the cuDNN graphs (compile only otherwise, for CI).
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell if [ -x $(CUDA_HOME)/bin/nvcc ]; then echo $(CUDA_HOME)/bin/nvcc; else command -v nvcc 2>/dev/null; fi)
GPU_COMPUTE_CAPABILITY ?=
ifeq ($(GPU_COMPUTE_CAPABILITY),)
  NVCC_ARCH = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
else
  NVCC_ARCH = -gencode arch=compute_$(GPU_COMPUTE_CAPABILITY),code=sm_$(GPU_COMPUTE_CAPABILITY)
endif
PRECISION ?= BF16
USE_MPI ?= 0
NVCC_FLAGS = -O3 -std=c++17 -lineinfo $(NVCC_ARCH) -I. -Xcompiler -Wall,-Wextra,-Wno-unknown-pragmas
NVCC_LDLIBS = -lcublas -lcublasLt
NVCC_DEFS = -DENABLE_$(PRECISION)
# no --use_fast_math: the kernels must match the CPU path's expf/tanhf to test tolerances
# NCCL and cuDNN come with the toolkit (NVIDIA's tarballs, conda) or as Debian/NVIDIA packages, which put the
# headers in /usr/include (or its multiarch directory) and the libraries in the multiarch lib directory.
# cuda_inc/cuda_lib: the first directory holding the file (empty if none); cuda_paths: the -I/-L flags a
# found pair needs (none for the directories the compiler and linker search anyway)
CUDA_MULTIARCH := $(or $(shell $(CC) -print-multiarch 2>/dev/null),x86_64-linux-gnu)
CUDA_INC_DIRS = $(CUDA_HOME)/include /usr/include /usr/include/$(CUDA_MULTIARCH)
CUDA_LIB_DIRS = $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib /usr/lib/$(CUDA_MULTIARCH) /usr/lib64 /usr/lib
cuda_inc = $(patsubst %/,%,$(dir $(firstword $(wildcard $(addsuffix /$(1),$(CUDA_INC_DIRS))))))
cuda_lib = $(patsubst %/,%,$(dir $(firstword $(wildcard $(addsuffix /$(1),$(CUDA_LIB_DIRS))))))
cuda_found = $(and $(call cuda_inc,$(1)),$(call cuda_lib,$(2)))
cuda_paths = $(addprefix -I,$(filter-out $(CUDA_HOME)/include /usr/include,$(call cuda_inc,$(1)))) \
             $(addprefix -L,$(filter-out $(CUDA_HOME)/lib64 /usr/lib/$(CUDA_MULTIARCH) /usr/lib64 /usr/lib,$(call cuda_lib,$(2))))
ifneq ($(call cuda_found,nccl.h,libnccl.so),)
  NVCC_DEFS += -DMULTI_GPU
  NVCC_FLAGS += $(call cuda_paths,nccl.h,libnccl.so)
  NVCC_LDLIBS += -lnccl
endif
ifeq ($(USE_MPI),1)
  MPI_INC := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/openmpi /usr/include/mpich /usr/include/x86_64-linux-gnu/mpich))
  ifeq ($(MPI_INC),)
    $(error USE_MPI=1 but no MPI headers (mpi.h) were found)
  endif
  NVCC_DEFS += -DUSE_MPI
  NVCC_FLAGS += -I$(MPI_INC)
  NVCC_LDLIBS += -lmpi
endif
USE_CUDNN ?= 1
CUDNN_OBJ =
ifeq ($(USE_CUDNN)$(PRECISION),1BF16)
  ifneq ($(call cuda_found,cudnn.h,libcudnn.so),)
    CUDNN_OBJ = $(BUILD)/cudnn_att.o
    CUDNN_PATHS = $(call cuda_paths,cudnn.h,libcudnn.so)
    NVCC_DEFS += -DENABLE_CUDNN
    NVCC_FLAGS += $(CUDNN_PATHS)
    NVCC_LDLIBS += -lcudnn
  endif
endif

.PHONY: cuda-check
ifneq ($(NVCC),)
train_gpt2cu: train_gpt2.cu $(CUDNN_OBJ)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) $(DEPFLAGS) $< $(CUDNN_OBJ) $(NVCC_LDLIBS) -o $@
test_gpt2cu: test_gpt2.cu $(CUDNN_OBJ)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) $(DEPFLAGS) $< $(CUDNN_OBJ) $(NVCC_LDLIBS) -o $@
# host code only (the backend API): no device code, so no architecture flags
$(BUILD)/cudnn_att.o: llmc/cudnn_att.cpp | $(BUILD)
	$(NVCC) -O3 -std=c++17 -I. $(filter -I%,$(CUDNN_PATHS)) -Xcompiler -Wall,-Wextra $(DEPFLAGS) -c $< -o $@
# kernel development files: make dev/cuda/layernorm etc. (one file per kernel, CPU reference + timing sweep)
dev/cuda/%: dev/cuda/%.cu $(CUDNN_OBJ)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) $(DEPFLAGS) $< $(CUDNN_OBJ) $(NVCC_LDLIBS) -o $@
# host-only: builds and finalizes every descriptor of the cuDNN graphs, which needs libcudnn but no GPU
.PHONY: cudnn-graph-check
cudnn-graph-check:
	@if [ -z "$(CUDNN_OBJ)" ]; then echo "cudnn-graph-check: no cuDNN in this build (not found, USE_CUDNN=0 or fp32)"; \
	else $(MAKE) --no-print-directory dev/cuda/cudnn_graph_check && ./dev/cuda/cudnn_graph_check; fi
# compile-only check for CI (one architecture to keep it quick): the trainer in fp32, both binaries in bf16
# without cuDNN, then in bf16 with cuDNN where found (so the binaries left behind use it), and the graph check
cuda-check:
	$(MAKE) --no-print-directory -B train_gpt2cu GPU_COMPUTE_CAPABILITY=80 PRECISION=FP32
	$(MAKE) --no-print-directory -B train_gpt2cu test_gpt2cu GPU_COMPUTE_CAPABILITY=80 USE_CUDNN=0
	$(MAKE) --no-print-directory -B train_gpt2cu test_gpt2cu GPU_COMPUTE_CAPABILITY=80
	$(MAKE) --no-print-directory cudnn-graph-check GPU_COMPUTE_CAPABILITY=80
else
train_gpt2cu test_gpt2cu cuda-check cudnn-graph-check:
	@echo "nvcc not found (looked in $(CUDA_HOME)/bin and PATH): skipping $@"
endif

# ---- section: reliability ----
# Sanitizer build of the test suite, fuzzers, and the crash / full-disk / signal / bad-input tests.
# `make test` runs the reliability tests and replays the fuzz corpora and crashers under ASan+UBSan; `make check` ends
# with `make test-asan`: every test binary rebuilt in build/asan with the sanitizers and run again.
SAN_CFLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
             -fopenmp -Wall -Wextra -I.
SAN_TRAINER = build/asan/train_gpt2
SAN_TOKENIZE = build/asan/tokenize
FUZZ_CC ?= clang-14
# FUZZ_SECONDS: seconds per target (default 60, set in the data section above)
FUZZ_CFLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
              -fopenmp -Wno-pass-failed -I.
# loaders end in exit(); in fuzz binaries exit(), fopen() and the allocator are wrapped (test/fuzz/fuzz.h)
FUZZ_WRAP = -Wl,--wrap=exit,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup \
            -Wl,--wrap=fopen,--wrap=fclose,--wrap=glob,--wrap=globfree
FUZZ_TARGETS = $(patsubst test/fuzz/fuzz_%.c,%,$(wildcard test/fuzz/fuzz_*.c))
ifdef SANITIZE
# inside `make test-asan`: the compiled tests of every section (those in $(BUILD)) and the tests that
# drive the sanitized trainer; scripts of other sections run unsanitized binaries and are not repeated
export LLMC_TRAINER = $(SAN_TRAINER)
export LLMC_TOKENIZE = $(SAN_TOKENIZE)
# the NaN-injection shim is preloaded after the ASan runtime, which must come first
export LLMC_PRELOAD = $(shell $(CC) -print-file-name=libasan.so)
export ASAN_OPTIONS = detect_leaks=1:abort_on_error=0:exitcode=86
export UBSAN_OPTIONS = print_stacktrace=1:halt_on_error=1:exitcode=87
export LSAN_OPTIONS = suppressions=$(CURDIR)/test/reliability/lsan.supp:print_suppressions=0
SAN_SCRIPTS = test/reliability/test_signal.sh test/reliability/test_bad_inputs.sh test/reliability/test_numeric.sh \
              test/test_bf16_reference.sh test/test_bf16_reference_runs.sh
SAN_TESTS = $(filter $(BUILD)/%,$(TESTS)) $(SAN_SCRIPTS) test/reliability/test_sanitized.sh
export SAN_BINARIES = $(filter $(BUILD)/%,$(TESTS)) $(SAN_TRAINER) $(SAN_TOKENIZE)
$(SAN_SCRIPTS): $(SAN_TRAINER) $(SAN_TOKENIZE) $(BUILD)/nan_sgemm.so
else
export LLMC_TRAINER = ./train_gpt2
TESTS += $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay_%)
TESTS += test/reliability/test_bad_inputs.sh test/reliability/test_signal.sh test/reliability/test_resume_hint.sh \
         test/reliability/test_diskfull.sh test/reliability/test_numeric.sh
# kill -9 at random moments (~35 s), then the whole suite rebuilt with the sanitizers (several minutes)
SLOW_TESTS += test/reliability/test_kill.sh test/reliability/test_asan.sh
test/reliability/test_bad_inputs.sh test/reliability/test_signal.sh test/reliability/test_resume_hint.sh \
test/reliability/test_kill.sh test/reliability/test_diskfull.sh test/reliability/test_numeric.sh \
test/test_bf16_reference.sh test/test_bf16_reference_runs.sh: train_gpt2
test/reliability/test_bad_inputs.sh: tokenize
test/reliability/test_numeric.sh: $(BUILD)/nan_sgemm.so
endif
export NAN_SGEMM_SO = $(BUILD)/nan_sgemm.so

.PHONY: test-asan test-asan-run fuzz-merge
# ./train_gpt2 and ./tokenize first, with their own flags: the sanitized build would otherwise remake them
# with its CFLAGS where they are out of date (the compiled tests depend on them)
test-asan:
	$(MAKE) --no-print-directory train_gpt2 tokenize
	$(MAKE) --no-print-directory SANITIZE=1 BUILD=build/asan CFLAGS="$(SAN_CFLAGS)" test-asan-run

# SAN_TESTS is complete only once every section is read: hence the second expansion
.SECONDEXPANSION:
# Criterion tests fork from a threaded runner, where LeakSanitizer cannot stop the runner's threads and
# prints a warning into the stderr those tests check: they run without leak checks (the trainer and
# tokenizer runs of the scripts, and the fuzz replays, keep them)
test-asan-run: $$(SAN_TESTS)
	@fail=0; for t in $(SAN_TESTS); do echo "== asan: $$t"; case $$t in \
	  *.sh) ./$$t || fail=1 ;; \
	  *) ASAN_OPTIONS="$$ASAN_OPTIONS:detect_leaks=0" ./$$t || fail=1 ;; esac; done; exit $$fail

$(SAN_TRAINER): train_gpt2.c
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) $< -o $@ $(LDLIBS)

$(SAN_TOKENIZE): data/tokenize.c
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(DEPFLAGS) $< -o $@

# NaN injection into cblas_sgemm for test_numeric.sh (LD_PRELOAD)
$(BUILD)/nan_sgemm.so: test/reliability/nan_sgemm.c | $(BUILD)
	$(CC) -O2 -shared -fPIC -Wall -Wextra $(DEPFLAGS) $< -o $@ -ldl

# with several sources the dependency file holds the last one's headers: replay.c includes only libc
$(BUILD)/fuzz/replay_%: test/fuzz/fuzz_%.c test/fuzz/replay.c
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -DFUZZ_NAME='"$*"' test/fuzz/replay.c $< $(DEPFLAGS) -o $@ $(FUZZ_WRAP) $(LDLIBS)

$(BUILD)/fuzz/fuzz_%: test/fuzz/fuzz_%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) $< -o $@ $(FUZZ_WRAP) $(LDLIBS)

# each target runs FUZZ_SECONDS on the committed corpus plus its growing copy in build/; a crash stops
# `make fuzz` and leaves the input in test/fuzz/crashers/<target>/, which `make test` then replays
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus_$$t test/fuzz/crashers/$$t; \
	  ASAN_OPTIONS=quarantine_size_mb=64 OMP_NUM_THREADS=1 ./$(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=10 -rss_limit_mb=2048 -max_len=131072 -close_fd_mask=2 -print_final_stats=1 \
	    -artifact_prefix=test/fuzz/crashers/$$t/ $(BUILD)/fuzz/corpus_$$t test/fuzz/corpus/$$t \
	    > $(BUILD)/fuzz/$$t.log 2>&1; rc=$$?; \
	  echo "fuzz $$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' $(BUILD)/fuzz/$$t.log)," \
	    "$$(grep -o 'cov: [0-9]*' $(BUILD)/fuzz/$$t.log | tail -1) (log $(BUILD)/fuzz/$$t.log)"; \
	  if [ $$rc -ne 0 ]; then tail -40 $(BUILD)/fuzz/$$t.log; echo "fuzz $$t: FAILED, input in test/fuzz/crashers/$$t/"; exit 1; fi; \
	done

# folds new coverage from build/ into the committed corpus (keep it small: review before committing)
fuzz-merge: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  ./$(BUILD)/fuzz/fuzz_$$t -merge=1 -max_len=131072 -close_fd_mask=2 test/fuzz/corpus/$$t $(BUILD)/fuzz/corpus_$$t; \
	done

# ---- section: export (scripts/export_hf, test/test_export_hf.py, test/test_hf_export.mjs, web/) ----
# scripts/export_hf writes a model as a Hugging Face GPT-2 folder and an ONNX graph. test_export_hf.py checks the
# folder's layout against the PyTorch reference and its refusals of bad input; test_hf_export.mjs holds three
# exports (random-init d2 models at GPT-2's vocabulary and at the 4096-token one of make data-small, and
# HF_TRAINED below) against transformers.js in node. Its npm dependencies (package.json, pinned in package-lock.json) come with npm ci;
# ONNXRUNTIME_NODE_INSTALL=skip: onnxruntime-node's CPU binaries are in the package, its install script would
# only fetch the CUDA ones from outside npm
NODE_DEPS = node_modules/.package-lock.json
$(NODE_DEPS): package.json package-lock.json
	ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund
	touch $@
build/hf/init_gpt2.bin: scripts/train_gpt2.py | $(BUILD)
	@mkdir -p $(dir $@)
	$(PYTHON) scripts/train_gpt2.py --write-init $@ --depth 2 --seed 42 --threads $(REF_THREADS)
build/hf/init_small.bin: scripts/train_gpt2.py | $(BUILD)
	@mkdir -p $(dir $@)
	$(PYTHON) scripts/train_gpt2.py --write-init $@ --depth 2 --vocab 4096 --seed 43 --threads $(REF_THREADS)
build/hf/init_gpt2_hf/config.json: build/hf/init_gpt2.bin scripts/export_hf
	scripts/export_hf $< $(dir $@)
build/hf/init_small_hf/config.json: build/hf/init_small.bin scripts/export_hf data/small4096/train_000000.bin
	scripts/export_hf $< $(dir $@) --vocab data/small4096/vocab
# a d2 trained 400 steps on data/small4096 (20 s): text that is not one repeated token, for both checks
HF_TRAINED = build/hf/trained/model_00000400.bin
$(HF_TRAINED): train_gpt2 data/small4096/train_000000.bin
	rm -rf build/hf/trained && mkdir -p build/hf
	OMP_NUM_THREADS=2 ./train_gpt2 -i 'data/small4096/train_*.bin' -e d2 -b 8 -t 128 -x 400 -l 2e-3 -u 40 -v 0 -s 0 \
	  -n 400 -o build/hf/trained > build/hf/trained.log
build/hf/trained_hf/config.json: $(HF_TRAINED) scripts/export_hf
	scripts/export_hf $< $(dir $@) --vocab data/small4096/vocab
$(BUILD)/hf_reference: test/hf_reference.c | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $(DEPFLAGS) -o $@ $< $(LDLIBS)
# test_export_hf.py (many exports, each a Python that loads torch) is the slow tier's; test_hf_export.mjs, in
# make test, exports and loads three models
TESTS += test/test_hf_export.mjs
SLOW_TESTS += test/test_export_hf.py
test/test_export_hf.py: build/hf/init_small.bin data/small4096/train_000000.bin train_gpt2
test/test_hf_export.mjs: $(NODE_DEPS) $(BUILD)/hf_reference train_gpt2 tokenize build/hf/init_gpt2_hf/config.json \
                         build/hf/init_small_hf/config.json build/hf/trained_hf/config.json

# the page (web/): `make web` exports WEB_MODEL with web/site.sh into build/web and serves it on localhost;
# test_web.mjs (slow tier: Chromium) does the same for HF_TRAINED and types a prompt
# (without WEB_MODEL's file it says what to run first and builds nothing)
WEB_MODEL ?= out/small/model_00002800.bin
WEB_VOCAB ?= data/small4096/vocab
WEB_PORT ?= 8000
WEB_SITE ?= build/web
.PHONY: web
web:
	@[ -f "$(WEB_MODEL)" ] || { echo "error: $(WEB_MODEL): no model file; run the README's quick start first (make data-small, then its ./train_gpt2 line), or give WEB_MODEL=FILE WEB_VOCAB=DIR" >&2; exit 1; }
	@$(MAKE) --no-print-directory $(NODE_DEPS)
	web/site.sh $(WEB_SITE) $(WEB_MODEL) $(WEB_VOCAB)
	@echo "web: serving $(WEB_SITE) on http://localhost:$(WEB_PORT)/ (Ctrl-C stops)"
	$(PYTHON) -m http.server $(WEB_PORT) --bind 127.0.0.1 -d $(WEB_SITE)
SLOW_TESTS += test/test_web.mjs
test/test_web.mjs: $(NODE_DEPS) $(HF_TRAINED) train_gpt2

# ---- section: experiments (scripts/compare_hybrid, scripts/compare_pytorch) ----
# test/test_compare.py drives the comparison scripts (with a fake trainer, then the real ./train_gpt2): about
# 70 s of end-to-end study runs, so the slow tier (make check), which keeps make test under 2 minutes
SLOW_TESTS += test/test_compare.py
test/test_compare.py: $(filter train_gpt2,$(PROGRAMS))
# the paired statistics over seeds (scripts/comparelib.py) and scripts/suite's runner (with the fake trainer);
# its longer suites (beta2 grids, named arms, the variants table, controls, epochs) are the slow tier's
TESTS += test/test_suite_stats.py test/test_suite.py
SLOW_TESTS += test/test_suite_variants.py
# scripts/best_rule.py scores the rules that could pick an arm's best grid point (a second, no trainer)
TESTS += test/test_best_rule.py
# scripts/grid_vs_fresh.py reads how far the grid's reading at a pick lies from the fresh seeds' (no trainer)
TESTS += test/test_grid_vs_fresh.py

# ---- section: documentation (README.md, docs/) ----
# every relative link resolves inside the repository; the README's quick start works in a fresh clone
TESTS += test/test_links.py
SLOW_TESTS := test/test_quickstart.sh $(SLOW_TESTS)

# ---- end of sections ----

all: $(PROGRAMS)

$(BUILD):
	mkdir -p $(BUILD)

# each runs its tests in order, keeps going, fails if any failed (Criterion prints its summary on stderr), and
# ends with each test's time, slowest first (test/run_tests.sh)
.PHONY: check
test: $(TESTS)
	@test/run_tests.sh $(TESTS)
check: $(TESTS) $(SLOW_TESTS)
	@test/run_tests.sh $(TESTS) $(SLOW_TESTS)

clean:
	rm -rf $(BUILD) $(PROGRAMS)

-include $(wildcard $(DEPDIR)/*.d)
