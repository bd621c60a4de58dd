"""Verdicts from synthetic measurements: medians, noise, crashes and out-of-memory."""

from __future__ import annotations

import pytest

from memlint.verify.judge import CONFIRMED, INCONCLUSIVE, NO_CLAIM, REFUTED, judge, overall
from memlint.verify.measure import Measurement

MiB = 2**20


def ok(peak=None, seconds=1.0, stdout="out", grads=None, memory="device"):
    return Measurement("ok", 0, memory, peak, seconds=seconds, stdout_sha256=stdout, stdout_tail=stdout,
                       grads=grads)


def failed(status, exit_code=1, error="RuntimeError: boom"):
    return Measurement(status, exit_code, "device", None, error=error, stderr_tail=f"Traceback\n{error}")


def peaks(*values, memory="device"):
    return [ok(peak=v * MiB, memory=memory) for v in values]


def test_peak_lower_confirmed_from_medians():
    j = judge("peak-lower", peaks(512, 512, 512), peaks(256, 256, 256))
    assert j.verdict == CONFIRMED
    assert (j.metric, j.before, j.after, j.ratio) == ("peak", 512 * MiB, 256 * MiB, 0.5)


def test_an_outlier_widens_the_noise_but_small_spread_does_not_hide_a_real_drop():
    assert judge("peak-lower", peaks(512, 512, 100), peaks(256, 256, 900)).verdict == INCONCLUSIVE
    assert judge("peak-lower", peaks(512, 512, 510), peaks(256, 257, 256)).verdict == CONFIRMED


def test_difference_within_spread_is_inconclusive():
    j = judge("peak-lower", peaks(500, 520, 540), peaks(490, 510, 530))
    assert j.verdict == INCONCLUSIVE and "noise" in j.reason


def test_difference_below_relative_threshold_is_inconclusive():
    assert judge("peak-lower", peaks(1000, 1000), peaks(995, 995)).verdict == INCONCLUSIVE
    assert judge("peak-lower", peaks(100), peaks(100)).verdict == INCONCLUSIVE


def test_host_memory_is_named_in_the_metric():
    assert judge("peak-lower", peaks(40, memory="host"), peaks(20, memory="host")).metric == "host peak"
    assert judge("peak-lower", peaks(40), peaks(20)).metric == "peak"


def test_host_memory_has_an_absolute_floor():
    assert judge("peak-lower", peaks(10, memory="host"), peaks(7, memory="host")).verdict == INCONCLUSIVE
    assert judge("peak-lower", peaks(80, memory="host"), peaks(77, memory="host")).verdict == INCONCLUSIVE
    assert judge("peak-lower", peaks(40, memory="host"), peaks(20, memory="host")).verdict == CONFIRMED


def test_peak_higher_refutes():
    j = judge("peak-lower", peaks(256, 256), peaks(512, 512))
    assert j.verdict == REFUTED and j.ratio == 2.0


def test_time_lower():
    fast = [ok(seconds=s) for s in (0.50, 0.52, 0.51)]
    slow = [ok(seconds=s) for s in (1.00, 1.02, 0.99)]
    assert judge("time-lower", slow, fast).verdict == CONFIRMED
    assert judge("time-lower", fast, slow).verdict == REFUTED
    assert judge("time-lower", [ok(seconds=1.0), ok(seconds=1.3)], [ok(seconds=0.9), ok(seconds=1.2)]).verdict \
        == INCONCLUSIVE


def test_output_identical():
    same = [ok(stdout="a"), ok(stdout="a")]
    assert judge("output-identical", same, same).verdict == CONFIRMED
    j = judge("output-identical", same, [ok(stdout="b")])
    assert j.verdict == REFUTED and "'a' -> 'b'" in j.reason
    varies = [ok(stdout="a"), ok(stdout="c")]
    assert judge("output-identical", varies, same).verdict == INCONCLUSIVE


def grads(zero, elements=1000, nonfinite=0, error=None):
    return ok(grads={"steps": 3, "elements": elements, "zero": zero, "nonfinite": nonfinite,
                     "checked_steps": 0 if error is None else 2, "error": error})


def test_gradients_fixed():
    assert judge("gradients-fixed", [grads(1000)], [grads(50)]).verdict == CONFIRMED
    assert judge("gradients-fixed", [grads(0, nonfinite=300)], [grads(0)]).verdict == CONFIRMED
    assert judge("gradients-fixed", [grads(50)], [grads(600)]).verdict == REFUTED
    assert judge("gradients-fixed", [grads(50)], [grads(51)]).verdict == INCONCLUSIVE
    j = judge("gradients-fixed", [ok()], [ok()])
    assert j.verdict == INCONCLUSIVE and "no gradients" in j.reason


def test_gradients_fixed_by_the_gradient_error_when_none_is_zero():
    """A missing zero_grad leaves finite, non-zero gradients: the error measure decides."""
    j = judge("gradients-fixed", [grads(0, error=2.5)] * 2, [grads(0, error=0.0)] * 2)
    assert (j.verdict, j.metric, j.before, j.after) == (CONFIRMED, "grad error", 2.5, 0.0)
    j = judge("gradients-fixed", [grads(0, error=0.0)], [grads(0, error=1.0)])
    assert j.verdict == REFUTED and j.metric == "grad error"
    j = judge("gradients-fixed", [grads(0, error=0.0)] * 2, [grads(0, error=0.0)] * 2)
    assert (j.verdict, j.metric) == (INCONCLUSIVE, "grad error") and "noise" in j.reason


def test_either_gradient_measure_going_up_refutes():
    j = judge("gradients-fixed", [grads(900, error=0.0)], [grads(0, error=1.0)])
    assert j.verdict == REFUTED and j.metric == "grad error"
    j = judge("gradients-fixed", [grads(0, error=3.0)], [grads(900, error=0.0)])
    assert j.verdict == REFUTED and j.metric == "bad grads"


def test_no_claim():
    j = judge("none", peaks(512), peaks(256))
    assert j.verdict == NO_CLAIM and j.before == 512 * MiB


@pytest.mark.parametrize("status", ["crash", "timeout", "oom"])
@pytest.mark.parametrize("claim", ["peak-lower", "time-lower", "output-identical", "gradients-fixed", "none"])
def test_a_fix_that_fails_where_the_original_did_not_is_refuted(claim, status):
    j = judge(claim, peaks(512, 512), [ok(peak=256 * MiB), failed(status)])
    assert j.verdict == REFUTED
    assert "the original did not" in j.reason


def test_crash_reason_names_exit_code_and_error():
    j = judge("peak-lower", peaks(512), [failed("crash", 3, "KeyError: 'x'")])
    assert "exit 3" in j.reason and "KeyError" in j.reason


def test_an_avoided_out_of_memory_confirms():
    j = judge("peak-lower", [failed("oom", error="OutOfMemoryError: CUDA out of memory")], peaks(256))
    assert j.verdict == CONFIRMED and "out-of-memory avoided" in j.reason


def test_original_failing_is_inconclusive():
    assert judge("peak-lower", [failed("crash")], peaks(256)).verdict == INCONCLUSIVE
    assert judge("peak-lower", [failed("crash")], [failed("crash")]).verdict == INCONCLUSIVE
    assert judge("peak-lower", [failed("oom")], [failed("oom")]).verdict == INCONCLUSIVE
    assert judge("time-lower", [failed("oom")], [ok()]).verdict == INCONCLUSIVE


def test_harness_error_is_inconclusive_not_refuted():
    j = judge("peak-lower", peaks(512), [failed("error", None, "torch cannot be imported")])
    assert j.verdict == INCONCLUSIVE and "could not run" in j.reason


def test_overall_verdict_of_several_claims():
    assert overall([CONFIRMED, CONFIRMED]) == CONFIRMED
    assert overall([CONFIRMED, NO_CLAIM]) == CONFIRMED
    assert overall([CONFIRMED, INCONCLUSIVE]) == INCONCLUSIVE
    assert overall([CONFIRMED, REFUTED]) == REFUTED
    assert overall([NO_CLAIM]) == NO_CLAIM
