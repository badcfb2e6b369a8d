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

# ---- section: CUDA ----

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
