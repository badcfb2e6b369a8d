# hybrid-llmc build. `make` builds the CPU trainer and tools, `make test` runs every CPU test.
CC ?= gcc
CFLAGS ?= -O3 -march=native -fopenmp -Wall -Wextra -I.
LDLIBS ?= -lopenblas -lm
TEST_LDLIBS = -lcriterion
BUILD = build

# every section below appends its binaries and tests to these
PROGRAMS =
TESTS =

.PHONY: all test bench fuzz clean
.DEFAULT_GOAL := all

# ---- section: CPU trainer (train_gpt2.c) ----
# -fno-math-errno lets sqrtf vectorise (it is not -ffast-math: NaN/Inf and rounding stay IEEE)
TRAINER_CFLAGS = -fno-math-errno
TRAINER_HEADERS = train_gpt2.c llmc/utils.h llmc/rand.h llmc/dataloader.h llmc/schedulers.h \
                  llmc/tokenizer.h llmc/checkpoint.h llmc/logger.h
PROGRAMS += train_gpt2
train_gpt2: $(TRAINER_HEADERS)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -o $@ train_gpt2.c $(LDLIBS) -fopenmp

TRAINER_TESTS = $(BUILD)/test_dataloader $(BUILD)/test_schedulers $(BUILD)/test_checkpoint \
                $(BUILD)/test_trainer_cli $(BUILD)/test_resume
TESTS += $(TRAINER_TESTS)
$(TRAINER_TESTS): $(BUILD)/%: test/%.c $(TRAINER_HEADERS) test/trainer_test_util.h | $(BUILD) train_gpt2
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS) -fopenmp

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

$(BUILD)/test_gpt2: test/test_gpt2.c train_gpt2.c $(wildcard llmc/*.h hybrid/*.h) $(BUILD)/ref_d2_state.bin | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS)
$(BUILD)/test_gradcheck: test/test_gradcheck.c train_gpt2.c $(wildcard llmc/*.h hybrid/*.h) | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS)

$(BUILD)/bench_sgemm: dev/bench_sgemm.c | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/bench_gpt2: dev/bench_gpt2.c train_gpt2.c $(wildcard llmc/*.h hybrid/*.h) | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -o $@ $< $(LDLIBS)

# tok/s and MFU of train_gpt2 vs PyTorch vs the SGEMM peak (BENCH_THREADS threads; see scripts/bench.py)
BENCH_THREADS ?= 2
bench: $(BUILD)/bench_sgemm $(BUILD)/bench_gpt2
	$(PYTHON) scripts/bench.py --threads $(BENCH_THREADS)

# ---- section: data / tokenizer ----
# ./tokenize (GPT-2 BPE: encode/decode/ids/vocab), its tests, and `make bench-tokenizer`
DATA_HEADERS = data/bpe.h data/shard.h data/unicode_tables.h llmc/utils.h llmc/dataloader.h llmc/rand.h llmc/tokenizer.h
PROGRAMS += tokenize
TESTS += $(BUILD)/test_tokenizer

tokenize: data/tokenize.c $(DATA_HEADERS)
	$(CC) $(CFLAGS) -o $@ data/tokenize.c

$(BUILD)/test_tokenizer: test/test_tokenizer.c $(DATA_HEADERS) tokenize | $(BUILD)
	$(CC) $(CFLAGS) -o $@ test/test_tokenizer.c $(TEST_LDLIBS)

$(BUILD)/bench_tokenizer: data/bench_tokenizer.c $(DATA_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ data/bench_tokenizer.c

.PHONY: bench-tokenizer
bench: bench-tokenizer
bench-tokenizer: $(BUILD)/bench_tokenizer
	./$(BUILD)/bench_tokenizer data/default/train_000000.bin

# libFuzzer (clang) on the tokenizer for FUZZ_SECONDS; the corpus of found inputs stays in build/
FUZZ_SECONDS ?= 60
$(BUILD)/fuzz_tokenizer: test/fuzz_tokenizer.c $(DATA_HEADERS) | $(BUILD)
	clang -O2 -g -fsanitize=fuzzer,address,undefined -I. -o $@ test/fuzz_tokenizer.c

.PHONY: fuzz-tokenizer
fuzz: fuzz-tokenizer
fuzz-tokenizer: $(BUILD)/fuzz_tokenizer
	mkdir -p $(BUILD)/fuzz_tokenizer_corpus
	./$(BUILD)/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz_tokenizer_corpus

# ---- section: hybrid ----
# hybrid/ is header-only; each header has its own Criterion test binary
HYBRID_HEADERS = $(wildcard hybrid/*.h)
HYBRID_TESTS = $(BUILD)/test_hybrid_controller $(BUILD)/test_hybrid_predictor $(BUILD)/test_hybrid_residual \
               $(BUILD)/test_hybrid_monitor $(BUILD)/test_hybrid_bandit $(BUILD)/test_hybrid_apply \
               $(BUILD)/test_hybrid_state
TESTS += $(HYBRID_TESTS)

$(HYBRID_TESTS): $(BUILD)/test_hybrid_%: test/test_hybrid_%.c $(HYBRID_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS) $(TEST_LDLIBS)

# the CPU trainer compiles hybrid/ in (--hybrid)
train_gpt2: $(HYBRID_HEADERS)

# ---- section: CUDA ----
# GPU trainer train_gpt2cu and its test test_gpt2cu. Everything is found by its header and library;
# nothing is linked that was not found. Knobs:
#   GPU_COMPUTE_CAPABILITY=90   build for one architecture (default: sm_80 and sm_90)
#   PRECISION=FP32              fp32 activations/weights instead of bf16 (default BF16)
#   USE_MPI=1                   initialise multi-GPU through MPI (default off: shared file or TCP)
# cuDNN is not used: attention is the trainer's own flash-style kernel (llmc/attention.cuh) on every build.
# `make cuda-check` compiles both binaries in bf16 and train_gpt2cu in fp32 (compile only, for CI).
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
NVCC_FLAGS = -O3 -std=c++17 -lineinfo $(NVCC_ARCH) -I. -Xcompiler -Wall,-Wno-unknown-pragmas
NVCC_LDLIBS = -lcublas -lcublasLt
NVCC_DEFS = -DENABLE_$(PRECISION)
# no --use_fast_math: the kernels must match the CPU path's expf/tanhf to test tolerances
cuda_found = $(and $(wildcard $(CUDA_HOME)/include/$(1)),$(wildcard $(CUDA_HOME)/lib64/$(2) /usr/lib/x86_64-linux-gnu/$(2) /usr/lib64/$(2)))
ifneq ($(call cuda_found,nccl.h,libnccl.so),)
  NVCC_DEFS += -DMULTI_GPU
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
CUDA_HEADERS = $(wildcard llmc/*.cuh llmc/*.h hybrid/*.h)

.PHONY: cuda-check
ifneq ($(NVCC),)
train_gpt2cu: train_gpt2.cu $(CUDA_HEADERS)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) $< $(NVCC_LDLIBS) -o $@
test_gpt2cu: test_gpt2.cu train_gpt2.cu $(CUDA_HEADERS)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) $< $(NVCC_LDLIBS) -o $@
# kernel development files: make dev/cuda/layernorm etc. (one file per kernel, CPU reference + timing sweep)
dev/cuda/%: dev/cuda/%.cu $(CUDA_HEADERS)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_DEFS) $< $(NVCC_LDLIBS) -o $@
# compile-only check for CI (one architecture to keep it quick): both binaries in bf16, the trainer in fp32,
# then the bf16 build again (sm_80), so the binaries left behind are bf16 ones
cuda-check:
	$(MAKE) --no-print-directory -B train_gpt2cu GPU_COMPUTE_CAPABILITY=80 PRECISION=FP32
	$(MAKE) --no-print-directory -B train_gpt2cu test_gpt2cu GPU_COMPUTE_CAPABILITY=80
else
train_gpt2cu test_gpt2cu cuda-check:
	@echo "nvcc not found (looked in $(CUDA_HOME)/bin and PATH): skipping $@"
endif

# ---- section: reliability ----

# ---- section: experiments (scripts/compare_hybrid, scripts/compare_pytorch) ----
# test/test_compare.py drives the comparison scripts (with a fake trainer, then the real ./train_gpt2)
TESTS += test/test_compare.py
test/test_compare.py: $(filter train_gpt2,$(PROGRAMS))

# ---- end of sections ----

all: $(PROGRAMS)

$(BUILD):
	mkdir -p $(BUILD)

# runs every test binary, keeps going, fails if any failed (Criterion prints its summary on stderr)
test: $(TESTS)
	@fail=0; for t in $(TESTS); do echo "== $$t"; ./$$t || fail=1; done; exit $$fail

clean:
	rm -rf $(BUILD) $(PROGRAMS)
