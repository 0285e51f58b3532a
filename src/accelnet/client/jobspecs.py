"""Job specs as the client sends them: from mappings, ``JobSpec`` models and job files."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from accelnet.sched import JobSpec

JobLike = Mapping[str, Any] | BaseModel
"""A job spec: a mapping as in a job file (docs/job-spec.md) or an
:class:`accelnet.sched.JobSpec`."""


def spec_dict(job: JobLike) -> dict[str, Any]:
    """The JSON body of one job spec. A pydantic model (``JobSpec``) sends only the keys
    that were set, so that an unset ``tenant`` stays the token's."""
    if isinstance(job, BaseModel):
        out: dict[str, Any] = job.model_dump(mode="json", exclude_unset=True)
        return out
    if isinstance(job, Mapping):
        if set(job) == {"jobs"}:
            raise ValueError(
                "a {'jobs': [...]} body: pass the list itself, client.submit(body['jobs'])"
            )
        return dict(job)
    raise TypeError(f"a job spec is a mapping or a JobSpec, not {type(job).__name__}")


def file_specs(path: str | os.PathLike[str]) -> list[JobSpec]:
    """The jobs of a YAML or JSON job file, validated here (``JobSpecError`` names the
    file, the line and the key), each after the jobs it takes ``inputs`` from."""
    from accelnet.sched.jobfile import load_jobs  # noqa: PLC0415 (the scheduler's models: only for files)

    return load_jobs(Path(path))


ServiceLike = Mapping[str, Any] | BaseModel | str | os.PathLike[str]
"""A service spec: a mapping (docs/serve.md), a ``ServiceSpec``, or a YAML/JSON file."""


def service_dict(spec: ServiceLike) -> dict[str, Any]:
    """The JSON body of a service spec; a file is read and validated here first."""
    if isinstance(spec, str | os.PathLike):
        from accelnet.serve.spec import load_service  # noqa: PLC0415 (only for files)

        spec = load_service(Path(spec))
    if isinstance(spec, BaseModel):
        out: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
        return out
    if isinstance(spec, Mapping):
        return dict(spec)
    raise TypeError(f"a service spec is a mapping, a ServiceSpec or a file, "
                    f"not {type(spec).__name__}")  # fmt: skip
