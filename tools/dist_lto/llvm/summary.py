"""A distributed backend's index summary, put in a form that depends on its meaning only.

Summary records of a distributed backend's index, as LLVM 22 writes them (summary
version 12, `writeCombinedGlobalValueSummary`). Values are numbered in the file, and
the numbering and the record order follow hash tables keyed by module paths: two
links of one program whose paths differ (LLD's process id in archive members' names)
write the same summary numbered and ordered differently, and compile to identical
objects. `canonical_summary` names every value by its GUID and sorts the records.
"""

from dist_lto.llvm.bitcode import FS_FLAGS

_SUMMARY_VERSION = 12
_FS_COMBINED_PROFILE = 5
"""[value, module, flags, insts, fflags, entry count, refs n, ro n, wo n, n x ref value,
(callee value, hotness) x m]"""
_FS_COMBINED_GLOBALVAR_INIT_REFS = 6
"""[value, module, flags, varflags, ref value...]"""
_FS_VERSION = 10
_FS_VALUE_GUID = 16
"""[value, GUID words]"""


def canonical_summary(
    records: list[tuple[int, list[int]]], modules: dict[int, str]
) -> bytes | None:
    """The summary with every value named by its GUID and module by `modules[id]`, records
    sorted; None for anything but the record kinds above (then the bytes are hashed as
    written, which is never wrong, only sometimes a needless miss)."""
    guids: dict[int, tuple[int, ...]] = {}
    for code, ops in records:
        if code == _FS_VALUE_GUID:
            if len(ops) < 2 or ops[0] in guids:
                return None
            guids[ops[0]] = tuple(ops[1:])
    canonical: list[tuple[object, ...]] = []
    try:
        for code, ops in records:
            if code in (_FS_VERSION, FS_FLAGS):
                if code == _FS_VERSION and ops != [_SUMMARY_VERSION]:
                    return None
                canonical.append((code, ops))
            elif code == _FS_COMBINED_PROFILE:
                refs = ops[6] if len(ops) >= 9 else -1
                calls = ops[9 + refs :]
                if refs < 0 or len(ops) < 9 + refs or len(calls) % 2:
                    return None
                edges = [(guids[v], h) for v, h in zip(calls[::2], calls[1::2], strict=True)]
                refs_named = [guids[v] for v in ops[9 : 9 + refs]]
                canonical.append(
                    (code, guids[ops[0]], modules[ops[1]], ops[2:9], refs_named, edges)
                )
            elif code == _FS_COMBINED_GLOBALVAR_INIT_REFS:
                if len(ops) < 4:
                    return None
                canonical.append((code, guids[ops[0]], modules[ops[1]], ops[2:4],
                                  [guids[v] for v in ops[4:]]))  # fmt: skip
            elif code != _FS_VALUE_GUID:
                return None
    except KeyError:
        return None  # a value or module the file does not define
    return repr((sorted(guids.values()), sorted(canonical, key=repr))).encode()
