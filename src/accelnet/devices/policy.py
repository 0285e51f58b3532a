"""The remediation policy: declarative, per device kind, loadable from YAML.

Pydantic models with ``extra="forbid"``: a typo is an error naming the file, line, key and
value. :meth:`RemediationPolicy.for_kind` layers the built-in defaults, the built-in kind's,
the file's ``defaults`` and the file's kind entry (later wins, field by field). The machine
that carries a policy out is :mod:`accelnet.devices.remediation`; the format is in
docs/devices.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from accelnet.devices.health import HealthChecks
from accelnet.fabric.model import DeviceKind
from accelnet.specio import SpecError, SpecModel, parse_text, read_text, validation_issues

Step = Literal["drain", "requeue", "reset", "probe"]
STEP_ORDER: tuple[Step, ...] = ("drain", "requeue", "reset", "probe")


class PolicyError(SpecError):
    """A remediation policy file that is not valid; names file, line, key and value."""

    what = "remediation policy"


class KindPolicy(SpecModel):
    """What to do with one kind of device when it fails (every field has a default)."""

    on_fail: tuple[Step, ...] = Field(STEP_ORDER, description="steps on FAIL, in order")
    warn_action: Literal["log", "drain", "fail"] = Field(
        "log", description="on WARN: only log it, drain the device (an operator decides) or fail it"
    )
    max_failures: int = Field(3, ge=1, description="failures within window_s before OFFLINE")
    window_s: float = Field(3600.0, gt=0, description="the failure-counting window")
    backoff_s: float = Field(10.0, ge=0, description="wait after a failed reset or probe")
    stop_grace_s: float = Field(
        10.0, ge=0, description="jobs told to stop that have not stopped by then are killed"
    )
    probe_level: Literal[1, 2] = Field(1, description="the probe run after a reset")
    probe_timeout_s: float = Field(120.0, gt=0, description="a probe not done by then FAILs")
    stress_s: float = Field(10.0, gt=0, description="how long a level-2 probe stresses")
    gpu_reset: bool = Field(True, description="reset NVIDIA GPUs with nvidia-smi where permitted")
    checks: HealthChecks = Field(default_factory=HealthChecks, description="passive checks")

    @field_validator("on_fail")
    @classmethod
    def _steps_in_order(cls, steps: tuple[Step, ...]) -> tuple[Step, ...]:
        if len(set(steps)) != len(steps):
            raise ValueError(f"a step is listed twice: {list(steps)}")
        if list(steps) != [s for s in STEP_ORDER if s in steps]:
            raise ValueError(f"steps must come in the order {', '.join(STEP_ORDER)}")
        if steps and steps[0] != "drain":
            raise ValueError("requeue, reset and probe need drain first (no new work)")
        return steps

    def over(self, base: KindPolicy) -> KindPolicy:
        """``base`` with the fields set in this one (checks merged field by field)."""
        data = base.model_dump()
        for name in self.model_fields_set:
            if name == "checks":
                data["checks"].update(self.checks.model_dump(include=self.checks.model_fields_set))
            else:
                data[name] = getattr(self, name)
        return KindPolicy.model_validate(data)


def _builtin_kinds() -> dict[DeviceKind, KindPolicy]:
    gpu = HealthChecks(temperature_warn_c=85.0, temperature_fail_c=95.0)
    cpu = HealthChecks(temperature_warn_c=95.0)
    return {DeviceKind.GPU: KindPolicy(checks=gpu), DeviceKind.CPU: KindPolicy(checks=cpu)}


class RemediationPolicy(SpecModel):
    """The remediation policy: ``defaults`` for every kind, overridden per ``kinds`` entry.

    Layers, later wins: the built-in defaults (GPUs: WARN at 85 C, FAIL at 95 C; CPUs: WARN
    at 95 C), the built-in kind's, the file's ``defaults``, the file's kind entry."""

    defaults: KindPolicy = Field(default_factory=KindPolicy, description="every kind")
    kinds: dict[DeviceKind, KindPolicy] = Field(default_factory=dict, description="per kind")

    def for_kind(self, kind: DeviceKind | str) -> KindPolicy:
        """The effective policy of a device kind."""
        kind = DeviceKind(kind)
        merged = KindPolicy()
        builtin = _builtin_kinds()
        for layer in (builtin.get(kind), self.defaults, self.kinds.get(kind)):
            if layer is not None:
                merged = layer.over(merged)
        return merged


def load_policy(path: str | Path) -> RemediationPolicy:
    """Read a policy file (YAML or JSON); PolicyError naming file:line, key and value."""
    source = str(path)
    text = read_text(path, PolicyError)
    data, node = parse_text(text, source, PolicyError, source.lower().endswith(".json"))
    return parse_policy(data, source, node)


def parse_policy(data: Any, source: str = "<policy>", node: Any = None) -> RemediationPolicy:
    """Validate policy data (an empty document is the default policy)."""
    try:
        return RemediationPolicy.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise PolicyError(source, validation_issues(exc, data, node, RemediationPolicy)) from None
