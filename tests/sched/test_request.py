def test_a_model_name_never_widens_to_a_custom_model_by_prefix() -> None:
    # issue 25 item 4: `V100:1` took a fabric's own `V100-32GB`; only catalog families widen
    from accelnet.fabric import build_fabric, parse_spec
    from accelnet.fabric.catalog import FAMILIES, find_device_model
    from accelnet.sched import JobSpec
    from accelnet.sched.request import canonical_models
    from accelnet.sched.topology import Topology

    custom = {"model": "V100-32GB", "kind": "gpu", "memory_gb": 32, "mem_bw_gbps": 900,
              "peak_tflops": {"fp16": 125}, "max_w": 300}  # fmt: skip
    spec = {"name": "lab", "hosts": [{"name": "a", "devices": ["V100"]},
                                     {"name": "b", "devices": [custom]}]}  # fmt: skip
    topo = Topology(build_fabric(parse_spec(spec, "lab")))

    def models(acc: str) -> list[str]:
        job = JobSpec.model_validate({"name": "j", "run": "x", "resources": {"accelerators": acc}})
        return canonical_models(job, topo)[0]

    assert "V100-32GB" not in models("V100:1")
    assert models("V100-32GB:1") == ["V100-32GB"]
    assert set(models("H100:1")) == {"H100-SXM", "H100-PCIe", "H100-NVL"}
    for members in FAMILIES.values():  # the table names catalog models only
        assert all(find_device_model(m) is not None for m in members)


def test_memoised_requests_keep_what_differs_between_jobs_of_one_shape() -> None:
    from accelnet.fabric import load_fabric
    from accelnet.sched import JobSpec
    from accelnet.sched.request import make_request, request_and_rejection
    from accelnet.sched.topology import Topology

    topo = Topology(load_fabric("mixed-lab"))

    def spec(**workload: object) -> JobSpec:
        return JobSpec.model_validate({"name": "j", "run": "x", "workload": workload,
                                       "resources": {"accelerators": "H100:2"}})  # fmt: skip

    a, never = request_and_rejection("a", spec(), topo)
    b = make_request("b", spec(), topo)  # the same shape: from the memo
    c = make_request("c", spec(bytes_per_step=1e9), topo)  # another traffic: not the memo's
    assert never is None and (a.job, b.job, c.job) == ("a", "b", "c")
    assert a.classes == b.classes and a.count == b.count == 2
    assert (a.comm_bytes, c.comm_bytes) == (0.0, 1e9)
    too_big = JobSpec.model_validate({"name": "k", "run": "x",
                                      "resources": {"accelerators": "H100:64"}})  # fmt: skip
    assert request_and_rejection("k", too_big, topo)[1] is not None


def test_a_model_measured_at_zero_steps_is_never_offered() -> None:
    # issue 27 item 2: a measured 0 steps/s means the job cannot run there (live as simulated)
    from accelnet.fabric import load_fabric
    from accelnet.sched import JobSpec
    from accelnet.sched.jobinfo import hint_rate
    from accelnet.sched.request import eligible_classes, rejection
    from accelnet.sched.topology import Topology

    def spec(throughput: dict[str, float], acc: str = "any:1") -> JobSpec:
        return JobSpec.model_validate({"name": "j", "run": "x",
                                       "workload": {"throughput": throughput},
                                       "resources": {"accelerators": acc}})  # fmt: skip

    topo = Topology(load_fabric("mixed-lab"))
    every = {c.model.name for c in eligible_classes(spec({}), topo)}
    assert "T4" in every and "H100-SXM" in every
    # an alias counts as the model; the zero rules out that model and nothing else
    left = {c.model.name for c in eligible_classes(spec({"Tesla-T4": 0.0, "H100": 9.0}), topo)}
    assert left == every - {"T4"}
    assert hint_rate(spec({"T4": 0.0, "H100-SXM": 9.0}), "T4", 2) == 0.0
    assert rejection(spec({"T4": 0.0}), topo) is None  # other models remain
    never = rejection(spec({"T4": 0.0}, "T4:1"), topo)
    assert never is not None and never.key == "workload.throughput"
    assert "0 steps/s on T4" in never.message and "T4: 0" in str(never.value)
    # a zero hint is not blamed for what memory rules out anyway
    res = {"accelerators": "any:1", "min_memory_gb": 500}
    big = JobSpec.model_validate({"name": "j", "run": "x", "resources": res,
                                  "workload": {"throughput": {"T4": 0.0}}})  # fmt: skip
    memory = rejection(big, topo)
    assert memory is not None and memory.key == "resources.min_memory_gb"
