"""test/testlib.py — the runner the Python test files share: each test is a function registered with the
@test decorator (in TESTS, in the order of the file); run_tests calls them in order, prints PASS (with its time), SKIP (a test that raised Skip: what it needs
is not there) or FAIL (with the traceback) per test and a summary line, removes the test's temporary
folder and exits non-zero if any failed."""
import shutil
import sys
import time
import traceback


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


class Skip(Exception):
    pass


def run_tests(tests, tmp=None):
    passed = failed = skipped = 0
    for fn in tests:
        t0 = time.time()
        try:
            fn()
            passed += 1
            print(f"PASS {fn.__name__} ({time.time() - t0:.1f}s)", flush=True)
        except Skip as e:
            skipped += 1
            print(f"SKIP {fn.__name__}: {e}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    sys.exit(1 if failed else 0)
