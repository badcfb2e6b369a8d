"""test/testlib.py — the runner the Python test files share: each test is a function registered in a list;
run_tests calls them in order, prints PASS/FAIL (with the traceback) per test and a summary line, removes
the test's temporary folder and exits non-zero if any failed."""
import shutil
import sys
import traceback


def run_tests(tests, tmp=None):
    passed = failed = 0
    for fn in tests:
        try:
            fn()
            passed += 1
            print(f"PASS {fn.__name__}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
