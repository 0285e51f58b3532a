"""How fast a job runs on a gang of devices: the simulator's throughput model.

A rate is in *steps per second of the whole gang*, the unit of Gavel's measured table
(stanford-futuredata/gavel, ``simulation_throughputs.json``; a compact copy of its
"job alone" entries ships in ``data/gavel_throughputs.json``, MIT licence in
``data/LICENSE-gavel``). Gavel measured 26 job types on K80, P100 and V100 with 1, 2, 4
and 8 GPUs, in one server ("consolidated") and spread over servers ("unconsolidated").
Everything else is derived by the rules below, chosen to be simple and to keep the
properties a scheduler relies on (more devices are not slower, a faster device is not
slower, a measured figure is returned as measured).

1. **Families.** Catalog models map to Gavel's worker types by family: ``V100`` and
   ``V100-PCIe`` -> ``v100``, ``P100`` and ``P100-SXM2`` -> ``p100``, ``K80`` -> ``k80``
   (aliases resolve through the catalog). Gavel's GPUs were a V100-SXM2, a P100-PCIe and
   one GK210 of a K80; the other family members differ by about 10 % in peak FLOP/s, less
   than the run-to-run spread of the table, so they share its figures. A table may also
   name a worker type by a catalog model name (``"A100"``): that model is then measured.
2. **Missing gang sizes.** For a count ``c`` a worker type did not measure for a job type,
   start from the nearest measured count *below* ``k`` (the smallest measured one if there
   is none below) and multiply by the job type's own measured scaling ``rate(c)/rate(k)``
   on the other worker types that measured both (their median); if none did (any count
   other than 1, 2, 4, 8, such as 3 or 16), by ``(c/k) * 0.9 ** log2(c/k)``: linear scaling
   at 90 % efficiency per doubling (:data:`EFFICIENCY_PER_DOUBLING`). The factor is kept in
   ``[1, c/k]`` (more devices are never slower, never better than linear), and the result
   is never above the larger of its measured neighbours, so a filled count never beats
   the measured count above it. Where the table itself dips (V100, LM bs10: 163 steps/s on
   2 GPUs, 121 on 4) a count in between keeps the rate below; the dip is not copied.
3. **Gangs spanning hosts** (``consolidated=False``). The ``<wt>_unconsolidated`` figure
   when measured. Else, if the job type has unconsolidated figures for several devices on
   that worker type, rule 2 applied to them (V100, LM bs10 on 3 GPUs: between its 35 and
   38 steps/s on 2 and 4, not its consolidated 163 times a ratio). Else the consolidated
   rate times the median unconsolidated/consolidated ratio, at the nearest gang size, over
   the job types that have both on that worker type (on Gavel's table: v100 0.50 / 0.52 /
   0.30 at 2 / 4 / 8 GPUs, p100 0.69 / 0.66 / 0.71, k80 1.01 / 1.04 / 1.04; pooled over
   worker types where one has none). A derived rate never exceeds the consolidated one
   (spreading a gang over hosts is not modelled as faster unless measured so: K80 jobs
   barely feel the network, hence medians near 1), nor linear scaling from one device
   (where the consolidated table itself is better than linear). One device is never
   penalised.
4. **Models Gavel did not measure** (H100, A100, L4, T4, MI300X, TPUs, CPU cores...): a
   roofline fit per job type. A step takes ``t(M) = a / F(M) + b / B(M)`` seconds (``F``
   peak FLOP/s, ``B`` memory bandwidth, ``a, b >= 0``: work that is compute-bound and
   memory-bound), fitted by non-negative least squares on the relative error of the
   measured one-device rates (K80, P100, V100). The estimate is anchored on the fastest
   measured type (V100 for Gavel's table): ``rate(M) = rate(anchor) * t(anchor) / t(M)``,
   so a model at least as strong as the anchor in both figures is at least as fast, and
   a job type the fit cannot describe (Recommendation runs *slower* on a V100 than on a
   P100) still keeps the anchor's measured rate. ``F`` is the FP32 peak: Gavel's jobs
   train in FP32 and their ratios across K80/P100/V100 follow FP32, not the V100's tensor
   cores. Models with no FP32 unit (TPUs, Gaudi) use their BF16 peak, the precision their
   compilers run FP32 matrix products in by default; a model with neither raises
   ``ValueError``. With fewer than two measured points, or a fit of zero, the rate is the
   anchor's times the FP32 peak ratio. Several devices scale as the job type does on the
   reference's worker type (the anchor's if the reference was not measured). Memory
   capacity is not modelled: a job that would not fit still gets a rate.
5. **Job types.** A type not in the table raises :class:`UnknownJobTypeError`. The type
   ``"generic"`` runs 1.0 step/s on one reference device (so its work, in steps, is
   seconds on one reference device), scales with the gang like the median measured job
   type, and on other models as a purely compute-bound job (peak FLOP/s ratio to the
   reference). :meth:`ThroughputModel.job_types` lists only measured types: trace
   generators sample from it, and "generic" is not a measured workload.
6. **Power.** :meth:`~ThroughputModel.power_w` is the catalog's ``max_w`` when busy and
   ``idle_w`` when idle; under a cap below ``max_w`` a busy device draws the cap. A capped
   device runs at ``(cap / max_w) ** (1/3)`` of its rate, at least 0.3 of it
   (:data:`DVFS_FLOOR`): under DVFS dynamic power goes as ``f * V**2`` with ``V`` about
   proportional to ``f``, so clock (and a compute-bound rate) goes as the cube root of
   power. This is an approximation; it ignores static power and memory-bound work. A cap at
   or above ``max_w`` changes nothing; a cap <= 0 raises ``ValueError``, so does a count
   below 1. The cap applies to each device of the gang.
7. **Speed.** :meth:`~ThroughputModel.rate` is memoised per instance (a dict keyed by its
   arguments): after the first call, one dict lookup.

Gavel records 0.0 steps/s for three configurations (ResNet-50 bs128 on 2, 4 and 8 K80s):
the job does not run there (it does not fit). **A measured zero is infeasible**:
:meth:`~ThroughputModel.rate` returns 0.0 for that gang size, spread or not, and for the
sizes rule 2 would fill from it (a size not measured whose nearest measured size below, or
the smallest above if none is below, is a zero: 16 K80s there too). Rule 2 never fills from
a zero. A rate of 0 is what the policies and the simulator read as "cannot run here": the
LPs and the round plans leave such pairs out, and the simulator restricts a job's request
to the models where its gang has a rate (or rejects it, saying why, where none has).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Final

from accelnet.fabric.catalog import device_model, find_device_model
from accelnet.fabric.model import DeviceModel, Precision
from accelnet.sim.colocation import Colocation, Factors, pairs_from_compact, pairs_from_gavel
from accelnet.sim.gavelkeys import parse_key

__all__ = [
    "DVFS_FLOOR",
    "EFFICIENCY_PER_DOUBLING",
    "GENERIC",
    "ThroughputModel",
    "UnknownJobTypeError",
]

GENERIC: Final = "generic"
"""The job type that runs 1 step/s on one reference device (see the module's rule 5)."""

EFFICIENCY_PER_DOUBLING: Final = 0.9
"""Scaling efficiency per doubling of a gang where no worker type measured the count."""

DVFS_FLOOR: Final = 0.3
"""The lowest fraction of its rate a power-capped device is modelled to keep."""

_UNCONSOLIDATED: Final = "_unconsolidated"
_BUNDLED: Final = "data/gavel_throughputs.json"
# Gavel's worker types, and the catalog models each one stands for (rule 1).
_GAVEL_MODEL: Final = {"k80": "K80", "p100": "P100", "v100": "V100"}
_GAVEL_FAMILY: Final = {
    "k80": ("K80",),
    "p100": ("P100", "P100-SXM2"),
    "v100": ("V100", "V100-PCIe"),
}

Table = Mapping[str, Mapping[str, Mapping[int, float]]]
"""worker type -> job type -> gang size -> steps/s of the gang."""

_Rows = dict[str, dict[int, float]]
_RateKey = tuple[str, str, int, bool, float | None]


class UnknownJobTypeError(KeyError, ValueError):
    """A job type the throughput table does not know; the message lists known ones."""

    def __init__(self, job_type: str, known: Iterable[str]) -> None:
        self.job_type = job_type
        self.known = tuple(known)
        shown = ", ".join(repr(k) for k in self.known[:10])
        more = f" and {len(self.known) - 10} more" if len(self.known) > 10 else ""
        super().__init__(
            f"unknown job type {job_type!r}; the throughput table has {len(self.known)}: "
            f"{shown}{more} (and {GENERIC!r}, 1 step/s on one reference device)"
        )

    def __str__(self) -> str:
        return str(self.args[0])


class ThroughputModel:
    """Steps/s of a job type on a gang of catalog devices; see the module for the rules.

    ``tables`` maps a worker type (``"v100"``, or a catalog model name) to job type to gang
    size to steps/s of the gang; ``unconsolidated`` the same for gangs spread over hosts,
    keyed by the same worker types. ``reference`` is the catalog model whose rates define
    "duration on the reference" (traces give durations on it).
    """

    reference: str

    def __init__(
        self,
        tables: Table,
        reference: str = "V100",
        unconsolidated: Table | None = None,
        colocated: Colocation | None = None,
        infeasible: Mapping[str, Mapping[str, Iterable[int]]] | None = None,
    ) -> None:
        """``colocated``: measured co-location factors (:mod:`accelnet.sim.colocation`),
        keyed by the same worker types; ``infeasible``: worker type -> job type -> the gang
        sizes measured at 0 steps/s (the job cannot run there: see the module's notes)."""
        if not tables:
            raise ValueError("a throughput model needs at least one worker type's rates")
        self._tables: dict[str, _Rows] = {
            wt: _clean_rows(rows, f"throughput table {wt!r}") for wt, rows in tables.items()
        }
        self._unc: dict[str, _Rows] = {}
        self._zeros: dict[str, dict[str, frozenset[int]]] = {}
        for wt, given in (infeasible or {}).items():
            if wt not in self._tables:
                raise ValueError(f"infeasible sizes for {wt!r}: no throughput table for it")
            read = {jt: tuple(sizes) for jt, sizes in given.items()}  # iterables read once
            for jt, sizes in read.items():
                bad = [n for n in sizes if isinstance(n, bool) or not isinstance(n, int) or n < 1]
                if bad:
                    raise ValueError(f"infeasible sizes for {wt!r} {jt!r}: gang sizes must be "
                                     f"integers >= 1, got {bad[0]!r}")  # fmt: skip
            self._zeros[wt] = {jt: frozenset(sizes) for jt, sizes in read.items() if sizes}
        self._colo = colocated if colocated is not None else Colocation({})
        for wt in self._colo.worker_types():
            if wt not in tables:
                raise ValueError(f"co-location factors for {wt!r}: no throughput table for it")
        for wt, rows in (unconsolidated or {}).items():
            what = f"unconsolidated throughput table {wt!r}"
            if wt not in self._tables:
                raise ValueError(f"{what}: no consolidated table for worker type {wt!r}")
            clean = _clean_rows(rows, what)
            for job_type in clean:
                if job_type not in self._tables[wt]:
                    raise ValueError(
                        f"{what}: job type {job_type!r} has no consolidated rates on {wt!r}"
                    )
            self._unc[wt] = clean
        self._wt_model: dict[str, DeviceModel] = {}
        self._wt_of: dict[str, str] = {}  # canonical catalog name -> worker type
        for wt in self._tables:
            model, family = _worker_models(wt)
            self._wt_model[wt] = model
            for name in family:
                if name in self._wt_of:
                    raise ValueError(
                        f"throughput tables {self._wt_of[name]!r} and {wt!r} both describe "
                        f"device model {name!r}"
                    )
                self._wt_of[name] = wt
        ref = device_model(reference)
        _peak_tflops(ref)  # a reference must have a compute figure ("generic" needs it)
        self.reference = ref.name
        self._ref = ref
        self._job_types = tuple(sorted({jt for rows in self._tables.values() for jt in rows}))
        self._known = frozenset(self._job_types)
        self._unc_medians = self._median_unconsolidated_ratios()
        self._cache: dict[_RateKey, float] = {}
        self._extra: dict[str, DeviceModel] = {}  # a fabric's own models, by folded name
        self._fits: dict[str, tuple[float, float] | None] = {}
        self._generic_scaling: dict[tuple[int, bool], float] = {}

    @classmethod
    def gavel(cls, path: str | Path | None = None, reference: str = "V100") -> ThroughputModel:
        """The model of Gavel's measured table.

        ``path`` None reads the bundled copy; a path reads Gavel's original
        ``simulation_throughputs.json`` (or a file in the bundled copy's compact format).
        A malformed file raises ``ValueError`` naming the file and the key.
        """
        if path is None:
            where = f"accelnet.sim/{_BUNDLED}"
            text = resources.files("accelnet.sim").joinpath(_BUNDLED).read_text("utf-8")
        else:
            where = str(path)
            text = Path(path).read_text(encoding="utf-8")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON: {exc}") from exc
        if isinstance(doc, dict) and "worker_types" in doc:
            raw = _parse_compact(doc["worker_types"], where)
            colo = pairs_from_compact(doc.get("colocated", {}), where)
        else:
            raw = _parse_gavel(doc, where)
            colo = pairs_from_gavel(doc, where)
        tables: dict[str, _Rows] = {}
        unc: dict[str, _Rows] = {}
        zeros: dict[str, dict[str, list[int]]] = {}
        for wt, rows in raw.items():
            measured = {jt: {s: r for s, r in row.items() if r > 0} for jt, row in rows.items()}
            measured = {jt: row for jt, row in measured.items() if row}
            if wt.endswith(_UNCONSOLIDATED):
                unc[wt.removesuffix(_UNCONSOLIDATED)] = measured
            else:
                tables[wt] = measured
            base = zeros.setdefault(wt.removesuffix(_UNCONSOLIDATED), {})
            for jt, row in rows.items():
                base.setdefault(jt, []).extend(s for s, r in row.items() if r == 0)
        for wt in unc:
            if wt not in tables:
                raise ValueError(f"{where}: {wt + _UNCONSOLIDATED!r} without {wt!r}")
        device_model(reference)  # an unknown reference is not the file's fault
        try:
            infeasible = {wt: z for wt, z in zeros.items() if wt in tables}
            return cls(tables, reference, unc, colo, infeasible)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc

    def add_models(self, models: Iterable[DeviceModel]) -> None:
        """Know the models a fabric declares beyond the catalog (``A10`` with its kind,
        memory, peak FLOP/s and power): their rates come from their declared peak against
        the reference, their power from their declared figures. Catalog models are skipped."""
        for m in models:
            if find_device_model(m.name) is None:
                self._extra[m.name.lower()] = m

    def _device_model(self, name: str) -> DeviceModel:
        """The model called ``name``: one a fabric declared (:meth:`add_models`), else the
        catalog's (UnknownNameError listing the known ones)."""
        return self._extra.get(name.lower()) or device_model(name)

    def job_types(self) -> tuple[str, ...]:
        """The measured job types, sorted ("generic" is accepted but not listed)."""
        return self._job_types

    def reference_rate(self, job_type: str, gpus: int) -> float:
        """Steps/s of ``gpus`` reference devices in one host."""
        return self.rate(job_type, self.reference, gpus)

    def rate(
        self,
        job_type: str,
        model: str,
        count: int,
        consolidated: bool = True,
        power_cap_w: float | None = None,
    ) -> float:
        """Steps/s of a gang of ``count`` devices of catalog model ``model``.

        ``consolidated`` False: the gang spans hosts. ``power_cap_w`` caps each device.
        Raises :class:`UnknownJobTypeError`, or ``ValueError`` for an unknown model, a
        count below 1 or a cap <= 0.
        """
        key = (job_type, model, count, consolidated, power_cap_w)
        try:
            return self._cache[key]
        except KeyError:
            pass
        value = self._compute_rate(job_type, model, count, consolidated, power_cap_w)
        self._cache[key] = value
        return value

    def colocated(self, a: str, b: str, model: str, count: int) -> Factors | None:
        """The fractions of their rates alone that job types ``a`` and ``b`` keep while
        they share the same ``count`` devices of catalog model ``model`` (space sharing);
        None where that pair was not measured on the model's worker type, or does not fit.
        """
        found = find_device_model(model)
        wt = self._wt_of.get(found.name) if found is not None else None
        return None if wt is None else self._colo.factors(wt, a, b, count)

    def max_pair_gain(self) -> float:
        """The most a device's work grows when two jobs share it (:meth:`Colocation.max_gain`,
        at least 1.0): what a makespan bound must allow for under a policy that packs."""
        return max(1.0, self._colo.max_gain())

    def per_device(self, job_type: str, model: str) -> float:
        """Steps/s of one device of ``model``."""
        return self.rate(job_type, model, 1)

    def best_rate(self, job_type: str, count: int, models: Iterable[str]) -> float:
        """The highest consolidated rate of ``count`` devices over ``models``."""
        names = list(models)
        if not names:
            raise ValueError(f"best_rate({job_type!r}, {count}): no device models given")
        return max(self.rate(job_type, name, count) for name in names)

    def power_w(self, model: str, busy: bool, power_cap_w: float | None = None) -> float:
        """Draw of one device of ``model``: ``max_w`` (or the cap below it) busy, else idle.
        A busy device never draws less than an idle one (a cap below idle cannot be met)."""
        m = self._device_model(model)
        if power_cap_w is not None:
            _check_cap(power_cap_w)
        if not busy:
            return m.idle_w
        return m.max_w if power_cap_w is None else max(m.idle_w, min(power_cap_w, m.max_w))

    # -- computing a rate (once per distinct argument tuple) ------------------------------

    def _compute_rate(
        self,
        job_type: str,
        model: str,
        count: int,
        consolidated: bool,
        power_cap_w: float | None,
    ) -> float:
        if job_type != GENERIC and job_type not in self._known:
            raise UnknownJobTypeError(job_type, self._job_types)
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"device count must be an integer >= 1, got {count!r}")
        m = self._device_model(model)
        factor = 1.0
        if power_cap_w is not None:
            _check_cap(power_cap_w)
            if power_cap_w < m.max_w:
                factor = max(DVFS_FLOOR, (power_cap_w / m.max_w) ** (1.0 / 3.0))
        return self._uncapped(job_type, m, count, consolidated) * factor

    def _uncapped(self, job_type: str, m: DeviceModel, count: int, consolidated: bool) -> float:
        if job_type == GENERIC:
            ratio = _peak_tflops(m) / _peak_tflops(self._ref)
            return ratio * self._generic_scale(count, consolidated)
        wt = self._wt_of.get(m.name)
        if wt is not None and self._infeasible(wt, job_type, count):
            return 0.0  # measured at 0 steps/s: it cannot run there
        if wt is not None and job_type in self._tables[wt]:
            return self._wt_rate(wt, job_type, count, consolidated)
        single = self._roofline(job_type, m)
        if count == 1:
            return single
        sw = self._scaling_wt(job_type)
        gang = self._wt_rate(sw, job_type, count, consolidated)
        return single * gang / self._wt_rate(sw, job_type, 1, True)

    def _infeasible(self, wt: str, job_type: str, count: int) -> bool:
        """Whether ``count`` devices of worker type ``wt`` cannot run ``job_type``: that
        size was measured at 0, or it was not measured and the nearest measured size below
        it (the smallest above, if none is below) was."""
        zeros = self._zeros.get(wt, {}).get(job_type)
        if not zeros:
            return False
        row = self._tables[wt].get(job_type, {})
        if count in row:
            return False
        if count in zeros:
            return True
        sizes = zeros | row.keys()
        below = [s for s in sizes if s < count]
        return (max(below) if below else min(sizes)) in zeros

    def _wt_rate(self, wt: str, job_type: str, count: int, consolidated: bool) -> float:
        """Rules 2 and 3 on a measured worker type."""
        rate = _fill(self._tables, wt, job_type, count)
        if consolidated or count == 1:
            return rate
        unc = self._unc.get(wt, {}).get(job_type, {})
        if count in unc:
            return unc[count]
        if any(s > 1 for s in unc):
            return min(rate, _fill(self._unc, wt, job_type, count))
        medians = self._unc_medians.get(wt) or self._unc_medians.get("", {})
        if not medians:
            return rate
        # never better than linear from one device (the consolidated table may be: K80,
        # ResNet-50 bs64 does 2.04x on two GPUs in one server)
        linear = count * _fill(self._tables, wt, job_type, 1)
        return min(rate * min(1.0, medians[_nearest(list(medians), count)]), linear)

    def _median_unconsolidated_ratios(self) -> dict[str, dict[int, float]]:
        """Per worker type (and pooled, under ""), gang size -> median unc/cons ratio."""
        ratios: dict[str, dict[int, list[float]]] = {}
        for wt, rows in self._unc.items():
            for job_type, unc in rows.items():
                cons = self._tables[wt][job_type]
                for s, rate in unc.items():
                    if s > 1 and s in cons:
                        for key in (wt, ""):
                            ratios.setdefault(key, {}).setdefault(s, []).append(rate / cons[s])
        return {
            key: {s: statistics.median(v) for s, v in sorted(by.items())}
            for key, by in ratios.items()
        }

    def _anchor(self, job_type: str) -> str:
        """The measured worker type with the highest peak for ``job_type`` (rule 4)."""
        measured = [wt for wt, rows in self._tables.items() if job_type in rows]
        return max(measured, key=lambda wt: (_peak_tflops(self._wt_model[wt]), wt))

    def _scaling_wt(self, job_type: str) -> str:
        """Whose gang scaling unmeasured models follow: the reference's, else the anchor's."""
        wt = self._wt_of.get(self.reference)
        if wt is not None and job_type in self._tables[wt]:
            return wt
        return self._anchor(job_type)

    def _roofline(self, job_type: str, m: DeviceModel) -> float:
        """Rule 4: one device of a model not measured for ``job_type``."""
        anchor = self._anchor(job_type)
        am = self._wt_model[anchor]
        anchor_rate = _fill(self._tables, anchor, job_type, 1)
        peak = _peak_tflops(m)
        if job_type not in self._fits:
            self._fits[job_type] = self._fit(job_type)
        fit = self._fits[job_type]
        if fit is None:
            return anchor_rate * peak / _peak_tflops(am)
        a, b = fit
        step_anchor = a / _peak_tflops(am) + b / _bandwidth(am)
        step_model = a / peak + b / _bandwidth(m)
        return anchor_rate * step_anchor / step_model

    def _fit(self, job_type: str) -> tuple[float, float] | None:
        """``(a, b)`` of ``t = a/F + b/B`` on the relative error, None if degenerate."""
        xs: list[tuple[float, float]] = []
        for wt, rows in self._tables.items():
            if job_type in rows:
                model = self._wt_model[wt]
                rate = _fill(self._tables, wt, job_type, 1)
                xs.append((rate / _peak_tflops(model), rate / _bandwidth(model)))
        if len(xs) < 2:
            return None
        a, b = _nnls2(xs, [1.0] * len(xs))
        return None if a == 0.0 and b == 0.0 else (a, b)

    def _generic_scale(self, count: int, consolidated: bool) -> float:
        """Rule 5: the median job type's gang scaling on its scaling worker type."""
        if count == 1:
            return 1.0
        key = (count, consolidated)
        if key not in self._generic_scaling:
            growth = []
            for job_type in self._job_types:
                wt = self._scaling_wt(job_type)
                gang = self._wt_rate(wt, job_type, count, consolidated)
                growth.append(gang / self._wt_rate(wt, job_type, 1, True))
            self._generic_scaling[key] = statistics.median(growth)
        return self._generic_scaling[key]


# -- helpers ------------------------------------------------------------------------------


def _fill(tables: Mapping[str, _Rows], wt: str, job_type: str, count: int) -> float:
    """Rule 2: ``count`` devices where ``tables[wt]`` did not measure them for ``job_type``."""
    row = tables[wt][job_type]
    if count in row:
        return row[count]
    below = [s for s in row if s < count]
    above = [s for s in row if s > count]
    k = max(below) if below else min(above)
    donors = [
        other[job_type][count] / other[job_type][k]
        for name, other in tables.items()
        if name != wt and job_type in other and count in other[job_type] and k in other[job_type]
    ]
    if donors:
        growth = statistics.median(donors)
    else:
        growth = (count / k) * EFFICIENCY_PER_DOUBLING ** math.log2(count / k)
    low, high = (1.0, count / k) if count > k else (count / k, 1.0)
    value = row[k] * min(max(growth, low), high)
    if below and above:
        value = min(value, max(row[k], row[min(above)]))
    return value


def _worker_models(wt: str) -> tuple[DeviceModel, tuple[str, ...]]:
    """The catalog model a worker type was measured on, and the names it stands for."""
    if wt in _GAVEL_MODEL:
        return device_model(_GAVEL_MODEL[wt]), _GAVEL_FAMILY[wt]
    model = find_device_model(wt)
    if model is None:
        hint = (
            f"; pass {_UNCONSOLIDATED} tables as `unconsolidated`"
            if wt.endswith(_UNCONSOLIDATED)
            else ""
        )
        raise ValueError(
            f"throughput table: worker type {wt!r} is neither a Gavel worker type "
            f"({', '.join(_GAVEL_MODEL)}) nor a catalog device model{hint}"
        )
    return model, (model.name,)


def _clean_rows(rows: Mapping[str, Mapping[int, float]], what: str) -> _Rows:
    """A plain copy of one worker type's rates, checked: names, gang sizes, rates > 0."""
    out: _Rows = {}
    for job_type, row in rows.items():
        if not isinstance(job_type, str) or not job_type:
            raise ValueError(f"{what}: job type must be a non-empty string, got {job_type!r}")
        if job_type == GENERIC:
            raise ValueError(f"{what}: job type {GENERIC!r} is reserved (1 step/s by design)")
        clean: dict[int, float] = {}
        for scale, rate in row.items():
            if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
                raise ValueError(
                    f"{what}: job type {job_type!r}: gang size must be an integer >= 1, "
                    f"got {scale!r}"
                )
            if isinstance(rate, bool) or not isinstance(rate, int | float):
                raise ValueError(
                    f"{what}: job type {job_type!r}, {scale} devices: rate must be a "
                    f"number, got {rate!r}"
                )
            if not (math.isfinite(rate) and rate > 0):
                raise ValueError(
                    f"{what}: job type {job_type!r}, {scale} devices: rate must be finite "
                    f"and > 0 steps/s, got {rate!r}"
                )
            clean[scale] = float(rate)
        if not clean:
            raise ValueError(f"{what}: job type {job_type!r} has no rates")
        out[job_type] = clean
    return out


def _parse_gavel(doc: object, where: str) -> dict[str, _Rows]:
    """Gavel's format: worker type -> "('<job type>', scale)" -> {"null": rate, ...}."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a JSON object of worker types")
    out: dict[str, _Rows] = {}
    for wt, entries in doc.items():
        if not isinstance(entries, dict):
            raise ValueError(f"{where}: worker type {wt!r}: expected an object of job keys")
        rows: _Rows = {}
        for key, value in entries.items():
            job_type, scale = parse_key(key, f"{where}: {wt}")
            if not isinstance(value, dict) or "null" not in value:
                raise ValueError(f"{where}: {wt}[{key!r}]: expected an object with a 'null'")
            row = rows.setdefault(job_type, {})
            if scale in row:
                raise ValueError(f"{where}: {wt}[{key!r}]: duplicate of an earlier key")
            row[scale] = _rate(value["null"], f"{where}: {wt}[{key!r}]['null']")
        out[wt] = rows
    return out


def _parse_compact(doc: object, where: str) -> dict[str, _Rows]:
    """The bundled format: worker type -> job type -> "scale" -> rate."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: 'worker_types' must be an object")
    out: dict[str, _Rows] = {}
    for wt, rows in doc.items():
        if not isinstance(rows, dict):
            raise ValueError(f"{where}: worker_types[{wt!r}] must be an object")
        parsed: _Rows = {}
        for job_type, row in rows.items():
            if not isinstance(row, dict):
                raise ValueError(f"{where}: worker_types[{wt!r}][{job_type!r}] must be an object")
            parsed[job_type] = {}
            for scale, rate in row.items():
                at = f"{where}: worker_types[{wt!r}][{job_type!r}][{scale!r}]"
                if not (isinstance(scale, str) and scale.isdigit() and int(scale) >= 1):
                    raise ValueError(f"{at}: gang size must be an integer >= 1")
                parsed[job_type][int(scale)] = _rate(rate, at)
        out[wt] = parsed
    return out


def _rate(value: object, where: str) -> float:
    """A rate read from a file: a finite number >= 0 (0 means not measured)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number of steps/s, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{where}: expected a finite rate >= 0, got {value!r}")
    return float(value)


def _check_cap(power_cap_w: float) -> None:
    if not (math.isfinite(power_cap_w) and power_cap_w > 0):
        raise ValueError(f"power cap must be a finite number of watts > 0, got {power_cap_w!r}")


def _peak_tflops(m: DeviceModel) -> float:
    """FP32 peak, else BF16 (rule 4); ValueError naming the model if it has neither."""
    for precision in (Precision.FP32, Precision.BF16):
        value = m.tflops(precision)
        if value > 0:
            return value
    raise ValueError(
        f"device model {m.name!r} has no FP32 or BF16 peak in the catalog; "
        "the throughput model cannot estimate training rates on it"
    )


def _bandwidth(m: DeviceModel) -> float:
    if m.mem_bw_gbps <= 0:
        raise ValueError(f"device model {m.name!r} has no memory bandwidth in the catalog")
    return m.mem_bw_gbps


def _nearest(scales: list[int], count: int) -> int:
    """The scale closest to ``count`` on a log scale; the larger one on a tie."""
    return min(scales, key=lambda s: (abs(math.log2(s / count)), -s))


def _nnls2(xs: list[tuple[float, float]], ys: list[float]) -> tuple[float, float]:
    """Non-negative least squares with two unknowns, exactly.

    The problem is convex, so the optimum is the unconstrained one when it is feasible,
    else on an edge (one unknown zero): compare the feasible candidates.
    """
    s11 = sum(x1 * x1 for x1, _ in xs)
    s22 = sum(x2 * x2 for _, x2 in xs)
    s12 = sum(x1 * x2 for x1, x2 in xs)
    t1 = sum(x1 * y for (x1, _), y in zip(xs, ys, strict=True))
    t2 = sum(x2 * y for (_, x2), y in zip(xs, ys, strict=True))
    candidates = [(0.0, 0.0)]
    if s11 > 0:
        candidates.append((max(t1 / s11, 0.0), 0.0))
    if s22 > 0:
        candidates.append((0.0, max(t2 / s22, 0.0)))
    det = s11 * s22 - s12 * s12
    if det > 1e-12 * s11 * s22:
        a = (t1 * s22 - t2 * s12) / det
        b = (t2 * s11 - t1 * s12) / det
        if a >= 0 and b >= 0:
            candidates.append((a, b))

    def residual(ab: tuple[float, float]) -> float:
        a, b = ab
        return sum((a * x1 + b * x2 - y) ** 2 for (x1, x2), y in zip(xs, ys, strict=True))

    return min(candidates, key=residual)
