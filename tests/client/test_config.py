"""Where the URL and token come from: flags, then the environment, then the config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.client import Client, ConfigError, config_path, resolve
from accelnet.client.client import base_url


def write(config_home: Path, text: str) -> Path:
    path = config_home / "accelnet" / "client.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_precedence_per_key(no_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(no_config, 'url = "http://file:1"\ntoken = "file-token"\n')
    assert config_path() == path
    found = resolve()
    assert (found.url, found.token, found.url_source) == ("http://file:1", "file-token", str(path))
    monkeypatch.setenv("ACCELNET_URL", "http://env:2")
    found = resolve()
    assert (found.url, found.token) == ("http://env:2", "file-token")  # each key on its own
    assert (found.url_source, found.token_source) == ("ACCELNET_URL", str(path))
    monkeypatch.setenv("ACCELNET_TOKEN", "env-token")
    found = resolve(token="flag-token")
    assert (found.url, found.token, found.token_source) == ("http://env:2", "flag-token", "--token")
    found = resolve(url="http://flag:3")
    assert (found.url, found.token, found.url_source) == ("http://flag:3", "env-token", "--url")


def test_file_not_read_when_not_needed(no_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(no_config, "this is not toml")
    monkeypatch.setenv("ACCELNET_URL", "http://env:2")
    assert resolve(token="t").url == "http://env:2"
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve()


def test_missing_and_bad_files(no_config: Path) -> None:
    found = resolve()
    assert (found.url, found.token) == (None, None)
    with pytest.raises(ConfigError) as err:
        found.require()
    text = str(err.value)
    assert all(w in text for w in ("--url", "--token", "ACCELNET_URL", "ACCELNET_TOKEN",
                                   str(config_path())))  # fmt: skip
    with pytest.raises(ConfigError, match=r"--token.*ACCELNET_TOKEN"):
        resolve(url="http://x").require()
    path = write(no_config, 'url = "http://x"\ntokn = "t"\n')
    with pytest.raises(ConfigError, match=rf"{path}: unknown key 'tokn' \(keys: url, token\)"):
        resolve()
    write(no_config, "url = 8765\n")
    with pytest.raises(ConfigError, match="url must be a string, got int"):
        resolve()
    path.unlink()
    with pytest.raises(ConfigError, match="no server url"):
        Client.from_config(token="t")


def test_from_config_and_urls(no_config: Path) -> None:
    write(no_config, 'url = "127.0.0.1:8765/"\ntoken = " acn_x \\n"\n')
    with Client.from_config() as api:
        assert api.url == "http://127.0.0.1:8765"
    assert resolve().token == "acn_x"
    assert base_url("https://h:1/api/v1/") == "https://h:1"
    assert base_url(" http://h:1 ") == "http://h:1"
    assert config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/accelnet/client.toml")
    assert config_path({}) == Path.home() / ".config" / "accelnet" / "client.toml"
