#!/bin/bash
# test/reliability/test_asan.sh — the last step of `make check`: the whole suite again, every test binary
# rebuilt in build/asan with -fsanitize=address,undefined (`make test-asan`). A sanitizer report fails
# the test that printed it (ASan exit code 86, UBSan 87, both halt on the first error).
cd "$(dirname "$0")/../.." || exit 1
unset MAKEFLAGS MFLAGS MAKELEVEL
exec make --no-print-directory test-asan
