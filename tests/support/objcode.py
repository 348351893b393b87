"""Functions of an x86-64 ELF relocatable object, compared without regard to layout.

A function is its bytes plus its relocations, each relocation named by its offset in
the function, its type, its target (symbol name, or section name for a section
symbol) and its addend. Two objects laid out differently have equal functions when
they generate the same code against the same targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

R_X86_64_PC32 = 2
R_X86_64_PLT32 = 4
R_X86_64_GOTPCREL = 9
R_X86_64_GOTPCRELX = 41
R_X86_64_REX_GOTPCRELX = 42
GOT_LOADS = frozenset({R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX})
"""Relocations that load a symbol's address from its GOT entry."""

MOV = 0x8B
LEA = 0x8D


@dataclass(frozen=True)
class Reloc:
    offset: int
    kind: int
    target: str
    addend: int


@dataclass(frozen=True)
class Function:
    code: bytes
    relocs: tuple[Reloc, ...]


@dataclass(frozen=True)
class Symbols:
    """An object's functions, and the global symbols it defines."""

    functions: dict[str, Function]
    defined: frozenset[str]
    ordered: tuple[tuple[str, Function], ...] = ()
    """Every function in symbol-table order, local ones of the same name included."""


def _word(data: bytes, offset: int, size: int) -> int:
    return int.from_bytes(data[offset : offset + size], "little")


def read(path: Path) -> Symbols:
    """Every defined function of an ELF64 relocatable object, and its defined globals."""
    data = path.read_bytes()
    shoff, shentsize, shnum, shstrndx = (
        _word(data, 0x28, 8),
        _word(data, 0x3A, 2),
        _word(data, 0x3C, 2),
        _word(data, 0x3E, 2),
    )
    fields = ((0, 4), (4, 4), (0x18, 8), (0x20, 8), (0x28, 4), (0x2C, 4))
    sections = [
        tuple(_word(data, shoff + i * shentsize + o, s) for o, s in fields) for i in range(shnum)
    ]

    def string(table: int, offset: int) -> str:
        start = sections[table][2] + offset
        return data[start : data.index(b"\0", start)].decode()

    names = [string(shstrndx, s[0]) for s in sections]
    symtab = next(i for i, s in enumerate(sections) if s[1] == 2)  # SHT_SYMTAB
    _, _, sym_off, sym_size, strtab, _ = sections[symtab]
    symbols = []
    for j in range(sym_size // 24):
        base = sym_off + j * 24
        name, info, shndx = _word(data, base, 4), data[base + 4], _word(data, base + 6, 2)
        value, size = _word(data, base + 8, 8), _word(data, base + 16, 8)
        symbols.append((string(strtab, name), info, shndx, value, size))
    relocs: dict[int, list[tuple[int, int, int, int]]] = {}
    for s in sections:
        if s[1] == 4:  # SHT_RELA
            relocs[s[5]] = [
                (
                    _word(data, s[2] + k * 24, 8),
                    _word(data, s[2] + k * 24 + 8, 4),
                    _word(data, s[2] + k * 24 + 12, 4),
                    int.from_bytes(
                        data[s[2] + k * 24 + 16 : s[2] + k * 24 + 24], "little", signed=True
                    ),
                )
                for k in range(s[3] // 24)
            ]
    functions = {}
    ordered = []
    defined = set()
    for name, info, shndx, value, size in symbols:
        if shndx == 0 or shndx >= 0xFF00:
            continue
        if info >> 4 != 0:  # not STB_LOCAL
            defined.add(name)
        if info & 0xF != 2:  # STT_FUNC
            continue
        start = sections[shndx][2] + value
        fixups = []
        for offset, kind, sym, addend in relocs.get(shndx, []):
            if value <= offset < value + size:
                target = symbols[sym]
                fixups.append(Reloc(offset - value, kind, target[0] or names[target[2]], addend))
        functions[name] = Function(
            data[start : start + size],
            tuple(sorted(fixups, key=lambda r: (r.offset, r.kind, r.target, r.addend))),
        )
        ordered.append((name, functions[name]))
    return Symbols(functions, frozenset(defined), tuple(ordered))


def relaxes_to(ours: Function, reference: Function) -> bool:
    """Whether `ours` becomes `reference` once the linker relaxes its GOT loads: the
    only differences are `mov X@GOTPCREL(%rip)` where the reference has `lea X(%rip)`,
    which LLD rewrites into that `lea` for a symbol defined in the executable."""
    if len(ours.code) != len(reference.code) or len(ours.relocs) != len(reference.relocs):
        return False
    code = bytearray(ours.code)
    for mine, ref in zip(ours.relocs, reference.relocs, strict=True):
        if mine == ref:
            continue
        if not (
            mine.kind in (R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX)
            and ref.kind == R_X86_64_PC32
            and (mine.offset, mine.target, mine.addend) == (ref.offset, ref.target, ref.addend)
            and mine.offset >= 2
            and code[mine.offset - 2] == MOV
            and reference.code[ref.offset - 2] == LEA
        ):
            return False
        code[mine.offset - 2] = LEA
    return bytes(code) == reference.code


def got_only_in(ours: Function, reference: Function) -> set[str]:
    """Symbols `ours` loads from the GOT and `reference` does not."""
    theirs = {r.target for r in reference.relocs if r.kind in GOT_LOADS}
    return {r.target for r in ours.relocs if r.kind in GOT_LOADS} - theirs


def functions(path: Path) -> dict[str, Function]:
    """Every defined function of an object (`read` without the defined globals)."""
    return read(path).functions


def numbered(path: Path) -> dict[tuple[str, int], Function]:
    """Every defined function by name and occurrence (a program's local functions may
    share a name: the second `init` is `("init", 1)`)."""
    seen: dict[str, int] = {}
    found = {}
    for name, function in read(path).ordered:
        found[(name, seen.get(name, 0))] = function
        seen[name] = seen.get(name, 0) + 1
    return found
