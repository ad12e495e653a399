"""Hostile inputs are refused with the exception and message tests/support/hostile_cases.py names, and none of
them reaches cuLaunchKernel (a sentinel stands in for it) or brings the process down.

Runs without a GPU: inputs that need a device get a fake one (fake_driver.FakeDriver); the gpu-marked
test runs those again on the real driver. Cases marked with a known defect are expected failures
(strict: fixing the defect makes them pass and the mark must go). docs/hostile_inputs.md is the table
of all of them (tools/hostile_table.py).
"""
import gc

import pytest

from tests.support.hostile_cases import CASES, run_case


def _param(case):
    marks = [pytest.mark.xfail(strict=True, reason=f"known defect: {case.bug}")] if case.bug else []
    return pytest.param(case, id=case.id, marks=marks)


def _check(case, outcome):
    assert outcome.launches == 0, f"{case.id}: {case.input} reached cuLaunchKernel"
    assert outcome.raised is not None, f"{case.id}: {case.input} was accepted"
    assert isinstance(outcome.exception, case.exc), \
        f"{case.id}: raised {outcome.raised}: {outcome.message}; expected {case.exc.__name__}"
    assert case.message in outcome.message, f"{case.id}: message {outcome.message!r}"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_hostile_input_is_refused_before_any_launch(case):
    _check(case, run_case(case))


@pytest.mark.gpu
@pytest.mark.parametrize("case", [_param(c) for c in CASES if c.needs == "device"])
def test_hostile_input_on_the_real_device(case):
    _check(case, run_case(case, real_device=True))
    gc.collect()  # whatever the case made on the device is released now, while the driver is sane


def test_the_list_covers_the_public_api():
    apis = {case.api.split(".")[1] if case.api.startswith("pyrms.") else case.api for case in CASES}
    assert len(CASES) >= 30
    for needed in ("rms_norm", "fused_add_rms_norm", "rms_norm_backward", "layer_norm", "layer_norm_backward",
                   "Tensor", "Stream", "Event", "DeviceBuffer", "compiler", "python -m pyrms.bench",
                   "python -m pyrms.demo"):
        assert needed in apis, needed
    assert {case.needs for case in CASES} == {"nothing", "device", "no-driver"}


def test_environments_leave_the_driver_module_as_they_found_it():
    from tests.support.fake_driver import driver_modules
    from pyrms import driver, launch
    from pyrms.driver import _process

    def state():
        return ([module._cu for module in driver_modules()], _process._state, _process._selected.device,
                driver.launch_kernel, launch.get_kernel, driver._Owned._own)

    before = state()
    for case in CASES:
        if case.needs != "nothing":
            run_case(case)
    assert state() == before
