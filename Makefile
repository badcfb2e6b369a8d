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

TRAINER_TESTS =
TESTS += $(TRAINER_TESTS)
$(TRAINER_TESTS): $(BUILD)/%: test/%.c $(TRAINER_HEADERS) test/trainer_test_util.h | $(BUILD) train_gpt2
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) -o $@ $< $(LDLIBS) $(TEST_LDLIBS) -fopenmp

# ---- section: data / tokenizer ----
# ./tokenize (GPT-2 BPE: encode/decode/ids/vocab), its tests, and `make bench-tokenizer`
DATA_HEADERS = data/bpe.h data/shard.h data/unicode_tables.h llmc/utils.h
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

# ---- section: hybrid ----
# hybrid/ is header-only; each header has its own Criterion test binary
HYBRID_HEADERS = $(wildcard hybrid/*.h)
HYBRID_TESTS = $(BUILD)/test_hybrid_controller $(BUILD)/test_hybrid_predictor $(BUILD)/test_hybrid_residual \
               $(BUILD)/test_hybrid_monitor $(BUILD)/test_hybrid_bandit $(BUILD)/test_hybrid_apply \
               $(BUILD)/test_hybrid_state
TESTS += $(HYBRID_TESTS)

$(HYBRID_TESTS): $(BUILD)/test_hybrid_%: test/test_hybrid_%.c $(HYBRID_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS) $(TEST_LDLIBS)

# the CPU trainer compiles hybrid/ in (--hybrid); test_hybrid_train includes it and drives the binary
train_gpt2: $(HYBRID_HEADERS)
TESTS += $(BUILD)/test_hybrid_train
$(BUILD)/test_hybrid_train: test/test_hybrid_train.c $(TRAINER_HEADERS) $(HYBRID_HEADERS) train_gpt2 | $(BUILD)
	$(CC) $(CFLAGS) $(TRAINER_CFLAGS) $< -o $@ $(LDLIBS) $(TEST_LDLIBS) -fopenmp

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
