"""Each module's own relocation model: the Linux kernel's failure, at small scale.

The kernel's LTO link is `ld.lld -r` over non-PIC bitcode whose inline assembly takes a
global's address as an immediate (`"i"`). LLD 22's DTLTO job file names no relocation
model for `-r` or `-no-pie` links, so a plain `clang -x ir` backend compiles as its
driver's default (PIE on Debian) and fails: `invalid operand for inline asm constraint
'i'`. In-process LLD takes each module's own model. Ours reads it from the module's
flags (`llvm/module_flags.py`): every route links, and its code equals in-process.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from dist_lto.llvm.module_flags import flag_for_levels, relocation_flag, relocation_levels
from support import objcode
from support.tools import Llvm, run_cli

SOURCES = {
    "page.c": "int zone_count;\nint spare;\nint refill(int);\n"
    "int alloc_page(int order) {\n"
    '  asm volatile(".pushsection .discard.site\\n.quad %c0\\n.popsection" :: "i"(&zone_count));\n'
    "  return refill(order) + zone_count;\n}\n",
    "refill.c": "extern int zone_count;\n"
    "int refill(int order) {\n"
    '  asm volatile(".pushsection .discard.site\\n.quad %c0\\n.popsection" :: "i"(&zone_count));\n'
    "  return order * 2 + zone_count;\n}\n",
    "pic.c": "int shared_value;\nint read_shared(void) { return shared_value; }\n",
}
"""Two kernel-like modules (`-fno-pic`, an `"i"` operand that is a global's address) and
one compiled `-fPIC`, so that a relocatable link mixes both models."""

MODEL_FLAGS = {"page.c": "-fno-pic", "refill.c": "-fno-pic", "pic.c": "-fPIC"}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    root = tmp_path_factory.mktemp("relocation")
    for name, text in SOURCES.items():
        (root / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", MODEL_FLAGS[name], "-c", name],
                       cwd=root, check=True)  # fmt: skip
    return root


def objects(kind: str) -> list[str]:
    """The link's objects: a `-no-pie` executable needs no PIC module (and a `main`)."""
    if kind == "-r":
        return ["page.o", "refill.o", "pic.o"]
    return ["page.o", "refill.o", "main.o"]


def link_command(llvm: Llvm, kind: str, out: str) -> list[str]:
    flags = ["-r", "-nostdlib"] if kind == "-r" else ["-no-pie"]
    return [llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *flags, *objects(kind), "-o", out]


def in_process(root: Path, llvm: Llvm, kind: str) -> dict[str, objcode.Function]:
    """Every function in-process ThinLTO generates (its objects kept by --save-temps)."""
    subprocess.run([*link_command(llvm, kind, "ref"), "-Wl,--save-temps=prelink"], cwd=root,
                   check=True, capture_output=True)  # fmt: skip
    found: dict[str, objcode.Function] = {}
    for obj in objects(kind):
        found.update(objcode.functions(root / f"ref.lto.{Path(obj).stem}.o"))
    return found


def with_main(root: Path, llvm: Llvm) -> None:
    (root / "main.c").write_text("int alloc_page(int);\nint main(void) { return alloc_page(1); }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-fno-pic", "-c", "main.c"], cwd=root,
                   check=True)  # fmt: skip


def test_module_flags_give_each_model_its_clang_flag(tmp_path: Path, llvm: Llvm) -> None:
    (tmp_path / "m.c").write_text("int g;\nint f(void) { return g; }\n")
    for flag in ("-fno-pic", "-fpic", "-fPIC", "-fpie", "-fPIE"):
        obj = tmp_path / f"m{flag}.o"
        subprocess.run([llvm.clang, "-O2", "-g", "-flto=thin", flag, "-c", "m.c", "-o", obj],
                       cwd=tmp_path, check=True)  # fmt: skip
        assert relocation_flag(obj.read_bytes()) == flag
    assert flag_for_levels(0, 0) == "-fno-pic"


def test_module_flags_of_a_module_with_debug_information_come_through_its_metadata_index(
    tmp_path: Path, llvm: Llvm
) -> None:
    """A module with more than 25 metadata nodes gets a metadata index: the reader jumps
    over the debug information to the named metadata and back to the flag nodes."""
    body = "".join(f"struct s{i} {{ int a{i}; }};\nint f{i}(struct s{i} *p) {{ return p->a{i}; }}\n"
                   for i in range(40))  # fmt: skip
    (tmp_path / "big.c").write_text(body)
    subprocess.run([llvm.clang, "-O2", "-g", "-flto=thin", "-fPIE", "-c", "big.c"], cwd=tmp_path,
                   check=True)  # fmt: skip
    analyzer = Path(llvm.clang).parent / "llvm-bcanalyzer"
    dump = subprocess.run([analyzer, "-dump", "big.o"], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout  # fmt: skip
    assert "<INDEX_OFFSET" in dump
    assert relocation_levels((tmp_path / "big.o").read_bytes()) == (2, 2)


def test_a_module_that_is_not_bitcode_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError):
        relocation_levels(b"BC\xc0\xde" + b"PIC Level" + b"\0" * 64)


@pytest.mark.parametrize("kind", ["-r", "-no-pie"])
def test_a_non_pic_link_through_dtlto_compiles_each_module_with_its_own_model(
    modules: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "w"
    subprocess.run(["cp", "-r", str(modules), str(root)], check=True)
    with_main(root, llvm)
    distributor = ["-fthinlto-distributor=" + dist_lto_cmd[0],
                   *(f"-Xthinlto-distributor={arg}" for arg in [*dist_lto_cmd[1:], "distribute",
                                                                  "--no-cache"])]  # fmt: skip
    # The failure itself: LLD's job file, run as it is.
    plain = subprocess.run([*link_command(llvm, kind, "plain"), *serial(root)], cwd=root,
                           capture_output=True, text=True)  # fmt: skip
    assert plain.returncode != 0
    assert "invalid operand for inline asm constraint 'i'" in plain.stderr
    done = subprocess.run([*link_command(llvm, kind, "ours"), *distributor, "-Wl,--save-temps"],
                          cwd=root, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (job_file,) = root.glob("ours.*.dist-file.json")
    ours: dict[str, objcode.Function] = {}
    for job in json.loads(job_file.read_text())["jobs"]:
        ours.update(objcode.functions(root / job["outputs"][0]))
    reference = in_process(root, llvm, kind)
    assert ours == reference
    assert {"alloc_page", "refill"} <= set(ours)


def serial(root: Path) -> list[str]:
    """LLVM's example distributor in a few lines: each job's command as LLD wrote it."""
    script = root / "serial.py"
    script.write_text(
        "import json, subprocess, sys\n"
        "jobs = json.load(open(sys.argv[-1]))\n"
        "for job in jobs['jobs']:\n"
        "    subprocess.run(jobs['common']['args'] + job['args'], check=True)\n"
    )
    return ["-fthinlto-distributor=/usr/bin/python3", f"-Xthinlto-distributor={script}"]


@pytest.mark.parametrize("kind", ["-r", "-no-pie"])
def test_plan_and_link_accept_relocatable_and_non_pie_links_with_in_process_code(
    modules: Path, llvm: Llvm, tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "w"
    subprocess.run(["cp", "-r", str(modules), str(root)], check=True)
    with_main(root, llvm)
    groups = [{"pre_flags": [], "post_flags": [], "linkables": [
        {"kind": "object", "index": i, "path": obj, "index_output": f"out/index/{obj}.thinlto.bc",
         "plan_output": f"out/plans/{i}.json", "opt_output": f"out/opt/{i}.o"}
        for i, obj in enumerate(objects(kind))]}]  # fmt: skip
    meta = {"version": 1, "index_dir": "out/index", "link_plan_output": "out/link-plan.json",
            "final_link_args_output": "out/final-link.args", "groups": groups}  # fmt: skip
    (root / "meta.json").write_text(json.dumps(meta))
    flags = link_command(llvm, kind, "app")
    command = [
        flags[0],
        *(f for f in flags[1:] if not f.endswith(".o")),
    ]
    planned = run_cli(["plan", "meta.json", "--", *command], cwd=root)
    assert planned.returncode == 0, planned.stderr
    linked = run_cli(["link", "--no-cache", "meta.json", "--", *command], cwd=root)
    assert linked.returncode == 0, linked.stderr
    ours: dict[str, objcode.Function] = {}
    for i in range(len(objects(kind))):
        ours.update(objcode.functions(root / f"out/opt/{i}.o"))
    assert ours == in_process(root, llvm, kind)


def test_opt_for_a_relocatable_link_gives_the_backend_the_module_own_model(
    modules: Path, tmp_path: Path
) -> None:
    args = tmp_path / "link.args"
    args.write_text("-O2\n-r\n-nostdlib\n")
    for module, flag in (("page.o", "-fno-pic"), ("pic.o", "-fPIC")):
        shown = run_cli(["opt", "--input", module, "--index", f"{module}.thinlto.bc", "--out",
                         str(tmp_path / module), "--args", str(args), "--print-command", "--",
                         "clang"], cwd=modules)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        command = shown.stdout.split()
        assert flag in command
        assert not {"-fpic", "-fno-pic", "-fPIC"} - {flag} & set(command)
