"""Our prelude's link modes, archive cases, errors and incremental rebuilds, with real
Buck2 on small projects.

One copy of the project per module (one Buck2 daemon); each test adds its own
package, so tests never see each other's targets.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.real_buck2 import Buck2, scratch_project

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

BITCODE = b"BC\xc0\xde"
LLVM_AR = "/usr/lib/llvm-22/bin/llvm-ar"


@pytest.fixture(scope="module")
def buck2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buck2]:
    session = Buck2(scratch_project(tmp_path_factory.mktemp("rules")))
    yield session
    session.kill()


def add_package(buck2: Buck2, package: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = buck2.project / package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def run(exe: Path) -> str:
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


LIB = {
    "BUCK": """
        cxx_library(name = "lib", srcs = ["a/util.c", "b/util.c", "unused.c"], lto = LTO)
        cxx_binary(name = "app", srcs = ["main.c"], deps = [":lib"], lto = LTO)
        cxx_binary(name = "app-dist", srcs = ["main.c"], deps = [":lib"], dist_lto = True)
        prebuilt_cxx_library(name = "pre", static_lib = ":lib", bitcode = True)
        cxx_binary(name = "app-prepared", srcs = ["main.c"], deps = [":pre"], dist_lto = True)
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


def lib_package(buck2: Buck2, package: str, lto: bool) -> None:
    add_package(buck2, package, {**LIB, "BUCK": LIB["BUCK"].replace("LTO", str(lto))})


def categories(buck2: Buck2, target: str) -> Counter[str]:
    return Counter(r.category for r in buck2.what_ran() if r.target == target)


def test_plain_link_compiles_native_objects_and_runs_no_lto_step(buck2: Buck2) -> None:
    lib_package(buck2, "plain", lto=False)
    exe = buck2.outputs("//plain:app")["root//plain:app"]
    assert run(exe) == "40 21\n"
    ran = buck2.what_ran()
    compiles = [r for r in ran if r.category == "cxx_compile"]
    assert compiles and all("-flto=thin" not in r.argv for r in compiles)
    for r in compiles:
        obj = r.argv[r.argv.index("-o") + 1]
        assert (buck2.project / obj).read_bytes()[:4] != BITCODE, obj
    (link,) = [r for r in ran if r.category == "cxx_link"]
    assert "-flto=thin" not in link.argv
    assert not [r for r in ran if r.category.startswith("thin_lto")]


def test_duplicate_member_names_link_the_same_distributed_and_in_process(buck2: Buck2) -> None:
    lib_package(buck2, "dups", lto=True)
    out = buck2.outputs("//dups:lib", "//dups:app", "//dups:app-dist")
    members = subprocess.run(
        [LLVM_AR, "t", str(out["root//dups:lib"])], capture_output=True, text=True, check=True
    ).stdout.split()
    assert members.count("util.o") == 2
    assert run(out["root//dups:app"]) == run(out["root//dups:app-dist"]) == "40 21\n"
    optimised = [r.identifier for r in buck2.what_ran() if r.category == "thin_lto_opt"]
    assert sum("util" in i for i in optimised) == 2


def test_archive_member_the_link_never_loads_gets_no_opt_action(buck2: Buck2) -> None:
    lib_package(buck2, "lazy", lto=True)
    exe = buck2.outputs("//lazy:app-dist")["root//lazy:app-dist"]
    optimised = [r.identifier for r in buck2.what_ran() if r.category == "thin_lto_opt"]
    assert optimised and not any("unused" in i for i in optimised)
    assert run(exe) == "40 21\n"


def test_bitcode_archive_holding_only_native_members_links(buck2: Buck2) -> None:
    add_package(
        buck2,
        "native",
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
    exe = buck2.outputs("//native:app")["root//native:app"]
    assert run(exe) == "42\n"
    prepared = [r.target for r in buck2.what_ran() if r.category == "thin_lto_prepare"]
    assert prepared == ["root//native:pre"]  # the library's own action
    assert [r.identifier for r in buck2.what_ran() if r.category == "thin_lto_opt"] == [
        "app/0:main.o"
    ]


def test_a_prebuilt_bitcode_archive_is_prepared_once_for_every_link(buck2: Buck2) -> None:
    add_package(
        buck2,
        "shared",
        {
            "BUCK": """
                cxx_library(name = "lib", srcs = ["n.c"])
                prebuilt_cxx_library(name = "pre", static_lib = ":lib", bitcode = True)
                cxx_binary(name = "one", srcs = ["one.c"], deps = [":pre"], dist_lto = True)
                cxx_binary(name = "two", srcs = ["two.c"], deps = [":pre"], dist_lto = True)
            """,
            "n.c": "int answer(void) { return 42; }\n",
            "one.c": """
                #include <stdio.h>
                int answer(void);
                int main(void) { printf("%d\\n", answer()); }
            """,
            "two.c": """
                #include <stdio.h>
                int answer(void);
                int main(void) { printf("%d\\n", answer() + 1); }
            """,
        },
    )
    out = buck2.outputs("//shared:one", "//shared:two")
    assert (run(out["root//shared:one"]), run(out["root//shared:two"])) == ("42\n", "43\n")
    ran = buck2.what_ran()
    assert [r.target for r in ran if r.category == "thin_lto_prepare"] == ["root//shared:pre"]
    assert sorted(r.identifier for r in ran if r.category == "thin_lto_opt") == [
        "one/0:one.o", "one/archive 0:n.o@0", "two/0:two.o", "two/archive 0:n.o@0"
    ]  # fmt: skip


TWO_LINKS = {
    "BUCK": """
        load(":two.bzl", "two_links")
        cxx_library(name = "lib", srcs = ["lib.c"])
        cxx_binary(name = "first", srcs = ["main.c"], deps = [":lib"], dist_lto = True)
        cxx_binary(name = "second", srcs = ["main.c"], deps = [":lib"], dist_lto = True,
                   compiler_flags = ["-DGREETING=2"])
        two_links(name = "both", main = "main.c", lib = ":lib")
    """,
    "two.bzl": """
        load("@prelude//cxx:compile.bzl", "compile_sources")
        load("@prelude//cxx:providers.bzl", "CxxLinkInfo", "LinkGroup", "ObjectLinkable")
        load("@prelude//dist_lto:link.bzl", "dist_lto_link")
        load("@prelude//toolchain.bzl", "LlvmToolchainInfo", "TOOLCHAIN", "dist_lto_tools")

        # One target, two distributed links of the same inputs under two names.
        def _impl(ctx: AnalysisContext) -> list[Provider]:
            toolchain = ctx.attrs._toolchain[LlvmToolchainInfo]
            objects = compile_sources(ctx, toolchain, [ctx.attrs.main], [], [], [], True)
            linkables = [ObjectLinkable(object = o.object, bitcode = o.bitcode) for o in objects]
            own = LinkGroup(owner = "main", linkables = linkables, cxx = False)
            groups = [own] + ctx.attrs.lib[CxxLinkInfo].groups
            tools = dist_lto_tools(toolchain)
            driver = cmd_args(toolchain.clang, toolchain.linker_flags)
            a = dist_lto_link(ctx, tools, "a", groups, driver, ["-O2"]).binary
            b = dist_lto_link(ctx, tools, "b", groups, driver, ["-O2"]).binary
            return [DefaultInfo(default_output = a, other_outputs = [b])]

        two_links = rule(impl = _impl, attrs = {
            "main": attrs.source(),
            "lib": attrs.dep(),
            "_toolchain": attrs.toolchain_dep(default = TOOLCHAIN, providers = [LlvmToolchainInfo]),
        })
    """,
    "lib.c": "int helper(int x) { return x * 7; }\n",
    "main.c": """
        #include <stdio.h>
        #ifndef GREETING
        #define GREETING 1
        #endif
        int helper(int);
        int main(void) { printf("%d %d\\n", GREETING, helper(6)); return 0; }
    """,
}


def test_two_distributed_links_in_one_package_keep_their_own_actions(buck2: Buck2) -> None:
    add_package(buck2, "twopkg", TWO_LINKS)
    out = buck2.outputs("//twopkg:first", "//twopkg:second")
    assert run(out["root//twopkg:first"]) == "1 42\n"
    assert run(out["root//twopkg:second"]) == "2 42\n"
    ran = buck2.what_ran()
    for target in ("root//twopkg:first", "root//twopkg:second"):
        plans = [r for r in ran if r.target == target and r.category == "thin_lto_plan"]
        assert len(plans) == 1


def test_a_rule_with_two_distributed_links_scopes_outputs_and_identifiers(buck2: Buck2) -> None:
    add_package(buck2, "tworule", TWO_LINKS)
    proc = buck2("build", "--console=simple", "//tworule:both", "--show-full-json-output")
    assert proc.returncode == 0
    ran = [r for r in buck2.what_ran() if r.target == "root//tworule:both"]
    by_link = Counter(r.identifier.split("/", 1)[0] for r in ran if r.category == "thin_lto_opt")
    assert by_link == {"a": 2, "b": 2}
    assert sorted(r.identifier for r in ran if r.category == "thin_lto_plan") == ["a", "b"]
    bins = sorted(
        (buck2.project / r.argv[r.argv.index("-o") + 1])
        for r in ran
        if r.category == "thin_lto_link"
    )
    assert [p.name for p in bins] == ["a", "b"]
    assert [run(p) for p in bins] == ["1 42\n", "1 42\n"]


def test_bad_archive_kind_fails_at_the_buck_file_line(buck2: Buck2) -> None:
    add_package(
        buck2,
        "badkind",
        {"BUCK": 'cxx_library(\n    name = "lib",\n    srcs = ["x.c"],\n    archive = "fat",\n)\n',
         "x.c": "int x;\n"},
    )  # fmt: skip
    proc = buck2.build("//badkind:lib", check=False)
    assert proc.returncode != 0
    assert "fat" in proc.stderr and "regular" in proc.stderr, proc.stderr
    assert "badkind/BUCK:1" in proc.stderr, proc.stderr


def test_unknown_source_language_fails_in_compile_bzl_naming_the_file(buck2: Buck2) -> None:
    add_package(buck2, "fortran", {"BUCK": 'cxx_library(name = "lib", srcs = ["x.f90"])\n',
                                   "x.f90": ""})  # fmt: skip
    proc = buck2.build("//fortran:lib", check=False)
    assert proc.returncode != 0
    assert "root//fortran:lib: cannot compile `x.f90`: known extensions are" in proc.stderr
    assert "prelude/cxx/compile.bzl" in proc.stderr


def test_prelude_type_annotations_are_checked(buck2: Buck2) -> None:
    add_package(
        buck2,
        "misuse",
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
    proc = buck2.build("//misuse:m", check=False)
    assert proc.returncode != 0
    assert "list[LinkGroup]" in proc.stderr, proc.stderr
    assert "misuse/misuse.bzl:5" in proc.stderr, proc.stderr


INCREMENTAL = {
    "BUCK": """
        cxx_library(name = "lib", srcs = ["leaf.c", "mid.c", "other.c"])
        cxx_binary(name = "app", srcs = ["main.c"], deps = [":lib"], dist_lto = True)
    """,
    "leaf.c": "int leaf(int x) { return x + 1; }\n",
    "mid.c": "int leaf(int);\nint mid(int x) { return leaf(x) * 2; }\n",
    "other.c": "int other(int x) { return x - 3; }\n",
    "main.c": """
        #include <stdio.h>
        int mid(int), other(int);
        int main(void) { printf("%d %d\\n", mid(4), other(10)); return 0; }
    """,
}


def _imports(buck2: Buck2, ran: list) -> dict[str, set[str]]:
    """Each opt action's module -> the basenames of the modules LLD says it imports."""
    found = {}
    for r in ran:
        if r.category != "thin_lto_opt":
            continue
        module = r.argv[r.argv.index("--input") + 1]
        (imports,) = (buck2.project / "buck-out").glob(f"**/dist_lto/app/index/{module}.imports")
        found[Path(module).name] = {Path(p).name for p in imports.read_text().split()}
    return found


def test_editing_one_source_reruns_only_what_depends_on_it(buck2: Buck2) -> None:
    add_package(buck2, "incr", INCREMENTAL)
    exe = buck2.outputs("//incr:app")["root//incr:app"]
    assert run(exe) == "10 7\n"
    full = buck2.what_ran()
    assert Counter(r.category for r in full if r.category.startswith("thin_lto")) == {
        "thin_lto_opt_ready": 1, "thin_lto_plan": 1, "thin_lto_opt": 4, "thin_lto_link": 1,
    }  # fmt: skip
    # The rules know the library's objects: its archive is neither prepared nor made.
    assert "archive" not in {r.category for r in full}
    imports = _imports(buck2, full)
    assert "leaf.o" in imports["mid.o"], imports  # ThinLTO imports leaf() into mid.o

    leaf = buck2.project / "incr" / "leaf.c"
    leaf.write_text("int leaf(int x) { return x + 2; }\n")
    exe = buck2.outputs("//incr:app")["root//incr:app"]
    assert run(exe) == "12 7\n"
    rebuilt = buck2.what_ran()
    counts = Counter(r.category for r in rebuilt)
    assert counts["cxx_compile"] == 1
    assert counts["thin_lto_plan"] == counts["thin_lto_link"] == 1
    reran = {Path(r.argv[r.argv.index("--input") + 1]).name
             for r in rebuilt if r.category == "thin_lto_opt"}  # fmt: skip
    # Exactly the edited module and the modules that import it; the others' actions
    # have the same inputs as before and are not run again.
    affected = {"leaf.o"} | {m for m, deps in imports.items() if "leaf.o" in deps}
    assert reran == affected
    assert "other.o" not in reran


@pytest.mark.parametrize("kind", ["PLAN", "MANIFEST"])
def test_rules_refuse_a_plan_or_manifest_of_another_version_naming_the_file(
    tmp_path: Path, kind: str
) -> None:
    """Rules of one release and tools of another: the rules' formats.bzl is edited to
    expect the next version of what the tools write."""
    project = scratch_project(tmp_path)
    formats = project / "prelude" / "dist_lto" / "formats.bzl"
    text = formats.read_text()
    (written,) = re.findall(rf"^{kind}_VERSION = (\d+)$", text, re.MULTILINE)
    expected = int(written) + 1
    formats.write_text(
        text.replace(f"{kind}_VERSION = {written}\n", f"{kind}_VERSION = {expected}\n")
    )
    # Only an archive whose objects the rules do not know (a prebuilt one) is prepared.
    target = "app-dist" if kind == "PLAN" else "app-prepared"
    other = Buck2(project)
    try:
        lib_package(other, "lib", lto=True)
        proc = other.build(f"//lib:{target}", check=False)
    finally:
        other.kill()
    assert proc.returncode != 0
    what = "(object|archive|link) plan" if kind == "PLAN" else "manifest"
    owner = target if kind == "PLAN" else "pre"  # the library prepared its archive
    refused = (rf"root//lib:{owner}: \S+\.json: {what} version {written},"
               rf" where these rules read version {expected}")  # fmt: skip
    assert re.search(refused, proc.stderr), proc.stderr[-3000:]
