"""Co-location (space sharing): how fast two jobs run when they share the same devices.

Gavel measured, for every pair of its job types with the same gang size on K80, P100 and
V100, the steps/s of each job while both run on the same GPUs at once (its
``simulation_throughputs.json``: ``table[wt][a][b] = [rate of a, rate of b]``, beside the
``"null"`` rate of ``a`` alone). A pair fits in one GPU's memory only sometimes (a 0 means
it did not: out of memory) and pays only sometimes: on a V100 most pairs together do
1.1-1.65x the work of one job alone, on a P100 or a K80 about 1.0x.

Factors are kept as *fractions of the job's rate alone* (``rate_ab / rate_a``), so they
apply to the job's rate on any gang of that worker type: :class:`Colocation` answers
``(fraction kept by a, fraction kept by b)`` or None when the pair was not measured or
does not fit. Only pairs of equal gang size are measured (Gavel packs a gang with a gang
of its size, on the same devices).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from accelnet.sim.gavelkeys import parse_key

Factors = tuple[float, float]
PairTable = dict[str, dict[tuple[str, str, int], Factors]]
"""worker type -> (job type a, job type b, gang size) -> (fraction a keeps, fraction b keeps)."""


class Colocation:
    """Measured co-location factors by worker type (see the module docstring)."""

    def __init__(self, pairs: Mapping[str, Mapping[tuple[str, str, int], Factors]]) -> None:
        self._pairs: PairTable = {}
        for wt, rows in pairs.items():
            table: dict[tuple[str, str, int], Factors] = {}
            for (a, b, gang), (fa, fb) in rows.items():
                where = f"co-location factors {wt!r} {a!r} with {b!r} on {gang}"
                for f in (fa, fb):
                    if isinstance(f, bool) or not isinstance(f, int | float):
                        raise ValueError(f"{where}: expected a number, got {f!r}")
                    if not (math.isfinite(f) and 0 < f <= 1):
                        raise ValueError(f"{where}: expected a fraction of the rate alone in "
                                         f"(0, 1], got {f!r}")  # fmt: skip
                table[(a, b, gang)] = (float(fa), float(fb))
                table[(b, a, gang)] = (float(fb), float(fa))
            self._pairs[wt] = table

    def __bool__(self) -> bool:
        return any(self._pairs.values())

    def max_gain(self) -> float:
        """The most work two jobs sharing devices do together, in units of one job's work
        alone there (``max(fa + fb)``; 1.0 with no pairs): no device does more."""
        return max((fa + fb for rows in self._pairs.values() for fa, fb in rows.values()),
                   default=1.0)  # fmt: skip

    def worker_types(self) -> tuple[str, ...]:
        """Worker types with measured pairs."""
        return tuple(sorted(wt for wt, rows in self._pairs.items() if rows))

    def factors(self, wt: str, a: str, b: str, gang: int) -> Factors | None:
        """``(fraction of its rate alone a keeps, b keeps)`` sharing ``gang`` devices of
        worker type ``wt``; None if not measured (or the pair does not fit)."""
        return self._pairs.get(wt, {}).get((a, b, gang))

    def to_compact(self) -> dict[str, dict[str, dict[str, dict[str, list[float]]]]]:
        """The bundled format: wt -> a -> b -> "gang" -> [fa, fb] (each pair once, a < b or
        a == b)."""
        out: dict[str, dict[str, dict[str, dict[str, list[float]]]]] = {}
        for wt, rows in sorted(self._pairs.items()):
            for (a, b, gang), (fa, fb) in sorted(rows.items()):
                if a <= b:
                    out.setdefault(wt, {}).setdefault(a, {}).setdefault(b, {})[str(gang)] = [
                        fa, fb,
                    ]  # fmt: skip
        return out


def pairs_from_gavel(doc: Mapping[str, object], where: str) -> Colocation:
    """The measured pairs of Gavel's own format (entries other than ``"null"``); a pair
    with a zero (does not fit) or of unequal gang sizes is left out."""
    out: dict[str, dict[tuple[str, str, int], Factors]] = {}
    for wt, entries in doc.items():
        if wt.endswith("_unconsolidated") or not isinstance(entries, dict):
            continue
        alone: dict[str, float] = {}
        for key, value in entries.items():
            if isinstance(value, dict) and isinstance(value.get("null"), int | float):
                alone[key] = float(value["null"])
        rows: dict[tuple[str, str, int], Factors] = {}
        for key, value in entries.items():
            a, gang_a = parse_key(key, f"{where}: {wt}")
            for other, pair in value.items():
                if other == "null" or other not in alone:
                    continue
                b, gang_b = parse_key(other, f"{where}: {wt}[{key!r}]")
                if gang_a != gang_b:
                    continue
                at = f"{where}: {wt}[{key!r}][{other!r}]"
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise ValueError(f"{at}: expected [rate of the first, rate of the second]")
                ra, rb = (float(x) if isinstance(x, int | float) else math.nan for x in pair)
                if not (math.isfinite(ra) and math.isfinite(rb)):
                    raise ValueError(f"{at}: expected two finite rates, got {pair!r}")
                if ra > 0 and rb > 0 and alone[key] > 0 and alone[other] > 0:
                    rows[(a, b, gang_a)] = (ra / alone[key], rb / alone[other])
        out[wt] = rows
    try:
        return Colocation(out)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def pairs_from_compact(doc: object, where: str) -> Colocation:
    """The bundled format (see :meth:`Colocation.to_compact`)."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: 'colocated' must be an object")
    out: dict[str, dict[tuple[str, str, int], Factors]] = {}
    for wt, rows in doc.items():
        table = out.setdefault(wt, {})
        for a, partners in (rows or {}).items():
            for b, gangs in (partners or {}).items():
                for gang, pair in (gangs or {}).items():
                    at = f"{where}: colocated[{wt!r}][{a!r}][{b!r}][{gang!r}]"
                    if not (isinstance(gang, str) and gang.isdigit() and int(gang) >= 1):
                        raise ValueError(f"{at}: gang size must be an integer >= 1")
                    if not (isinstance(pair, list) and len(pair) == 2):
                        raise ValueError(f"{at}: expected [fraction of a, fraction of b]")
                    table[(a, b, int(gang))] = (pair[0], pair[1])
    try:
        return Colocation(out)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
