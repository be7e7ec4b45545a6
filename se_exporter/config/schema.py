"""Typed, strict decoding of the files an operator writes (approval policy, actions, web config, scenarios).

Each file kind declares its shape once, as ``msgspec.Struct`` types with ``forbid_unknown_fields``;
``decode`` converts the strictly loaded YAML (see ``strict_yaml.load_yaml``) into those types without
coercion (``"5"`` is not 5, ``true`` is not 1). A problem becomes one line naming the key path and
what was expected, phrased from the schema itself::

    approval config policy.yaml: rules[1].max_duration_seconds: must be an integer >= 0, got "eight"

msgspec stops at its first problem and says it only in English, while an operator wants every problem. So
a file msgspec refuses is walked along the schema's own types: each unknown and missing key of a struct,
and each value converted alone by msgspec as the type the schema declares for it, so that where a problem
is comes from the walk and what it is from msgspec's verdict on that one value; no message is read. That
costs nothing a valid file pays, and no dependency: jsonschema's ``iter_errors`` over msgspec's JSON Schema
would do the same with five more packages (10 MiB imported), whose Rust part (rpds-py) does not load under
the Wine the Windows tests run on; pydantic's ``errors()`` would replace msgspec at twice that memory.

Checks that types cannot express live in the structs' ``__post_init__``: raising
``field_problem("key", "...")`` there blames that key of the struct. Each struct is then converted without
what was found wrong in it, so such a problem comes with its place as an object too. Values under a secret
key (``basic_auth_users``) are never shown.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import msgspec
import msgspec.inspect as types

from se_exporter.errors import ConfigError, show

T = TypeVar("T")
Path = tuple[str | int, ...]  # a key path: ("rules", 1, "max_duration_seconds")
Problem = tuple[Path, str]  # where, for the file's order, and the line that says it
MAX_CHECKS = 64  # a struct's own checks run at most this many times, each without the key found wrong before
_UNICODE = "holds text that is not valid Unicode (a lone surrogate)"

CommandWord = Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")]  # a word of a hook's or an action's command


class FieldProblem(ValueError):
    """Raised by a ``__post_init__``: the struct's ``key`` is wrong, or the entry ``index`` of its list, or
    what ``below`` names inside it (``.scope`` of a rule, ``.X-Frame-Options`` of the headers)."""

    def __init__(self, key: str, problem: str, index: int | None = None, below: str = "") -> None:
        super().__init__(f"{key}{'' if index is None else f'[{index}]'}{below}: {problem}")
        self.key, self.problem, self.index, self.below = key, problem, index, below

    def place(self, kept: dict[str, list[int]]) -> tuple[str, int | None, str]:
        """(key, index in the file, below) when the struct was checked with only the entries ``kept`` of its
        lists (their indices in the file, by key)."""
        if self.index is None or self.key not in kept:
            return self.key, self.index, self.below
        return self.key, kept[self.key][self.index], self.below


field_problem = FieldProblem  # for ``__post_init__``: ``raise field_problem("key", "what is wrong")``


def check_command(command: Sequence[str]) -> None:
    """For ``__post_init__`` of a struct with a ``command``: no operating system takes a NUL in an argument,
    so a command holding one is refused with its file, not when it first runs."""
    for index, word in enumerate(command):
        if "\x00" in word:
            raise field_problem("command", f"{show(word)} holds a NUL character, which no command can take", index)


def decode(
    data: object,
    schema: type[T],
    *,
    prefix: str,
    error: type[Exception] = ConfigError,
    secret_keys: Sequence[str] = (),
    each: Sequence[str] = (),
) -> T:
    """``data`` as a ``schema``; raise ``error("<prefix>: <key path>: <problem>")`` with one line per
    independent problem, in the file's order, if it is not one. The items of an ``each`` list have unique
    ``name``s, checked on the file as written, so that a duplicate is said whatever else is wrong with either."""
    problems = _duplicate_names(data, each)
    try:
        result = msgspec.convert(data, schema, strict=True)
    except msgspec.ValidationError:
        try:
            problems += _problems(data, schema, (), secret_keys)
        except RecursionError:  # not from YAML, which refuses such nesting first (strict_yaml.py)
            problems.append(((), "(top level): holds values nested too deeply to check"))
    except UnicodeEncodeError:  # YAML's "\ud800" escapes: text no file or label can hold
        raise error(f"{prefix}: {_UNICODE}") from None
    else:
        if not problems:
            return result
    problems.sort(key=lambda problem: _position(data, problem[0]))
    lines = dict.fromkeys(line for _, line in problems)
    raise error("\n".join(f"{prefix}: {line}" for line in lines)) from None


def _problems(data: object, kind: Any, path: Path, secret_keys: Sequence[str]) -> list[Problem]:
    """Every problem of ``data`` as ``kind`` (a type as the schema declares it), deepest first: each unknown and
    each missing key of a struct, each entry of a list and value of a mapping checked as its own type; a value
    whose parts are sound converted whole by msgspec, its refusal this value's; and a struct's own checks."""
    bare, nullable = _declared(kind)
    if data is None and nullable:
        return []
    args, problems = get_args(bare), list[Problem]()
    if isinstance(bare, type) and issubclass(bare, msgspec.Struct) and isinstance(data, dict):
        fields = _fields(bare)
        expected = f"unknown key; expected one of: {', '.join(fields)}"
        problems += [((*path, str(k)), f"{_join(path, str(k))}: {expected}") for k in data if k not in fields]
        missing = [key for key, field in fields.items() if field.required and key not in data]
        problems += [((*path, key), f"{_join(path, key)}: is required") for key in missing]
        for key, value in data.items():
            if key in fields:
                problems += _problems(value, fields[key].type, (*path, key), secret_keys)
        return problems + _struct_problems(data, bare, path, [where for where, _ in problems])
    if get_origin(bare) in (list, tuple, set, frozenset) and isinstance(data, list) and args[-1] is ...:
        for index, item in enumerate(data):
            problems += _problems(item, args[0], (*path, index), secret_keys)
    elif get_origin(bare) is dict and isinstance(data, dict) and all(isinstance(key, str) for key in data):
        for key, value in data.items():
            problems += _problems(value, args[1], (*path, key), secret_keys)
    if problems:
        return problems
    try:
        msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError:
        text = f"{_join(path)}: must be {_describe(_type_info(kind))}"
        return [(path, text if any(key in secret_keys for key in path) else f"{text}, got {show(data)}")]
    except UnicodeEncodeError:
        return [(path, f"{_join(path)}: {_UNICODE}")]
    return []


@functools.cache
def _fields(cls: type[msgspec.Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    """The struct's fields by their name in the file (msgspec evaluates the annotations anew at every call)."""
    return {field.encode_name: field for field in msgspec.structs.fields(cls)}


@functools.cache
def _type_info(kind: Any) -> types.Type:
    return types.type_info(kind)


def _declared(kind: Any) -> tuple[Any, bool]:
    """``kind`` without ``Annotated`` and without ``| None`` (what decides how its parts are checked), and
    whether it takes None."""
    if get_origin(kind) is Annotated:
        return _declared(get_args(kind)[0])
    if get_origin(kind) in (Union, UnionType) and type(None) in get_args(kind):
        others = [arg for arg in get_args(kind) if arg is not type(None)]
        return (_declared(others[0])[0] if len(others) == 1 else kind), True
    return kind, kind is Any


def _struct_problems(data: dict[str, Any], cls: type[Any], path: Path, wrong: list[Path]) -> list[Problem]:
    """The problems of a struct's own checks (``__post_init__``), the struct converted without what is
    ``wrong`` in it (a list keeps its sound entries) and then without each key its checks blame, until they
    pass. A problem of the struct as a whole is said only when nothing was left out of it: it could be a
    consequence (a rule left without its one matching key matches everything)."""
    current, kept = _sound_part(data, path, wrong)
    complete, problems = current == data, list[Problem]()
    for _ in range(MAX_CHECKS):
        try:
            msgspec.convert(current, cls, strict=True)
            return problems
        except UnicodeEncodeError:
            return [*problems, (path, f"{_join(path)}: {_UNICODE}")]
        except msgspec.ValidationError as problem:
            cause = problem.__cause__
            if not isinstance(cause, FieldProblem):
                if complete and cause is not None:
                    problems.append((path, f"{_join(path)}: {cause}"))
                return problems
        key, entry, below = cause.place(kept)
        where = (*path, key) if entry is None else (*path, key, entry)
        problems.append((where, f"{_join(where)}{below}: {cause.problem}"))
        if key not in current:
            return problems
        current, complete = _left_out(current, key, cause.index, kept), False
    return problems


def _sound_part(data: dict[str, Any], path: Path, wrong: list[Path]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """``data`` (a struct's) without what is ``wrong`` in it: a key whose value is wrong, or holds something
    wrong but for the entries of a list, which are left out one by one; ``kept`` maps such a list's key to the
    indices in the file of the entries it keeps."""
    gone: set[str] = set()
    entries: dict[str, set[int]] = {}
    for found in wrong:
        if len(found) <= len(path) or found[len(path)] not in data:
            continue
        key = str(found[len(path)])
        inner = found[len(path) + 1 :]
        if inner and isinstance(inner[0], int) and isinstance(data[key], list):
            entries.setdefault(key, set()).add(inner[0])
        else:
            gone.add(key)
    current = {key: value for key, value in data.items() if key not in gone}
    kept: dict[str, list[int]] = {}
    for key, indices in entries.items():
        if key in current:
            kept[key] = [index for index in range(len(data[key])) if index not in indices]
            current[key] = [data[key][index] for index in kept[key]]
    return current, kept


def _left_out(current: dict[str, Any], key: str, index: int | None, kept: dict[str, list[int]]) -> dict[str, Any]:
    """``current`` without the entry ``index`` of its list at ``key`` (if it has more), else without the key."""
    values = current[key]
    if index is None or not isinstance(values, list) or len(values) < 2 or index >= len(values):
        return {k: v for k, v in current.items() if k != key}
    file_indices = kept.setdefault(key, list(range(len(values))))
    del file_indices[index]
    return {**current, key: values[:index] + values[index + 1 :]}


def _position(data: object, path: Path) -> list[int]:
    """Where ``path`` is in the file, for problems in the file's order (a key not in the file last)."""
    position = []
    for part in path:
        if isinstance(data, dict):
            keys = list(data)
            position.append(keys.index(part) if part in data else len(keys))
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int):
            position.append(part)
            data = data[part] if part < len(data) else None
        else:
            position.append(0)
    return position


def _duplicate_names(data: object, each: Sequence[str]) -> list[Problem]:
    """A name used by an earlier item of the same list (a rule's, an action's): one line per repeat."""
    problems: list[Problem] = []
    for key in each:
        items = data.get(key) if isinstance(data, dict) else None
        seen: set[str] = set()
        for index, item in enumerate(items if isinstance(items, list) else ()):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in seen:
                kind = key.removesuffix("s")
                text = f"{key}[{index}].name: {show(name)} is used by an earlier {kind}; names must be unique"
                problems.append(((key, index, "name"), text))
            seen.add(name)
    return problems


def _join(path: Path, *more: str) -> str:
    """``("rules", 1, "name")`` as ``rules[1].name``; ``(top level)`` for the file as a whole."""
    text = ""
    for part in (*path, *more):
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(top level)"


def _bare(info: types.Type) -> types.Type:
    """The type without ``| None`` (a key left out is the same as null) and without its metadata."""
    info = _optional(info)
    return _bare(info.type) if isinstance(info, types.Metadata) else info


def _optional(info: types.Type) -> types.Type:
    if isinstance(info, types.UnionType):
        others = [t for t in info.types if not isinstance(t, types.NoneType)]
        if len(others) == 1:
            return others[0]
    return info


def _describe(info: types.Type, plural: bool = False) -> str:  # noqa: PLR0911 - one line per kind of type
    info = _optional(info)
    if isinstance(info, types.Metadata) and info.extra_json_schema and "description" in info.extra_json_schema:
        described = str(info.extra_json_schema["description"])
        if plural and described.startswith("one of "):  # a choice of strings: "a list of strings (A, B)"
            return f"strings ({described.removeprefix('one of ')})"
        return described
    info = _bare(info)
    if isinstance(info, types.BoolType):
        return "true or false"
    if isinstance(info, types.IntType):
        return ("integers" if plural else "an integer") + _bounds(info)
    if isinstance(info, types.FloatType):
        return ("numbers" if plural else "a number") + _bounds(info)
    if isinstance(info, types.StrType):
        empty = "non-empty " if info.min_length else ""
        return f"{empty}strings" if plural else f"a {empty}string"
    if isinstance(info, types.LiteralType | types.EnumType):
        choices = info.values if isinstance(info, types.LiteralType) else [member.value for member in info.cls]
        values = ", ".join(map(str, choices))
        return f"strings ({values})" if plural else f"one of {values}"
    if isinstance(info, types.ListType | types.VarTupleType | types.SetType):
        empty = "non-empty " if info.min_length else ""
        return f"a {empty}list of {_describe(info.item_type, plural=True)}"
    if isinstance(info, types.StructType | types.DictType):
        return "mappings" if plural else "a mapping"
    return "values" if plural else "a value"


def _bounds(info: types.IntType | types.FloatType) -> str:
    bounds = [
        f"{symbol} {bound:g}"
        for symbol, bound in ((">=", info.ge), (">", info.gt), ("<=", info.le), ("<", info.lt))
        if bound is not None
    ]
    return f" {' and '.join(bounds)}" if bounds else ""
