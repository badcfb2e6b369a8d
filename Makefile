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

# ---- section: CUDA ----

# ---- section: reliability ----
# Sanitizer build of the test suite, fuzzers, and the crash / full-disk / signal / bad-input tests.
# `make test` runs the reliability tests, replays the fuzz corpora and crashers under ASan+UBSan, and ends
# with `make test-asan`: every test binary rebuilt in build/asan with the sanitizers and run again.
SAN_CFLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
             -fopenmp -Wall -Wextra -I.
SAN_TRAINER = build/asan/train_gpt2
SAN_TOKENIZE = build/asan/tokenize
FUZZ_CC ?= clang-14
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
              -fopenmp -Wno-pass-failed -I.
# loaders end in exit(); in fuzz binaries exit(), fopen() and the allocator are wrapped (test/fuzz/fuzz.h)
FUZZ_WRAP = -Wl,--wrap=exit,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup \
            -Wl,--wrap=fopen,--wrap=fclose,--wrap=glob,--wrap=globfree
FUZZ_TARGETS = $(patsubst test/fuzz/fuzz_%.c,%,$(wildcard test/fuzz/fuzz_*.c))
FUZZ_DEPS = test/fuzz/fuzz.h $(wildcard llmc/*.h data/*.h hybrid/*.h)
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
SAN_SCRIPTS = test/reliability/test_signal.sh test/reliability/test_bad_inputs.sh test/reliability/test_numeric.sh
SAN_TESTS = $(filter $(BUILD)/%,$(TESTS)) $(SAN_SCRIPTS) test/reliability/test_sanitized.sh
export SAN_BINARIES = $(filter $(BUILD)/%,$(TESTS)) $(SAN_TRAINER) $(SAN_TOKENIZE)
$(SAN_SCRIPTS): $(SAN_TRAINER) $(SAN_TOKENIZE) $(BUILD)/nan_sgemm.so
else
export LLMC_TRAINER = ./train_gpt2
TESTS += $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay_%)
TESTS += test/reliability/test_bad_inputs.sh test/reliability/test_signal.sh test/reliability/test_kill.sh \
         test/reliability/test_diskfull.sh test/reliability/test_numeric.sh test/reliability/test_asan.sh
test/reliability/test_bad_inputs.sh test/reliability/test_signal.sh test/reliability/test_kill.sh \
test/reliability/test_diskfull.sh test/reliability/test_numeric.sh: train_gpt2
test/reliability/test_bad_inputs.sh: tokenize
test/reliability/test_numeric.sh: $(BUILD)/nan_sgemm.so
endif
export NAN_SGEMM_SO = $(BUILD)/nan_sgemm.so

.PHONY: test-asan test-asan-run fuzz-merge
test-asan:
	$(MAKE) --no-print-directory SANITIZE=1 BUILD=build/asan CFLAGS="$(SAN_CFLAGS)" test-asan-run

# SAN_TESTS is complete only once every section is read: hence the second expansion
.SECONDEXPANSION:
test-asan-run: $$(SAN_TESTS)
	@fail=0; for t in $(SAN_TESTS); do echo "== asan: $$t"; ./$$t || fail=1; done; exit $$fail

$(SAN_TRAINER): train_gpt2.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(TRAINER_CFLAGS) $< -o $@ $(LDLIBS)

$(SAN_TOKENIZE): data/tokenize.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $< -o $@

# NaN injection into cblas_sgemm for test_numeric.sh (LD_PRELOAD)
$(BUILD)/nan_sgemm.so: test/reliability/nan_sgemm.c | $(BUILD)
	$(CC) -O2 -shared -fPIC -Wall -Wextra $< -o $@ -ldl

$(BUILD)/fuzz/replay_%: test/fuzz/fuzz_%.c test/fuzz/replay.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -DFUZZ_NAME='"$*"' $< test/fuzz/replay.c -o $@ $(FUZZ_WRAP) $(LDLIBS)

$(BUILD)/fuzz/fuzz_%: test/fuzz/fuzz_%.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< -o $@ $(FUZZ_WRAP) $(LDLIBS)

# each target runs FUZZ_SECONDS on the committed corpus plus its growing copy in build/; a crash stops
# `make fuzz` and leaves the input in test/fuzz/crashers/<target>/, which `make test` then replays
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus_$$t test/fuzz/crashers/$$t; \
	  ASAN_OPTIONS=quarantine_size_mb=64 OMP_NUM_THREADS=1 ./$(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -close_fd_mask=2 -print_final_stats=1 \
	    -artifact_prefix=test/fuzz/crashers/$$t/ $(BUILD)/fuzz/corpus_$$t test/fuzz/corpus/$$t \
	    > $(BUILD)/fuzz/$$t.log 2>&1; rc=$$?; \
	  echo "fuzz $$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' $(BUILD)/fuzz/$$t.log)," \
	    "$$(grep -o 'cov: [0-9]*' $(BUILD)/fuzz/$$t.log | tail -1) (log $(BUILD)/fuzz/$$t.log)"; \
	  if [ $$rc -ne 0 ]; then tail -40 $(BUILD)/fuzz/$$t.log; echo "fuzz $$t: FAILED, input in test/fuzz/crashers/$$t/"; exit 1; fi; \
	done

# folds new coverage from build/ into the committed corpus (keep it small: review before committing)
fuzz-merge: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  ./$(BUILD)/fuzz/fuzz_$$t -merge=1 -max_len=65536 -close_fd_mask=2 test/fuzz/corpus/$$t $(BUILD)/fuzz/corpus_$$t; \
	done

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
