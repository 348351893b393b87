"""Durations as people write them: `90` (seconds), `500ms`, `60s`, `5m`, `12h`, `30d`,
`2w`, decimals allowed (`1.5h`). One parser for every duration a command reads, from
its command line, a `DIST_LTO_*` variable or the configuration file, with Bazel's
units (`--remote_timeout=10m`) and `w` for cache ages. Standard library only: the
distributor reads durations at start-up."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration(text: str) -> float:
    """Seconds; ValueError (naming the text and the units) for anything else."""
    stripped = text.strip().lower()
    number, factor = stripped, 1.0
    for unit in ("ms", "s", "m", "h", "d", "w"):  # "ms" before "s" and "m"
        if stripped.endswith(unit):
            number, factor = stripped[: -len(unit)].rstrip(), _UNITS[unit]
            break
    whole, _, fraction = number.partition(".")
    if not (whole or fraction) or not all(
        part == "" or (part.isascii() and part.isdigit()) for part in (whole, fraction)
    ):
        raise ValueError(
            f"not a duration: {text!r} (use seconds or a ms, s, m, h, d, w suffix: 60s, 5m)"
        )
    return float(number) * factor
