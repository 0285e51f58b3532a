"""Where a client finds the server and its token.

Each of ``url`` and ``token`` is taken from the first place that has it:

1. what the caller gives (``--url``/``--token`` on the command line);
2. the environment: ``ACCELNET_URL``, ``ACCELNET_TOKEN``;
3. the config file ``$XDG_CONFIG_HOME/accelnet/client.toml`` (``~/.config/accelnet/
   client.toml`` when ``XDG_CONFIG_HOME`` is not set)::

       url = "http://127.0.0.1:8765"
       token = "acn_..."

The file is read only when something is still missing; a file that is not valid TOML, a
key other than ``url`` and ``token``, or a value that is not a string is an error naming
the file. Nothing here touches the network.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_URL = "ACCELNET_URL"
ENV_TOKEN = "ACCELNET_TOKEN"
KEYS = ("url", "token")


class ConfigError(ValueError):
    """No URL or token could be found, or the config file is not valid."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The resolved URL and token, and where each came from (for messages)."""

    url: str | None
    token: str | None
    url_source: str | None = None
    token_source: str | None = None

    def require(self) -> tuple[str, str]:
        """``(url, token)``; ConfigError naming the three places when one is missing."""
        missing = [k for k, v in (("url", self.url), ("token", self.token)) if not v]
        if missing:
            flags = " and ".join(f"--{k}" for k in missing)
            envs = " and ".join(ENV_URL if k == "url" else ENV_TOKEN for k in missing)
            keys = ", ".join(f'{k} = "..."' for k in missing)
            raise ConfigError(
                f"no server {' or '.join(missing)} given: use {flags}, set {envs}, or write "
                f"{keys} in {config_path()}"
            )
        assert self.url is not None and self.token is not None
        return self.url, self.token


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/accelnet/client.toml``, else ``~/.config/accelnet/client.toml``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "accelnet" / "client.toml"


def read_config_file(path: Path) -> dict[str, str]:
    """The file's ``url`` and ``token`` (either may be absent; no file: empty).
    ConfigError naming the file for bad TOML, an unknown key or a non-string value."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    out: dict[str, str] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} (keys: {', '.join(KEYS)})")
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {key} must be a string, got {type(value).__name__}")
        out[key] = value
    return out


def resolve(
    url: str | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> ClientConfig:
    """URL and token by precedence (see the module docstring); either may stay None."""
    env = os.environ if env is None else env
    found: dict[str, tuple[str, str]] = {}
    for key, given, var in (("url", url, ENV_URL), ("token", token, ENV_TOKEN)):
        if given:
            found[key] = (given, f"--{key}")
        elif env.get(var):
            found[key] = (env[var], var)
    if len(found) < len(KEYS):
        file = path if path is not None else config_path(env)
        for key, value in read_config_file(file).items():
            if key not in found and value:
                found[key] = (value, str(file))
    u, t = found.get("url"), found.get("token")
    return ClientConfig(
        url=u[0] if u else None,
        token=t[0].strip() if t else None,
        url_source=u[1] if u else None,
        token_source=t[1] if t else None,
    )
