"""From a job spec to a placement request: which device classes may serve it, best first.

Also answers whether a job can *ever* run on a fabric (admission): an unknown model, a
memory floor no device meets, or a gang larger than any domain the topology allows is
rejected with the spec key and value that cause it, instead of queueing forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from accelnet.fabric import DomainLevel
from accelnet.fabric.catalog import family, find_device_model
from accelnet.sched.jobinfo import peak_tflops
from accelnet.sched.spec import JobSpec, LaunchMode, Prefer
from accelnet.sched.topology import (
    CPU_UNITS,
    LEVEL_NAMES,
    MEMORY_UNITS,
    DeviceClass,
    Topology,
    cpu_units,
    memory_units,
)


@dataclass(frozen=True, slots=True)
class Request:
    """A gang to place: ``count`` devices (or ``share`` of one) of one of ``classes``.

    ``comm_bytes``: what the gang communicates per step (allreduce), from the workload
    hint ``bytes_per_step``; ``step_rates``: steps/s of the gang on each class, aligned with
    ``classes`` (0 where no hint says): what communication-aware placement weighs.
    ``counts``: the gang's size on each class, aligned with ``classes``, when it differs
    per model (empty: ``count`` on every class). ``cpus`` and ``memory_gb``: what each rank
    needs of its host (``per_host``: one rank per host, else one per device); a request
    with ``count`` 0 is a CPU-only job: one rank on one host. ``prefer``: how the classes
    are weighed against each other (:class:`~accelnet.sched.spec.Prefer`)."""

    job: str
    classes: tuple[DeviceClass, ...]
    count: int
    share: float
    required: DomainLevel | None
    preferred: DomainLevel | None
    comm_bytes: float = 0.0
    step_rates: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    cpus: float = 0.0
    memory_gb: float = 0.0
    per_host: bool = False
    prefer: Prefer = Prefer.FIT

    @property
    def cpu_only(self) -> bool:
        """Whether the request takes no device (CPU cores and memory on one host)."""
        return self.count == 0

    @property
    def needs_host(self) -> bool:
        """Whether the request asks for CPU cores or host memory."""
        return bool(self.cpus or self.memory_gb)

    def narrowed(self, ranks: Sequence[int]) -> Request:
        """The request with only ``classes[i]`` for ``i`` in ``ranks`` (and their counts
        and step rates, which stay aligned with the classes)."""
        return replace(
            self,
            classes=tuple(self.classes[i] for i in ranks),
            counts=tuple(self.counts[i] for i in ranks) if self.counts else (),
            step_rates=tuple(self.step_rates[i] for i in ranks) if self.step_rates else (),
        )

    def count_on(self, rank: int) -> int:
        """The gang's size on ``classes[rank]``."""
        return self.counts[rank] if self.counts else self.count

    def what(self, cls: DeviceClass | None = None) -> str:
        """``8 x H100-SXM`` (or ``0.25 of a T4``, ``4 CPUs, 8 GB``) for messages."""
        host = self.host_what()
        if self.cpu_only:
            return host
        if cls is not None and self.counts:
            count = self.counts[self.classes.index(cls)]
        else:
            count = self.count
        name = (
            cls.model.name if cls else "|".join(dict.fromkeys(c.model.name for c in self.classes))
        )
        out = f"{self.share:g} of a {name}" if self.share < 1 else f"{count} x {name}"
        return f"{out} with {host} per {'host' if self.per_host else 'rank'}" if host else out

    def host_what(self) -> str:
        """``4 CPUs, 8 GB`` (what a rank needs of its host), or empty."""
        parts = []
        if self.cpus:
            parts.append(f"{self.cpus:g} CPU{'s' * (self.cpus != 1)}")
        if self.memory_gb:
            parts.append(f"{self.memory_gb:g} GB")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a job can never run here: the spec key, its value, and a sentence."""

    key: str
    value: object
    message: str


def canonical_models(spec: JobSpec, topo: Topology) -> tuple[list[str], list[str]]:
    """(model names the fabric knows them by, names matching nothing) for the job's list.

    A name matches its catalog model (aliases included) and the catalog family it names
    (:data:`~accelnet.fabric.catalog.FAMILIES`: ``H100`` is H100-SXM, H100-PCIe and H100-NVL;
    ``V100`` also V100-PCIe). Models named in a fabric spec but not in the catalog match by
    their exact name only (``V100`` never takes a custom ``V100-32GB``). Answers are memoised
    per fabric.
    """
    names = spec.resources.accelerators.models
    found = topo.resolved.get(names)
    if found is None:
        found = topo.resolved[names] = _resolve(names, topo)
    return list(found[0]), list(found[1])


def named_models(name: str, here: Iterable[str]) -> list[str]:
    """The model names a listed ``name`` stands for: its catalog model (aliases
    included), the catalog family it names, and those of ``here`` (a fabric's models) of
    exactly that name, case aside (see :func:`canonical_models`)."""
    found = find_device_model(name)
    matches = [found.name] if found is not None else []
    matches += family(name)
    matches += [m for m in here if m.lower() == name.lower()]
    return list(dict.fromkeys(matches))


def _resolve(names: tuple[str, ...], topo: Topology) -> tuple[tuple[str, ...], tuple[str, ...]]:
    here = {c.model.name for c in topo.classes.values()}
    known: list[str] = []
    unknown: list[str] = []
    for name in names:
        matches = named_models(name, here)
        if not matches:
            unknown.append(name)
        for n in matches:
            if n not in known:
                known.append(n)
    return tuple(known), tuple(unknown)


def _speed(cls: DeviceClass, spec: JobSpec) -> tuple[float, float]:
    hint = spec.workload.throughput
    measured = hint.get(cls.model.name, 0.0)
    if not measured:
        for name, value in hint.items():
            found = find_device_model(name)
            if found is not None and found is cls.model:
                measured = value
    return measured, peak_tflops(cls.model)


def _shape(spec: JobSpec) -> tuple[object, ...]:
    """Everything of a spec that its eligible classes and never-fit verdict depend on."""
    res = spec.resources
    acc = res.accelerators
    hint = spec.workload.throughput
    return (
        acc.models, acc.count, acc.share, res.kind, res.min_memory_gb,
        spec.topology.required, spec.topology.preferred,
        tuple(sorted(hint.items())) if hint else (),
        acc.counts, acc.prefer, res.cpus, res.memory_gb, spec.launch,
    )  # fmt: skip


def eligible_classes(spec: JobSpec, topo: Topology) -> tuple[DeviceClass, ...]:
    """Classes that satisfy models, kind and memory, best first (memoised per fabric by the
    spec's shape: jobs that ask alike get the same answer).

    Listed models keep the user's order (smaller memory first within a model, to keep big
    devices for jobs that need them); for ``any``, faster first: measured throughput from
    the workload hints, then peak FLOP/s. With ``prefer: fit`` (the default) this order
    only breaks ties between equally tight placements; with ``order`` and ``speed`` it is
    the order classes are tried in. None for a CPU-only job.
    """
    key = _shape(spec)
    found = topo.eligible.get(key)
    if found is None:
        found = topo.eligible[key] = _eligible(spec, topo)
    return found


def zero_models(spec: JobSpec) -> frozenset[str]:
    """The device models (catalog names, and the names as written) the job's hints
    measured at 0 steps/s: it cannot run there."""
    names: set[str] = set()
    for name, value in spec.workload.throughput.items():
        if value == 0:
            found = find_device_model(name)
            names.add(found.name if found is not None else name)
            names.add(name)
    return frozenset(names)


def _eligible(spec: JobSpec, topo: Topology, zeros: bool = True) -> tuple[DeviceClass, ...]:
    """The eligible classes, best first (``zeros`` False: the models its hints measured at
    0 steps/s left in)."""
    res = spec.resources
    req = res.accelerators
    if res.cpu_only:
        return ()
    wanted, _ = canonical_models(spec, topo)
    zero = zero_models(spec) if zeros else frozenset()
    out = []
    for c in topo.classes.values():
        if wanted and c.model.name not in wanted:
            continue
        if c.model.name in zero:
            continue
        if res.kind is not None and c.model.kind is not res.kind:
            continue
        if res.min_memory_gb is not None and c.memory_gb * req.share < res.min_memory_gb - 1e-9:
            continue
        out.append(c)
    if wanted and req.prefer is not Prefer.SPEED:
        out.sort(key=lambda c: (wanted.index(c.model.name), c.memory_gb, c.key))
    else:
        out.sort(key=lambda c: (*(-x for x in _speed(c, spec)), c.memory_gb, c.key))
    return tuple(out)


def make_request(job_id: str, spec: JobSpec, topo: Topology) -> Request:
    """The placement request of a job (its classes may be empty: see :func:`rejection`)."""
    return request_and_rejection(job_id, spec, topo)[0]


def request_and_rejection(
    job_id: str, spec: JobSpec, topo: Topology
) -> tuple[Request, Rejection | None]:
    """:func:`make_request` and :func:`rejection` at once, both memoised per fabric by the
    spec's shape (a new job of a shape seen before costs a lookup, not a derivation)."""
    key = _shape(spec)
    fields_key = (key, spec.workload.bytes_per_step)
    fields = topo.requests.get(fields_key)
    if fields is None:
        fields = topo.requests[fields_key] = _request_fields(spec, topo)
    return Request(job_id, *fields), _known_rejection(key, spec, topo)


def _request_fields(spec: JobSpec, topo: Topology) -> tuple[Any, ...]:
    """A request's fields after ``job``, in :class:`Request`'s order."""
    res = spec.resources
    acc = res.accelerators
    classes = eligible_classes(spec, topo)
    counts: tuple[int, ...] = ()
    if acc.counts:
        counts = tuple(_count_on(c, acc.models, acc.counts, topo) for c in classes)
    return (
        classes,
        acc.count,
        acc.share,
        spec.topology.required.domain if spec.topology.required else None,
        spec.topology.preferred.domain if spec.topology.preferred else None,
        spec.workload.bytes_per_step or 0.0,
        tuple(_speed(c, spec)[0] for c in classes) if spec.workload.throughput else (),
        counts,
        res.cpus or 0.0,
        res.memory_gb or 0.0,
        spec.launch is LaunchMode.PER_HOST,
        acc.prefer,
    )


def _count_on(
    cls: DeviceClass, models: tuple[str, ...], counts: tuple[int, ...], topo: Topology
) -> int:
    """The count the user gave for the listed name that ``cls`` matches (the first)."""
    for name, n in zip(models, counts, strict=True):  # the first name that matches
        if cls.model.name in _resolve((name,), topo)[0]:
            return n
    return max(counts)  # not reached: eligible classes match a listed name


def rejection(spec: JobSpec, topo: Topology) -> Rejection | None:
    """Why ``spec`` can never run on this fabric, or None if it can (on an empty fabric);
    memoised per fabric by the spec's shape."""
    return _known_rejection(_shape(spec), spec, topo)


def _known_rejection(key: tuple[object, ...], spec: JobSpec, topo: Topology) -> Rejection | None:
    """:func:`rejection` of ``spec``, whose shape is ``key``, from the fabric's memo."""
    if key in topo.rejections:
        known: Rejection | None = topo.rejections[key]
        return known
    found = topo.rejections[key] = _rejection(spec, topo)
    return found


def _host_rejection(spec: JobSpec, topo: Topology) -> Rejection | None:
    """A rank's CPU cores or memory more than any host has (hosts that declare none are
    not limited)."""
    res = spec.resources
    for key, want, declared, most, to_units, unit, what in (
        ("resources.cpus", res.cpus, topo.host_cpu, topo.most_cpu, cpu_units, CPU_UNITS,
         "CPU cores"),
        ("resources.memory_gb", res.memory_gb, topo.host_mem, topo.most_mem, memory_units,
         MEMORY_UNITS, "GB of memory"),
    ):  # fmt: skip
        if not want or len(declared) < len(topo.hosts):
            continue
        if to_units(want) > most:
            return Rejection(
                key, want, f"needs {want:g} {what} per rank; the largest host has {most / unit:g}"
            )
    return None


def _rejection(spec: JobSpec, topo: Topology) -> Rejection | None:
    fabric = topo.fabric
    acc = spec.resources.accelerators
    host = _host_rejection(spec, topo)
    if host is not None or spec.resources.cpu_only:
        return host
    here = sorted({c.model.name for c in topo.classes.values()})
    _, unknown = canonical_models(spec, topo)
    key = "resources.accelerators"
    if unknown:
        return Rejection(
            key,
            ", ".join(unknown),
            f"fabric {fabric.name!r} has no {', '.join(unknown)}; models here: {', '.join(here)}",
        )
    wanted, _ = canonical_models(spec, topo)
    if wanted and not any(c.model.name in wanted for c in topo.classes.values()):
        return Rejection(
            key,
            "|".join(wanted),
            f"fabric {fabric.name!r} has no {'|'.join(wanted)}; models here: {', '.join(here)}",
        )
    classes = eligible_classes(spec, topo)
    if not classes and zero_models(spec):
        # only the models its hints measured at 0 fit otherwise: that is the reason
        otherwise = _eligible(spec, topo, zeros=False)
        if otherwise:
            zeroed = sorted({c.model.name for c in otherwise})
            return Rejection(
                "workload.throughput",
                ", ".join(f"{n}: 0" for n in zeroed),
                f"measured 0 steps/s on {', '.join(zeroed)}: the job cannot run there, and "
                f"fabric {fabric.name!r} has no other device it may use",
            )
    if not classes:
        res = spec.resources
        if res.min_memory_gb is not None:
            matching = [
                c
                for c in topo.classes.values()
                if (not wanted or c.model.name in wanted)
                and (res.kind is None or c.model.kind is res.kind)
            ] or list(topo.classes.values())
            biggest = max(c.memory_gb * acc.share for c in matching)
            return Rejection(
                "resources.min_memory_gb",
                res.min_memory_gb,
                f"no matching device has {res.min_memory_gb:g} GB"
                f"{' per share' if acc.share < 1 else ''}; the most is {biggest:g} GB",
            )
        return Rejection("resources.kind", res.kind, f"fabric {fabric.name!r} has no such device")
    if acc.counts:
        fit = [
            c for c in classes
            if _count_on(c, acc.models, acc.counts, topo) <= topo.largest(c.key, DomainLevel.FABRIC)
        ]  # fmt: skip
        if not fit:
            return Rejection(key, acc.describe(), f"needs {acc.describe()}; the fabric has "
                             "fewer of each")  # fmt: skip
        return None
    total = max(topo.largest(c.key, DomainLevel.FABRIC) for c in classes)
    if acc.count > total:
        names = "|".join(dict.fromkeys(c.model.name for c in classes))
        return Rejection(
            key, acc.describe(), f"needs {acc.count} x {names}; the fabric has at most {total}"
        )
    required = spec.topology.required
    if required is not None:
        level = required.domain
        most = max(topo.largest(c.key, level) for c in classes)
        if acc.count > most:
            return Rejection(
                "topology.required",
                required.value,
                f"needs {acc.count} devices in one {LEVEL_NAMES[level]}; "
                f"the largest here has {most}",
            )
    return None
