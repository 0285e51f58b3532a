"""Reading and validating spec files (fabrics, jobs): one place for the hard parts.

Spec files are YAML or JSON validated by pydantic models. Every problem becomes a
:class:`SpecIssue` naming the file, the line, the key path (``hosts[0].devices``) and the
value, collected in a :class:`SpecError`. Reading is bounded (16 MiB, whatever ``stat``
says), duplicate and non-scalar keys are rejected, absurd nesting is an error, and values
are shown through a bounded ``repr`` (safe on YAML alias bombs).
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Strict, ValidationError

MAX_SPEC_BYTES = 16 * 1024 * 1024
MAX_VALUES = 2_000_000  # scalars, lists and mappings after YAML aliases are expanded


def expanded_size(root: yaml.Node) -> int:
    """How many nodes ``root`` has once aliases are expanded (shared nodes count each time),
    computed without expanding them, and capped just above MAX_VALUES."""
    memo: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        if ready or not kids:
            memo[id(node)] = min(MAX_VALUES + 1, 1 + sum(memo.get(id(k), 0) for k in kids))
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(root)]


class SpecModel(BaseModel):
    """Base of every spec: unknown keys are errors, values are immutable and finite."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, allow_inf_nan=False
    )


# Numbers and flags as a user writes them: no coercion from text ("10") or between booleans
# and numbers (``true`` is not 1); an int is a float, a whole float is not an int.
StrictInt = Annotated[int, Strict()]
StrictFloat = Annotated[float, Strict()]
StrictBool = Annotated[bool, Strict()]
TYPE_ERRORS = {  # pydantic's error type -> what the field wants (:func:`strict_type_message`)
    "int_type": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
}


@dataclass(frozen=True, slots=True)
class SpecIssue:
    """One problem: where (``hosts[0].devices[1].model``), what value, and why."""

    path: str
    message: str
    value: Any = None
    line: int | None = None

    def render(self, source: str) -> str:
        """``lab.yaml:12: hosts[0].devices[0].model = 'H900': unknown device model ...``."""
        where = f"{source}:{self.line}" if self.line is not None else source
        shown = "" if self.value is None else f" = {_short(self.value)}"
        key = self.path or "(top level)"
        return f"{where}: {key}{shown}: {self.message}"


def _bounded_repr() -> reprlib.Repr:
    r = reprlib.Repr()  # keyword arguments only from Python 3.12
    r.maxlevel, r.maxlist, r.maxdict, r.maxstring, r.maxother = 2, 4, 4, 60, 60
    return r


_REPR = _bounded_repr()


def short_repr(value: Any) -> str:
    """A bounded ``repr``: safe on huge or self-sharing values (YAML alias bombs)."""
    return _REPR.repr(value)


def _short(value: Any) -> str:
    return short_repr(value)


class SpecError(ValueError):
    """An invalid spec; ``issues`` lists every problem found, ``source`` names the file."""

    what = "spec"

    def __init__(self, source: str, issues: Sequence[SpecIssue]) -> None:
        self.source = source
        self.issues = tuple(issues)
        lines = [issue.render(source) for issue in self.issues]
        head = f"invalid {self.what} {source}: {len(lines)} problem{'s' * (len(lines) != 1)}"
        super().__init__("\n".join([head, *("  " + line for line in lines)]))


def format_path(loc: Sequence[str | int]) -> str:
    """``("hosts", 0, "devices")`` -> ``"hosts[0].devices"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"a key must be a plain value, not {type(key).__name__}",
                key_node.start_mark,
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"duplicate key {key!r} (first on line {seen[key] + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def line_of(node: yaml.Node | None, loc: Sequence[str | int]) -> int | None:
    """1-based line of the deepest YAML node that ``loc`` reaches."""
    line = None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        nxt: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == part:
                    nxt = v
                    line = k.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            nxt = node.value[part] if 0 <= part < len(node.value) else None
        node = nxt
    if node is not None:
        line = node.start_mark.line + 1
    return line


def data_path(data: Any, loc: Sequence[str | int]) -> tuple[list[str | int], Any]:
    """The parts of a pydantic ``loc`` that index into ``data``, and the value there."""
    kept: list[str | int] = []
    cur = data
    for part in loc:
        in_dict = isinstance(cur, dict) and part in cur
        in_list = isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        if in_dict or in_list:
            cur = cur[part]
            kept.append(part)
    return kept, cur


def read_text(path: str | Path, error: type[SpecError]) -> str:
    """The file's text, at most 16 MiB; ``error`` for anything unreadable."""
    source = str(path)
    try:
        with Path(path).open("rb") as f:  # bounded: st_size lies for /dev/zero and pipes
            raw = f.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise error(source, [SpecIssue("", "file is larger than 16 MiB")])
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(source, [SpecIssue("", f"cannot read: {exc}")]) from None


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def validation_issues(
    exc: ValidationError, data: Any, node: yaml.Node | None, root: type[BaseModel]
) -> list[SpecIssue]:
    """Turn pydantic's errors into issues with the key path, the value and the line."""
    issues = []
    for err in exc.errors(include_url=False):
        kept, value = data_path(data, err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            value = None
            msg = f"unknown key (allowed here: {allowed_keys(root, kept[:-1])})"
        elif err["type"] == "missing":
            kept = [*kept, str(err["loc"][-1])]
            value = None
        elif isinstance(value, dict):
            value = None  # a problem of the whole entry: the message says which keys
        elif err["type"] in TYPE_ERRORS:
            msg = strict_type_message(err["type"], value)
        issues.append(SpecIssue(format_path(kept), msg, value, line_of(node, kept)))
    return issues


def strict_type_message(error_type: str, value: Any) -> str:
    """What a strict number or flag field says of a value of another type (``"10"``,
    ``true``), for pydantic's ``int_type``, ``float_type`` and ``bool_type`` errors."""
    wanted = TYPE_ERRORS[error_type]
    if isinstance(value, str):
        hint = " (write it without quotes)" if wanted != "true or false" else ""
        return f"text, not {wanted}{hint}"
    if isinstance(value, bool):
        return f"true/false, not {wanted}"
    return f"not {wanted}"


def allowed_keys(root: type[BaseModel], parent: Sequence[str | int]) -> str:
    """The keys a spec model accepts at ``parent`` (for 'unknown key' messages)."""
    model: Any = root
    for part in parent:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            break
        ann = field.annotation
        for cand in getattr(ann, "__args__", (ann,)):
            inner = getattr(cand, "__args__", (cand,))[0]
            if hasattr(inner, "model_fields"):
                model = inner
                break
    return ", ".join(model.model_fields)


def parse_text(
    text: str, source: str, error: type[SpecError], as_json: bool = False
) -> tuple[Any, yaml.Node | None]:
    """Parse YAML (or JSON) text; ``error`` naming the line for anything malformed.

    Rejects duplicate keys, unhashable (complex) keys and absurd nesting, none of which a
    plain loader reports well.
    """
    node: yaml.Node | None = None
    try:
        if as_json:
            return json.loads(text, object_pairs_hook=_unique_json_object), None
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        if node is not None and expanded_size(node) > MAX_VALUES:
            raise error(
                source,
                [SpecIssue("", f"expands to more than {MAX_VALUES:,} values (YAML aliases?)")],
            )
        return yaml.load(text, Loader=_UniqueKeyLoader), node
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise error(source, [SpecIssue("", f"not valid YAML: {exc}", None, line)]) from None
    except json.JSONDecodeError as exc:
        raise error(
            source, [SpecIssue("", f"not valid JSON: {exc.msg}", None, exc.lineno)]
        ) from None
    except RecursionError:
        raise error(source, [SpecIssue("", "nested too deeply")]) from None
    except (TypeError, ValueError) as exc:  # unhashable YAML keys, duplicate JSON keys
        raise error(source, [SpecIssue("", f"not a valid spec: {exc}")]) from None
