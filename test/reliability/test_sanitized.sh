#!/bin/bash
# test/reliability/test_sanitized.sh — inside `make test-asan`: proves that the binaries that just ran
# were really built with the sanitizers (a stale unsanitized binary would pass silently otherwise).
# SAN_BINARIES is exported by the Makefile: every compiled test and the sanitized trainer.
fail=0
for b in $SAN_BINARIES; do
    if ! nm "$b" 2>/dev/null | grep -q -E '__asan_init|__asan_report'; then
        echo "FAIL [test_sanitized]: $b is not built with AddressSanitizer" >&2
        fail=1
    fi
    if ! nm "$b" 2>/dev/null | grep -q '__ubsan_handle'; then
        echo "FAIL [test_sanitized]: $b is not built with UndefinedBehaviorSanitizer" >&2
        fail=1
    fi
done
[ $fail -eq 0 ] && echo "[test_sanitized] ok: $(echo $SAN_BINARIES | wc -w) binaries carry ASan and UBSan"
exit $fail
