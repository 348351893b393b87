"""Response files: the GNU `@FILE` syntax that clang and LLD expand.

The planner writes the index step's and the final link's arguments this way, and
`dist-lto upstream plan` reads a final link's back. Every whitespace, quote and
backslash character is escaped with a backslash; an empty argument is ''.
"""

import re

from dist_lto.errors import BadInput

_SPECIAL = re.compile(r"""[ \t\r\n\v\f'"\\]""")
_QUOTING = re.compile(r"""['"\\]""")
_BLANKS = re.compile(r"[ \t\r\n\v\f]+")


def quote_arg(arg: str) -> str:
    if not arg:
        return "''"
    return _SPECIAL.sub(lambda m: "\\" + m.group(0), arg)


def response_file(args: list[str]) -> bytes:
    """One argument per line, escaped for `@FILE` expansion by clang or LLD."""
    return "".join(quote_arg(a) + "\n" for a in args).encode()


def parse_response_file(text: str, file: str = "response file") -> list[str]:
    """The arguments of a GNU-syntax response file (quotes and backslash escapes)."""
    if not _QUOTING.search(text):  # what the planner writes for plain paths: no escapes
        return [word for word in _BLANKS.split(text) if word]
    args: list[str] = []
    token: list[str] = []
    in_token = False
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            token.append(text[i + 1])
            in_token = True
            i += 2
            continue
        if quote:
            if c == quote:
                quote = ""
            else:
                token.append(c)
        elif c in "'\"":
            quote = c
            in_token = True
        elif c in " \t\r\n\v\f":
            if in_token:
                args.append("".join(token))
                token, in_token = [], False
        else:
            token.append(c)
            in_token = True
        i += 1
    if quote:
        raise BadInput(f"{file}: unterminated {quote} quote")
    if in_token:
        args.append("".join(token))
    return args
