"""Where the ``mere`` command finds its warehouse: options, environment, config file; and secret hiding.

Precedence, highest first: command-line options (``--warehouse``, ``--catalog``, ``--storage-option``),
environment variables (``MERE_WAREHOUSE``, ``MERE_CATALOG``, ``MERE_STORAGE_OPTIONS``), the config file
(``--config``, else ``$MERE_CONFIG``, else ``$XDG_CONFIG_HOME/mere/config.toml`` or
``~/.config/mere/config.toml`` when it exists). Storage options merge key by key in the same order.

This module needs neither click nor rich.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlalchemy.engine import make_url as sa_url

from mere import durations
from mere.io.options import is_secret

ENV_WAREHOUSE = "MERE_WAREHOUSE"
ENV_CATALOG = "MERE_CATALOG"
ENV_STORAGE_OPTIONS = "MERE_STORAGE_OPTIONS"
ENV_CONFIG = "MERE_CONFIG"
CONFIG_KEYS = ("warehouse", "catalog", "storage_options")


class SettingsError(ValueError):
    """The options, environment or config file do not say where the warehouse is, or say it wrongly."""


@dataclass
class Settings:
    """The resolved connection settings, with the secrets they carry (to hide in anything printed)."""

    warehouse: str
    catalog: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    config_file: str | None = None

    def secrets(self) -> list[str]:
        """Every secret value these settings hold: secret storage options and URL passwords."""
        found: list[str] = []
        for k, v in self.storage_options.items():
            if is_secret(k):
                found.append(v)
            found += url_secrets(v)
        for url in (self.warehouse, self.catalog or ""):
            found += url_secrets(url)
        out: list[str] = []
        for s in found:
            for variant in (s, unquote(s)):
                if variant and variant not in out:
                    out.append(variant)
        return sorted(out, key=len, reverse=True)  # longest first: a secret inside another goes whole


def url_secrets(value: str) -> list[str]:
    """The password of a ``scheme://user:password@host`` URL and secret-looking query values (and the
    password of a libpq ``key=value`` string, which mere refuses but must not print)."""
    if "://" not in value:
        return re.findall(r"(?:^|\s)password\s*=\s*(\S+)", value)
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return []
    out = [password] if password else []
    # A database URL's password as SQLAlchemy reads it: up to the first "@", so it may hold "/" or "?",
    # where urlsplit ends the user info.
    try:
        database_password = sa_url(value).password
    except Exception:  # not a URL SQLAlchemy reads: urlsplit's reading stands
        database_password = None
    if database_password:
        out.append(str(database_password))
    for pair in parts.query.split("&"):
        k, eq, v = pair.partition("=")
        if eq and v and is_secret(k):
            out.append(v)
    return out


# The password runs to the last "@" before the host: an unencoded "@" in it must not leave its tail shown.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][\w+.\-]*://)(?P<user>[^/@:\s]*):(?P<pw>[^/\s]*)@")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret and every URL password replaced by ``***``.

    Secrets of 6 characters or more go wherever they occur; shorter ones only as whole words, so that a
    password ``b`` does not turn ``db`` into ``d***``.
    """
    for s in secrets:
        if len(s) >= 6:
            text = text.replace(s, "***")
        elif s:
            text = re.sub(rf"(?<!\w){re.escape(s)}(?!\w)", "***", text)
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)


def shown_catalog(url: str) -> str:
    """A catalog URL fit to print: its password hidden where SQLAlchemy (which connects with it) reads
    one, which may hold "/" or "?" that end urlsplit's user info."""
    try:
        shown = sa_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads
        shown = url
    return redact_url(shown)


def redact_url(url: str) -> str:
    """A URL fit to print: its password and secret query values hidden."""
    return redact(url, url_secrets(url))


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a key without ``=`` raises SettingsError (naming the key, never a value)."""
    out: dict[str, str] = {}
    for item in items:
        k, eq, v = item.partition("=")
        k = k.strip()
        if not eq or not k:  # the item is not echoed: it may be a secret with a typo
            raise SettingsError(f"{what} must look like key=value; an item has no key or no '='")
        out[k] = v
    return out


def parse_storage_options_env(text: str) -> dict[str, str]:
    """``MERE_STORAGE_OPTIONS``: a JSON object of strings, or ``key=value`` pairs separated by commas."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise SettingsError(f"{ENV_STORAGE_OPTIONS} is not a valid JSON object: {e.msg}") from None
        if not isinstance(value, dict):
            raise SettingsError(f"{ENV_STORAGE_OPTIONS} must be a JSON object of strings")
        return _string_options(value, ENV_STORAGE_OPTIONS)
    return parse_pairs([p for p in text.split(",") if p.strip()], ENV_STORAGE_OPTIONS)


def _string_options(value: Mapping[str, Any], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, bool):
            out[str(k)] = "true" if v else "false"
        elif isinstance(v, (str, int, float)):
            out[str(k)] = str(v)
        else:
            raise SettingsError(f"{where}: storage option {k!r} must be a string, number or boolean")
    return out


def default_config_path(env: Mapping[str, str]) -> str:
    """``$XDG_CONFIG_HOME/mere/config.toml``, or ``~/.config/mere/config.toml``."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "mere", "config.toml")


def read_config(path: str) -> dict[str, Any]:
    """The config file's settings: ``warehouse``, ``catalog`` and a ``[storage_options]`` table."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist") from None
    except OSError as e:
        raise SettingsError(f"cannot read config file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"config file {path} is not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"config file {path} is not UTF-8 text (TOML files are)") from None
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise SettingsError(
            f"config file {path}: unknown key(s) {unknown}; it may set {', '.join(CONFIG_KEYS)}"
        )
    for key in ("warehouse", "catalog"):
        if key in data and (not isinstance(data[key], str) or not data[key].strip()):
            raise SettingsError(f"config file {path}: {key} must be a non-empty string")
    opts = data.get("storage_options", {})
    if not isinstance(opts, dict):
        raise SettingsError(f"config file {path}: storage_options must be a table: [storage_options]")
    data["storage_options"] = _string_options(opts, f"config file {path}")
    return data


def resolve(
    warehouse: str | None = None,
    catalog: str | None = None,
    storage_options: Iterable[str] = (),
    config: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Settings from the command line's values, then the environment, then the config file."""
    env = os.environ if env is None else env
    for option, value in (("--warehouse", warehouse), ("--catalog", catalog), ("--config", config)):
        if value is not None and not value.strip():  # given but empty: not a fall back to other sources
            raise SettingsError(f"{option} is empty")
    path = config or env.get(ENV_CONFIG) or None
    file: dict[str, Any] = {}
    if path is not None:
        file = read_config(os.path.expanduser(path))
    else:
        default = default_config_path(env)
        if os.path.isfile(default):
            path = default
            file = read_config(default)
    options = dict(file.get("storage_options", {}))
    options.update(parse_storage_options_env(env.get(ENV_STORAGE_OPTIONS, "")))
    options.update(parse_pairs(storage_options, "--storage-option"))
    wh = warehouse or env.get(ENV_WAREHOUSE) or file.get("warehouse")
    if not wh:
        raise SettingsError(
            f"no warehouse: pass --warehouse PATH_OR_URI, set {ENV_WAREHOUSE}, or put warehouse = '...' in "
            f"the config file ({path or default_config_path(env)})"
        )
    cat = catalog or env.get(ENV_CATALOG) or file.get("catalog") or None
    return Settings(_home(wh), _home(cat) if cat else None, options, path)


def _home(location: str) -> str:
    """A path starting with ``~`` (from the environment or the config file: no shell expanded it) expanded."""
    return os.path.expanduser(location) if location.startswith("~") else location


def parse_duration(text: str) -> dt.timedelta:
    """``'7d'``, ``'1h30m'``, ``'90s'``, ``'2.5h'``, ``'0'`` as a timedelta (units ms, s, m, h, d, w)."""
    try:
        return durations.parse_duration(text)
    except OverflowError:
        raise SettingsError(f"duration {text!r} is too long") from None
    except ValueError:
        raise SettingsError(f"{text!r} is not a duration such as 7d, 12h, 1h30m, 90s or 0") from None
