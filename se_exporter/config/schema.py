"""Typed, strict decoding of the files an operator writes (approval policy, web config, scenarios).

Each file kind declares its shape once, as ``msgspec.Struct`` types with ``forbid_unknown_fields``;
``decode`` converts the strictly loaded YAML (see ``strict_yaml.load_yaml``) into those types without
coercion (``"5"`` is not 5, ``true`` is not 1). A problem becomes one line naming the key path and
what was expected, phrased from the schema itself::

    approval config policy.yaml: rules[1].max_duration_seconds: must be an integer >= 0, got "eight"

Checks that types cannot express live in the structs' ``__post_init__``: raising
``field_problem("key", "...")`` there blames that key of the struct. Values under a secret key
(``basic_auth_users``) are never shown.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

import msgspec
import msgspec.inspect as types

from se_exporter.config.files import show
from se_exporter.errors import ConfigError

T = TypeVar("T")
_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_TOKEN = re.compile(r"\.(?P<key>[^.\[]+)|\[(?P<index>\d+|\.\.\.)\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<key>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<key>[^`]*)`$")
_RELATIVE = "@"  # marks a __post_init__ problem that names one key of its struct
MAX_PROBLEMS = 64  # a file checked again at most this many times, each without the key found wrong

CommandWord = Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")]  # a word of a hook's or an action's command


def check_command(command: Sequence[str]) -> None:
    """For ``__post_init__`` of a struct with a ``command``: no operating system takes a NUL in an argument,
    so a command holding one is refused with its file, not when it first runs."""
    for index, word in enumerate(command):
        if "\x00" in word:
            raise field_problem(f"command[{index}]", f"{show(word)} holds a NUL character, which no command can take")


def field_problem(key: str, problem: str) -> ValueError:
    """For ``__post_init__``: an error about ``key`` of the struct being checked."""
    return ValueError(f"{_RELATIVE}{key}: {problem}")


def decode(
    data: object,
    schema: type[T],
    *,
    prefix: str,
    error: type[Exception] = ConfigError,
    secret_keys: Sequence[str] = (),
    each: Sequence[str] = (),
) -> T:
    """``data`` as a ``schema``; raise ``error("<prefix>: <key path>: <problem>")`` if it is not one.

    msgspec stops at the first problem; an operator wants them all. So the error holds one line per
    independent problem: the first, then each item of the lists named in ``each`` (every rule, every
    action) checked as its own type, every problem of it, then the file checked again without each
    optional key found wrong (``_other_problems``). The items of an ``each`` list have unique ``name``s,
    checked on the file as written, so that a duplicate is said whatever else is wrong with either item."""
    try:
        result = msgspec.convert(data, schema, strict=True)
    except msgspec.ValidationError as problem:
        lines = [_line(problem, data, schema, secret_keys), *_duplicate_names(data, each)]
    except UnicodeEncodeError:  # YAML's "\ud800" escapes: text no file or label can hold
        raise error(f"{prefix}: holds text that is not valid Unicode (a lone surrogate)") from None
    else:
        if not (lines := _duplicate_names(data, each)):
            return result
    lines += _other_problems(data, schema, each, secret_keys)
    unique = list(dict.fromkeys(lines))
    raise error("\n".join(f"{prefix}: {line}" for line in unique)) from None


def _line(problem: Exception, data: object, schema: type[Any], secret_keys: Sequence[str]) -> str:
    path, text = _explain(str(problem), data, schema, secret_keys)
    return f"{path or '(top level)'}: {text}"


def _other_problems(data: object, schema: type[Any], each: Sequence[str], secret_keys: Sequence[str]) -> list[str]:
    """The problems after the first: each item of the lists in ``each`` checked as its own type, then the
    file checked again without each optional key found wrong (so that no problem is one only because another
    key was left out)."""
    info = types.type_info(schema)
    if not isinstance(data, dict) or not isinstance(info, types.StructType):
        return []
    fields = {f.encode_name: f for f in info.fields}  # the lists of ``each`` are checked item by item
    lines: list[str] = []
    # msgspec checks keys in the file's order: the lists go last, so that every other key is seen first.
    current = {k: v for k, v in data.items() if k not in each} | {k: v for k, v in data.items() if k in each}
    for key in each:
        listed = _bare(fields[key].type) if key in fields else None
        if not isinstance(listed, types.ListType | types.VarTupleType) or not isinstance(current.get(key), list):
            continue
        item = _bare(listed.item_type)
        valid = []
        for index, entry in enumerate(current[key] if isinstance(item, types.StructType) else ()):
            found, repaired = _item_problems(
                entry, item, (key, index), data=data, schema=schema, secret_keys=secret_keys
            )
            lines += found
            if repaired is not None:  # still in the list, so that the checks across items see it (its name)
                valid.append(repaired)
        current[key] = valid
    for _ in range(MAX_PROBLEMS):
        try:
            msgspec.convert(current, schema, strict=True)
            break
        except (msgspec.ValidationError, UnicodeEncodeError) as problem:
            line = _line(problem, current, schema, secret_keys)
            tokens = _tokens(line.split(": ", 1)[0])
            if tokens and tokens[0] in each and (len(tokens) == 1 or line in lines):
                break  # what is left of a list whose items were checked one by one: said
            lines.append(line)
            smaller = _without(current, tokens, info)
            if smaller is None:
                break  # nothing more can be learned without the key
            current = smaller
    return lines


def _duplicate_names(data: object, each: Sequence[str]) -> list[str]:
    """A name used by an earlier item of the same list (a rule's, an action's): one line per repeat."""
    lines = []
    for key in each:
        items = data.get(key) if isinstance(data, dict) else None
        seen: set[str] = set()
        for index, item in enumerate(items if isinstance(items, list) else ()):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in seen:
                kind = key.removesuffix("s")
                lines.append(f"{key}[{index}].name: {show(name)} is used by an earlier {kind}; names must be unique")
            seen.add(name)
    return lines


def _item_problems(
    entry: object,
    item: types.Type,
    place: tuple[str, int],
    *,
    data: dict[str, Any],
    schema: type[Any],
    secret_keys: Sequence[str],
) -> tuple[list[str], object | None]:
    """Every problem of one item of a list (a rule, an action), each value found wrong left out in turn (an
    entry of a list of values, else the key); and the item without them, if it is valid then (None if not).
    A problem of the item as a whole that shows only once something was left out (a rule left without any
    matching key) is a consequence, not said."""
    cls = getattr(item, "cls", None)
    lines: list[str] = []
    alive: dict[tuple[str, ...], list[int]] = {}  # a list's entries left, by their index in the file
    key, index = place
    where, depth = f".{key}[{index}]", 2
    current: object | None = entry
    for _ in range(MAX_PROBLEMS):
        if cls is None or not isinstance(current, dict):
            break
        try:
            msgspec.convert(current, cls, strict=True)
            return lines, current
        except UnicodeEncodeError:
            break
        except msgspec.ValidationError as problem:
            items = data[key]
            view = {**data, key: [*items[:index], current, *items[index + 1 :]]}  # what was wrong, as it is now
            line = _line(_at(problem, where), view, schema, secret_keys)
            path, _, text = line.partition(": ")
            inner = _tokens(path)[depth:]
            if lines and not inner:
                break
            listed = len(inner) >= 2 and inner[-1].isdigit()
            if listed and (kept := alive.get(tuple(inner[:-1]))) is not None:
                line = f"{path[: path.rindex('[')]}[{kept[int(inner[-1])]}]: {text}"  # its index in the file
            lines.append(line)
            current = _left_out(current, inner, item, alive) if listed else _without(current, inner, item)
    return lines, None


def _left_out(
    entry: dict[str, Any], tokens: Sequence[str], item: types.Type, alive: dict[tuple[str, ...], list[int]]
) -> dict[str, Any] | None:
    """``entry`` without the value at ``tokens`` (an index in a list of values), its list kept if anything is
    left of it (``alive`` keeps the indices in the file of those left), else without the key."""
    values = _value_at(entry, tokens[:-1])
    if not isinstance(values, list) or len(values) < 2:
        return _without(entry, tokens, item)
    kept = alive.setdefault(tuple(tokens[:-1]), list(range(len(values))))
    smaller, copied = _copied_along(entry, tokens[:-1])
    if not isinstance(copied, list):
        return None
    del copied[int(tokens[-1])]
    del kept[int(tokens[-1])]
    return smaller  # type: ignore[no-any-return]


def _tokens(path: str) -> list[str]:
    """``tls_server_config.cipher_suites[0]`` as ``["tls_server_config", "cipher_suites", "0"]``."""
    return [m.group("key") or m.group("index") for m in _TOKEN.finditer("." + path)] if path != "(top level)" else []


def _without(data: dict[str, Any], tokens: Sequence[str], info: types.Type) -> dict[str, Any] | None:
    """A copy of ``data`` without the innermost key on ``tokens`` that its struct does not require (or does
    not know): checked again without it, the file says its next problem, in that section or another. None
    when no key on the path can go."""
    for depth in range(len(tokens) - 1, -1, -1):
        key = tokens[depth]
        parent = _bare(_type_at(info, tokens[:depth]))
        if key.isdigit() or not isinstance(parent, types.StructType):
            continue
        field = next((f for f in parent.fields if f.encode_name == key), None)
        if field is not None and field.required:
            continue
        copied, container = _copied_along(data, tokens[:depth])
        if isinstance(container, dict) and key in container:
            del container[key]
            return copied  # type: ignore[no-any-return]
    return None


def _copied_along(data: Any, tokens: Sequence[str]) -> tuple[Any, dict[str, Any] | list[Any] | None]:
    """A copy of ``data`` whose containers on the path ``tokens`` are copies (the rest is shared, however
    deeply it nests), and the copy of the container at its end (None if there is none)."""
    root = current = copy.copy(data) if isinstance(data, dict | list) else data
    for token in tokens:
        if isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current[int(token)] = copy.copy(current[int(token)])
            current = current[int(token)]
        elif isinstance(current, dict) and token in current:
            current[token] = copy.copy(current[token])
            current = current[token]
        else:
            return root, None
    return root, current if isinstance(current, dict | list) else None


def _at(problem: msgspec.ValidationError, where: str) -> Exception:
    """The problem of an item checked alone, with the item's place in the file put in front of its path."""
    message = str(problem)
    if " - at `$" in message:
        return ValueError(message.replace(" - at `$", f" - at `${where}", 1))
    return ValueError(f"{message} - at `${where}`")


def _explain(message: str, data: object, schema: type[Any], secret_keys: Sequence[str]) -> tuple[str, str]:
    match = _PATH.search(message)
    path = match.group("path") if match else ""
    message = message[: match.start()] if match else message
    tokens = [m.group("key") or m.group("index") for m in _TOKEN.finditer(path)]
    if (unknown := _UNKNOWN.match(message)) is not None:
        fields = _struct_fields(_type_at(types.type_info(schema), tokens))
        known = f"; expected one of: {', '.join(fields)}" if fields else ""
        return _join(tokens, unknown.group("key")), f"unknown key{known}"
    if (missing := _MISSING.match(message)) is not None:
        return _join(tokens, missing.group("key")), "is required"
    if message.startswith(_RELATIVE):
        key, _, text = message[len(_RELATIVE) :].partition(": ")
        return _join(tokens, key), text
    if not message.startswith(("Expected", "Invalid enum value")):
        return _join(tokens), message  # a __post_init__ problem about the struct as a whole
    expected = _describe(_type_at(types.type_info(schema), tokens))
    if any(token in secret_keys for token in tokens) or "..." in tokens:
        return _join(tokens), f"must be {expected}"
    return _join(tokens), f"must be {expected}, got {show(_value_at(data, tokens))}"


def _join(tokens: Sequence[str], *more: str) -> str:
    path = ""
    for part in (*tokens, *more):
        path += f"[{part}]" if part.isdigit() or part == "..." else (f".{part}" if path else part)
    return path


def _value_at(data: object, tokens: Sequence[str]) -> object:
    for token in tokens:
        if isinstance(data, list) and token.isdigit():
            data = data[int(token)]
        elif isinstance(data, dict):
            data = data.get(token)
    return data


def _type_at(info: types.Type, tokens: Sequence[str]) -> types.Type:
    for token in tokens:
        info = _bare(info)
        if isinstance(info, types.StructType):
            info = next((f.type for f in info.fields if f.encode_name == token), types.AnyType())
        elif isinstance(info, types.ListType | types.VarTupleType | types.SetType):
            info = info.item_type
        elif isinstance(info, types.DictType):
            info = info.value_type
    return info


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


def _struct_fields(info: types.Type) -> list[str]:
    info = _bare(info)
    if not isinstance(info, types.StructType):
        return []
    refused = getattr(info.cls, "__refused_keys__", ())  # accepted by the type only to explain the refusal
    return [f.encode_name for f in info.fields if f.encode_name not in refused]


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
