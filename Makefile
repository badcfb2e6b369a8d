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

# ---- section: data / tokenizer ----

# ---- section: hybrid ----
# hybrid/ is header-only; each header has its own Criterion test binary
HYBRID_HEADERS = $(wildcard hybrid/*.h)
HYBRID_TESTS = $(BUILD)/test_hybrid_controller $(BUILD)/test_hybrid_predictor $(BUILD)/test_hybrid_residual \
               $(BUILD)/test_hybrid_monitor $(BUILD)/test_hybrid_bandit $(BUILD)/test_hybrid_apply \
               $(BUILD)/test_hybrid_state
TESTS += $(HYBRID_TESTS)

$(HYBRID_TESTS): $(BUILD)/test_hybrid_%: test/test_hybrid_%.c $(HYBRID_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS) $(TEST_LDLIBS)

# ---- section: CUDA ----

# ---- section: reliability ----

# ---- end of sections ----

all: $(PROGRAMS)

$(BUILD):
	mkdir -p $(BUILD)

# runs every test binary, keeps going, fails if any failed (Criterion prints its summary on stderr)
test: $(TESTS)
	@fail=0; for t in $(TESTS); do echo "== $$t"; ./$$t || fail=1; done; exit $$fail

clean:
	rm -rf $(BUILD) $(PROGRAMS)
