"""Link flags -> backend flags: one case per translation, the errors, and real clang/LLD."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from dist_lto.errors import BadInput
from dist_lto.llvm.flags import (
    CLANG_DEFAULT_PIE,
    LLD_CODEGEN_DEFAULTS,
    LLD_DEFAULT_LTO_O,
    QUIET_UNUSED,
    read_args_file,
    translate,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.tools import Llvm


def added(link_flags: list[str]) -> list[str]:
    """What the link flags add after the fixed head (-O, LLD defaults, PIC, quiet)."""
    flags = translate(link_flags).flags
    head = flags.index(QUIET_UNUSED) + 1
    return flags[head:]


# Each case: link flags -> the flags they add. Ids name the translation.
TRANSLATIONS = {
    "lto-sample-profile": (["-Wl,--lto-sample-profile=p.prof"], ["-fprofile-sample-use=p.prof"]),
    "plugin-opt-sample-profile": (
        ["-Wl,-plugin-opt,sample-profile=p.prof"], ["-fprofile-sample-use=p.prof"]),
    "plugin-opt-eq-sample-profile": (
        ["-Wl,--plugin-opt=sample-profile=p.prof"], ["-fprofile-sample-use=p.prof"]),
    "wl-mllvm-pair": (["-Wl,-mllvm,-inline-threshold=500"], ["-mllvm", "-inline-threshold=500"]),
    "wl-mllvm-eq": (["-Wl,-mllvm=-x86-asm-syntax=intel"], ["-mllvm", "-x86-asm-syntax=intel"]),
    "wl-mllvm-across-two-wl": (["-Wl,-mllvm", "-Wl,-foo=1"], ["-mllvm", "-foo=1"]),
    "xlinker-mllvm-pairs": (["-Xlinker", "-mllvm", "-Xlinker", "-foo"], ["-mllvm", "-foo"]),
    "plugin-opt-minus": (["-Wl,-plugin-opt,-enable-ext-tsp-block-placement"],
                         ["-mllvm", "-enable-ext-tsp-block-placement"]),
    "plugin-opt-eq-minus": (["-Wl,--plugin-opt=-foo=2"], ["-mllvm", "-foo=2"]),
    "plugin-opt-emulated-tls": (["-Wl,-plugin-opt=-emulated-tls"], ["-femulated-tls"]),
    "plugin-opt-stack-size-section": (["-Wl,-plugin-opt=-stack-size-section"],
                                      ["-fstack-size-section"]),
    "plugin-opt-split-machine-functions": (["-Wl,-plugin-opt=-split-machine-functions"],
                                           ["-fsplit-machine-functions"]),
    "plugin-opt-jmc": (["-Wl,-plugin-opt=-enable-jmc-instrument"], ["-fjmc"]),
    "plugin-opt-tlsdesc": (["-Wl,-plugin-opt=-enable-tlsdesc"], ["-mtls-dialect=gnu2"]),
    "plugin-opt-debugger-tune": (["-Wl,-plugin-opt=-debugger-tune=lldb"], ["-glldb"]),
    "plugin-opt-function-sections-always-on": (["-Wl,-plugin-opt=-function-sections=1"], []),
    "plugin-opt-mcpu": (["-Wl,-plugin-opt=mcpu=znver3"],
                        ["-Xclang", "-target-cpu", "-Xclang", "znver3"]),
    "basic-block-sections-all": (["-Wl,--lto-basic-block-sections=all"],
                                 ["-fbasic-block-sections=all"]),
    "basic-block-sections-labels": (["-Wl,--lto-basic-block-sections=labels"],
                                    ["-fbasic-block-address-map"]),
    "basic-block-sections-file": (["-Wl,--lto-basic-block-sections=bb.txt"],
                                  ["-fbasic-block-sections=list=bb.txt"]),
    "basic-block-address-map": (["-Wl,--lto-basic-block-address-map"],
                                ["-fbasic-block-address-map"]),
    "unique-bb-section-names": (["-Wl,--lto-unique-basic-block-section-names"],
                                ["-funique-basic-block-section-names"]),
    "load-pass-plugin": (["-Wl,--load-pass-plugin=libP.so"], ["-fpass-plugin=libP.so"]),
    "load-pass-plugin-separate": (["-Wl,--load-pass-plugin,libP.so"], ["-fpass-plugin=libP.so"]),
    "remote-compiler-arg": (["-Wl,--thinlto-remote-compiler-arg=-fno-math-errno"],
                            ["-fno-math-errno"]),
    "f-codegen-passes": (["-fno-omit-frame-pointer", "-falign-loops=32"],
                         ["-fno-omit-frame-pointer", "-falign-loops=32"]),
    "fPIC-passes": (["-fPIC"], ["-fPIC"]),
    "fpic-passes": (["-fpic"], ["-fpic"]),
    "fPIE-passes": (["-fPIE"], ["-fPIE"]),
    "m-codegen-passes": (["-march=haswell", "-mcmodel=medium", "-mno-red-zone"],
                         ["-march=haswell", "-mcmodel=medium", "-mno-red-zone"]),
    "profile-use-passes": (["-fprofile-use=p.profdata"], ["-fprofile-use=p.profdata"]),
    "cs-profile-generate-passes": (["-fcs-profile-generate"], ["-fcs-profile-generate"]),
    "target-pair": (["-target", "x86_64-linux-gnu"], ["-target", "x86_64-linux-gnu"]),
    "target-eq": (["--target=x86_64-linux-gnu"], ["--target=x86_64-linux-gnu"]),
    "debugger-tuning": (["-ggdb"], ["-ggdb"]),
}  # fmt: skip


@pytest.mark.parametrize(("link", "expected"), TRANSLATIONS.values(), ids=TRANSLATIONS.keys())
def test_link_flag_translates_to_backend_flag(link: list[str], expected: list[str]) -> None:
    assert added(link) == expected


DROPPED = {
    "operands": ["obj/a.o", "libfoo.a", "/usr/lib/libz.so"],
    "libraries": ["-lm", "-l", "pthread", "-L/opt/lib", "-L", "lib"],
    "output": ["-o", "prog"],
    "lto-mode": ["-flto=thin", "-flto", "-fuse-ld=lld", "-flto-jobs=8"],
    "runtimes": ["-pthread", "-static-libstdc++", "-nostdlib", "-rtlib=compiler-rt"],
    "sanitizers-and-instrumentation": ["-fsanitize=address", "-fprofile-instr-generate",
                                       "-fcoverage-mapping", "--coverage"],
    "sections-lld-forces": ["-ffunction-sections", "-fno-data-sections", "-fno-addrsig"],
    "pic-off-flags": ["-fno-pic", "-fno-PIE"],
    "driver-mllvm-and-xclang": ["-mllvm", "-foo", "-Xclang", "-bar", "-mllvm=-baz"],
    "compile-only": ["-I", "inc", "-Iinc", "-DNDEBUG", "-std=c11", "-include", "x.h",
                     "-MD", "-MF", "x.d", "-isystem", "sys"],
    "warnings": ["-Wall", "-Werror", "-Wno-foo", "-Wa,--noexecstack"],
    "debug-info-kinds": ["-g", "-g3", "-gdwarf-4", "-gz"],
    "driver-sample-profile": ["-fprofile-sample-use=p.prof"],
    "extra-outputs": ["-fsave-optimization-record", "-ftime-trace", "-fstack-usage",
                      "-save-temps=obj"],
    "lld-link-only": ["-Wl,--gc-sections,-O1,--icf=all,-z,now,--as-needed,--build-id"],
    "lld-separate-values": ["-Wl,-soname,--lto-emit-asm", "-Wl,--version-script,v.map",
                            "-Wl,-rpath,/x", "-Wl,-m,elf_x86_64", "-Wl,-z,relro"],
    "lld-index-step": ["-Wl,--thinlto-index-only=list", "-Wl,--thinlto-emit-imports-files",
                       "-Wl,--thinlto-prefix-replace=a;b", "-Wl,--lto-whole-program-visibility",
                       "-Wl,--thinlto-cache-dir=c", "-Wl,--thinlto-jobs=4"],
    "lld-debug-outputs": ["-Wl,--save-temps", "-Wl,--lto-obj-path=x", "-Wl,--time-trace",
                          "-Wl,--opt-remarks-filename,r.yaml", "-Wl,--lto-debug-pass-manager"],
    "plugin-opt-no-code-change": ["-Wl,-plugin-opt=thinlto", "-Wl,--plugin-opt=jobs=8",
                                  "-Wl,-plugin-opt=/usr/lib/gcc/x86_64-linux-gnu/12/lto-wrapper",
                                  "-Wl,--plugin-opt=save-temps", "-Wl,-plugin,/x/LLVMgold.so"],
    "lld-library-not-lto-option": ["-Wl,-lto-O3"],  # LLD reads this as -l to-O3
}  # fmt: skip


@pytest.mark.parametrize("link", DROPPED.values(), ids=DROPPED.keys())
def test_link_only_flags_are_dropped(link: list[str]) -> None:
    assert added(link) == []
    assert translate(link).opt_level == LLD_DEFAULT_LTO_O


OPT_LEVELS = {
    "lld-default": ([], LLD_DEFAULT_LTO_O),
    "driver-O3": (["-O3"], 3),
    "driver-O0": (["-O0"], 0),
    "driver-Os-as-driver-maps-it": (["-Os"], 2),
    "driver-Oz": (["-Oz"], 2),
    "driver-Og": (["-Og"], 1),
    "driver-O": (["-O"], 1),
    "driver-Ofast": (["-Ofast"], 3),
    "driver-O9": (["-O9"], 3),
    "lto-O": (["-Wl,--lto-O1"], 1),
    "plugin-opt-O-pair": (["-Wl,-plugin-opt,O0"], 0),
    "plugin-opt-eq-O": (["-Wl,--plugin-opt=O3"], 3),
    "xlinker-lto-O": (["-Xlinker", "--lto-O3"], 3),
    "linker-level-beats-driver-level": (["-Wl,--lto-O1", "-O3"], 1),
    "last-linker-level-wins": (["-Wl,--lto-O3", "-Wl,-plugin-opt,O1"], 1),
    "matching-lto-CGO": (["-Wl,--lto-O3,--lto-CGO3"], 3),
    "linker-O-is-not-lto": (["-Wl,-O3"], LLD_DEFAULT_LTO_O),
}  # fmt: skip


@pytest.mark.parametrize(("link", "level"), OPT_LEVELS.values(), ids=OPT_LEVELS.keys())
def test_optimisation_level_follows_the_link(link: list[str], level: int) -> None:
    backend = translate(link)
    assert backend.opt_level == level
    assert backend.flags[0] == f"-O{level}"


def test_lld_defaults_come_after_the_level_and_can_be_left_out() -> None:
    assert translate([]).flags[1:4] == list(LLD_CODEGEN_DEFAULTS)
    assert not set(LLD_CODEGEN_DEFAULTS) & set(translate([], lld_defaults=False).flags)


def test_no_pgo_warn_mismatch_is_translated_and_the_last_one_wins() -> None:
    assert "-no-pgo-warn-mismatch" in translate(["-Wl,--no-lto-pgo-warn-mismatch"]).flags
    on_again = ["-Wl,--no-lto-pgo-warn-mismatch", "-Wl,--lto-pgo-warn-mismatch"]
    assert "-no-pgo-warn-mismatch" not in translate(on_again).flags


def test_split_dwarf_in_the_link_is_reported() -> None:
    assert translate(["-gsplit-dwarf", "-g"]).split_dwarf
    assert translate(["-Wl,--plugin-opt=dwo_dir=out-dwo"]).split_dwarf
    assert not translate(["-gsplit-dwarf", "-gno-split-dwarf"]).split_dwarf
    assert not translate(["-g"]).split_dwarf


REJECTED = {
    "unknown-driver-flag": (["--frobnicate"], "line 1: cannot translate link flag '--frobnicate'"),
    "response-file": (["-lm", "@link.rsp"], "line 2: cannot translate '@link.rsp'"),
    "linker-response-file": (["-Wl,@link.rsp"], "expand response files"),
    "compile-flag": (["-c"], "'-c' is not a link flag"),
    "language-flag": (["-x", "c"], "'-x' is not a link flag"),
    "emit-asm": (["-Wl,--lto-emit-asm"], "'--lto-emit-asm': the backend must write an object"),
    "emit-llvm": (["-Wl,--plugin-opt=emit-llvm"], "the backend must write an object"),
    "custom-pipeline": (["-Wl,--lto-newpm-passes=instcombine"], "custom pass pipeline"),
    "aa-pipeline": (["-Wl,--lto-aa-pipeline=basic-aa"], "custom pass pipeline"),
    "cs-profile-generate": (["-Wl,--lto-cs-profile-generate"], "-fcs-profile-generate"),
    "cs-profile-file": (["-Wl,--lto-cs-profile-file=p"], "-fprofile-use="),
    "plugin-cs-profile": (["-Wl,-plugin-opt=cs-profile-path=p"], "-fprofile-use="),
    "unknown-lto-option": (["-Wl,--lto-frob"], "unknown LTO linker flag '--lto-frob'"),
    "unknown-thinlto-option": (["-Wl,--thinlto-frob"], "unknown LTO linker flag"),
    "unknown-plugin-option": (["-Wl,-plugin-opt=frob"], "unknown plugin option '-plugin-opt=frob'"),
    "level-out-of-range": (["-Wl,--lto-O4"], "'--lto-O4': the level must be 0, 1, 2 or 3"),
    "level-missing": (["-Wl,--lto-O"], "the level must be"),
    "cgo-differs-from-level": (["-Wl,--lto-CGO1"], "'--lto-CGO1': clang's backend generates code"
                                                   " at the level of -O2"),
    "bad-driver-level": (["-Omagic"], "unknown optimisation level"),
    "thinlto-index-flag": (["-fthinlto-index=x"], "sets it from --index"),
    "missing-value-at-end": (["-Xlinker"], "'-Xlinker' at the end is missing its argument"),
    "linker-missing-value": (["-Wl,-mllvm"], "'-mllvm' at the end is missing its argument"),
    "empty-argument": ([""], "line 1: empty argument"),
    "empty-xlinker-value": (["-Xlinker", ""], "line 2: empty argument after '-Xlinker'"),
    "nopie-unsupported-by-clang-22": (["-nopie"], "cannot translate link flag '-nopie'"),
    "prepend-arg": (["-Wl,--thinlto-remote-compiler-prepend-arg=ccache"], "wrapper"),
}  # fmt: skip


@pytest.mark.parametrize(("link", "message"), REJECTED.values(), ids=REJECTED.keys())
def test_untranslatable_flag_is_an_error_naming_it(link: list[str], message: str) -> None:
    with pytest.raises(BadInput) as caught:
        translate(link, origin="link.args")
    assert caught.value.message.startswith("link.args: ")
    assert message in caught.value.message


def test_error_names_the_line_that_carried_the_linker_flag() -> None:
    expected = r"^f: line 3: cannot translate linker flag '--lto-emit-asm'"
    with pytest.raises(BadInput, match=expected):
        translate(["-O2", "-lm", "-Wl,--gc-sections,--lto-emit-asm"], origin="f")


# ---------------------------------------------------------------------------------
# PIC mode: ours must equal what the clang driver passes to LLD, and LLD's rule


PIC_CASES = {
    "default": [],
    "no-pie": ["-no-pie"],
    "pie": ["-pie"],
    "shared": ["-shared"],
    "static": ["-static"],
    "static-pie": ["-static-pie"],
    "shared-beats-pie": ["-pie", "-shared"],
    "no-pie-then-pie": ["-no-pie", "-pie"],
    "static-with-pie": ["-static", "-pie"],
    "wl-no-pie": ["-Wl,--no-pie"],
    "wl-pie-after-no-pie": ["-no-pie", "-Wl,-pie"],
    "wl-shared": ["-Wl,-shared"],
    "wl-pic-executable": ["-no-pie", "-Wl,--pic-executable"],
}


def lld_is_pic(llvm: Llvm, link: list[str], tmp: Path) -> bool:
    """LLD's isPic (`pie || shared`) for the ld.lld command the clang driver builds."""
    (tmp / "x.o").write_bytes(b"")
    job = subprocess.run(
        [llvm.clang, "-###", "-flto=thin", "-fuse-ld=lld", *link, "x.o", "-o", "x"],
        cwd=tmp, capture_output=True, text=True, check=True,
    ).stderr.splitlines()[-1]  # fmt: skip
    args = [a.strip('"') for a in job.split()]
    pie = False
    shared = False
    for arg in args:
        if arg in ("-pie", "--pie", "--pic-executable"):
            pie = True
        elif arg in ("-no-pie", "--no-pie"):
            pie = False
        elif arg in ("-shared", "--shared"):
            shared = True
    return pie or shared


@pytest.mark.parametrize("link", PIC_CASES.values(), ids=PIC_CASES.keys())
def test_pic_mode_is_the_one_the_driver_and_lld_choose(
    llvm: Llvm, tmp_path: Path, link: list[str]
) -> None:
    backend = translate(link)
    assert backend.pic == lld_is_pic(llvm, link, tmp_path)
    assert ("-fpic" if backend.pic else "-fno-pic") in backend.flags


@pytest.mark.parametrize("link", [["-r"], ["-Wl,--relocatable"], ["-Wl,-r", "-no-pie"]])
def test_a_relocatable_link_names_no_model_so_each_module_keeps_its_own(link: list[str]) -> None:
    backend = translate(link)
    assert backend.pic is None
    assert not {"-fpic", "-fno-pic", "-fPIC", "-fpie", "-fPIE"} & set(backend.flags)


def test_clang_default_pie_constant_matches_the_installed_driver(
    llvm: Llvm, tmp_path: Path
) -> None:
    assert lld_is_pic(llvm, [], tmp_path) == CLANG_DEFAULT_PIE


# ---------------------------------------------------------------------------------
# Every backend flag we produce is one the real clang 22 driver accepts


def test_every_translated_flag_is_accepted_by_clang(llvm: Llvm, tmp_path: Path) -> None:
    produced: list[str] = []
    for link, _ in TRANSLATIONS.values():
        flags = added(link)
        if not any(f.startswith(("-fprofile-sample-use=", "-fprofile-use=", "-fpass-plugin=",
                                 "-fbasic-block-sections=list=")) for f in flags):  # fmt: skip
            produced += flags  # (those name files that do not exist here)
    produced += translate(["-no-pie", "-Wl,--no-lto-pgo-warn-mismatch"]).flags
    (tmp_path / "m.o").write_bytes(b"")
    (tmp_path / "m.o.thinlto.bc").write_bytes(b"")
    result = subprocess.run(
        [llvm.clang, "-###", "-c", "-x", "ir", "m.o", "-fthinlto-index=m.o.thinlto.bc",
         *produced, "-o", "m.opt.o"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "unknown argument" not in result.stderr
    assert "error:" not in result.stderr


# ---------------------------------------------------------------------------------
# Properties


FLAG_ALPHABET = st.sampled_from(
    ["-", "--", "-W", "l", ",", "=", "O", "f", "m", "g", "lto", "plugin-opt", "mllvm", "3",
     "-Wl,", "-Xlinker", "pie", "shared", "thinlto-", "x", "@", "/", "."]
)  # fmt: skip
FLAGS = st.lists(st.lists(FLAG_ALPHABET, max_size=6).map("".join), max_size=8)


@given(link=FLAGS)
@settings(max_examples=examples(400))
def test_any_link_flags_translate_or_fail_as_bad_input(link: list[str]) -> None:
    try:
        backend = translate(link, origin="f")
    except BadInput as err:
        assert err.message.startswith("f: ")
        assert "\n" not in err.message
        return
    assert backend.flags[0] == f"-O{backend.opt_level}"
    assert 0 <= backend.opt_level <= 3
    assert not any(f.startswith(("-flto", "-Wl,", "-fuse-ld", "-l", "-o")) for f in backend.flags)


ARGUMENT = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r\0"), min_size=1
)


@given(args=st.lists(ARGUMENT, max_size=10), final_newline=st.booleans())
@settings(max_examples=examples(200))
def test_args_file_holds_one_argument_per_line_verbatim(
    tmp_path_factory: pytest.TempPathFactory, args: list[str], final_newline: bool
) -> None:
    path = tmp_path_factory.mktemp("args") / "link.args"
    text = "\n".join(args) + ("\n" if final_newline and args else "")
    path.write_text(text, encoding="utf-8")
    assert read_args_file(str(path)) == args


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"-lm\n\n-O2\n", "line 2: empty line"), (b"-O2\r\n", "line 1: carriage return"),
     (b"-O2\n\xff\n", "line 2: not UTF-8")],
)  # fmt: skip
def test_malformed_args_file_is_bad_input_naming_the_line(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "link.args"
    path.write_bytes(content)
    with pytest.raises(BadInput, match=f"link.args: {message}"):
        read_args_file(str(path))


def test_missing_args_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"nope\.args: cannot read link flags"):
        read_args_file(str(tmp_path / "nope.args"))
