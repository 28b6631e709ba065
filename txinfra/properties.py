"""Java ``.properties`` configuration files, validated against a declared schema.

Both node kinds are configured by such files (worker.properties, cluster.properties).
Every problem is reported with the key (and file) it concerns; nothing starts on a bad
file. Parsing is javaproperties'; this module only declares and checks keys.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import javaproperties


class ConfigError(ValueError):
    """A configuration file is unusable; the message names the file and the key."""


@dataclass(frozen=True)
class Key:
    """One documented configuration key."""

    name: str
    parse: Callable[[str], Any]
    default: Any = None
    required: bool = False
    description: str = ""
    # Other spellings accepted for the same setting (the original's documented names);
    # the value is the key's, and two spellings with different values are refused.
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schema:
    keys: tuple[Key, ...]
    # Keys matching one of these patterns are accepted as-is (e.g. worker.<n>.url).
    patterns: tuple[tuple[re.Pattern[str], Callable[[str], Any]], ...] = field(default=())

    def key(self, name: str) -> Key | None:
        return next((k for k in self.keys if k.name == name), None)

    def canonical(self, name: str) -> str:
        """The key an alias spells (``name`` itself when it is no alias)."""
        return next((k.name for k in self.keys if name in k.aliases), name)

    def respell(self, changes: Mapping[str, str | None],
                present: Collection[str]) -> dict[str, str | None]:
        """``changes`` to keys, written under the spellings a file already uses: a key
        set as its alias is changed there (and under both spellings when it has both),
        so that a runtime change never leaves two spellings with different values."""
        out: dict[str, str | None] = {}
        for name, value in changes.items():
            key = self.key(name)
            spellings = [s for s in (name, *key.aliases) if s in present] if key else []
            for spelling in spellings or [name]:
                out[spelling] = value
        return out

    def fields(self, values: Mapping[str, Any], exclude: Collection[str] = ()) -> dict[str, Any]:
        """The values of this schema's keys as keyword arguments of a configuration class
        (``jmx.ssl.keystore`` -> ``jmx_ssl_keystore``), but for the keys in ``exclude``,
        which the class takes in another form."""
        return {re.sub(r"[-.]", "_", k.name): values[k.name]
                for k in self.keys if k.name not in exclude}

    def validate(self, raw: Mapping[str, str], source: str = "<config>") -> dict[str, Any]:
        """Check every key of ``raw``; return typed values with defaults filled in."""
        values, problems = self.check(raw)
        if problems:
            raise ConfigError(f"{source}: " + "; ".join(problems))
        return values

    def check(self, raw: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
        """Like ``validate`` but returns the problems instead of raising.

        The values hold every key that parsed (bad keys are left out), so callers can add
        their cross-key checks and report everything in one message.
        """
        values: dict[str, Any] = {}
        problems: list[str] = []
        spelled: dict[str, str] = {}  # key -> the spelling its value was read under
        for name, text in raw.items():
            canonical = self.canonical(name)
            key = self.key(canonical)
            parser: Callable[[str], Any] | None = key.parse if key else None
            if parser is None:
                parser = next((p for rx, p in self.patterns if rx.fullmatch(name)), None)
            if parser is None:
                problems.append(f"unknown key '{name}'")
                continue
            try:
                value = parser(text.strip())
            except (ValueError, TypeError) as exc:
                problems.append(f"invalid value for '{name}': {exc}")
                continue
            other = spelled.get(canonical)
            if other is not None and values[canonical] != value:
                problems.append(
                    f"'{other}' and '{name}' are two spellings of the same setting with "
                    f"different values ('{raw[other].strip()}' and '{text.strip()}'): keep "
                    f"one of them")
                continue
            values[canonical] = value
            spelled[canonical] = name
        for key in self.keys:
            if key.name in values:
                continue
            if key.required:
                problems.append(f"missing required key '{key.name}'")
            else:
                values[key.name] = key.default
        return values, problems


def read_properties(path: str | Path) -> dict[str, str]:
    p = Path(path)
    try:
        with p.open("r", encoding="utf-8") as fh:
            return dict(javaproperties.load(fh))
    except FileNotFoundError as exc:
        raise ConfigError(f"{p}: configuration file not found") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{p}: cannot read configuration file: {exc}") from exc


def duplicate_keys(path: str | Path) -> list[str]:
    """Keys set more than once in a file (javaproperties keeps the last one silently)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read configuration file: {exc}") from exc
    seen: set[str] = set()
    twice: list[str] = []
    for element in javaproperties.parse(text):
        if isinstance(element, javaproperties.KeyValue):
            if element.key in seen and element.key not in twice:
                twice.append(element.key)
            seen.add(element.key)
    return twice


def rewrite_properties(
    path: str | Path,
    changes: Mapping[str, str | None],
    check: Callable[[dict[str, str]], None] | None = None,
) -> dict[str, str]:
    """Apply ``changes`` to a properties file, keeping its comments, blank lines and order.

    An existing key is replaced in place, a new key is appended, a key mapped to None is
    removed; values are escaped by javaproperties. ``check`` sees the resulting raw
    mapping first and raises (ConfigError) to refuse it: the file is then untouched. The
    new file replaces the old one atomically (temp file in the same directory, fsync,
    os.replace), keeping its permission bits. Returns the resulting raw mapping.
    """
    p = Path(path)
    try:
        with p.open("r", encoding="utf-8") as fh:
            document = javaproperties.PropertiesFile.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"{p}: configuration file not found") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{p}: cannot read configuration file: {exc}") from exc
    for name, value in changes.items():
        if value is None:
            document.pop(name, None)
        else:
            document[name] = value
    result = dict(document)
    if check is not None:
        check(result)
    mode = p.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            document.dump(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # The rename itself is durable only once the directory entry is on disk.
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return result


# ---- value parsers: each raises ValueError with a message a human can act on ----

def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "yes", "on", "1"):
        return True
    if low in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got '{text}'")


def parse_int(minimum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got '{text}'") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def parse_float(minimum: float | None = None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number, got '{text}'") from None
        if value != value or (minimum is not None and value < minimum):
            raise ValueError(f"must be a number >= {minimum}, got {text}")
        return value

    return parse


def parse_nonempty(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def parse_repository_id(text: str) -> str:
    if not _REPO_ID.fullmatch(text):
        raise ValueError(
            f"'{text}' is not a repository id (letters, digits, '_', '.', '-'; max 128)"
        )
    return text


# The one rule for backup names (admin API, JMX, the CLI, the worker): a name becomes a
# folder on the worker and a row of the master's log, so no separator and no leading dot.
BACKUP_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
BACKUP_NAME_RULE = "1-100 letters, digits, '_', '.', '-', starting with a letter or digit"


def is_backup_name(text: str) -> bool:
    return re.fullmatch(BACKUP_NAME, text) is not None


def parse_listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got '{text}'")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"port must be a number in '{text}'") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port out of range in '{text}'")
    return host.strip("[]"), number


def parse_url(text: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise ValueError(f"expected an http(s) URL, got '{text}'")
    return text.rstrip("/")


def parse_path(text: str) -> Path:
    if not text:
        raise ValueError("must be a path")
    return Path(text)


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        for choice in choices:
            if text.lower() == choice.lower():
                return choice
        raise ValueError(f"expected one of {', '.join(choices)}, got '{text}'")

    return parse
