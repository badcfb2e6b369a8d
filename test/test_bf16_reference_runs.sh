#!/bin/sh
# test/test_bf16_reference_runs.sh — test_resume and test_hybrid_train with every bf16 product by the test
# reference: the trainer runs of test/test_bf16_reference.sh (which says why), in make check
exec "$(dirname "$0")/test_bf16_reference.sh" runs
