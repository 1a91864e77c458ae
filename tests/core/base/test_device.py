import pytest
import torch

from qwen3_trn_helpers import device
from qwen3_trn_helpers.errors import DeviceError

no_accelerator = pytest.mark.skipif(
    torch.cuda.is_available() or device.neuron_available(), reason="CPU-only check"
)


@no_accelerator
def test_cpu_machine_reports_cpu_and_no_neuron():
    report = device.device_report()
    assert report.device_type == "cpu"
    assert not report.on_trainium
    assert report.privateuse1_backend != "neuron"  # nothing pretends to be Trainium
    assert report.torchtitan == "0.3.0"
    assert "device_type" in str(report) and "<table>" in report._repr_html_()


@no_accelerator
def test_neuron_requested_but_absent_is_a_clear_error():
    with pytest.raises(DeviceError, match="no Trainium device is visible"):
        device.resolve_device("neuron")
    assert device.resolve_device("auto") == "cpu"
    assert device.resolve_device("cpu") == "cpu"


def test_unknown_device():
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        device.resolve_device("tpu")


def test_the_stack_imports_with_the_collector_paused_and_restored():
    """stack.collector_paused: no collection inside (the stack's imports), the collector
    as it was afterwards (on, or off where the caller had turned it off), even on error."""
    import gc

    from qwen3_trn_helpers.stack import collector_paused

    gc.enable()  # (as a fresh process has it)
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ImportError), collector_paused():
        import qwen3_trn_no_such_module  # noqa: F401
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()
