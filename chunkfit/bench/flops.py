"""FLOPs per training window counted from a Keras model, and the CPU's float32 peak.

The convention, so that "how close to the limit" is one number:

- only the multiply-adds of the layers that multiply by weights count (Conv1D/2D/3D, Dense,
  depthwise and separable convolutions, LSTM and GRU cells); one multiply-add is 2 FLOPs;
- a training window costs 3x its forward FLOPs: the forward pass, then the backward pass's
  gradients with respect to the inputs and to the weights, each as costly as the forward;
- elementwise work (biases, activations, pooling, normalisation, ``Add``, the optimizer) is not
  counted: for the built-in models it is a few percent of the multiply-adds.

baseline-cnn at window 104 (one channel, two classes), by hand: Conv1D(24, 9) over 96 positions is
96 x 24 x 9 = 20,736 multiply-adds, Dense(20) on the 24 x 24 pooled values 11,520, Dense(2) 40:
32,296 multiply-adds, 64,592 forward FLOPs, 193,776 FLOPs per training window (0.19 MFLOP).

The peak is cores x float32 lanes per FMA unit x FMA units per core x 2 FLOPs per FMA x clock, from
``/proc/cpuinfo``, sysfs and ``lscpu``: cores are the physical cores under the logical CPUs this
process may run on (SMT siblings share one core's FMA units, so they count once); lanes are 16
where the FMA units are 512 bits wide (AVX-512 on Intel, and on AMD from Zen 5, family 26; Zen 4
splits 512-bit work over 256-bit units), else 8 with AVX2 and FMA, else 4; two FMA units per core
(what these server cores have; not readable from the flags); the clock is ``lscpu``'s "CPU max
MHz" where it shows one, else ``/proc/cpuinfo``'s "cpu MHz" (under a hypervisor often the nominal
clock).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

FMA_UNITS = 2
TRAIN_FACTOR = 3  # forward + backward (gradients of inputs and of weights)


@dataclasses.dataclass(frozen=True)
class ModelFlops:
    """Multiply-adds of one window's forward pass and the layers that were not counted."""

    multiply_adds: int
    uncounted: tuple[str, ...] = ()

    @property
    def forward(self) -> int:
        return 2 * self.multiply_adds

    @property
    def per_training_window(self) -> int:
        return TRAIN_FACTOR * self.forward

    def to_dict(self) -> dict[str, Any]:
        return {
            "multiply_adds": self.multiply_adds,
            "forward_flops": self.forward,
            "training_flops": self.per_training_window,
            "uncounted_layers": list(self.uncounted),
        }


def _shape(tensor: Any) -> tuple[int, ...]:
    """A symbolic tensor's shape without its batch axis."""
    return tuple(int(d) for d in tensor.shape[1:])


def _layer_macs(layer: Any) -> int | None:
    """Multiply-adds of one call of ``layer`` on one window, or None for a weighted layer this
    does not know (0 for layers without weights that multiply)."""
    kind = type(layer).__name__
    if kind in ("Conv1D", "Conv2D", "Conv3D"):
        out, inp = _shape(layer.output), _shape(layer.input)
        groups = getattr(layer, "groups", 1)
        return math.prod(out) * math.prod(layer.kernel_size) * inp[-1] // groups
    if kind in ("DepthwiseConv1D", "DepthwiseConv2D"):
        return math.prod(_shape(layer.output)) * math.prod(layer.kernel_size)
    if kind in ("SeparableConv1D", "SeparableConv2D"):
        out, inp = _shape(layer.output), _shape(layer.input)
        positions = math.prod(out[:-1])
        depth = positions * math.prod(layer.kernel_size) * inp[-1] * layer.depth_multiplier
        return depth + positions * inp[-1] * layer.depth_multiplier * out[-1]
    if kind == "Dense":
        inp = _shape(layer.input)
        return math.prod(inp) * layer.units
    if kind in ("LSTM", "GRU", "SimpleRNN"):
        inp = _shape(layer.input)
        gates = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}[kind]
        return inp[0] * gates * (inp[-1] + layer.units) * layer.units
    if not layer.weights or kind in (
        "BatchNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "Normalization",
        "PReLU",
    ):
        return 0
    return None


def count_flops(model: Any) -> ModelFlops:
    """Multiply-adds of ``model``'s forward pass on one window, walking its layers (nested models
    included); a layer with weights this does not know is listed in ``uncounted``, not guessed."""
    macs, uncounted = 0, list[str]()
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:  # a nested model
            inner = count_flops(layer)
            macs += inner.multiply_adds
            uncounted += inner.uncounted
            continue
        try:
            n = _layer_macs(layer)
        except (AttributeError, ValueError, TypeError):
            n = None
        if n is None:
            uncounted.append(f"{layer.name} ({type(layer).__name__})")
        else:
            macs += n
    return ModelFlops(macs, tuple(uncounted))


@dataclasses.dataclass(frozen=True)
class CpuPeak:
    """The CPU's float32 peak and where each factor came from."""

    cores: int
    lanes: int  # float32 lanes per FMA unit
    fma_units: int
    ghz: float
    clock_from: str
    model_name: str
    flags: tuple[str, ...]  # the vector flags that set ``lanes`` and bfloat16 support

    @property
    def gflops(self) -> float:
        return self.cores * self.lanes * self.fma_units * 2 * self.ghz

    def formula(self) -> str:
        return (
            f"{self.cores} cores x {self.lanes} float32 lanes x {self.fma_units} FMA units x 2 "
            f"FLOPs per FMA x {self.ghz:.3f} GHz ({self.clock_from}) = {self.gflops:,.0f} GFLOP/s"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "flags": list(self.flags),
            "gflops": self.gflops,
            "formula": self.formula(),
        }


def lanes_for(flags: set[str], family: int | None, vendor: str) -> int:
    """float32 lanes of one FMA unit from the CPU flags (see the module's docstring)."""
    if "avx512f" in flags and (vendor != "AuthenticAMD" or (family or 0) >= 26):
        return 16
    if "avx2" in flags and "fma" in flags:
        return 8
    return 4


def cpu_peak(
    cpuinfo: str | None = None, lscpu: str | None = None, cores: int | None = None
) -> CpuPeak | None:
    """The float32 peak of the cores this process may run on; None off Linux. ``cpuinfo`` and
    ``lscpu`` are the two commands' text (read here when not given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    if lscpu is None:
        try:
            lscpu = subprocess.run(
                ["lscpu"], capture_output=True, text=True, check=False, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            lscpu = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():  # the first CPU's fields
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    family = int(fields["cpu family"]) if fields.get("cpu family", "").isdigit() else None
    max_mhz = re.search(r"^CPU max MHz:\s*([\d.]+)", lscpu, re.MULTILINE)
    if max_mhz and float(max_mhz.group(1)) > 0:
        mhz, source = float(max_mhz.group(1)), 'lscpu "CPU max MHz"'
    elif fields.get("cpu MHz"):
        mhz, source = float(fields["cpu MHz"]), '/proc/cpuinfo "cpu MHz"'
    else:
        return None
    if cores is None:
        cpus = (
            sorted(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else list(range(os.cpu_count() or 1))
        )
        cores = physical_cores(cpus, _core_ids(cpus), _threads_per_core(lscpu))
    shown = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
    return CpuPeak(
        cores=cores or 1,
        lanes=lanes_for(flags, family, fields.get("vendor_id", "")),
        fma_units=FMA_UNITS,
        ghz=mhz / 1000,
        clock_from=source,
        model_name=fields.get("model name", "?"),
        flags=tuple(f for f in shown if f in flags),
    )


def physical_cores(cpus: list[int], core_ids: dict[int, str], threads_per_core: int) -> int:
    """The physical cores under the logical CPUs ``cpus``: CPUs with the same ``core_ids`` entry
    (sysfs's "package:core") are SMT siblings of one core and count once. Where no CPU's core is
    known, the logical CPUs divided by ``threads_per_core`` (lscpu's "Thread(s) per core").
    Example: CPUs [0, 1, 2, 3] with core ids {0: "0:0", 1: "0:1", 2: "0:0", 3: "0:1"} are 2 cores;
    CPUs [0, 2] of those are 1."""
    if not any(cpu in core_ids for cpu in cpus):
        return max(1, len(cpus) // max(1, threads_per_core))
    return len({core_ids.get(cpu, f"cpu {cpu}") for cpu in cpus})


def _core_ids(cpus: list[int]) -> dict[int, str]:
    """Each CPU's "package:core" from sysfs, for those that show one."""
    out: dict[int, str] = {}
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            out[cpu] = f"{package}:{(topology / 'core_id').read_text().strip()}"
        except OSError:
            continue
    return out


def _threads_per_core(lscpu: str) -> int:
    found = re.search(r"^Thread\(s\) per core:\s*(\d+)", lscpu, re.MULTILINE)
    return int(found.group(1)) if found else 1


def achieved(windows_per_s: float, flops_per_window: int, peak: CpuPeak | None) -> dict[str, Any]:
    """GFLOP/s reached at ``windows_per_s`` and its share of ``peak`` (None where unknown)."""
    gflops = windows_per_s * flops_per_window / 1e9
    return {"gflop_per_s": gflops, "peak_share": gflops / peak.gflops if peak else None}
