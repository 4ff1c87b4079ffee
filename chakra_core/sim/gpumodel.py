"""The GPU parts of a system description (chakra extensions of ASTRA-sim's system JSON, which it
ignores): the profiler's cost taken out of recorded host time (`host-overhead`) and the delays
between device work and what it waited for (`device-timing`); docs/gpu.md."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field


class _GpuModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HostOverhead(_GpuModel):
    """How long a CPU node took without the profiler (docs/gpu.md, 'The profiler's cost'):

        min(recorded, op_ns + launch_ns x L + scale x max(0, recorded - (recorded_op_ns
            + recorded_input_ns x I + recorded_launch_ns x L + recorded_child_ns x C)))

    for a node that launched L kernels, copies or memsets (from L runtime calls; a CUDA graph's
    replay launches its kernels with one, and `launch_ns` counts the calls), has I recorded inputs and C host
    operators recorded directly inside it (the table's `children`): the profiler's records of
    each child (the observer writing it out) fall outside the child's span, in its parent's own
    time. The
    recorded_* terms are what the trace gives an operator of little work of its own (the
    profiler's records of it and of its inputs, and the launches); op_ns and launch_ns what such
    an operator takes unprofiled; the recorded time beyond the prediction is the operator's own
    work, of which `scale` is kept. With the recorded_* terms and op_ns 0 (the default), the
    model is min(recorded, scale x recorded + launch_ns x L). Device work, timed by the device,
    keeps its recorded durations."""

    scale: float = Field(gt=0, le=1, allow_inf_nan=False, strict=True,
                         description="Share of a CPU node's recorded duration beyond the small-operator "
                                     "prediction that it keeps unprofiled.")
    launch_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                             description="Host time per device kernel, copy or memset the node launched (ns).")
    op_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                         description="Unprofiled host time of an operator besides its launches (ns).")
    recorded_op_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                                  description="Recorded time of an operator of no work of its own (ns).")
    recorded_input_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                                     description="Recorded time per input of such an operator (ns).")
    recorded_launch_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                                      description="Recorded time per launch of such an operator (ns).")
    recorded_child_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                                     description="Recorded time a node's own time holds per operator directly "
                                                 "inside it: the profiler's records of the child (ns).")

    @property
    def reads_inputs(self) -> bool:
        """Whether the model needs each node's recorded input count."""
        return self.recorded_input_ns > 0

    @property
    def reads_children(self) -> bool:
        """Whether the model needs each node's count of operators directly inside it."""
        return self.recorded_child_ns > 0

    def host_ns(self, recorded_ns: int, launches: int, inputs: int = 0, children: int = 0,
                launch_calls: int | None = None) -> int:
        """launch_calls: the runtime calls that launched the node's `launches` device items where
        fewer (a CUDA graph's replay, one call): the host pays per call, the profiler per item."""
        calls = launches if launch_calls is None else min(launch_calls, launches)
        if self.recorded_launch_ns > 0:  # more device work than its time could launch one by one: a CUDA graph's
            launches = min(launches, recorded_ns / self.recorded_launch_ns)
            calls = min(calls, launches)
        small = (self.recorded_op_ns + self.recorded_input_ns * inputs + self.recorded_launch_ns * launches
                 + self.recorded_child_ns * children)
        unprofiled = self.op_ns + self.launch_ns * calls + self.scale * max(0.0, recorded_ns - small)
        return max(1, min(recorded_ns, math.floor(unprofiled)))


class DeviceTiming(_GpuModel):
    """Delays between a device node and what it waited for, measured from a GPU trace
    (convert/devicetiming.py; docs/gpu.md, 'Device timing'): a device compute node that finds
    the device idle starts launch_latency_ns after it became free to run (its launch), one that
    was waiting for the previous device work kernel_gap_ns after that work ended."""

    launch_latency_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                                     description="Delay from a launch to its start on an idle device (ns).")
    kernel_gap_ns: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False, strict=True,
                                 description="Delay between back-to-back device work (ns).")
