"""The usual command line of `opt` and `distribute`, read without argparse.

Both run once per backend or per link, where importing argparse (~6 ms with what it
pulls in) is a measurable share of their start-up. `scan` takes the forms a build
system or LLD writes; anything else returns None and the command's argparse parser
decides, so `--help` and usage errors are argparse's, and each command's property test
pins that the two agree. Standard library only, no imports.
"""


def scan(
    argv: list[str],
    target: object,
    values: dict[str, str],
    flags: dict[str, str],
    *,
    rest: str | None = None,
) -> list[str] | None:
    """Set `target`'s attributes from `argv`; return the positional arguments.

    `values` maps an option taking a value to the attribute it sets: `--name=VALUE` or
    `--name VALUE` (a short `-n` only as `-n VALUE`), never a VALUE that starts with
    `-`. `flags` maps a flag to the attribute set to True. With `rest`, everything
    after `--` is set, as a list, to that attribute. None for anything else.
    """
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--" and rest is not None:
            setattr(target, rest, argv[i:])
            break
        name, eq, value = arg.partition("=")
        if name in values and (not eq or name.startswith("--")):
            if not eq:
                if i == len(argv) or argv[i].startswith("-"):
                    return None
                value = argv[i]
                i += 1
            setattr(target, values[name], value)
        elif arg in flags:
            setattr(target, flags[arg], True)
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    return positional
