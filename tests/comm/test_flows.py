"""Max-min fair sharing of links."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.comm.flows import Path, capacities, link_loads, max_min_rates


def _path(*hops: str, cap: float = 10.0) -> Path:
    return Path(tuple((h, h, h) for h in hops), tuple(cap for _ in hops), 0.0)


def test_flows_on_one_link_split_it_evenly() -> None:
    rates = max_min_rates([_path("x"), _path("x"), _path("x"), _path("x")])
    assert rates == [2.5, 2.5, 2.5, 2.5]


def test_a_flow_limited_elsewhere_leaves_its_share_to_the_others() -> None:
    # flow 0 crosses a slow link (2) and the shared one (10); flows 1, 2 only the shared
    slow = Path((("s", "s", "s"), ("x", "x", "x")), (2.0, 10.0), 0.0)
    rates = max_min_rates([slow, _path("x"), _path("x")])
    assert rates == pytest.approx([2.0, 4.0, 4.0])


def test_a_flow_to_itself_is_unbounded() -> None:
    assert max_min_rates([Path((), (), 0.0)]) == [float("inf")]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True),
        min_size=1,
        max_size=12,
    ),
    st.dictionaries(st.sampled_from("abcdef"), st.floats(0.5, 100.0), min_size=6),
)
def test_max_min_shares_fill_every_bottleneck_and_never_exceed_capacity(
    flows: list[list[str]], caps: dict[str, float]
) -> None:
    paths = [Path(tuple((h, h, h) for h in f), tuple(caps[h] for h in f), 0.0) for f in flows]
    rates = max_min_rates(paths)
    loads = link_loads(paths, rates)
    cap = capacities(paths)
    for hop, load in loads.items():
        assert load <= cap[hop] * (1 + 1e-9)
    # every flow is held back by a full link on which no flow gets more than it
    for path, rate in zip(paths, rates, strict=True):
        assert rate > 0
        full = [h for h in path.hops if loads[h] >= cap[h] * (1 - 1e-9)]
        assert full, "a flow could go faster"
        assert any(
            all(r <= rate * (1 + 1e-9) for p, r in zip(paths, rates, strict=True) if h in p.hops)
            for h in full
        )
