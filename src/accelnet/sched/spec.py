"""Job specs: what a user asks for, validated with pydantic (``extra="forbid"``).

A job file reads like a SkyPilot or dstack task::

    name: train-resnet
    tenant: vision
    priority: 5
    resources:
      accelerators: "H100:8"     # or "any:2", "T4:0.25", {any_of: [A100-80GB, H100], count: 4}
      min_memory_gb: 40
    topology: {required: nvlink}        # or {preferred: host}
    run: python train.py --epochs 3     # or entrypoint: {function: "pkg.mod:main", args: [1]}
    inputs: {data: prepare-data}        # waits for job prepare-data; gets its output folder
    workload: {category: training, total_steps: 10000, throughput: {H100-SXM: 12.5}}
    max_retries: 2
    checkpointable: true

``accelnet job schema`` prints the JSON schema; docs/job-spec.md describes every key.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator

from accelnet.fabric.model import DeviceKind, DomainLevel
from accelnet.fabric.spec import MAX_HOST_MEMORY_GB  # a rank asks at most what a host has
from accelnet.specio import SpecModel, StrictBool, StrictFloat, StrictInt

_NAME = r"^[\w][\w.-]*$"
_ALIAS = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
MAX_INPUTS = 64
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ANY = "any"
_NONE = "none"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_RUN_BYTES = 64 * 1024  # one argument of exec (the kernel's limit is 128 KiB)
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_BYTES = 128 * 1024  # every NAME=VALUE of a job's env together
RESERVED_ENV_PREFIX = "ACCELNET_"  # the runtime's own: the task's identity, folders, inputs
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES"})  # the devices the job was given


def _text_for_exec(what: str, value: str) -> str:
    """Refuse text no process can be given (argv and the environment are C strings of
    UTF-8): a NUL byte, or a lone surrogate (from a JSON ``\\ud800`` escape)."""
    nul = value.find("\x00")
    if nul >= 0:
        raise ValueError(
            f"{what} holds a NUL byte (\\x00) at character {nul}: a command or an "
            "environment variable cannot contain one"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{what} holds a lone surrogate ({value[e.start]!r} at character {e.start}): "
            "not text a process can be given"
        ) from None
    return value


def _env_name(name: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not an environment variable name (letters, digits and _, not "
            "starting with a digit)"
        )
    if name.startswith(RESERVED_ENV_PREFIX) or name in RESERVED_ENV:
        raise ValueError(
            f"{name} is set by accelnet for every task (ACCELNET_* names the task, its "
            "folders and inputs; CUDA_VISIBLE_DEVICES the devices it was given): a job "
            "cannot set it"
        )
    return name


def _env_value(value: str) -> str:
    _text_for_exec("the value", value)
    _at_most(
        value,
        MAX_ENV_VALUE_BYTES,
        "the value is {size:,} bytes; at most {limit:,} "
        "(32 KiB) each: pass large data in a file (inputs, or the job's own folder)",
    )
    return value


def _at_most(text: str, limit: int, message: str) -> None:
    """ValueError(``message`` with ``size`` and ``limit``) if ``text`` is over ``limit``
    bytes in UTF-8."""
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValueError(message.format(size=size, limit=limit))


EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, AfterValidator(_env_value)]


class TopologyLevel(StrEnum):
    """How close a job's devices must (or should) be; ``any`` is the whole fabric."""

    NVLINK = "nvlink"
    HOST = "host"
    LEAF = "leaf"
    POD = "pod"
    ANY = "any"

    @property
    def domain(self) -> DomainLevel:
        """The placement domain level this topology level means."""
        return DomainLevel.FABRIC if self is TopologyLevel.ANY else DomainLevel(self.value)


class Category(StrEnum):
    """What kind of work a job is (policies and reports use it)."""

    TRAINING = "training"
    INFERENCE = "inference"
    RENDERING = "rendering"
    DATA = "data"
    VIDEO = "video"
    OTHER = "other"


_REQUEST_KEYS = frozenset({"models", "any_of", "count", "share", "prefer", "counts"})


def _parse_accelerators(value: Any) -> Any:
    """``"H100:8"``, ``"any:2"``, ``"T4:0.25"``, ``"H100"``, ``"none"``, ``{H100: 8,
    A100: 16}`` -> the mapping form."""
    if value is None or (isinstance(value, str) and value.strip().lower() == _NONE):
        return {"models": [], "count": 0}
    if isinstance(value, dict) and value and not (_REQUEST_KEYS & value.keys()):
        return _per_model_counts(value)
    if isinstance(value, dict) and "any_of" in value:
        value = {**value, "models": value["any_of"]}
        del value["any_of"]
    if isinstance(value, dict) and value.get("counts") and "count" not in value:
        counts = value["counts"]
        if isinstance(counts, list | tuple) and all(type(n) is int for n in counts):
            value = {**value, "count": min(counts)}
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        return value
    model, sep, amount = value.strip().rpartition(":")
    if not sep:
        model, amount = amount, "1"
    if not model:
        raise ValueError(f"{value!r}: write MODEL:COUNT, e.g. H100:8, any:2 or T4:0.25")
    models = [] if model.lower() == _ANY else [m.strip() for m in model.split("|")]
    try:
        number = float(amount)
    except ValueError:
        raise ValueError(f"{value!r}: {amount!r} is not a number of devices") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{value!r}: the count must be at least 1 (or a share in (0, 1))")
    if number < 1:
        return {"models": models, "count": 1, "share": number}
    if number != int(number):
        raise ValueError(
            f"{value!r}: a count is a whole number of devices (8) and a share is a part of "
            "one device below 1 (0.25); not both"
        )
    return {"models": models, "count": int(number)}


def _per_model_counts(value: dict[Any, Any]) -> dict[str, Any]:
    """``{H100: 8, A100-80GB: 16}`` (SkyPilot's form: 8 H100 *or* 16 A100-80GB)."""
    counts = []
    for model, n in value.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(
                f"{model}: {n!r} is not a count of devices (a whole number >= 1); write "
                "{H100: 8, A100-80GB: 16} for 8 H100 or 16 A100-80GB"
            )
        counts.append(n)
    return {"models": list(value), "count": min(counts), "counts": counts}


class Prefer(StrEnum):
    """Which of the allowed device models a job takes when several have room.

    ``fit``: every allowed model is weighed together, the placement that fits tightest
    (tightest domain, fewest free devices left around it; for a share, the partly used
    device with the least room) wins, and speed only breaks ties; ``order``: the first
    listed model with room, in the user's order; ``speed``: the fastest model with room
    (measured throughput from the workload hints, then peak FLOP/s)."""

    FIT = "fit"
    ORDER = "order"
    SPEED = "speed"


class AcceleratorRequest(SpecModel):
    """How many devices of which models; ``share`` < 1 asks for part of one device;
    ``count`` 0 asks for none (a CPU-only job: see ``resources.cpus``)."""

    models: tuple[Annotated[str, Field(min_length=1, max_length=128)], ...] = Field(
        (), description="acceptable device models; empty = any"
    )
    count: StrictInt = Field(
        1, ge=0, le=65536, description="devices in the gang (0: none, a CPU-only job)"
    )
    share: StrictFloat = Field(
        1.0, ge=0.01, le=1, description="part of one device (with its memory), in 0.01 steps"
    )
    counts: tuple[Annotated[StrictInt, Field(ge=1, le=65536)], ...] = Field(
        (),
        description="devices in the gang per listed model ({H100: 8, A100-80GB: 16}: 8 H100 "
        "or 16 A100-80GB); empty: count on every model",
    )
    prefer: Prefer = Field(
        Prefer.FIT,
        description="fit: the allowed model where the gang fits tightest; order: the first "
        "listed model with room; speed: the fastest with room",
    )

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return _parse_accelerators(value)

    @field_validator("share")
    @classmethod
    def _on_the_grid(cls, share: float) -> float:
        if abs(share * 100 - round(share * 100)) > 1e-6:
            raise ValueError(f"share {share:g}: shares come in steps of 0.01")
        return round(share * 100) / 100  # kept on the grid: 0.999999999 is a whole device

    @model_validator(mode="after")
    def _share_of_one(self) -> AcceleratorRequest:
        if self.share < 1 and self.count != 1:
            raise ValueError("a fractional share is part of one device: count must be 1")
        if self.count == 0 and self.models:
            raise ValueError(
                f"count 0 asks for no device, but models {', '.join(self.models)} are "
                "listed: give a count, or leave models out for a CPU-only job"
            )
        if self.counts:
            if len(self.counts) != len(self.models):
                raise ValueError(
                    f"counts has {len(self.counts)} entries for {len(self.models)} models: "
                    "one count per listed model"
                )
            if self.share < 1:
                raise ValueError("counts per model are whole devices; a share is one device")
            lowered = [m.lower() for m in self.models]
            if _ANY in lowered:
                raise ValueError("counts are per named model: 'any' has no count of its own")
            twice = sorted({m for m in self.models if lowered.count(m.lower()) > 1})
            if twice:
                raise ValueError(f"counts name {', '.join(twice)} twice: one count per model")
            if self.count != min(self.counts):
                raise ValueError(
                    f"count {self.count} with counts {list(self.counts)}: count is the "
                    "smallest of counts (leave it out)"
                )
        return self

    def describe(self) -> str:
        """``8 x H100``, ``0.25 of a T4``, ``2 x any``, ``8 x H100 or 16 x A100``, ``none``."""
        if self.count == 0:
            return "no accelerator"
        if self.counts:
            return " or ".join(f"{n} x {m}" for m, n in zip(self.models, self.counts, strict=True))
        models = "|".join(self.models) or "any"
        if self.share < 1:
            return f"{self.share:g} of a {models}"
        return f"{self.count} x {models}"


MAX_CPUS = 4096.0


class ResourcesSpec(SpecModel):
    """The devices a job needs, and the CPU cores and host memory beside them.

    ``cpus`` and ``memory_gb`` are per rank: per device with ``launch: per-device``, per
    host with ``launch: per-host``, and for the job's one process when it asks for no
    accelerator. Leaving ``accelerators`` out while giving ``cpus`` or ``memory_gb`` makes
    a CPU-only job; leaving all three out asks for one device of any model, as before."""

    accelerators: AcceleratorRequest = Field(
        default_factory=AcceleratorRequest,
        description='"H100:8", "any:2", "T4:0.25", {any_of: [...], count: N}, '
        '{H100: 8, A100: 16} or "none"',
    )
    kind: DeviceKind | None = Field(None, description="gpu, tpu, npu, cpu or fpga")
    min_memory_gb: StrictFloat | None = Field(
        None, gt=0, description="accelerator memory per device (or share)"
    )
    cpus: StrictFloat | None = Field(
        None, gt=0, le=MAX_CPUS, description="CPU cores per rank (0.01 steps)"
    )
    memory_gb: StrictFloat | None = Field(
        None, gt=0, le=MAX_HOST_MEMORY_GB, description="host memory (RAM) per rank, GB"
    )

    @model_validator(mode="before")
    @classmethod
    def _cpu_only(cls, value: Any) -> Any:
        if (
            isinstance(value, dict)
            and "accelerators" not in value
            and (value.get("cpus") is not None or value.get("memory_gb") is not None)
        ):
            return {**value, "accelerators": {"models": [], "count": 0}}
        return value

    @model_validator(mode="after")
    def _cpu_only_asks_for_something(self) -> ResourcesSpec:
        if self.accelerators.count == 0:
            if self.cpus is None and self.memory_gb is None:
                raise ValueError(
                    "accelerators: none asks for no device: give cpus or memory_gb (what "
                    "the CPU-only job needs on its host)"
                )
            if self.kind is not None or self.min_memory_gb is not None:
                key = "kind" if self.kind is not None else "min_memory_gb"
                raise ValueError(f"{key} describes an accelerator, but the job asks for none")
        if self.cpus is not None and abs(self.cpus * 100 - round(self.cpus * 100)) > 1e-6:
            raise ValueError(f"cpus {self.cpus:g}: CPU cores come in steps of 0.01")
        return self

    @property
    def cpu_only(self) -> bool:
        """Whether the job asks for no accelerator (its ranks need CPU and memory only)."""
        return self.accelerators.count == 0


class TopologySpec(SpecModel):
    """Like Kueue's topology-aware scheduling: a level the gang must or should fit in."""

    required: TopologyLevel | None = Field(None, description="never placed wider than this")
    preferred: TopologyLevel | None = Field(None, description="placed this tight if possible")
    wait_s: StrictFloat | None = Field(
        None,
        ge=0,
        description="wait up to this long (since submission) for a placement within "
        "'preferred' before taking a wider one (Slurm's --switches=N@max-time); "
        "unset: a wider one at once",
    )

    @model_validator(mode="after")
    def _preferred_within_required(self) -> TopologySpec:
        if self.wait_s is not None and self.preferred is None:
            raise ValueError("wait_s needs 'preferred': the level to wait for")
        order = list(TopologyLevel)
        if (
            self.required
            and self.preferred
            and (order.index(self.preferred) > order.index(self.required))
        ):
            raise ValueError(
                f"preferred {self.preferred.value} is looser than required {self.required.value}"
            )
        return self


class EntrypointSpec(SpecModel):
    """A Python function to call: ``package.module:function`` with arguments."""

    function: str = Field(max_length=256, description="module:function")
    args: list[Any] = Field(default_factory=list, description="positional arguments")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")

    @field_validator("function")
    @classmethod
    def _importable(cls, v: str) -> str:
        if not _FUNCTION.match(v):
            raise ValueError(f"{v!r} is not module:function (e.g. mypkg.train:main)")
        return v


class WorkloadSpec(SpecModel):
    """Hints that policies use: what the job is and how fast it runs where."""

    category: Category = Field(Category.OTHER, description="training, inference, ...")
    type: str | None = Field(
        None, max_length=128, description="job type, e.g. 'ResNet-50 (batch size 64)'"
    )
    total_steps: StrictFloat | None = Field(None, gt=0, description="work to do, in steps")
    duration_s: StrictFloat | None = Field(None, gt=0, description="estimated run time, seconds")
    throughput: dict[str, Annotated[StrictFloat, Field(ge=0)]] = Field(
        default_factory=dict,
        description="measured steps/s per device model (0: measured, it cannot run there: "
        "never placed on that model)",
    )
    bytes_per_step: StrictFloat | None = Field(None, ge=0, description="communicated per step")
    colocated: dict[str, Annotated[StrictFloat, Field(gt=0, le=1)]] = Field(
        default_factory=dict,
        description="per device model: the fraction of its rate the job keeps while it "
        "shares the devices with one other job (space sharing); models left out: never packed",
    )


class LaunchMode(StrEnum):
    """How many processes a job's gang runs: one per device (each a rank, as ``srun
    --ntasks-per-gpu=1``), or one per host driving all of the job's devices there (for
    ``torchrun --nproc-per-node``, MPI launchers, JAX multi-host; as SkyPilot's
    ``num_nodes`` or ``srun --ntasks-per-node=1``)."""

    PER_DEVICE = "per-device"
    PER_HOST = "per-host"


MAX_WORKDIR_BYTES = 4096  # PATH_MAX


def _workdir(value: str | None) -> str | None:
    if value is None:
        return None
    if not value:
        raise ValueError("an empty workdir: give a folder, or leave workdir out")
    _text_for_exec("the workdir", value)
    _at_most(value, MAX_WORKDIR_BYTES, "the workdir is {size:,} bytes; at most {limit:,}")
    return value


class RetrySpec(SpecModel):
    """How long a failed job waits before its next attempt: exponential backoff with jitter
    (as Kubernetes' crash-loop backoff and AWS's retry guidance), so that a job that fails
    at once does not burn its retries in milliseconds and jobs that failed together (a
    device, a service they use) do not all retry at the same instant."""

    backoff_s: StrictFloat = Field(
        1.0, ge=0, le=86400, description="the wait after the first failure (0: retry at once)"
    )
    factor: StrictFloat = Field(
        2.0, ge=1, le=10, description="each further failure waits this many times longer"
    )
    max_backoff_s: StrictFloat = Field(
        60.0, ge=0, le=86400, description="no wait is longer than this"
    )
    jitter: StrictFloat = Field(
        0.5,
        ge=0,
        le=1,
        description="the wait is drawn from [1 - jitter, 1] times the backoff (0: exact)",
    )

    def delay(self, failures: int, key: str) -> float:
        """The wait before the attempt after failure number ``failures`` (1: the first):
        ``min(max_backoff_s, backoff_s * factor ** (failures - 1))``, less a part drawn
        from ``key`` (the job's id and ``failures``: the same for a job on every run,
        different between jobs; no random state to keep)."""
        if self.backoff_s == 0 or failures < 1:
            return 0.0
        base = min(self.max_backoff_s, self.backoff_s * self.factor ** min(failures - 1, 64))
        digest = hashlib.blake2b(f"{key}:{failures}".encode(), digest_size=8).digest()
        draw = int.from_bytes(digest) / 2.0**64  # in [0, 1)
        return base * (1.0 - self.jitter * draw)


class JobSpec(SpecModel):
    """One job: a gang of tasks on ``resources.accelerators``, running ``run`` or
    ``entrypoint``."""

    name: str = Field(pattern=_NAME, max_length=128, description="job name (never a shell word)")
    tenant: str = Field("default", pattern=_NAME, max_length=64, description="owning tenant")
    priority: StrictInt = Field(0, ge=-1000, le=1000, description="higher runs first")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    topology: TopologySpec = Field(default_factory=TopologySpec)
    run: str | None = Field(
        None, max_length=MAX_RUN_BYTES, description="shell command (not empty; at most 64 KiB)"
    )
    entrypoint: EntrypointSpec | None = Field(None, description="Python function to call")
    setup: str | None = Field(
        None,
        max_length=MAX_RUN_BYTES,
        description="shell command run once on each host of the job, before its ranks start "
        "(each attempt); its failure fails the attempt, with its log",
    )
    workdir: Annotated[str | None, AfterValidator(_workdir)] = Field(
        None,
        description="the folder the ranks (and setup) start in: absolute, or relative to "
        "where they would start otherwise (the backend's folder, or the device's scratch "
        "folder under the service)",
    )
    launch: LaunchMode = Field(
        LaunchMode.PER_DEVICE,
        description="per-device: one process (rank) per device; per-host: one per host, "
        "driving all of the job's devices there (torchrun --nproc-per-node)",
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict,
        description="extra environment: NAME: value (no ACCELNET_* or CUDA_VISIBLE_DEVICES; "
        "values at most 32 KiB each, 128 KiB in all)",
    )
    inputs: dict[str, Annotated[str, Field(pattern=_NAME, max_length=128)]] = Field(
        default_factory=dict,
        description=(
            "earlier jobs whose outputs this job consumes: alias -> job name (or id). The "
            "job waits until every one has succeeded and fails if one fails or is cancelled; "
            "its tasks find each one's output folder in ACCELNET_INPUT_<ALIAS>"
        ),
    )
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    max_retries: StrictInt = Field(0, ge=0, le=100, description="retries after a failure")
    retry: RetrySpec = Field(
        default_factory=RetrySpec,
        description="the wait between a failure and the next attempt (backoff with jitter)",
    )
    checkpointable: StrictBool = Field(False, description="may be stopped and resumed")
    deadline: StrictFloat | None = Field(
        None, ge=0, description="finish by: seconds on the scheduler's clock, or ISO time"
    )
    timeout_s: StrictFloat | None = Field(None, gt=0, description="kill a task after this long")
    stop_grace_s: StrictFloat | None = Field(
        None,
        ge=0,
        le=3600,
        description="between SIGTERM and SIGKILL when a task is stopped (preempted, cancelled, "
        "timed out), to save a checkpoint; unset: 30 s for a checkpointable job, else the "
        "backend's (1 s)",
    )
    port: StrictInt | None = Field(
        None,
        ge=1024,
        le=65535,
        description="a TCP port on 127.0.0.1 that rank 0 serves on: it gets it as ACCELNET_PORT "
        "and PORT (a service's replicas: accelnet picks a free one for each)",
    )
    fresh_worker: StrictBool = Field(
        False,
        description="replace the worker process after each of this job's tasks (as Ray's "
        "max_calls=1): nothing its Python imported or left behind reaches the next task. "
        "By default a worker stays warm for the same tenant's next task",
    )

    @field_validator("deadline", mode="before")
    @classmethod
    def _iso_time(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                v = datetime.fromisoformat(v)
            except ValueError:
                raise ValueError(f"{v!r} is neither seconds nor an ISO time") from None
        if isinstance(v, datetime):
            # a time without a zone is UTC, whatever zone the machine is in
            return (v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp()
        return v

    @field_validator("run", "setup")
    @classmethod
    def _a_command(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip():  # (surrounding spaces are stripped already)
            raise ValueError("an empty command: give a shell command to run")
        _text_for_exec("the command", v)
        _at_most(
            v,
            MAX_RUN_BYTES,
            "the command is {size:,} bytes in UTF-8; at most "
            "{limit:,} (64 KiB): put a long script in a file and run that",
        )
        return v

    @field_validator("env")
    @classmethod
    def _env_size(cls, v: dict[str, str]) -> dict[str, str]:
        size = sum(len(k.encode()) + len(x.encode()) + 2 for k, x in v.items())  # NAME=VALUE\0
        if size > MAX_ENV_BYTES:
            raise ValueError(
                f"{len(v)} variables of {size:,} bytes in all; at most {MAX_ENV_BYTES:,} "
                "(128 KiB): pass large data in a file"
            )
        return v

    @field_validator("inputs")
    @classmethod
    def _input_aliases(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > MAX_INPUTS:
            raise ValueError(f"at most {MAX_INPUTS} inputs, got {len(v)}")
        for alias in v:
            if not _ALIAS.match(alias):
                raise ValueError(
                    f"input alias {alias!r}: lower-case letters, digits and _, not starting "
                    "with a digit, at most 64 (it names ACCELNET_INPUT_<ALIAS>)"
                )
        return v

    @model_validator(mode="after")
    def _one_program(self) -> JobSpec:
        if (self.run is None) == (self.entrypoint is None):
            raise ValueError("give exactly one of run (a shell command) or entrypoint")
        own = sorted(a for a, job in self.inputs.items() if job == self.name)
        if own:
            raise ValueError(f"inputs.{own[0]}: job {self.name} cannot consume its own outputs")
        return self


CHECKPOINT_GRACE_S = 30.0  # a checkpointable job's default stop_grace_s (Kubernetes' too)


def stop_grace(spec: JobSpec) -> float | None:
    """How long a stopped task of ``spec`` has between SIGTERM and SIGKILL: its
    ``stop_grace_s``, else :data:`CHECKPOINT_GRACE_S` if it is checkpointable, else None
    (the backend's own)."""
    if spec.stop_grace_s is not None:
        return spec.stop_grace_s
    return CHECKPOINT_GRACE_S if spec.checkpointable else None


def job_json_schema() -> dict[str, Any]:
    """JSON schema of one job, with the compact ``accelerators`` forms people write."""
    schema = JobSpec.model_json_schema()
    props = schema["$defs"]["ResourcesSpec"]["properties"]
    short = {"type": "string", "examples": ["H100:8", "any:2", "T4:0.25"]}
    family = {
        "type": "object",
        "properties": {
            "any_of": {"type": "array", "items": {"type": "string"}},
            "count": {"type": "integer", "minimum": 1},
            "share": {"type": "number"},
        },
        "required": ["any_of"],
        "additionalProperties": False,
    }
    props["accelerators"] = {
        "anyOf": [short, family, {"$ref": "#/$defs/AcceleratorRequest"}],
        "description": props["accelerators"].get("description", ""),
    }
    return schema
