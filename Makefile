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
