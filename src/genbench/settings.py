"""genbench's settings file: numbers a team sets once instead of on every command.

A GPU-hour's price is the same for every plan a team makes; typing it on every
`genbench plan` invites a typo in the one number that turns hours into money. So it can
live in a TOML file:

    [plan]
    price_per_gpu_hour = 2.5
    gpus_per_server = 8

The file is `$GENBENCH_CONFIG` when that is set (set and empty: no file), else
`$XDG_CONFIG_HOME/genbench/config.toml`, else `~/.config/genbench/config.toml`. A flag
always overrides the file, and whatever used a setting names where it came from. A key
genbench does not know in a section it reads is an error, not ignored: a misspelt price
would otherwise be silently left out of the plan.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genbench.errors import UsageError

ENV = "GENBENCH_CONFIG"

# section -> key -> the Python types its value may have (bool is not a number here)
KNOWN: dict[str, dict[str, tuple[type, ...]]] = {
    "plan": {"price_per_gpu_hour": (int, float), "gpus_per_server": (int,)},
}


@dataclass(frozen=True)
class Setting:
    """One value and where it came from (a flag's name, or the file's path)."""

    value: Any
    source: str


def settings_path() -> Path | None:
    """The settings file to read; None when $GENBENCH_CONFIG is set to nothing."""
    env = os.environ.get(ENV)
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "genbench" / "config.toml"


def load_settings(path: Path | None = None) -> tuple[dict[str, dict[str, Any]], Path | None]:
    """The known sections of the settings file, checked, and the file they came from.
    A missing default file is no settings; a missing $GENBENCH_CONFIG file is an error."""
    explicit = path is not None or bool(os.environ.get(ENV, "").strip())
    path = path if path is not None else settings_path()
    if path is None:
        return {}, None
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if explicit:
            raise UsageError(f"{ENV}={path}: no such settings file") from None
        return {}, None
    except OSError as e:
        raise UsageError(f"{path}: cannot read the settings file ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not a TOML settings file ({e})") from None
    return {name: _section(path, name, doc.get(name)) for name in KNOWN if name in doc}, path


def _section(path: Path, name: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [{name}] must be a table of settings")
    known = KNOWN[name]
    for key, value in table.items():
        if key not in known:
            raise UsageError(
                f"{path}: [{name}] has an unknown key {key!r} (known: {', '.join(known)})"
            )
        ok = isinstance(value, known[key]) and not isinstance(value, bool)
        if not ok or value <= 0:
            kind = "a whole number" if known[key] == (int,) else "a number"
            raise UsageError(f"{path}: [{name}] {key} must be {kind} above 0, got {value!r}")
    return dict(table)


def setting(section: str, key: str, flag: str, given: Any) -> Setting | None:
    """The flag's value when given, else the settings file's, else None."""
    if given is not None:
        return Setting(given, flag)
    sections, path = load_settings()
    value = sections.get(section, {}).get(key)
    return Setting(value, f"{path} [{section}] {key}") if value is not None else None
