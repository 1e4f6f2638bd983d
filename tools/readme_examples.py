#!/usr/bin/env python3
"""Runs every code block of README.md as written, so the front page cannot drift.

Each fenced block belongs to exactly one group, decided by its language and
content; `list` prints the assignment. A group runs where what it needs is:

  bazel    sh, textproto and c++ blocks: the CLI, mpirun, the plugin SDK
           (//tools:readme_examples_test, in tools/test.sh). Shell blocks run
           with bash -euo pipefail in a scratch folder where `attnkit` and
           `bazel-bin/tools/attnkit` are the CLI under test, the
           repository's files are beside them, and $ATTNKIT_SRC is the
           checkout. A c++ block is saved under the name its first line
           gives (`// my_plugin.cc`) before the shell blocks run; a textproto
           block must load and validate (`attnkit cost`).
  ci       a block that is one `tools/NAME.sh` command (the quick start's
           `tools/attnkit.sh compare` and `tools/test.sh`): scripts that run
           Bazel themselves, so .ci/run runs them; checked to be there, word
           for word (//tools:readme_examples_test).
  pip      the `pip install .` line: tools/wheel_test.sh runs it in the
           checkout, then the `python` group with the venv it made.
  python   Python blocks without torch, in order, in one namespace (as one
           session would), from outside the checkout (tools/wheel_test.sh).
  torch    Python blocks that import torch (tools/integration_test.sh, in
           its cached environment with torch and Transformers).

Usage:
  readme_examples.py list README
  readme_examples.py run GROUP README [--python=PY] [--attnkit=BIN] [--cwd=DIR]
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

GROUPS = ("bazel", "ci", "pip", "python", "torch")


class Block:
    def __init__(self, lang, line, text):
        self.lang = lang  # the fence's info string, first word
        self.line = line  # README line of the opening fence
        self.text = text

    def group(self):
        if self.lang == "python":
            return "torch" if re.search(r"^\s*import torch\b", self.text, re.M) else "python"
        if self.lang == "sh":
            if re.fullmatch(r"tools/\S+\.sh( [^\n]*)?", self.text.strip()):
                return "ci"
            return "pip" if "pip install ." in self.text else "bazel"
        if self.lang in ("textproto", "c++"):
            return "bazel"
        return None


def parse(readme):
    """Fenced blocks, in order. An indented code block is refused: it would
    escape this test (and the README's fences give each block a language)."""
    blocks, errors = [], []
    lines = pathlib.Path(readme).read_text().splitlines()
    fence, start, body, prev_blank, in_list = None, 0, [], True, False
    for n, line in enumerate(lines, 1):
        if fence is None:
            m = re.match(r"^(```+)\s*(\S*)", line)
            if m:
                fence, start, body = m.group(1), n, []
                lang = m.group(2)
                if not lang:
                    errors.append(f"README line {n}: a code block without a language")
                continue
            if re.match(r"^\s*([-*]|\d+\.)\s", line):
                in_list = True
            elif not line.strip():
                pass
            elif not line.startswith(" "):
                in_list = False
            if line.startswith("    ") and line.strip() and prev_blank and not in_list:
                errors.append(f"README line {n}: an indented code block; fence it with a language")
            prev_blank = not line.strip()
        elif line.startswith(fence) and not line[len(fence):].strip():
            blocks.append(Block(lang, start, "\n".join(body) + "\n"))
            fence, prev_blank = None, True
        else:
            body.append(line)
    if fence is not None:
        errors.append(f"README line {start}: a code block that never closes")
    for b in blocks:
        if b.lang and b.group() is None:
            errors.append(f"README line {b.line}: no runner for a {b.lang!r} block")
    return blocks, errors


def run(cmd, what, **kw):
    print(f"readme_examples: {what}", flush=True)
    result = subprocess.run(cmd, **kw)
    if result.returncode != 0:
        sys.exit(f"readme_examples: FAILED ({result.returncode}): {what}")


def run_sh(block, cwd, env=None):
    """A shell block as one bash -euo pipefail script in cwd."""
    run(["bash", "-euo", "pipefail", "-c", block.text],
        f"sh block at README line {block.line} in {cwd}:\n{block.text.rstrip()}", cwd=cwd, env=env)


def run_python(blocks, python, cwd):
    """One interpreter, one namespace: each block exec'd in turn, the README
    line of a failure named."""
    driver = (
        "import sys, traceback\n"
        "ns = {'__name__': '__main__'}\n"
        "for line, text in BLOCKS:\n"
        "    print(f'readme_examples: python block at README line {line}', flush=True)\n"
        "    try:\n"
        "        exec(compile(text, f'README.md:{line}', 'exec'), ns)\n"
        "    except BaseException:\n"
        "        traceback.print_exc()\n"
        "        sys.exit(f'readme_examples: FAILED: python block at README line {line}')\n"
    )
    pairs = [(b.line + 1, b.text) for b in blocks]
    # The block's own lines keep their README numbers in tracebacks.
    code = f"BLOCKS = {pairs!r}\n" + driver
    run([python, "-c", code], f"{len(blocks)} python block(s) with {python}", cwd=cwd)


def run_bazel_group(blocks, attnkit, src, cwd):
    attnkit = os.path.abspath(attnkit)
    src = os.path.abspath(src)
    work = pathlib.Path(cwd)
    # The repository's top-level entries beside the commands (relative paths
    # such as distributed/testdata/... work as they do in a checkout).
    for entry in pathlib.Path(src).iterdir():
        if not entry.name.startswith(("bazel-", ".")):
            (work / entry.name).symlink_to(entry)
    bindir = work / "bazel-bin" / "tools"
    bindir.mkdir(parents=True)
    (bindir / "attnkit").symlink_to(attnkit)
    path_dir = work / ".readme-path"
    path_dir.mkdir()
    (path_dir / "attnkit").symlink_to(attnkit)
    env = dict(os.environ)
    env["PATH"] = f"{path_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env["ATTNKIT_SRC"] = src
    if os.geteuid() == 0:  # the README's own advice for Open MPI as root
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    for b in blocks:
        if b.lang == "c++":
            m = re.match(r"//\s*(\S+\.(cc|cpp|h))\s*$", b.text.splitlines()[0])
            if not m:
                sys.exit(f"readme_examples: README line {b.line}: a c++ block's first line "
                         "must name its file (// my_plugin.cc)")
            (work / m.group(1)).write_text(b.text)
    for b in blocks:
        if b.lang == "textproto":
            path = work / f"readme_line_{b.line}.textproto"
            path.write_text(b.text)
            run([attnkit, "cost", f"--config={path}"], f"textproto at README line {b.line}",
                cwd=work, env=env, stdout=subprocess.DEVNULL)
        elif b.lang == "sh":
            run_sh(b, work, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("list", "run"))
    ap.add_argument("group", nargs="?", choices=GROUPS)
    ap.add_argument("readme")
    ap.add_argument("--python", default=sys.executable, help="interpreter for python/torch")
    ap.add_argument("--attnkit", help="the CLI binary (bazel group)")
    ap.add_argument("--src", default=".", help="the checkout (bazel, ci groups)")
    ap.add_argument("--cwd", help="where to run (pip: the checkout; default: a scratch folder)")
    args = ap.parse_args()
    blocks, errors = parse(args.readme)
    if errors:
        sys.exit("readme_examples: " + "\n".join(errors))
    if args.mode == "list":
        for b in blocks:
            first = b.text.strip().splitlines()[0] if b.text.strip() else ""
            print(f"line {b.line:4}  {b.lang:9}  {b.group():6}  {first[:70]}")
        return
    if not args.group:
        sys.exit("readme_examples: run needs a group: " + ", ".join(GROUPS))
    mine = [b for b in blocks if b.group() == args.group]
    if not mine:
        sys.exit(f"readme_examples: README has no {args.group} block")
    scratch = tempfile.mkdtemp(prefix="readme-examples-")
    try:
        cwd = args.cwd or scratch
        if args.group in ("python", "torch"):
            run_python(mine, args.python, cwd)
        elif args.group == "pip":
            for b in mine:
                run_sh(b, cwd)
        elif args.group == "ci":
            ci = pathlib.Path(args.src, ".ci", "run").read_text().splitlines()
            for b in mine:
                for line in b.text.splitlines():
                    command = line.split("#")[0].strip()
                    if command and command not in ci:
                        sys.exit(f"readme_examples: README line {b.line}: .ci/run has no line "
                                 f"{command!r}")
                    if command:
                        print(f"readme_examples: .ci/run runs {command!r}")
        else:
            if not args.attnkit:
                sys.exit("readme_examples: the bazel group needs --attnkit")
            run_bazel_group(mine, args.attnkit, args.src, cwd)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"readme_examples: {args.group}: {len(mine)} block(s) ran as written")


if __name__ == "__main__":
    main()
