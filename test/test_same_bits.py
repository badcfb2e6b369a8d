#!/usr/bin/python3
"""
test/test_same_bits.py — scripts/same_bits.py finds what differs: the same trainer twice is the same bits
(every run, the hybrid ones with their Predict run and Correct step and a rollback, the bf16 ones with the
test reference's products, so that they run on any CPU); a trainer whose learning rate is one ulp
of a flag away differs in metrics.jsonl; one whose last checkpoint has a byte flipped (metrics untouched)
differs in that file; a byte changed inside the optimizer state's header (the run's clock) does not count.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import Skip, TESTS, run_tests, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "same_bits.py")
TRAINER = os.path.join(ROOT, "train_gpt2")
TMP = os.path.join("/tmp", f"test_same_bits_{os.getpid()}")

# a wrapper around ./train_gpt2: runs it, then (if asked) changes one byte of a file it wrote
WRAP = """#!/bin/sh
out=""; prev=""
for x in "$@"; do [ "$prev" = "-o" ] && out=$x; prev=$x; done
"%s" "$@" %s || exit $?
%s
"""


def wrapper(name, extra_flags="", after=""):
    os.makedirs(TMP, exist_ok=True)
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(WRAP % (TRAINER, extra_flags, after))
    os.chmod(path, 0o755)
    return path


def same_bits(a, b, *extra):
    r = subprocess.run([sys.executable, SCRIPT, "--trainers", a, b, *extra], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    return r.returncode, r.stdout + r.stderr


def need_trainer():
    if not os.access(TRAINER, os.X_OK):
        raise Skip("./train_gpt2 is not built")


FLIP = 'python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,\'rb\').read()); b[%d]^=1; open(p,\'wb\').write(b)" "$out/%s"'


@test
def the_same_trainer_is_the_same_bits():
    need_trainer()
    rc, out = same_bits(TRAINER, wrapper("plain"), "--bf16-reference")
    assert rc == 0 and out.rstrip().endswith("same bits"), out
    assert "hybrid (look-ahead, Predict, Correct): same (metrics and checkpoints)" in out, out
    if "this build has no oneDNN" not in out:  # a DNNL=0 build: the bf16 runs skipped
        assert "hybrid, bf16 (reference products): same (metrics and checkpoints)" in out, out
        assert "hybrid rollback, bf16 (reference products): same (metrics and checkpoints)" in out, out
    assert "hybrid rollback: same (metrics and checkpoints)" in out, out
    assert out.count(": same (metrics and checkpoints)") + out.count(": skipped") == 7, out


@test
def another_learning_rate_differs_in_the_metrics():
    need_trainer()
    rc, out = same_bits(TRAINER, wrapper("lr", "-l 0.00030001"), "--only", "fp32")
    assert rc == 1 and "fp32: DIFFERS: metrics.jsonl line 2 (step 1): " in out and "2 run(s) differ" in out, out


@test
def a_flipped_weight_differs_in_its_checkpoint():
    need_trainer()
    rc, out = same_bits(TRAINER, wrapper("flip", after=FLIP % (2000, "model_00000008.bin")), "--only", "fp32")
    assert rc == 1 and "fp32: DIFFERS: model_00000008.bin: byte 2000" in out, out


@test
def the_state_header_is_not_compared():
    need_trainer()
    rc, out = same_bits(TRAINER, wrapper("hdr", after=FLIP % (1000, "state_00000008_00000.bin")), "--only", "fp32")
    assert rc == 0 and "same bits" in out, out


# the state past its header up to the record byte for byte, then the record flag by flag: a new flag in one
# trainer's record only is left out, a flag both have with other values differs
RECORD = ('python3 -c "import struct,sys; p=sys.argv[1]; b=bytearray(open(p,\'rb\').read()); '
          'n=struct.unpack_from(\'<i\', b, 432)[0]; %s; open(p,\'wb\').write(b)" "$out/state_00000008_00000.bin"')


@test
def a_flipped_moment_differs_in_the_state():
    need_trainer()
    rc, out = same_bits(TRAINER, wrapper("moment", after=FLIP % (3000, "state_00000008_00000.bin")), "--only", "fp32")
    assert rc == 1 and "fp32: DIFFERS: state_00000008_00000.bin: byte 3000" in out, out


@test
def a_new_flag_in_one_record_is_left_out():
    need_trainer()
    add = "r = b\'--a-new-flag 1\\n\'; b += r; struct.pack_into(\'<i\', b, 432, n + len(r))"
    rc, out = same_bits(TRAINER, wrapper("newflag", after=RECORD % add), "--only", "fp32")
    assert rc == 0 and "same bits" in out, out


@test
def another_value_in_the_record_differs():
    need_trainer()
    change = "i = b.rindex(b\'\\n-x \'); b[i + 4] = ord(\'9\')"
    rc, out = same_bits(TRAINER, wrapper("recval", after=RECORD % change), "--only", "fp32")
    assert rc == 1 and "the record's -x" in out, out


# metrics.jsonl: a field only one trainer logs (a new one) is left out; a loss one of them does not log differs
METRICS = ('python3 -c "import json,sys; p=sys.argv[1]; L=[json.loads(x) for x in open(p)]; [%s for r in L]; '
           'open(p,\'w\').write(\'\'.join(json.dumps(r) + chr(10) for r in L))" "$out/metrics.jsonl"')


@test
def a_new_field_in_one_log_is_left_out_a_missing_loss_is_not():
    need_trainer()
    rc, out = same_bits(TRAINER, wrapper("newfield", after=METRICS % "r.update(new_field=1)"), "--only", "fp32")
    assert rc == 0 and "same bits" in out, out
    rc, out = same_bits(TRAINER, wrapper("noloss", after=METRICS % "r.pop(\'loss\', None)"), "--only", "fp32")
    assert rc == 1 and "fp32: DIFFERS: metrics.jsonl line 2 (step 1): step/loss missing" in out, out


if __name__ == "__main__":
    run_tests(TESTS, TMP)
