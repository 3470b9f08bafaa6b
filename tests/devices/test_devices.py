"""The device a run records and a cluster worker pins: the pin variables, GPUs chosen by index or UUID,
CPU sets as text, the manifest's record read back for the page."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from perflib import devices

H200 = [devices.Gpu("0", "NVIDIA H200", "GPU-aaaa"), devices.Gpu("1", "NVIDIA H200", "GPU-bbbb")]


def test_a_pinned_gpu_is_what_every_child_sees():
    env = devices.pin_env("1")
    assert {env[v] for v in devices.PIN_VARIABLES} == {"1"} and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    out = subprocess.run([sys.executable, "-c", "from perflib import devices; print(devices.pinned())"],
                         env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "('1',)"
    assert devices.pinned(devices.pin_env(None)) == ()  # a CPU worker sees no GPU
    assert devices.pinned({}) is None  # not pinned: every GPU


@pytest.mark.parametrize(("value", "ids"), [("0,2", ("0", "2")), ("1,-1,2", ("1",)), ("", ()),
                                            ("GPU-bbbb", ("GPU-bbbb",))])
def test_pin_variables_read_as_cuda_and_rocm_read_them(value, ids):
    assert devices.pinned({"ROCR_VISIBLE_DEVICES": value}) == ids


def test_gpus_are_chosen_by_index_or_uuid():
    assert devices.select(H200, ("1",)) == (H200[1],)
    assert devices.select(H200, ("GPU-aaaa",)) == (H200[0],)
    assert devices.select(H200, None) == tuple(H200) and devices.select(H200, ()) == ()


@pytest.mark.parametrize(("cpus", "text"), [((0, 1, 2, 3, 8), "0-3,8"), ((5,), "5"), ((0, 2, 4), "0,2,4")])
def test_cpu_sets_round_trip_as_text(cpus, text):
    assert devices.cpu_text(cpus) == text and devices.parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "1-", "0,,2"])
def test_bad_cpu_lists_are_refused(text):
    with pytest.raises(ValueError, match="expected CPUs like 0-3,8"):
        devices.parse_cpus(text)


def test_a_device_record_reads_back_for_the_page():
    device = devices.Device("gpu-box", "nvidia", (H200[1],), ("1",), "0-7")
    record = device.as_dict()
    assert devices.from_record(record) == device
    assert devices.describe_record(record) == "gpu-box: NVIDIA H200 #1 (GPU-bbbb), CPUs 0-7"
    assert devices.kind(record) == "NVIDIA H200"
    cpu = devices.Device("mac", None, (), (), "").as_dict()
    assert devices.describe_record(cpu) == "mac: no GPU (pinned to none)" and devices.kind(cpu) == "CPU"
    assert devices.describe_record(None) == "" and devices.kind({"gpus": []}) == ""


def test_this_device_names_this_host():
    device = devices.this_device()
    assert device.host == devices.host_name()
    assert device.pinned == devices.pinned()
