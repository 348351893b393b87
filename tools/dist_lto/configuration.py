"""Settings the command line leaves unset: `DIST_LTO_*` environment variables, then a
TOML configuration file.

A distributor is started by LLD with the arguments of the link line
(`-Xthinlto-distributor=`), so whatever is not there (a team's remote engine, its CA, a
bigger cache) comes from the environment LLD passes on or from the file; an option on
the command line always wins. The file is `$DIST_LTO_CONFIG` when set (then it must
exist), else `$XDG_CONFIG_HOME/dist-lto/config.toml` (`~/.config/...`) when it exists.
Values are taken as the command line would spell them and checked where the command
line's are, with messages naming where each came from.
"""

import os

from dist_lto.errors import BadInput

CONFIG_ENV = "DIST_LTO_CONFIG"


class Source:
    """One setting: the attribute of a command's options, its option, environment
    variable and key in the file (`section.name`). `kind` is `str`, `list` (a
    repeatable option: a TOML table of K = V in the file, comma-separated K=V in the
    environment) or `bool` (a flag: `1`/`0`, `true`/`false`). A plain class: the
    distributor starts without `dataclasses`."""

    __slots__ = ("attr", "env", "key", "kind", "option")

    def __init__(self, attr: str, option: str, env: str, key: str, kind: str = "str") -> None:
        self.attr = attr
        self.option = option
        self.env = env
        self.key = key
        self.kind = kind


CACHE = (
    Source("cache_dir", "--cache-dir", "DIST_LTO_CACHE_DIR", "cache.dir"),
    Source("cache_max_size", "--cache-max-size", "DIST_LTO_CACHE_MAX_SIZE", "cache.max_size"),
)
"""Where the result cache is and how big it may grow: read alike by the commands that
fill it and by `dist-lto cache`, so all of them look at the same directory."""

LOCAL = (
    Source("jobs", "--jobs", "DIST_LTO_JOBS", "jobs"),
    *CACHE,
    Source("no_cache", "--no-cache", "DIST_LTO_NO_CACHE", "cache.disabled", "bool"),
)
"""Settings of every command that runs backends here (`distribute`, `link`)."""

REMOTE = (
    Source("remote", "--remote", "DIST_LTO_REMOTE", "remote.executor"),
    Source("remote_cache", "--remote-cache", "DIST_LTO_REMOTE_CACHE", "remote.cache"),
    Source("instance", "--instance", "DIST_LTO_REMOTE_INSTANCE", "remote.instance"),
    Source("remote_ca", "--remote-ca", "DIST_LTO_REMOTE_CA", "remote.ca"),
    Source("remote_client_cert", "--remote-client-cert", "DIST_LTO_REMOTE_CLIENT_CERT",
           "remote.client_cert"),
    Source("remote_client_key", "--remote-client-key", "DIST_LTO_REMOTE_CLIENT_KEY",
           "remote.client_key"),
    Source("credential_helper", "--credential-helper", "DIST_LTO_CREDENTIAL_HELPER",
           "remote.credential_helper"),
    Source("remote_timeout", "--remote-timeout", "DIST_LTO_REMOTE_TIMEOUT", "remote.timeout"),
    Source("remote_action_timeout", "--remote-action-timeout", "DIST_LTO_REMOTE_ACTION_TIMEOUT",
           "remote.action_timeout"),
    Source("remote_header", "--remote-header", "", "remote.headers", "list"),
    Source("platform", "--platform", "DIST_LTO_REMOTE_PLATFORM", "remote.platform", "list"),
)  # fmt: skip
"""`distribute`'s remote settings. Headers come from the file or a credential helper,
never from the environment: a secret there leaks into every child process."""

_SECTIONS = {"cache", "remote"}

EXCLUSIVE = (("cache_dir", "no_cache"), ("remote", "remote_cache"))
"""Settings of which the command line's one wins over the other's from elsewhere."""


def config_file(environ: "os._Environ[str] | dict[str, str]") -> tuple[str, bool]:
    """The configuration file's path and whether it was named explicitly."""
    named = environ.get(CONFIG_ENV)
    if named:
        return named, True
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return os.path.join(base, "dist-lto", "config.toml"), False


def read_config(path: str, explicit: bool) -> dict[str, object]:
    """The file's settings by key (`remote.ca`); empty when an implicit file is absent."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if explicit:
            raise BadInput(f"{path}: configuration file ({CONFIG_ENV}) does not exist") from None
        return {}
    except OSError as err:
        raise BadInput(f"{path}: cannot read the configuration file: {err.strerror}") from None
    import tomllib

    try:
        doc = tomllib.loads(data.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise BadInput(f"{path}: not a valid TOML file: {err}") from None
    flat: dict[str, object] = {}
    for name, value in doc.items():
        if name in _SECTIONS:
            if not isinstance(value, dict):
                raise BadInput(f"{path}: [{name}] must be a table")
            flat.update((f"{name}.{k}", v) for k, v in value.items())
        else:
            flat[name] = value
    known = {s.key for s in (*LOCAL, *REMOTE)}
    for key in flat:
        if key not in known:
            raise BadInput(f"{path}: unknown setting {key!r} (docs/configuration.md)")
    return flat


def _from_file(source: Source, value: object, where: str) -> object:
    if source.kind == "list":
        if not isinstance(value, dict) or not all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in value.values()
        ):
            raise BadInput(f"{where}: expected a table of names to strings")
        return [f"{k}={v}" for k, v in value.items()]
    if source.kind == "bool":
        if not isinstance(value, bool):
            raise BadInput(f"{where}: expected true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadInput(f"{where}: expected a string or a number")
    return str(value)


def _from_env(source: Source, value: str) -> object:
    if source.kind == "list":
        return [item.strip() for item in value.split(",") if item.strip()]
    if source.kind == "bool":
        if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise BadInput(f"{source.env}: expected 1 or 0, got {value!r}")
        return value.lower() in ("1", "true", "yes")
    return value


def fill(
    opts: object,
    sources: tuple[Source, ...],
    environ: "os._Environ[str] | dict[str, str] | None" = None,
) -> dict[str, str]:
    """Set each of `opts`' attributes in `sources` that the command line left unset
    (None, False or an empty list) from the environment, else the file. Returns, for
    each value set, how to name its origin in a message (`DIST_LTO_JOBS`,
    `FILE: jobs`); a value from the command line is named by its option."""
    environ = os.environ if environ is None else environ
    origin: dict[str, str] = {}
    config: dict[str, object] | None = None
    path = ""
    given = {s.attr for s in sources if getattr(opts, s.attr) not in (None, False, [])}
    for pair in EXCLUSIVE:
        if given & set(pair):
            given |= set(pair)
    for source in sources:
        if source.attr in given:
            continue
        raw = environ.get(source.env) if source.env else None
        if raw:
            setattr(opts, source.attr, _from_env(source, raw))
            origin[source.attr] = source.env
            continue
        if config is None:
            path, explicit = config_file(environ)
            config = read_config(path, explicit)
        if source.key in config:
            where = f"{path}: {source.key}"
            setattr(opts, source.attr, _from_file(source, config[source.key], where))
            origin[source.attr] = where
    return origin


def describe(sources: tuple[Source, ...]) -> str:
    """The precedence and each setting's variable and key, for `--help`."""
    option = max(len(s.option) for s in sources)
    env = max(len(s.env or "(file only)") for s in sources)
    rows = [f"  {s.option:<{option}} {s.env or '(file only)':<{env}} {s.key}" for s in sources]
    return (
        "Settings: the command line first, then DIST_LTO_* environment variables, then\n"
        "the configuration file ($DIST_LTO_CONFIG, else $XDG_CONFIG_HOME/dist-lto/config.toml\n"
        "or ~/.config/dist-lto/config.toml; docs/configuration.md):\n"
        f"  {'option':<{option}} {'environment':<{env}} file key\n" + "\n".join(rows)
    )
