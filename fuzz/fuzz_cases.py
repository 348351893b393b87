"""Fuzz inputs: mutated and generated archives, meta files, link flags and job files.

`make_case(tool, rng, corpus, cwd_abs)` returns one input as a `Case`: the files to
create (relative to the tool's working directory), the command line, and what the
input declares as outputs, read back leniently from the mutated input itself (a run
may change files only there, under `out/` and under `tmp/`, its TMPDIR). Every
generator starts from the real seeds in `fuzz_corpus` and mixes structure-aware
mutations (ar headers, JSON nodes, flag lists) with blind byte mutations and inputs
generated from scratch; a small share of inputs are the seeds unchanged, which must
succeed. The same (tool, seed) always gives the same input.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dist_lto.llvm import flags as lto_flags
from fuzz_corpus import Corpus

TOOLS = ("prepare", "plan", "opt", "distribute")
SCRATCH = ["out", "tmp"]
"""Directories every input may change: where outputs go, and TMPDIR."""


@dataclass
class Case:
    tool: str
    argv: list[str]
    files: dict[str, bytes]
    """Relative to the working directory; may climb (`../x`), staying in the sandbox."""
    dirs: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    """Symbolic links to create: path -> target."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Special files to create: path -> "fifo" (nobody reads it) or "null" (a character
    device like /dev/null, `mknod X c 1 3`; a FIFO where mknod is not allowed)."""
    outputs: list[str] = field(default_factory=list)
    """Paths the input declares as outputs (files or directories), as spelled."""
    clean_on_failure: list[str] = field(default_factory=list)
    """Declared outputs that a failed run must not leave behind (absent or empty dir)."""
    scratch: list[str] = field(default_factory=lambda: list(SCRATCH))
    """Directories the run may change freely (pre-existing files in them are not inputs)."""
    oracle: str = ""
    """For an unmutated seed or a safe generated input: what success must look like."""
    how: str = ""
    """The mutations applied, for the report."""
    expected: dict[str, bytes] = field(default_factory=dict)
    """Outputs a successful run must have written byte for byte (path -> contents)."""


# ---------------------------------------------------------------------------------
# Output paths drawn among the inputs, devices and FIFOs

NODES = {"in/null": "null", "in/fifo": "fifo", "out/null": "null", "out/fifo": "fifo"}
"""The special files an output may be pointed at: never replaced, written through
(the device) or refused in one line (the FIFO nobody reads)."""


def hostile_output(rng: random.Random, case: Case, inputs: list[str]) -> str:
    """An output path that is one of `inputs`, a device node or a FIFO (created in
    `case`), or a symbolic link to one of them."""
    roll = rng.randrange(4)
    if roll == 0 and inputs:
        return rng.choice(inputs)
    node = rng.choice(sorted(NODES))
    case.nodes[node] = NODES[node]
    if roll == 3:
        case.links["out/link-to-node"] = os.path.join("..", node)
        return "out/link-to-node"
    return node


# ---------------------------------------------------------------------------------
# Blind byte mutations

_INTERESTING_BYTES = b"\x00\xff\x7f\x80/.\n `0129#"


def mutate_bytes(data: bytes, rng: random.Random, others: list[bytes] | None = None) -> bytes:
    """1-8 random edits: bit flips, byte sets, inserts, deletes, copies, truncation, splices."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(8)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[rng.randrange(len(out))] = rng.choice(_INTERESTING_BYTES)
        elif op == 2:
            out[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 3 and out:
            del out[pos : pos + rng.randint(1, 64)]
        elif op == 4 and out:
            start = rng.randrange(len(out))
            out[pos:pos] = out[start : start + rng.randint(1, 128)]
        elif op == 5:
            del out[pos:]
        elif op == 6 and others:
            other = rng.choice(others)
            cut = rng.randrange(len(other) + 1)
            out[pos:] = other[cut:]
        elif op == 7 and len(out) >= 4:
            i = rng.randrange(len(out) - 3)
            out[i : i + 4] = rng.choice(
                [b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\xff\xff\xff\x7f", b"\x01\x00\x00\x80"]
            )
    return bytes(out)


# ---------------------------------------------------------------------------------
# ar archives

HOSTILE_NAMES = [
    b"../evil.o",
    b"../../evil.o",
    b"/abs.o",
    b"/etc/passwd",
    b"a/../../b.o",
    b".",
    b"..",
    b"",
    b"/",
    b"//",
    b"./x.o",
    b"a//b.o",
    b"x/",
    b"dir/",
    b"a" * 300,
    b"d/" * 100 + b"x.o",
    b"\xff\xfe.o",
    b"caf\xc3\xa9.o",
    b"name with space.o",
    b"nl\n.o",
    b"nul\x00.o",
    b"add.o",
    b"add~2.o",
    b"add~3.o",
    b"twice.o/x.o",
    b"twice.o",
    b"-rf",
    b"*",
    b".hidden.o",
    b"a\\b.o",
    b".x.o.tmp-1-dead",
    b"..o",
    b"...",
    b"x/..",
    b"x/../y.o",
    b"objects",
    b"sub/twice.o",
    b"sub",
    b"/SYM64/",
    b"__.SYMDEF",
    b"#1/20",
    b"/0",
    b"/9999",
    b"\xed\xa0\x80.o",
    "\u202e.o".encode(),
    b"a" * 255,
    b"b" * 256,
]
NORMAL_NAMES = [
    b"twice.o",
    b"add.o",
    b"ctor.o",
    b"native.o",
    b"unused.o",
    b"main.o",
    b"long_name_of_a_member_object.o",
    b"sub/inner.o",
    b"x.o",
]
MODES = [
    b"100644",
    b"100644",
    b"120777",
    b"20644",
    b"60644",
    b"10644",
    b"140755",
    b"40755",
    b"777777",
    b"abc",
    b"",
    b"-1",
    b"0",
    b"100000",
    b"1777777777",
]


def ar_header(name_field: bytes, size: int | bytes, mode: bytes = b"100644") -> bytes:
    """One 60-byte ar header (fields truncated or padded to their widths)."""
    size_field = size if isinstance(size, bytes) else str(size).encode()
    return (name_field[:16].ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6)
            + mode[:8].ljust(8) + size_field[:10].ljust(10) + b"`\n")  # fmt: skip


@dataclass
class _Member:
    name: bytes
    data: bytes
    mode: bytes = b"100644"


def build_archive(members: list[_Member], style: str, rng: random.Random) -> bytes:
    """A regular (`gnu`, `bsd`) or `thin` archive of `members`, structurally valid."""
    thin = style == "thin"
    out = [b"!<thin>\n" if thin else b"!<arch>\n"]
    if rng.random() < 0.3:  # a symbol table, which must not count as a member
        table = rng.randbytes(rng.choice([0, 4, 8, 13]))
        out.append(ar_header(b"/" if style != "bsd" else b"__.SYMDEF", len(table)) + table
                   + b"\n" * (len(table) & 1))  # fmt: skip
    if style == "bsd":
        for m in members:
            out.append(ar_header(b"#1/%d" % len(m.name), len(m.name) + len(m.data), m.mode))
            out.append(m.name + m.data + b"\n" * ((len(m.name) + len(m.data)) & 1))
        return b"".join(out)
    names = b""
    fields = []
    for m in members:
        if len(m.name) > 15 or b"/" in m.name or thin:
            fields.append(b"/%d" % len(names))
            names += m.name + b"/\n"
        else:
            fields.append(m.name + b"/")
    if names:
        out.append(ar_header(b"//", len(names)) + names + b"\n" * (len(names) & 1))
    for f, m in zip(fields, members, strict=True):
        if thin:
            out.append(ar_header(f, len(m.data), m.mode))
        else:
            out.append(ar_header(f, len(m.data), m.mode) + m.data + b"\n" * (len(m.data) & 1))
    return b"".join(out)


def _headers(data: bytes) -> list[tuple[int, int]]:
    """(header offset, data size) of each well-formed header, stopping at the first bad one."""
    found = []
    thin = data.startswith(b"!<thin>\n")
    offset = 8
    while offset + 60 <= len(data):
        field = data[offset + 48 : offset + 58].strip()
        if not field.isdigit() or data[offset + 58 : offset + 60] != b"`\n":
            break
        size = int(field)
        found.append((offset, size))
        name = data[offset : offset + 16].rstrip()
        inline = not thin or name in (b"/", b"//", b"/SYM64/")
        offset += 60 + ((size + (size & 1)) if inline else 0)
    return found


def _set_field(data: bytearray, header: int, start: int, width: int, value: bytes) -> None:
    data[header + start : header + start + width] = value[:width].ljust(width)


def mutate_archive(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """1-3 structure-aware edits of ar headers, the name table, members or the magic."""
    out = bytearray(data)
    done = []
    for _ in range(rng.randint(1, 3)):
        headers = _headers(bytes(out))
        op = rng.randrange(10)
        if not headers:
            op = 9
        header, size = rng.choice(headers) if headers else (8, 0)
        if op == 0:
            name = rng.choice(HOSTILE_NAMES)
            if len(name) <= 15 and b"/" not in name and rng.random() < 0.6:
                _set_field(out, header, 0, 16, name + b"/")
            else:  # BSD style: the name goes in front of the data
                _set_field(out, header, 0, 16, b"#1/%d" % len(name))
                _set_field(out, header, 48, 10, str(size + len(name)).encode())
                out[header + 60 : header + 60] = name
            done.append(f"name {name[:40]!r}")
        elif op == 1:
            mode = rng.choice(MODES)
            _set_field(out, header, 40, 8, mode)
            done.append(f"mode {mode!r}")
        elif op == 2:
            value = rng.choice([str(size + 1), str(max(size - 1, 0)), "0", "9999999999", "-1",
                                "  12", "1e3", "", "0x10", str(rng.randrange(len(out) + 100)),
                                "+5"]).encode()  # fmt: skip
            _set_field(out, header, 48, 10, value)
            done.append(f"size {value!r}")
        elif op == 3:
            out[header + 58 : header + 60] = rng.choice([b"\n\n", b"``", b"  ", b"`\x00"])
            done.append("terminator")
        elif op == 4:
            end = header + 60 + size + (size & 1)
            del out[header:end]
            done.append("drop member")
        elif op == 5:
            end = header + 60 + size + (size & 1)
            where = rng.choice([h for h, _ in headers] + [len(out)])
            out[where:where] = out[header:end]
            done.append("duplicate member")
        elif op == 6:
            name = out[header : header + 16].rstrip()
            if name == b"//":  # edit the name table in place, keeping its size
                body = header + 60
                if size:
                    i = body + rng.randrange(size)
                    piece = rng.choice([b"/", b"..", b"\n", b"\xff", b"/\n", b"../"])
                    out[i : i + len(piece)] = piece[: max(0, body + size - i)]
                done.append("name table edit")
            else:
                _set_field(out, header, 0, 16, b"/%d" % rng.choice([0, 1, 5, 17, 40, 100000]))
                done.append("name table reference")
        elif op == 7:
            name = rng.choice(HOSTILE_NAMES + NORMAL_NAMES)
            body = rng.choice([b"", rng.randbytes(rng.randint(1, 40)), b"BC\xc0\xde" + bytes(8),
                               b"\x7fELF" + bytes(60)])  # fmt: skip
            member = build_archive([_Member(name, body, rng.choice(MODES))], "gnu", rng)[8:]
            where = rng.choice([h for h, _ in headers] + [len(out)])
            out[where:where] = member
            done.append(f"insert member {name[:40]!r}")
        elif op == 8:
            out[header + 16 : header + 48] = rng.randbytes(32)
            done.append("date/uid/gid garbage")
        else:
            out[:8] = rng.choice([b"!<thin>\n", b"!<arch>\n", b"!<arch>\r", b"!<ARCH>\n"])
            done.append("magic")
    return bytes(out), ", ".join(done)


def _prepare_argv(
    archive: str = "in/lib.a", objects: str = "out/objects", manifest: str = "out/lib.json"
) -> list[str]:
    return ["prepare", "--archive", archive, "--objects-out", objects, "--manifest-out", manifest]


_PREPARE_OUTPUT_TWISTS: list[tuple[str, str, str]] = [
    # (objects dir, manifest, what)
    ("out/objects", "out/objects/lib.json", "manifest inside the objects dir"),
    ("in", "out/lib.json", "objects dir holds the inputs"),
    ("in/lib.a", "out/lib.json", "objects dir is the archive"),
    ("out/objects", "in/lib.a", "manifest is the archive"),
    ("out/objects", "out", "manifest is a directory"),
    ("out/d/e/f/objects", "out/g/h/lib.json", "deep new directories"),
    (".", "out/lib.json", "objects dir is the working directory"),
    ("out/objects", "out/lib.json", "stale objects dir"),
    ("out/objects/", "out//lib.json", "odd spellings"),
    ("out/x/../objects", "out/./lib.json", "dotted spellings"),
]


def prepare_case(rng: random.Random, corpus: Corpus, cwd_abs: str) -> Case:
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    objects_dir, manifest = "out/objects", "out/lib.json"
    roll = rng.random()
    oracle = ""
    if roll < 0.35:
        seed = rng.choice(sorted(corpus.archives))
        archive, how = mutate_archive(corpus.archives[seed], rng)
        how = f"{seed}: {how}"
    elif roll < 0.55:
        seed = rng.choice(sorted(corpus.archives))
        archive = mutate_bytes(corpus.archives[seed], rng, list(corpus.archives.values()))
        how = f"{seed}: bytes"
    elif roll < 0.75:
        style = rng.choice(["gnu", "gnu", "bsd", "thin"])
        members = []
        for _ in range(rng.randint(0, 8)):
            name = rng.choice(HOSTILE_NAMES if rng.random() < 0.4 else NORMAL_NAMES)
            kind = rng.random()
            data = (rng.choice(list(corpus.objects.values())) if kind < 0.6
                    else rng.randbytes(rng.randint(0, 300)))  # fmt: skip
            mode = rng.choice(MODES) if rng.random() < 0.2 else b"100644"
            members.append(_Member(name, data, mode))
            if style == "thin":
                _thin_member_file(files, name, data)
        archive = build_archive(members, style, rng)
        how = f"generated {style}: {[m.name[:30] for m in members]}"
        if style == "thin":
            _thin_links(links, cwd_abs)
    elif roll < 0.87:
        archive, how = _thin_case(rng, corpus, files, links, cwd_abs)
    elif roll < 0.93:
        seed = rng.choice([*sorted(corpus.archives), "thin"])
        archive = corpus.thin_archive if seed == "thin" else corpus.archives[seed]
        if seed == "thin":
            for name in ("twice.o", "native.o", "add.o"):
                files[f"in/obj/{name}"] = corpus.objects[name]
        how = f"{seed}: unchanged"
        oracle = "prepare"
    else:
        seed = rng.choice(sorted(corpus.archives))
        archive = corpus.archives[seed]
        objects_dir, manifest, how = rng.choice(_PREPARE_OUTPUT_TWISTS)
        if how == "stale objects dir":
            files["out/objects/stale.o"] = b"stale"
        how = f"{seed}: {how}"
    files["in/lib.a"] = archive
    return Case(
        tool="prepare",
        argv=_prepare_argv(objects=objects_dir, manifest=manifest),
        files=files,
        links=links,
        outputs=[objects_dir, manifest],
        clean_on_failure=[manifest, objects_dir],
        oracle=oracle,
        how=how,
    )


def _thin_member_file(files: dict[str, bytes], name: bytes, data: bytes) -> None:
    """Create a thin member's file where the linker would look, when that stays inside."""
    try:
        text = name.decode()
    except UnicodeDecodeError:
        return
    path = os.path.normpath(os.path.join("in", text)) if text else ""
    clash = any(other.startswith(path + "/") or path.startswith(other + "/") for other in files)
    if (
        text
        and "\0" not in text
        and not text.startswith("/")
        and path.startswith("in/")
        and len(text) < 200
        and not text.endswith("/")
        and not clash
    ):
        files[path] = data


def _thin_links(links: dict[str, str], cwd_abs: str) -> None:
    links.update(
        {
            "in/up": "..",
            "in/loop": "loop",
            "in/objlink": "obj",
            "in/dev": "/dev/zero",
            "in/outside": "/usr/lib",
            "in/absobj": os.path.join(cwd_abs, "in", "obj"),
        }
    )


_THIN_NAMES = [b"obj/twice.o", b"objlink/twice.o", b"up/in/obj/twice.o", b"loop/x.o",
               b"dev", b"outside/os-release", b"absobj/twice.o", b"obj/../obj/add.o",
               b"obj//native.o", b"./obj/add.o", b"obj", b"missing.o", b"../in/obj/add.o",
               b"../../../../../../etc/hostname"]  # fmt: skip


def _thin_case(
    rng: random.Random, corpus: Corpus, files: dict[str, bytes], links: dict[str, str], cwd_abs: str
) -> tuple[bytes, str]:
    """A thin archive naming member files through links, `..`, devices, directories."""
    for name in ("twice.o", "native.o", "add.o"):
        files[f"in/obj/{name}"] = corpus.objects[name]
    _thin_links(links, cwd_abs)
    names = [rng.choice(_THIN_NAMES) for _ in range(rng.randint(1, 4))]
    names.append(os.fsencode(os.path.join(cwd_abs, "in", "obj", "add.o")))
    rng.shuffle(names)
    members = [_Member(n, bytes(rng.choice([0, 10, 100]))) for n in names]
    archive = build_archive(members, "thin", rng)
    if rng.random() < 0.4:
        archive, how = mutate_archive(archive, rng)
        return archive, f"thin {names}: {how}"
    return archive, f"thin {names}"


# ---------------------------------------------------------------------------------
# JSON documents (meta files, manifests, job files)

_STRING_PIECES = ["../", "./", "/", "//", "/..", "/.", "~", " ", "\n", "\r", "\0", "\t", "é",
                  "\udc80", "\\", '"', "(x.o at 12)", ".thinlto.bc", ".imports", "*", "-",
                  "--", "@", "-o", "@file", "\U0001f600", "%s", "{}"]  # fmt: skip
_SCALARS: list[Any] = [0, 1, -1, 2, 7, 2**31, 2**32, 2**63, 2**64 + 1, -(2**63), 0.5, 1e308,
                       True, False, None, "", "x", "1", [], {}]  # fmt: skip


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    found = [(path, doc)]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _nodes(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _nodes(value, (*path, i))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def mutate_string(text: str, rng: random.Random, pool: list[str], cwd_abs: str) -> str:
    op = rng.randrange(9)
    piece = rng.choice(_STRING_PIECES)
    if op == 0:
        return piece + text
    if op == 1:
        return text + piece
    if op == 2:
        i = rng.randrange(len(text) + 1)
        return text[:i] + piece + text[i:]
    if op == 3 and pool:
        return rng.choice(pool)
    if op == 4:
        return os.path.join(cwd_abs, text)
    if op == 5:
        return text[: rng.randrange(len(text) + 1)]
    if op == 6:
        return text * rng.choice([2, 3, 200])
    if op == 7:
        return ""
    return text.replace("/", rng.choice(["//", "/./", "/x/../"]), 1)


def mutate_json(doc: Any, rng: random.Random, cwd_abs: str, rounds: int = 0) -> tuple[bytes, str]:
    """1-4 edits at random nodes (type changes, removed or unknown keys, duplicated,
    dropped or swapped list items, path spellings), serialised with the standard library
    (which also writes lone surrogates, huge integers and NaN), sometimes then byte-mutated."""
    doc = copy.deepcopy(doc)
    done = []
    for _ in range(rounds or rng.randint(1, 4)):
        nodes = _nodes(doc)
        strings = [v for _, v in nodes if isinstance(v, str)]
        path, value = rng.choice(nodes)
        where = "/" + "/".join(map(str, path))
        op = rng.random()
        if isinstance(value, str) and op < 0.6:
            new = mutate_string(value, rng, strings, cwd_abs)
            doc = _replace(doc, path, new)
            done.append(f"{where}={new[:60]!r}")
        elif isinstance(value, bool) and op < 0.5:
            doc = _replace(doc, path, not value)
            done.append(f"{where} flipped")
        elif isinstance(value, int) and not isinstance(value, bool) and op < 0.6:
            new = rng.choice([value + 1, value - 1, -value - 1, 2**40, 0])
            doc = _replace(doc, path, new)
            done.append(f"{where}={new}")
        elif isinstance(value, dict) and value and op < 0.6:
            key = rng.choice(sorted(value))
            choice = rng.randrange(3)
            if choice == 0:
                del value[key]
                done.append(f"{where}/{key} removed")
            elif choice == 1:
                value[rng.choice(["extra", "Version", key + "_", ""])] = rng.choice(_SCALARS)
                done.append(f"{where} unknown key")
            else:
                value[key] = copy.deepcopy(rng.choice(nodes)[1])
                done.append(f"{where}/{key} replaced by another node")
        elif isinstance(value, list) and op < 0.7:
            choice = rng.randrange(5)
            if choice == 0 and value:
                del value[rng.randrange(len(value))]
                done.append(f"{where} item removed")
            elif choice == 1 and value:
                value.insert(rng.randrange(len(value) + 1), copy.deepcopy(rng.choice(value)))
                done.append(f"{where} item duplicated")
            elif choice == 2 and len(value) > 1:
                i, j = rng.sample(range(len(value)), 2)
                value[i], value[j] = value[j], value[i]
                done.append(f"{where} items swapped")
            elif choice == 3:
                value.clear()
                done.append(f"{where} emptied")
            else:
                value.append(copy.deepcopy(rng.choice(nodes)[1]))
                done.append(f"{where} node appended")
        else:
            new = copy.deepcopy(rng.choice(_SCALARS))
            doc = _replace(doc, path, new)
            done.append(f"{where}={new!r}")
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2]))
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        data = mutate_bytes(data, rng)
        done.append("bytes")
    return data, "; ".join(done)


def _strings_at(doc: Any, keys: set[str]) -> list[str]:
    """Every string value (or string in a list value) under a key in `keys`, anywhere."""
    found: list[str] = []
    for path, value in _nodes(doc):
        keyed = (path and path[-1] in keys) or (len(path) > 1 and path[-2] in keys)
        if keyed and isinstance(value, str):
            found.append(value)
    return found


def _lenient_json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8", "surrogatepass"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


# ---------------------------------------------------------------------------------
# plan

_META_OUTPUT_KEYS = {"index_dir", "link_plan_output", "final_link_args_output",
                     "index_output", "plan_output", "opt_output", "opt_objects_dir"}  # fmt: skip


def plan_case(rng: random.Random, corpus: Corpus, cwd_abs: str) -> Case:
    files = dict(corpus.plan_tree)
    meta = files["meta.json"]
    replay = rng.random() < 0.85
    argv = (
        ["plan", "--replay", "meta.json"]
        if replay
        else ["plan", "meta.json", "--", corpus.clang, *corpus.link_flags, "-o", "out/app"]
    )
    if not replay:
        files = {k: v for k, v in files.items() if not k.startswith(corpus.index_dir + "/")}
    if rng.random() < 0.2:
        argv[1:1] = ["--jobs", rng.choice(["2", "3"])]
    roll = rng.random()
    oracle = ""
    if roll < 0.55:
        meta, how = mutate_json(corpus.plan_meta, rng, cwd_abs)
    elif roll < 0.62:
        meta = mutate_bytes(meta, rng)
        how = "meta bytes"
    elif roll < 0.72:
        name = rng.choice([k for k in files if k.endswith("manifest.json")])
        files[name], how = mutate_json(_lenient_json(files[name]), rng, cwd_abs)
        how = f"{name}: {how}"
    elif replay and roll < 0.85:
        how = _mutate_index_outputs(files, rng, corpus, cwd_abs)
    elif roll < 0.90:
        how = "unchanged"
        oracle = "plan"
    else:
        twist = rng.randrange(5)
        if twist == 0:
            argv = ["plan", "--replay", "missing.json"]
        elif twist == 1:
            argv = ["plan", "--replay", "in"]
        elif twist == 2:
            argv = ["plan", "--jobs", rng.choice(["-1", "x", "0", "100"]), "--replay", "meta.json"]
        elif twist == 3:
            argv = ["plan", "meta.json"]
        else:
            argv = ["plan", "meta.json", "--", "/nonexistent/clang"]
        how = f"argv {argv}"
    case = Case(tool="plan", argv=argv, files=files, dirs=["tmp"], oracle=oracle, how=how)
    if rng.random() < 0.08:
        doc = copy.deepcopy(corpus.plan_meta)
        spots = [(path, value) for path, value in _nodes(doc)
                 if path and path[-1] in _META_OUTPUT_KEYS and isinstance(value, str)]  # fmt: skip
        where, _ = rng.choice(spots)
        inputs = [k for k in files if not k.startswith(corpus.index_dir + "/") or replay]
        target = hostile_output(rng, case, inputs)
        meta = json.dumps(_replace(doc, where, target)).encode()
        case.how = f"meta output {'/'.join(map(str, where))} -> {target}"
        case.oracle = ""
    files["meta.json"] = meta
    doc = _lenient_json(meta)
    case.outputs = _strings_at(doc, _META_OUTPUT_KEYS) if doc is not None else []
    link_plan = doc.get("link_plan_output") if isinstance(doc, dict) else None
    case.clean_on_failure = (
        [link_plan] if isinstance(link_plan, str) and link_plan not in case.nodes else []
    )
    return case


def _mutate_index_outputs(
    files: dict[str, bytes], rng: random.Random, corpus: Corpus, cwd_abs: str
) -> str:
    """What a broken or hostile index step might have left: odd lists and imports files."""
    listing = f"{corpus.index_dir}/index.list"
    imports = [k for k in files if k.endswith(".imports")]
    lines = files[listing].decode().split("\n")
    op = rng.randrange(6)
    if op == 0:
        i = rng.randrange(len(lines))
        lines[i] = mutate_string(lines[i], rng, lines, cwd_abs)
        files[listing] = "\n".join(lines).encode("utf-8", "surrogatepass")
        return f"index.list line {i}: {lines[i][:60]!r}"
    if op == 1:
        files[listing] = mutate_bytes(files[listing], rng)
        return "index.list bytes"
    if op == 2:
        name = rng.choice(imports)
        entries = files[name].decode().split("\n")
        extra = rng.choice(
            [m for m, _ in corpus.modules]
            + [
                "in/obj/native.o",
                "../x.o",
                "/abs.o",
                "in/prep/libm/objects/unused.o",
                "",
                "libm.a(add.o at 4)",
            ]
        )
        entries.insert(rng.randrange(len(entries) + 1), mutate_string(extra, rng, [], cwd_abs)
                       if rng.random() < 0.3 else extra)  # fmt: skip
        files[name] = "\n".join(entries).encode("utf-8", "surrogatepass")
        return f"{name}: import {extra!r}"
    if op == 3:
        name = rng.choice(imports)
        files[name] = mutate_bytes(files[name], rng)
        return f"{name}: bytes"
    if op == 4:
        name = rng.choice(
            [k for k in files if k.startswith("out/") and k.endswith((".imports", ".thinlto.bc"))]
        )
        del files[name]
        return f"{name} removed"
    name = rng.choice([k for k in files if k.endswith(".thinlto.bc")])
    files[name] = mutate_bytes(files[name], rng)
    return f"{name}: bytes"


# ---------------------------------------------------------------------------------
# Link flags (opt) and job arguments (distribute)


def _flag_vocabulary() -> list[str]:
    """Flags our translation knows (read from its own tables) and real flags it does not."""
    t = lto_flags
    words: list[str] = list(t._DRIVER_OPT_LEVELS)
    words += sorted(t._DRIVER_PAIRS_DROPPED) + sorted(t._DRIVER_DROPPED)
    words += [p + "x" for p in t._DRIVER_DROPPED_PREFIXES]
    words += [f + ("x" if f.endswith("=") else "") for f in t._F_DROPPED]
    words += [f"-Wl,--{name}" + ("=x" if name.endswith("-") else "") for name in t._LLD_DROPPED_LTO]
    words += [f"-Wl,--{name}" + ("x" if name.endswith("=") else "") for name in t._LLD_REJECTED_LTO]
    words += [f"-Wl,--plugin-opt={name}" for name in t._PLUGIN_CODEGEN]
    words += [f"-Wl,--{name},x" for name in sorted(t._LLD_SEPARATE)[:20]]
    words += [
        "-O", "-O5", "-Ox", "-O-1", "-Wl,--lto-O0", "-Wl,--lto-O3", "-Wl,--lto-O9", "-Wl,--lto-O",
        "-Wl,--lto-CGO2", "-Wl,--lto-CGO1", "-Wl,-plugin-opt,O1", "-Wl,--plugin-opt=O3",
        "-Wl,--plugin-opt=O7", "-Wl,-plugin-opt", "-Xlinker", "-Xlinker --lto-O1",
        "-Wl,-mllvm,-inline-threshold=500", "-Wl,-mllvm", "-Wl,-mllvm=-unroll-threshold=10",
        "-Wl,-mllvm,-bogus-option", "-Wl,--plugin-opt=mcpu=bogus", "-Wl,--plugin-opt=mcpu=znver3",
        "-Wl,--lto-sample-profile=missing.prof", "-Wl,--plugin-opt=sample-profile=x",
        "-Wl,--lto-basic-block-sections=all", "-Wl,--lto-basic-block-sections=labels",
        "-Wl,--lto-basic-block-sections=missing.txt", "-Wl,--load-pass-plugin=/nonexistent.so",
        "-Wl,--thinlto-remote-compiler-arg=-fno-omit-frame-pointer", "-Wl,--lto-bogus",
        "-Wl,--thinlto-bogus", "-Wl,--plugin-opt=bogus", "-Wl,--plugin-opt=-bogus-llvm-flag",
        "-Wl,--plugin-opt=dwo_dir=dwo", "-Wl,--plugin-opt=emit-llvm", "-Wl,-pie", "-Wl,--no-pie",
        "-Wl,-shared", "-Wl,-r", "-Wl,@resp", "-Wl,", "-Wl,,,", "-march=x86-64-v3",
        "-march=bogus", "-mcpu=znver3", "-mtune=generic", "-mcmodel=large", "-mno-red-zone",
        "-fPIC", "-fpic", "-fPIE", "-fno-omit-frame-pointer", "-fstack-protector-strong",
        "-fno-plt", "-fcf-protection=full", "-falign-functions=64", "-fbogus-flag",
        "-fthinlto-index=other.bc", "-fprofile-use=missing.profdata", "-fpass-plugin=/x.so",
        "-fplugin=/nonexistent.so", "--target=x86_64-linux-gnu", "--target=aarch64-linux-gnu",
        "-target", "x86_64-linux-gnu", "--target=bogus", "-g", "-g3", "-ggdb", "-gsplit-dwarf",
        "-gsplit-dwarf=single", "-gsplit-dwarf=none", "-gno-split-dwarf", "-gdwarf-4",
        "-shared", "-static", "-static-pie", "-pie", "-no-pie", "-nopie", "-r", "-c", "-S",
        "-E", "-x", "c", "-xc", "-###", "-emit-llvm", "@resp.txt", "-", "--", "-lm", "-L.",
        "main.o", "libfoo.a", "-o", "out/app", "-z", "now", "-Wall", "-Werror", "-w", "-v",
        "-pthread", "--bogus", "-bogus", "-Xclang", "-disable-llvm-passes", "-mllvm",
        "-inline-threshold=0", "-fsanitize=address", "-fprofile-generate", "-ftime-trace",
        "-fsave-optimization-record", "-fstack-usage", "-femit-all-decls", "-std=c11",
    ]  # fmt: skip
    return words


FLAGS = _flag_vocabulary()

_WRITES_FILES = ("-ftime-trace", "-fsave-optimization-record", "-foptimization-record-",
                 "-fstack-usage", "-fproc-stat-report", "-fthin-link-bitcode=", "-save-temps",
                 "-Wl,", "-o", "-M", "-fprofile-generate", "-fprofile-instr-generate",
                 "-fcs-profile-generate", "-fcoverage", "-ftest-coverage", "-fprofile-arcs",
                 "-fembed-bitcode", "-gsplit-dwarf", "-fcrash-diagnostics", "-###", "-E",
                 "-S", "-emit-llvm", "-c", "--")  # fmt: skip
"""Flags with which clang itself writes files other than its `-o` output (or prints
instead of compiling): a job file that asks for them gets what it asked for, so the
distributor's fuzzing leaves them out."""

JOB_FLAGS = [f for f in FLAGS if not f.startswith(_WRITES_FILES) and f != "-"]


def link_flags_file(rng: random.Random, seed: list[str]) -> tuple[bytes, str]:
    roll = rng.random()
    if roll < 0.7:
        flags = list(seed) if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 8)):
            flags.insert(rng.randrange(len(flags) + 1), rng.choice(FLAGS))
        data = "\n".join(flags).encode() + (b"\n" if rng.random() < 0.8 else b"")
        return data, f"flags {flags}"
    if roll < 0.85:
        data = mutate_bytes("\n".join(seed + rng.sample(FLAGS, 3)).encode(), rng)
        return data, "flags bytes"
    if roll < 0.93:
        return b"", "no flags"
    return "\n".join(seed).encode() + b"\n", "seed flags"


# ---------------------------------------------------------------------------------
# opt


def _option_values(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """Values of `--name X` / `--name=X` options (before `--`)."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in names:
            if eq:
                found.append(value)
            elif i + 1 < len(argv):
                found.append(argv[i + 1])
    return found


def opt_case(rng: random.Random, corpus: Corpus, cwd_abs: str) -> Case:
    files = dict(corpus.plan_tree)
    module, index = rng.choice(corpus.modules)
    out = "out/opt/m.o"
    args, how = link_flags_file(rng, corpus.link_flags)
    files["in/link.args"] = args
    argv = [
        "opt",
        "--input",
        module,
        "--index",
        index,
        "--out",
        out,
        "--args",
        "in/link.args",
        "--",
        corpus.clang,
    ]
    oracle = "opt" if how in ("seed flags", "no flags") else ""
    roll = rng.random()
    if roll < 0.12:
        others = [v for k, v in files.items() if k.endswith(".thinlto.bc")]
        files[index] = mutate_bytes(files[index], rng, others)
        how += "; index bytes"
        oracle = ""
    elif roll < 0.15:
        files[module] = mutate_bytes(files[module], rng)
        how += "; module bytes"
        oracle = ""
    elif roll < 0.30:
        argv, twist = _opt_argv_twist(rng, argv, module, index, out, corpus)
        how += f"; {twist}"
        oracle = ""
    case = Case(
        tool="opt",
        argv=argv,
        files=files,
        dirs=["out/opt", "tmp"],
        scratch=["out/opt", "tmp"],  # out/index holds inputs here
        oracle=oracle,
        how=how,
    )
    if roll >= 0.30 and rng.random() < 0.10:
        option = rng.choice(["--out", "--dwo"])
        target = hostile_output(rng, case, [module, index, "in/link.args"])
        if option == "--out":
            argv[argv.index("--out") + 1] = target
        else:
            argv[argv.index("--") : argv.index("--")] = ["--dwo", target]
        case.how += f"; {option} {target}"
        case.oracle = ""
    case.outputs = _option_values(argv, ("--out", "--dwo"))
    case.clean_on_failure = [o for o in case.outputs if o not in case.nodes]
    return case


def _opt_argv_twist(
    rng: random.Random, argv: list[str], module: str, index: str, out: str, corpus: Corpus
) -> tuple[list[str], str]:
    twist = rng.randrange(16)
    argv = list(argv)
    if twist == 0:
        argv[argv.index("--out") + 1] = module
        return argv, "--out is the input"
    if twist == 1:
        argv[argv.index("--out") + 1] = index
        return argv, "--out is the index"
    if twist == 2:
        argv[argv.index("--") : argv.index("--")] = ["--dwo", out]
        return argv, "--dwo is --out"
    if twist == 3:
        argv[argv.index("--") : argv.index("--")] = ["--dwo", "out/opt/m.dwo"]
        return argv, "--dwo"
    if twist == 4:
        argv[argv.index("--out") + 1] = "out/missing/m.o"
        return argv, "--out in a missing directory"
    if twist == 5:
        argv[argv.index("--input") + 1] = "in/obj/native.o"
        return argv, "native input"
    if twist == 6:
        argv[argv.index("--input") + 1] = "./" + module
        return argv, "respelled input"
    if twist == 7:
        argv.insert(1, "--print-command")
        return argv, "--print-command"
    if twist == 8:
        argv.insert(1, "--no-lld-defaults")
        return argv, "--no-lld-defaults"
    if twist == 9:
        argv += rng.sample(FLAGS, 2)
        return argv, f"extra flags {argv[-2:]}"
    if twist == 10:
        argv[-1] = rng.choice(["/bin/false", "/nonexistent/clang", "in", "in/obj/main.o"])
        return argv, f"compiler {argv[-1]}"
    if twist == 11:
        i = rng.randrange(1, len(argv) - 2)
        del argv[i]
        return argv, f"argument {i} removed"
    if twist == 12:
        argv[argv.index("--index") + 1] = rng.choice(
            [m for m, _ in corpus.modules] + ["in", "missing.bc"]
        )
        return argv, f"--index {argv[argv.index('--index') + 1]}"
    if twist == 13:
        argv[argv.index("--args") + 1] = rng.choice(["in", "missing.args", "in/obj/main.o"])
        return argv, f"--args {argv[argv.index('--args') + 1]}"
    if twist == 14:
        argv[argv.index("--out") + 1] = "out/opt"
        return argv, "--out is a directory"
    argv[argv.index("--out") + 1] = rng.choice(["out/opt/", "out/opt/.", "/", "."])
    return argv, f"--out {argv[argv.index('--out') + 1]}"


# ---------------------------------------------------------------------------------
# distribute


def _job_args_mutation(job: dict[str, Any], rng: random.Random) -> str:
    entry = rng.choice(job["jobs"]) if job["jobs"] and rng.random() < 0.7 else job["common"]
    args = entry["args"]
    flag = rng.choice(JOB_FLAGS)
    args.insert(rng.randrange(len(args) + 1), flag)
    return f"args + {flag!r}"


def distribute_case(rng: random.Random, corpus: Corpus, cwd_abs: str) -> Case:
    files = dict(corpus.dtlto_tree)
    job_file = corpus.job_file
    cache = ["--no-cache"] if rng.random() < 0.6 else ["--cache-dir", "out/cache"]
    argv = ["distribute", *cache, "--jobs", rng.choice(["1", "2", "3"]), job_file]
    roll = rng.random()
    oracle = ""
    expected: dict[str, bytes] = {}
    if roll < 0.55:
        files[job_file], how = mutate_json(corpus.dtlto_job, rng, cwd_abs)
    elif roll < 0.65:
        job = copy.deepcopy(corpus.dtlto_job)
        how = _job_args_mutation(job, rng)
        files[job_file] = json.dumps(job).encode()
    elif roll < 0.72:
        files[job_file] = mutate_bytes(files[job_file], rng)
        how = "job file bytes"
    elif roll < 0.84:
        names = sorted(k for k in files if k.endswith(".thinlto.bc") or k.endswith(".o"))
        name = rng.choice(names)
        files[name] = mutate_bytes(files[name], rng, [files[n] for n in names])
        how = f"{name}: bytes"
    elif roll < 0.87:
        how = "unchanged"
        oracle = "distribute"
    elif roll < 0.93:
        # A full cache whose entries a disk fault, a bad copy or another user damaged:
        # the link must succeed with exactly the objects a clean run writes.
        files.update(corpus.dtlto_cache)
        argv = ["distribute", "--cache-dir", "out/cache", "--jobs", argv[-2], job_file]
        entries = sorted(corpus.dtlto_cache)
        damaged = rng.sample(entries, rng.randint(0, min(3, len(entries))))
        for name in damaged:
            files[name] = mutate_bytes(files[name], rng, [files[n] for n in entries])
        for name in rng.sample(entries, rng.randint(0, 1)):
            files.pop(name)
            damaged.append(f"{name} removed")
        how = f"cache restore, damaged: {damaged}"
        oracle = "distribute"
        expected = dict(corpus.dtlto_outputs)
    else:
        twist = rng.choice([["--jobs", "0"], ["--jobs", "x"], ["-j", "1"],
                            ["--cache-max-size", rng.choice(["x", "0", "1K", "-1", "9T"])],
                            ["--verbose"], ["missing.json"], ["in"], ["--no-cache", "--cache-dir",
                            "out/c"], [job_file, job_file]])  # fmt: skip
        argv = ["distribute", "--cache-dir", "out/cache", *twist]
        if job_file not in twist and "missing.json" not in twist and "in" not in twist:
            argv.append(job_file)
        how = f"argv {argv}"
    doc = _lenient_json(files[job_file])
    outputs: list[str] = []
    inputs: list[str] = [job_file]
    if isinstance(doc, dict) and isinstance(doc.get("jobs"), list):
        for entry in doc["jobs"]:
            if isinstance(entry, dict) and isinstance(entry.get("outputs"), list):
                outputs += [o for o in entry["outputs"] if isinstance(o, str)]
            if isinstance(entry, dict) and isinstance(entry.get("inputs"), list):
                inputs += [i for i in entry["inputs"] if isinstance(i, str) and i in files]
    case = Case(
        tool="distribute",
        argv=argv,
        files=files,
        dirs=["tmp", "in"],
        links={"bin/clang": corpus.clang},
        oracle=oracle,
        how=how,
        expected=expected,
    )
    if rng.random() < 0.08:
        trace = hostile_output(rng, case, inputs)
        argv.insert(1, f"--trace={trace}")
        outputs.append(trace)
        case.how += f"; --trace {trace}"
        case.oracle = ""
        case.expected = {}
    case.outputs = outputs
    return case


GENERATORS: dict[str, Callable[[random.Random, Corpus, str], Case]] = {
    "prepare": prepare_case,
    "plan": plan_case,
    "opt": opt_case,
    "distribute": distribute_case,
}


def make_case(tool: str, seed: int, corpus: Corpus, cwd_abs: str) -> Case:
    """Input number `seed` for `tool`: the same arguments always give the same input."""
    rng = random.Random(f"{tool}:{seed}")
    return GENERATORS[tool](rng, corpus, cwd_abs)
