"""The simulator's throughput model: Gavel's measurements, and the rules that extend them."""

from __future__ import annotations

import ast
import itertools
import json
import math
import statistics
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.fabric.catalog import device_model, device_models
from accelnet.fabric.model import DeviceModel, Precision
from accelnet.sim import throughput as tp
from accelnet.sim.throughput import (
    DVFS_FLOOR,
    EFFICIENCY_PER_DOUBLING,
    GENERIC,
    ThroughputModel,
    UnknownJobTypeError,
)

GAVEL_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gavel"
GAVEL_FILE = GAVEL_DIR / "simulation_throughputs.json"
needs_gavel = pytest.mark.skipif(
    not GAVEL_FILE.is_file(),
    reason=f"Gavel's original table is not at {GAVEL_FILE} (../shared/data/gavel)",
)

R50 = "ResNet-50 (batch size 64)"
R50_128 = "ResNet-50 (batch size 128)"
LM10 = "LM (batch size 10)"
REC = "Recommendation (batch size 2048)"
GAVEL_MODELS = {"k80": "K80", "p100": "P100", "v100": "V100"}


@pytest.fixture(scope="module")
def model() -> ThroughputModel:
    return ThroughputModel.gavel()


def bundled() -> dict[str, dict[str, dict[int, float]]]:
    """The bundled file as worker type -> job type -> scale -> rate (zeros included)."""
    text = resources.files("accelnet.sim").joinpath("data/gavel_throughputs.json").read_text()
    doc = json.loads(text)
    return {
        wt: {jt: {int(s): r for s, r in row.items()} for jt, row in rows.items()}
        for wt, rows in doc["worker_types"].items()
    }


TABLE = bundled()
JOB_TYPES = sorted(TABLE["v100"])


def has_figures(m: DeviceModel) -> bool:
    return m.tflops(Precision.FP32) > 0 or m.tflops(Precision.BF16) > 0


# -- the measured table ----------------------------------------------------------------


def test_known_values_from_gavels_table(model: ThroughputModel) -> None:
    assert model.per_device(R50, "K80") == pytest.approx(0.62, rel=0.01)
    assert model.per_device(R50, "P100") == pytest.approx(2.62, rel=0.01)
    assert model.per_device(R50, "V100") == pytest.approx(4.40, rel=0.01)
    # the recommendation model is memory-latency bound: faster on the P100 than the V100
    assert model.per_device(REC, "P100") == pytest.approx(16.6, rel=0.01)
    assert model.per_device(REC, "V100") == pytest.approx(7.47, rel=0.01)
    assert model.per_device(REC, "P100") > model.per_device(REC, "V100")


def test_every_measured_figure_is_returned_as_measured(model: ThroughputModel) -> None:
    checked = 0
    for wt, rows in TABLE.items():
        base, _, unc = wt.partition("_")
        for jt, row in rows.items():
            for scale, rate in row.items():
                if rate > 0:
                    got = model.rate(jt, GAVEL_MODELS[base], scale, consolidated=not unc)
                    assert got == rate, (wt, jt, scale)
                    checked += 1
    assert checked == 489  # 492 figures, 3 of them zeros


def test_job_types_are_the_measured_ones_sorted(model: ThroughputModel) -> None:
    assert model.job_types() == tuple(JOB_TYPES)
    assert len(model.job_types()) == 26
    assert GENERIC not in model.job_types()


def test_catalog_families_and_aliases_share_the_table(model: ThroughputModel) -> None:
    for jt in (R50, REC, LM10):
        for name in ("V100-PCIe", "v100", "Tesla-V100", "V100-SXM2-16GB"):
            assert model.rate(jt, name, 4) == model.rate(jt, "V100", 4)
        assert model.rate(jt, "P100-SXM2", 2) == model.rate(jt, "P100", 2)
        assert model.rate(jt, "tesla-k80", 1) == model.rate(jt, "K80", 1)


def test_per_device_reference_rate_and_best_rate(model: ThroughputModel) -> None:
    assert model.reference == "V100"
    assert model.per_device(R50, "P100") == model.rate(R50, "P100", 1)
    assert model.reference_rate(R50, 4) == model.rate(R50, "V100", 4)
    assert model.best_rate(REC, 1, ["K80", "P100", "V100"]) == model.per_device(REC, "P100")
    assert model.best_rate(R50, 2, iter(["K80", "V100"])) == model.rate(R50, "V100", 2)
    with pytest.raises(ValueError, match="no device models"):
        model.best_rate(R50, 1, [])


def test_reference_is_the_canonical_catalog_name() -> None:
    assert ThroughputModel.gavel(reference="tesla-k80").reference == "K80"
    k80 = ThroughputModel.gavel(reference="K80")
    assert k80.reference_rate(R50, 1) == pytest.approx(0.62, rel=0.01)
    with pytest.raises(ValueError, match="'Z9000'"):
        ThroughputModel.gavel(reference="Z9000")


# -- rule 2: gang sizes not measured -----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    jt=st.sampled_from(JOB_TYPES),
    wt=st.sampled_from(sorted(GAVEL_MODELS)),
    count=st.integers(1, 64),
    consolidated=st.booleans(),
)
def test_filled_gang_sizes_are_not_slower_and_never_superlinear(
    jt: str, wt: str, count: int, consolidated: bool
) -> None:
    model = ThroughputModel.gavel()
    name = GAVEL_MODELS[wt]
    row = TABLE[wt if consolidated else f"{wt}_unconsolidated"].get(jt, {})
    measured = {s: r for s, r in row.items() if r > 0}
    rate = model.rate(jt, name, count, consolidated)
    assert math.isfinite(rate)
    zeros = {s for s, r in TABLE[wt].get(jt, {}).items() if r == 0}
    if zeros and count >= min(zeros):  # measured infeasible from there on (Gavel's K80s)
        assert rate == 0.0
        return
    assert rate > 0
    if count in measured:
        return
    k = max(s for s in measured if s < count)
    base = model.rate(jt, name, k, consolidated)
    # never better than linear from the nearest measured size below
    assert rate <= base * count / k * (1 + 1e-12)
    if consolidated:
        assert rate >= base  # more devices are never slower
        above = [s for s in measured if s > count]
        if above:
            assert rate <= max(base, measured[min(above)])
    else:
        # a derived unconsolidated rate never beats the consolidated one
        assert rate <= model.rate(jt, name, count, True)


@pytest.mark.parametrize("jt", [R50, LM10, REC, "A3C"])
@pytest.mark.parametrize("name", ["K80", "V100", "H100", "T4"])
def test_more_devices_beyond_the_table_scale_monotonically(
    model: ThroughputModel, jt: str, name: str
) -> None:
    rates = [model.rate(jt, name, c) for c in range(8, 65)]
    assert all(b >= a for a, b in itertools.pairwise(rates))
    assert model.rate(jt, name, 16) <= 2 * model.rate(jt, name, 8)


def test_counts_between_measured_sizes_stay_between_their_neighbours(
    model: ThroughputModel,
) -> None:
    # V100 ResNet-50 bs64: 7.92 on 2, 9.45 on 4: three GPUs are in between
    assert model.rate(R50, "V100", 2) <= model.rate(R50, "V100", 3) <= model.rate(R50, "V100", 4)
    # V100 LM bs10 dips from 163 (2 GPUs) to 121 (4): three GPUs keep the rate of two
    assert model.rate(LM10, "V100", 3) == model.rate(LM10, "V100", 2)
    # its unconsolidated figures (35 on 2, 38 on 4) bound 3 spread GPUs, not 163 x a ratio
    assert 35.0 < model.rate(LM10, "V100", 3, consolidated=False) <= 37.9


def test_gavels_measured_zeros_are_infeasible(model: ThroughputModel) -> None:
    # Gavel records 0.0 for ResNet-50 bs128 on 2/4/8 K80s: it does not run there (it used
    # to be filled from the other worker types: 1.0576 steps/s on 4 K80s)
    assert model.rate(R50_128, "K80", 1) == TABLE["k80"][R50_128][1]
    for count in (2, 3, 4, 8, 16):  # measured zeros, and the sizes filled from them
        assert model.rate(R50_128, "K80", count) == 0.0
        assert model.rate(R50_128, "K80", count, consolidated=False) == 0.0
    for name in ("V100", "P100"):  # the other worker types keep their measured figures
        for count in (2, 4, 8):
            assert model.rate(R50_128, name, count) == TABLE[name.lower()][R50_128][count]
    assert model.rate(R50_128, "H100", 4) > 0  # a model Gavel never measured is not affected


def test_a_zero_rules_out_the_sizes_filled_from_it() -> None:
    m = ThroughputModel({"v100": {"X": {1: 10.0, 2: 18.0}}}, infeasible={"v100": {"X": [8]}})
    assert m.rate("X", "V100", 4) == pytest.approx(32.4)  # filled from 2, measured
    assert m.rate("X", "V100", 8) == 0.0 and m.rate("X", "V100", 16) == 0.0
    only_zero = ThroughputModel({"v100": {"Y": {1: 5.0}}, "k80": {"Y": {1: 1.0}}},
                                infeasible={"k80": {"Y": [2]}})  # fmt: skip
    assert only_zero.rate("Y", "K80", 2) == 0.0 and only_zero.rate("Y", "K80", 1) == 1.0
    with pytest.raises(ValueError, match="no throughput table for it"):
        ThroughputModel({"v100": {"X": {1: 1.0}}}, infeasible={"p100": {"X": [2]}})
    with pytest.raises(ValueError, match="integers >= 1, got 0"):
        ThroughputModel({"v100": {"X": {1: 1.0}}}, infeasible={"v100": {"X": [0]}})


def test_linear_scaling_at_the_documented_efficiency_without_donors() -> None:
    m = ThroughputModel({"v100": {"X": {1: 10.0}}})
    assert EFFICIENCY_PER_DOUBLING == 0.9
    assert m.rate("X", "V100", 2) == pytest.approx(18.0)
    assert m.rate("X", "V100", 4) == pytest.approx(32.4)
    assert m.rate("X", "V100", 3) == pytest.approx(10 * 3 * 0.9 ** math.log2(3))
    # below the smallest measured size: fewer devices, no better than linear down
    two = ThroughputModel({"v100": {"X": {2: 18.0}}})
    assert two.rate("X", "V100", 1) == pytest.approx(10.0)


# -- rule 3: gangs spread over hosts -----------------------------------------------------


def test_unconsolidated_is_slower_where_the_table_says_so(model: ThroughputModel) -> None:
    slower = 0
    for wt, name in GAVEL_MODELS.items():
        for jt, row in TABLE[f"{wt}_unconsolidated"].items():
            for count, rate in row.items():
                cons = TABLE[wt][jt].get(count, 0.0)
                if count > 1 and 0 < rate < cons:
                    assert model.rate(jt, name, count, False) < model.rate(jt, name, count)
                    slower += 1
    assert slower > 100


def test_one_device_is_never_penalised(model: ThroughputModel) -> None:
    for jt in JOB_TYPES:
        for name in ("K80", "V100", "H100", "L4"):
            assert model.rate(jt, name, 1, consolidated=False) == model.rate(jt, name, 1)
    assert model.rate(GENERIC, "V100", 1, consolidated=False) == 1.0


def test_missing_unconsolidated_entries_use_the_median_ratio() -> None:
    cons = {jt: {1: 10.0, 2: 20.0} for jt in ("A", "B", "C", "D")}
    unc = {"A": {2: 8.0}, "B": {2: 10.0}, "C": {2: 16.0}}  # ratios 0.4, 0.5, 0.8
    m = ThroughputModel({"v100": cons}, unconsolidated={"v100": unc})
    assert m.rate("D", "V100", 2, consolidated=False) == pytest.approx(20.0 * 0.5)
    assert m.rate("A", "V100", 2, consolidated=False) == 8.0
    # other sizes take the ratio of the nearest size with data
    assert m.rate("D", "V100", 4, consolidated=False) == pytest.approx(0.5 * m.rate("D", "V100", 4))


def test_derived_unconsolidated_rates_never_beat_consolidated(model: ThroughputModel) -> None:
    # K80 medians are about 1.01-1.04 (spread K80 jobs barely feel the network): capped at
    # 1, and at linear scaling from one device (ResNet-50 does 2.04x on two K80s in one
    # server: spread, 2x)
    for count in (2, 4, 8):
        linear = count * model.rate(R50, "K80", 1)
        spread = model.rate(R50, "K80", count, False)
        assert spread == min(model.rate(R50, "K80", count), linear)
    assert model.rate(R50, "K80", 2, False) == 2 * model.rate(R50, "K80", 1)
    m = ThroughputModel(
        {"v100": {"A": {1: 1.0, 2: 2.0}, "B": {1: 1.0, 2: 2.0}}},
        unconsolidated={"v100": {"A": {2: 3.0}}},
    )
    assert m.rate("A", "V100", 2, False) == 3.0  # measured: returned as measured
    assert m.rate("B", "V100", 2, False) == 2.0  # derived: capped at consolidated


# -- rule 4: models Gavel did not measure -------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_h100_is_not_slower_than_v100_for_any_job_type(model: ThroughputModel, count: int) -> None:
    for jt in JOB_TYPES:
        assert model.rate(jt, "H100-SXM", count) >= model.rate(jt, "V100", count), jt


def test_estimates_are_positive_and_finite_on_every_catalog_model(
    model: ThroughputModel,
) -> None:
    for m in device_models():
        for jt in [*JOB_TYPES, GENERIC]:
            if not has_figures(m):
                with pytest.raises(ValueError, match=m.name):
                    model.per_device(jt, m.name)
                continue
            for count in (1, 3, 8):
                rate = model.rate(jt, m.name, count)
                assert math.isfinite(rate), (m.name, jt)
                if (m.name, jt) == ("K80", R50_128) and count > 1:
                    assert rate == 0.0  # measured: it does not fit
                    continue
                assert rate > 0, (m.name, jt)
    assert any(not has_figures(m) for m in device_models())  # Alveo-U250: int8 only
    assert model.per_device(R50, "CPU-core") < model.per_device(R50, "K80")


def test_a_model_stronger_in_both_figures_is_not_slower(model: ThroughputModel) -> None:
    measured = {"K80", "P100", "P100-SXM2", "V100", "V100-PCIe"}
    unmeasured = [m for m in device_models() if has_figures(m) and m.name not in measured]
    pairs = 0
    for strong in [*unmeasured, device_model("V100")]:
        for weak in unmeasured:
            if strong is weak:
                continue
            if tp._peak_tflops(strong) >= tp._peak_tflops(weak) and (
                strong.mem_bw_gbps >= weak.mem_bw_gbps
            ):
                pairs += 1
                for jt in JOB_TYPES:
                    assert model.per_device(jt, strong.name) >= model.per_device(jt, weak.name) * (
                        1 - 1e-12
                    ), (strong.name, weak.name, jt)
    assert pairs > 20


def test_unmeasured_models_scale_like_the_reference(model: ThroughputModel) -> None:
    for jt in (R50, LM10, "Transformer (batch size 64)"):
        for count in (2, 4, 8, 16):
            for consolidated in (True, False):
                h100 = model.rate(jt, "H100", count, consolidated) / model.rate(jt, "H100", 1)
                v100 = model.rate(jt, "V100", count, consolidated) / model.rate(jt, "V100", 1)
                assert h100 == pytest.approx(v100)


def test_one_measured_type_falls_back_to_the_peak_flops_ratio() -> None:
    m = ThroughputModel({"v100": {"X": {1: 10.0}}})
    assert m.per_device("X", "H100-SXM") == pytest.approx(10.0 * 67 / 15.7)
    assert m.per_device("X", "T4") == pytest.approx(10.0 * 8.1 / 15.7)


def test_a_catalog_named_worker_type_is_measured() -> None:
    m = ThroughputModel({"v100": {"X": {1: 2.0}}, "A100": {"X": {1: 5.0}}})
    assert m.per_device("X", "A100-80GB") == 5.0
    assert m.per_device("X", "A100-SXM4-40GB") != 5.0  # another model: estimated


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.001, 1000.0), st.floats(0.001, 1000.0), st.floats(-10.0, 10.0)),
        min_size=1,
        max_size=6,
    )
)
def test_two_variable_nnls_matches_scipy(rows: list[tuple[float, float, float]]) -> None:
    import numpy as np
    from scipy.optimize import nnls

    xs = [(a, b) for a, b, _ in rows]
    ys = [y for _, _, y in rows]
    a, b = tp._nnls2(xs, ys)
    assert a >= 0
    assert b >= 0
    ref, _ = nnls(np.array(xs), np.array(ys))

    def residual(p: tuple[float, float]) -> float:
        return sum((p[0] * x1 + p[1] * x2 - y) ** 2 for (x1, x2), y in zip(xs, ys, strict=True))

    assert residual((a, b)) <= residual((float(ref[0]), float(ref[1]))) * (1 + 1e-6) + 1e-9


# -- rule 5: job types ---------------------------------------------------------------------


def test_generic_runs_one_step_per_second_on_the_reference(model: ThroughputModel) -> None:
    assert model.per_device(GENERIC, "V100") == 1.0
    assert model.per_device(GENERIC, "K80") == pytest.approx(4.37 / 15.7)
    assert model.per_device(GENERIC, "H100") == pytest.approx(67 / 15.7)
    growth = [model.rate(jt, "V100", 4) / model.rate(jt, "V100", 1) for jt in JOB_TYPES]
    assert model.rate(GENERIC, "V100", 4) == pytest.approx(statistics.median(growth))
    assert ThroughputModel.gavel(reference="K80").per_device(GENERIC, "K80") == 1.0


def test_unknown_job_type_lists_known_ones(model: ThroughputModel) -> None:
    with pytest.raises(UnknownJobTypeError) as info:
        model.rate("ResNet-51", "V100", 1)
    err = info.value
    assert isinstance(err, KeyError)
    assert isinstance(err, ValueError)
    text = str(err)
    assert text.startswith("unknown job type 'ResNet-51'")
    assert "'A3C'" in text
    assert "and 16 more" in text
    assert "'generic'" in text
    assert err.known == tuple(JOB_TYPES)


def test_unknown_model_is_named(model: ThroughputModel) -> None:
    with pytest.raises(ValueError, match="'Z9000'"):
        model.rate(R50, "Z9000", 1)
    with pytest.raises(ValueError, match="'Z9000'"):
        model.power_w("Z9000", busy=True)


@pytest.mark.parametrize("count", [0, -1, 2.5])
def test_bad_counts_are_rejected(model: ThroughputModel, count: Any) -> None:
    with pytest.raises(ValueError, match="count"):
        model.rate(R50, "V100", count)


# -- rule 6: power --------------------------------------------------------------------------


def test_power_draw_busy_idle_and_capped(model: ThroughputModel) -> None:
    v100 = device_model("V100")
    assert model.power_w("V100", busy=True) == v100.max_w
    assert model.power_w("V100", busy=False) == v100.idle_w
    assert model.power_w("V100", busy=True, power_cap_w=200) == 200
    assert model.power_w("V100", busy=True, power_cap_w=400) == v100.max_w
    assert model.power_w("V100", busy=False, power_cap_w=200) == v100.idle_w


def test_a_power_cap_slows_by_the_cube_root(model: ThroughputModel) -> None:
    full = model.rate(R50, "V100", 2)
    assert model.rate(R50, "V100", 2, power_cap_w=150) == pytest.approx(full * 0.5 ** (1 / 3))
    assert model.rate(R50, "V100", 2, power_cap_w=300) == full
    assert model.rate(R50, "V100", 2, power_cap_w=1000) == full
    assert model.rate(R50, "V100", 2, power_cap_w=1) == pytest.approx(full * DVFS_FLOOR)
    assert DVFS_FLOOR == 0.3
    # lower caps are never faster
    caps = [1, 10, 50, 100, 200, 299, 300]
    rates = [model.rate(R50, "H100", 1, power_cap_w=c) for c in caps]
    assert rates == sorted(rates)


@pytest.mark.parametrize("cap", [0, -5, math.nan, math.inf])
def test_bad_power_caps_are_rejected(model: ThroughputModel, cap: float) -> None:
    with pytest.raises(ValueError, match="power cap"):
        model.rate(R50, "V100", 1, power_cap_w=cap)
    with pytest.raises(ValueError, match="power cap"):
        model.power_w("V100", busy=True, power_cap_w=cap)


# -- rule 7: memoised --------------------------------------------------------------------------


def test_rates_are_memoised_per_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    original = ThroughputModel._compute_rate

    def counting(self: ThroughputModel, *args: Any) -> float:
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(ThroughputModel, "_compute_rate", counting)
    m = ThroughputModel.gavel()
    first = m.rate(R50, "H100", 4, False, 500.0)
    second = m.rate(R50, "H100", 4, False, 500.0)
    assert second is first
    assert len(calls) == 1
    m.rate(R50, "H100", 4)
    assert len(calls) == 2
    ThroughputModel.gavel().rate(R50, "H100", 4, False, 500.0)  # another instance: its own
    assert len(calls) == 3


# -- files ------------------------------------------------------------------------------------


@needs_gavel
def test_bundled_copy_equals_the_original_null_values() -> None:
    original = json.loads(GAVEL_FILE.read_text())
    expected: dict[str, dict[str, dict[int, float]]] = {}
    for wt, entries in original.items():
        for key, value in entries.items():
            jt, scale = ast.literal_eval(key)
            expected.setdefault(wt, {}).setdefault(jt, {})[scale] = value["null"]
    assert bundled() == expected


@needs_gavel
def test_the_original_file_loads_to_the_same_model(model: ThroughputModel) -> None:
    original = ThroughputModel.gavel(GAVEL_FILE)
    assert original.job_types() == model.job_types()
    for jt in JOB_TYPES:
        for name in ("K80", "P100", "V100", "H100", "T4"):
            for count in (1, 2, 3, 8):
                for consolidated in (True, False):
                    assert original.rate(jt, name, count, consolidated) == model.rate(
                        jt, name, count, consolidated
                    )


def test_the_licence_ships_with_the_data() -> None:
    text = resources.files("accelnet.sim").joinpath("data/LICENSE-gavel").read_text()
    assert "MIT License" in text
    assert "Stanford Future Data Systems" in text
    assert "gavel_throughputs.json" in text


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"v100": {"(\'A\', 1": {"null": 1.0}}}', "key \"\\('A', 1\""),
        ('{"v100": {"__import__(\'os\')": {"null": 1.0}}}', "__import__"),
        ('{"v100": {"(\'A\', 0)": {"null": 1.0}}}', r"scale >= 1"),
        ('{"v100": {"(\'A\', 1)": {"other": 1.0}}}', "'null'"),
        ('{"v100": {"(\'A\', 1)": {"null": -1.0}}}', r"\['null'\].*-1.0"),
        ('{"v100": {"(\'A\', 1)": {"null": "fast"}}}', "'fast'"),
        ('{"z80": {"(\'A\', 1)": {"null": 1.0}}}', "'z80'"),
        ('{"worker_types": {"v100": {"A": {"one": 1.0}}}}', r"\['A'\]\['one'\]"),
        ('{"v100_unconsolidated": {"(\'A\', 2)": {"null": 1.0}}}', "'v100'"),
    ],
)
def test_bad_files_name_the_file_and_the_key(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match) as info:
        ThroughputModel.gavel(path)
    assert str(path) in str(info.value)


def test_a_compact_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    doc = {"worker_types": {"v100": {"X": {"1": 2.0, "2": 0.0}}, "v100_unconsolidated": {}}}
    path.write_text(json.dumps(doc))
    m = ThroughputModel.gavel(path)
    assert m.job_types() == ("X",)
    assert m.rate("X", "V100", 1) == 2.0
    assert m.rate("X", "V100", 2) == 0.0  # a measured zero: it cannot run there


@pytest.mark.parametrize(
    ("tables", "unc", "match"),
    [
        ({}, None, "at least one"),
        ({"v100": {"X": {1: 0.0}}}, None, r"'v100'.*'X'.*> 0"),
        ({"v100": {"X": {1: math.nan}}}, None, r"'X'.*nan"),
        ({"v100": {"X": {0: 1.0}}}, None, "gang size"),
        ({"v100": {"generic": {1: 1.0}}}, None, "reserved"),
        ({"v100_unconsolidated": {"X": {1: 1.0}}}, None, "unconsolidated"),
        ({"v100": {"X": {1: 1.0}}}, {"p100": {"X": {2: 1.0}}}, "'p100'"),
        ({"v100": {"X": {1: 1.0}}}, {"v100": {"Y": {2: 1.0}}}, "'Y'"),
        ({"v100": {"X": {1: 1.0}}, "V100": {"X": {1: 1.0}}}, None, "both describe"),
    ],
)
def test_bad_tables_are_rejected(tables: Any, unc: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ThroughputModel(tables, unconsolidated=unc)
