"""Our prelude's link modes and archive cases on small projects, built with real tools.

Each test copies the prelude, the root BUCK (the toolchain) and the dist-lto
sources into a fresh project, adds one package, and builds it with the harness.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from buck2 import BuildError, BuildResult, Harness, Label
from buck2.local import REPO, harness_config

BITCODE = b"BC\xc0\xde"


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for name in ("prelude", "tools/dist_lto"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("BUCK", ".buckconfig"):
        shutil.copy(REPO / name, root / name)
    for name, text in files.items():
        (root / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "pkg" / name).write_text(textwrap.dedent(text))
    return root


def build(root: Path, *targets: str) -> BuildResult:
    return Harness(root, root.parent / "out", harness_config()).build(list(targets))


def run(result: BuildResult, name: str) -> str:
    proc = subprocess.run(
        result.run_args(Label("root", "pkg", name)), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def categories(result: BuildResult, name: str) -> list[str]:
    return [a.category for a in result.actions if a.target == f"root//pkg:{name}"]


LIB = {
    "BUCK": """
        cxx_library(name = "lib", srcs = ["a/util.c", "b/util.c", "unused.c"], lto = LTO)
        cxx_binary(name = "app", srcs = ["main.c"], deps = [":lib"], lto = LTO)
        cxx_binary(name = "app-dist", srcs = ["main.c"], deps = [":lib"], dist_lto = True)
    """,
    "a/util.c": "int twice(int x) { return 2 * x; }\n",
    "b/util.c": "int thrice(int x) { return 3 * x; }\n",
    "unused.c": "int never_called(int x) { return x - 1; }\n",
    "main.c": """
        #include <stdio.h>
        int twice(int), thrice(int);
        int main(void) { printf("%d %d\\n", twice(20), thrice(7)); return 0; }
    """,
}


def lib_project(tmp_path: Path, lto: bool) -> Path:
    files = dict(LIB)
    files["BUCK"] = LIB["BUCK"].replace("LTO", str(lto))
    return project(tmp_path, files)


def test_plain_link_compiles_native_objects_and_runs_no_lto_step(tmp_path: Path) -> None:
    root = lib_project(tmp_path, lto=False)
    result = build(root, "//pkg:app")
    assert run(result, "app") == "40 21\n"
    objects = [
        k for a in result.actions if a.category == "cxx_compile" for k in (o.key for o in a.outputs)
    ]
    assert objects and all(result.path(k).read_bytes()[:4] != BITCODE for k in objects)
    assert "-flto=thin" not in next(a.argv for a in result.actions if a.category == "cxx_link")


def test_duplicate_member_names_link_the_same_distributed_and_in_process(tmp_path: Path) -> None:
    root = lib_project(tmp_path, lto=True)
    result = build(root, "//pkg:app", "//pkg:app-dist")
    archive = result.outputs(Label("root", "pkg", "lib"))[0]
    members = subprocess.run(
        ["/usr/lib/llvm-22/bin/llvm-ar", "t", str(archive)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert members.count("util.o") == 2
    assert run(result, "app") == run(result, "app-dist") == "40 21\n"
    optimised = [a.identifier for a in result.actions if a.category == "thin_lto_opt"]
    assert sum("util" in i for i in optimised) == 2


def test_archive_member_the_link_never_loads_gets_no_opt_action(tmp_path: Path) -> None:
    root = lib_project(tmp_path, lto=True)
    result = build(root, "//pkg:app-dist")
    optimised = [a.identifier for a in result.actions if a.category == "thin_lto_opt"]
    assert optimised and not any("unused" in i for i in optimised)
    assert run(result, "app-dist") == "40 21\n"


def test_bitcode_archive_holding_only_native_members_links(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "BUCK": """
            cxx_library(name = "native", srcs = ["n.c"], lto = False)
            prebuilt_cxx_library(name = "pre", static_lib = ":native", bitcode = True)
            cxx_binary(name = "app", srcs = ["main.c"], deps = [":pre"], dist_lto = True)
        """,
            "n.c": "int answer(void) { return 42; }\n",
            "main.c": """
                #include <stdio.h>
                int answer(void);
                int main(void) { printf("%d\\n", answer()); }
            """,
        },
    )
    result = build(root, "//pkg:app")
    assert run(result, "app") == "42\n"
    assert categories(result, "app").count("thin_lto_prepare") == 1
    assert [a.identifier for a in result.actions if a.category == "thin_lto_opt"] == [
        "0:objects/main.o"
    ]


def test_bad_archive_kind_fails_at_the_buck_file_line(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "BUCK": """\
                cxx_library(
                    name = "lib",
                    srcs = ["x.c"],
                    archive = "fat",
                )
            """,
            "x.c": "int x;\n",
        },
    )
    with pytest.raises(BuildError) as err:
        build(root, "//pkg:lib")
    assert '`fat` is not one of ["regular", "thin"]' in str(err.value)
    assert "pkg/BUCK:1" in str(err.value)


def test_unknown_source_language_fails_in_compile_bzl_with_its_line(tmp_path: Path) -> None:
    root = project(tmp_path, {"BUCK": 'cxx_library(name = "lib", srcs = ["x.f90"])\n', "x.f90": ""})
    with pytest.raises(BuildError) as err:
        build(root, "//pkg:lib")
    message = str(err.value)
    line = next(
        i
        for i, text in enumerate((REPO / "prelude/cxx/compile.bzl").read_text().splitlines(), 1)
        if 'fail("{}: cannot compile' in text
    )
    assert "fail: lib: cannot compile `x.f90`: known extensions are" in message
    assert f"prelude/cxx/compile.bzl:{line}" in message


def test_prelude_type_annotations_are_checked(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "BUCK": 'load(":misuse.bzl", "misuse")\nmisuse(name = "m")\n',
            "misuse.bzl": """
            load("@prelude//cxx:link.bzl", "link_line")

            def _impl(ctx: AnalysisContext) -> list[Provider]:
                link_line(["not a link group"])
                return [DefaultInfo()]

            misuse = rule(impl = _impl, attrs = {})
        """,
        },
    )
    with pytest.raises(BuildError) as err:
        build(root, "//pkg:m")
    message = str(err.value)
    assert "does not match the type annotation `list[LinkGroup]` for argument `groups`" in message
    assert "pkg/misuse.bzl:5" in message
