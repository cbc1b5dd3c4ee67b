#!/usr/bin/env python3
"""test_docs.py — the documentation against the program: every command and snippet in README.md and
docs/**/*.md is run, docs/cli-spec.md is the CLI's own --help, and the files the documents name exist.

Usage: test_docs.py SOURCE_DIR path/to/lamina path/to/liblamina.so  (CTest passes all three).
Prints "ok - ..." / "not ok - ..." / "skip - ..." per check and a summary; exits 0 when nothing failed.

1. Commands. In README.md, then docs/**/*.md (the guides in docs/guide/ too, not the logs' notes in
   docs/bench/; sorted by path), the lines of ```sh, ```bash and ```console blocks are read (a trailing
   backslash joins lines, `# ...` comments and a leading `$ ` are dropped, `&&` splits a line into
   commands), in one scratch folder, in document order: a file one command writes (`--save cnn.lamina`)
   is there for the next (`eval --load cnn.lamina`), so a guide that needs a file makes it before (or an
   earlier document does). Each command is either run or named in COVERED_ELSEWHERE with the test that
   runs it; a command that is neither fails the test, so a new command in the docs needs a way to be
   run. `lamina` / `build/lamina` commands must exit 0, after these substitutions (so that they take
   seconds on a 2-core CPU with no GPU):
   - the program is the lamina under test; VAR=value prefixes become its environment;
   - `--data X` (and train/eval without --data) reads a small generated folder instead: 1024 training
     and 256 test images of 28x28, 10 classes, IDX gzipped like Debian's Fashion-MNIST;
   - `--epochs N` becomes min(N, 2); hidden's `--n N` at most 1M and `--repeat R` at most 3;
   - `lamina data` makes its sets from the small folder (`--from`, unless given), `--n` at most 200 and
     `--test` at most 50;
   - bench transfer gets `--reps 3 --warmup 1 --max-ms 10`, and `--batch 64,4096` without --batch or --shape;
   - an argument naming a file of the repository (bench/nets/res28.txt) gets the repository's path;
   - where there is no CUDA device, a command with `--device cuda`, `LAMINA_DEVICE=cuda` or
     `--precision tf32` is skipped (reported as such): on a GPU machine it runs.
2. Snippets. ```python blocks run with this Python, PYTHONPATH=SOURCE_DIR/python and LAMINA_LIBRARY,
   in the same scratch folder, with /usr/share/datasets/fashion-mnist read as the small folder and
   `epochs=N` as `epochs=min(N, 2)`; a block that imports torch is skipped where torch is missing, one that
   reads a folder named "...videos" where this lamina reads no video files (lamina info: video false). ```c blocks
   are compiled with cc against include/ and liblamina.so, and run.
3. docs/cli-spec.md: `scripts/gen-cli-spec --check` (its blocks equal each command's --help); every
   option a command's --help lists appears in the file; every --option the hand-written text names
   exists in that section's command (the text before the first command section: in any command).
   The other docs (docs/**/*.md) may name only options that some command has, or another program's
   that they show (OTHER_PROGRAMS_OPTIONS: torchrun, mpirun, pip, cmake, pkg-config, ctest, test_prims).
4. Paths: every word in `code` in README.md, BENCHMARKS.md, docs/bench/JOURNAL.md (the measurements' journal, which
   the commands of 1. leave out with the rest of docs/bench/) and docs/**/*.md that looks like a path into
   the repository (its first part is a top-level entry of the repository, or `..`), and every relative
   link target (taken from the document's own folder, as GitHub resolves it; `#anchor` dropped), must
   exist in the repository (git ls-files, untracked files included; without git, the file system).
   Build outputs (build*/) are not checked.
"""
import fnmatch
import glob
import gzip
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile

SRC, CLI, LIB = (os.path.abspath(a) for a in sys.argv[1:4]) if len(sys.argv) == 4 else (None, None, None)
if SRC is None:
    sys.exit("usage: test_docs.py SOURCE_DIR path/to/lamina path/to/liblamina.so")

# Commands of the docs that this test does not run, and the test (or reason) that covers each.
COVERED_ELSEWHERE = [
    (r"^make demo$", "not run: 5 epochs on the whole Fashion-MNIST; its commands (info, hidden, train, eval) "
                     "are run here in the README's tour"),
    (r"^make test$", "this suite itself"),
    (r"^make$", "the build this suite runs in"),
    (r"^/usr/bin/python3 -m venv --system-site-packages VENV$", "test_python_install (tests/python/check_install.py)"),
    (r"^VENV/bin/pip install --no-build-isolation \./python$", "test_python_install (tests/python/check_install.py)"),
    (r"^cc app\.c -o app \$\(pkg-config --cflags --libs lamina(-static)?\)$", "test_install (tests/test_install.sh)"),
    (r"^build/lamina train --data my-photos --size 32x32 ", "test_cli (train on an image folder with --size: the small "
                                                           "data set this suite substitutes is no image folder)"),
    (r"^build/lamina predict --load cnn\.lamina --input my-photos/test$", "test_cli (predict --input DIR: a CSV row per "
                                                                         "file)"),
    (r"^build/lamina train --data scenes ", "test_cli (train on segment scenes, --augment: the small data set this suite "
                                           "substitutes has a class per image)"),
    (r"^build/lamina eval --load unet\.lamina --data scenes$", "test_cli (eval per pixel: IoU per class, mean IoU)"),
    (r"^build/lamina bench data --data VOC2012 ", "test_cli (bench data: a mask folder streamed from its files; "
                                                  "VOC itself is not here)"),
    (r"^build/lamina train --data videos ", "test_cli (train on a video folder: the small data set this suite "
                                           "substitutes holds images, not videos)"),
    (r"^lamina (train|eval) --data videos ", "test_cli (eval --test-clips 3 on a video folder; the small data set "
                                            "this suite substitutes holds images, not videos)"),
    (r"^lamina predict --load clip\.lamina --input ", "test_cli (predict on a video file and on a folder of them)"),
    (r"^build/lamina predict --load unet\.lamina --data scenes ", "test_cli (predict a class per pixel: masks and a grid)"),
    (r"^build/lamina train --data (VOC2012|ADEChallengeData2016) ", "test_cli (mask folders: the generic, mmsegmentation "
                                                                  "and VOC layouts, --reduce-zero-label, --label-map)"),
    (r"^build/lamina eval --load voc\.lamina --data VOC2012$", "test_cli (eval on a mask folder: each class's IoU by name)"),
    (r"^build/lamina train --data clips ", "test_cli (train on clips: the small data set this suite substitutes holds "
                                          "images, not clips)"),
    (r"^build/lamina predict --load clips\.lamina --data clips$", "test_cli (predict on clips: a CSV row per clip)"),
    (r"^build/lamina data coco ", "test_cli (data coco: a tiny COCO set made there; COCO's own files are not here)"),
    (r"^mpirun -np 2 build/lamina train ", "test_ranks (tests/test_ranks.sh: 2 CPU ranks against one process)"),
    (r"^build/lamina train .*--gpus 2$", "test_ranks_gpu (tests/test_ranks_gpu.sh: --gpus 2 against one GPU; "
                                        "skipped without a GPU)"),
    (r"^torchrun --nproc-per-node 2 --no-python build/lamina train ", "test_ranks_gpu (torchrun where it is installed, "
                                                                      "and its environment by hand)"),
]

passed = failed = skipped = 0
HAS_VIDEO = True  # lamina info --json's "video": a command writing video files is skipped where it is false


def ok(desc):
    global passed
    passed += 1
    print(f"ok - {desc}")


def not_ok(desc, why):
    global failed
    failed += 1
    print(f"not ok - {desc}")
    for line in why.rstrip().splitlines()[-25:]:
        print(f"#   {line}")


def skip(desc, why):
    global skipped
    skipped += 1
    print(f"skip - {desc}: {why}")


def doc_files():
    """README.md first, then every .md under docs/ (the guides in docs/guide/ too), sorted by path; not the
    measurement logs' notes under docs/bench/, which record what was run then."""
    docs = glob.glob(os.path.join(SRC, "docs", "**", "*.md"), recursive=True)
    return ["README.md"] + sorted(d for d in (os.path.relpath(p, SRC).replace(os.sep, "/") for p in docs)
                                  if not d.startswith("docs/bench/"))


def fenced_blocks(text):
    """(info string, body) of every ``` fenced block."""
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```", text, re.M | re.S)]


def command_lines(body):
    """The commands of a shell block: joined continuations, no comments, split at &&."""
    out, cur = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        words = shlex.split(cur, comments=True)
        cur = ""
        if words and words[0] == "$":
            words = words[1:]
        part = []
        for w in words + ["&&"]:
            if w == "&&":
                if part:
                    out.append(part)
                part = []
            else:
                part.append(w)
    return out


# ---- the small data set -------------------------------------------------------------------------

def write_tiny(folder):
    """1024 training and 256 test images of 28x28, label k drawn as a bright band at rows 2k..2k+3."""
    os.makedirs(folder, exist_ok=True)
    seed = 12345
    for part, n in (("train", 1024), ("t10k", 256)):
        img, lab = bytearray(), bytearray()
        for i in range(n):
            k = (i * 7) % 10
            for p in range(784):
                seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
                img.append(255 if 2 * k <= p // 28 < 2 * k + 4 else seed >> 25)
            lab.append(k)
        with gzip.open(os.path.join(folder, f"{part}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(img))
        with gzip.open(os.path.join(folder, f"{part}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(lab))


# ---- running the lamina commands ---------------------------------------------------------------

def count(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?(?:e\d+)?)([KMG]?)", s)
    if not m:
        return None
    return int(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)])


def substitute(words, work, tiny, has_cuda):
    """(argv, env, reason to skip or None) for a documented lamina command."""
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        k, v = words[0].split("=", 1)
        env[k] = v
        words = words[1:]
    args = list(words[1:])
    needs_gpu = env.get("LAMINA_DEVICE") == "cuda" or any(
        i > 0 and (a, args[i - 1]) in (("cuda", "--device"), ("tf32", "--precision"))
        or a in ("--device=cuda", "--precision=tf32") for i, a in enumerate(args))
    if needs_gpu and not has_cuda:
        return None, env, "needs a CUDA device"
    if "mp4" in args and not HAS_VIDEO:
        return None, env, "this lamina reads and writes no video files (lamina info: video false)"
    cmd = args[0] if args else ""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        val = args[i + 1] if i + 1 < len(args) else None
        if a == "--data" and val is not None:
            out += ["--data", tiny]
            i += 2
            continue
        if a == "--epochs" and val is not None and val.isdigit():
            out += ["--epochs", str(min(int(val), 2))]
            i += 2
            continue
        if cmd == "data" and a in ("--n", "--test") and val is not None and val.isdigit():
            out += [a, str(min(int(val), 200 if a == "--n" else 50))]
            i += 2
            continue
        if cmd == "hidden" and a in ("--n", "--repeat") and val is not None and count(val) is not None:
            out += [a, str(min(count(val), 1000000 if a == "--n" else 3))]
            i += 2
            continue
        if not a.startswith("-") and "/" in a and not os.path.exists(os.path.join(work, a)) and \
                os.path.exists(os.path.join(SRC, a)):
            a = os.path.join(SRC, a)
        out.append(a)
        i += 1
    if cmd in ("train", "eval") and "--data" not in out:
        out += ["--data", tiny]
    if cmd == "data" and "--from" not in out:  # the data makers' source: the small set, not Fashion-MNIST
        out += ["--from", tiny]
    if cmd == "bench" and "transfer" in out:
        out += ["--reps", "3", "--warmup", "1", "--max-ms", "10"]
        if "--batch" not in out and "--shape" not in out and "--from-csv" not in out:
            out += ["--batch", "64,4096"]
    return [CLI] + out, env, None


def run_commands(work, tiny, has_cuda):
    for doc in doc_files():
        with open(os.path.join(SRC, doc), encoding="utf-8") as f:
            blocks = fenced_blocks(f.read())
        for info, body in blocks:
            if info in ("sh", "bash", "console"):
                for words in command_lines(body):
                    run_command(doc, words, work, tiny, has_cuda)
            elif info == "python":
                run_python(doc, body, work, tiny)
            elif info == "c":
                run_c(doc, body, work)


def run_command(doc, words, work, tiny, has_cuda):
    text = " ".join(words)
    desc = f"{doc}: {text}"
    for pattern, by in COVERED_ELSEWHERE:
        if re.match(pattern, text):
            print(f"# {desc}: covered elsewhere: {by}")
            return
    first = [w for w in words if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w)]
    if first and first[0] in ("lamina", "build/lamina"):
        argv, env, why = substitute(words, work, tiny, has_cuda)
        if why:
            skip(desc, why)
            return
        proc = subprocess.run(argv, cwd=work, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=300, stdin=subprocess.DEVNULL)
        ran = " ".join(shlex.quote(a) for a in argv)
        if proc.returncode == 0:
            ok(desc)
        else:
            not_ok(desc, f"ran: {ran}\nexit {proc.returncode}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        return
    if words and words[0].startswith("PYTHONPATH=") and words[1:2] == ["/usr/bin/python3"]:
        env = {**os.environ, "PYTHONPATH": os.path.join(SRC, words[0].split("=", 1)[1]), "LAMINA_LIBRARY": LIB}
        proc = subprocess.run([sys.executable] + words[2:], cwd=work, env=env, capture_output=True, text=True,
                              timeout=120)
        if proc.returncode == 0:
            ok(desc)
        else:
            not_ok(desc, f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return
    not_ok(desc, "a command this test neither runs nor knows a test for: run it here (run_command) or name "
                 "the test that runs it in COVERED_ELSEWHERE")


def run_python(doc, body, work, tiny):
    first = body.strip().splitlines()[0] if body.strip() else ""
    desc = f"{doc}: the python block '{first[:60]}'"
    if re.search(r"^\s*(import torch|from torch)", body, re.M):
        try:
            import torch  # noqa: F401
        except ImportError:
            skip(desc, "this Python has no torch")
            return
    if re.search(r"""["'][\w.-]*videos\b""", body) and not HAS_VIDEO:
        skip(desc, "this lamina reads no video files (lamina info: video false)")
        return
    code = body.replace("/usr/share/datasets/fashion-mnist", tiny)
    code = re.sub(r"\bepochs=\d+", lambda m: f"epochs={min(int(m.group(0)[7:]), 2)}", code)
    env = {**os.environ, "PYTHONPATH": os.path.join(SRC, "python"), "LAMINA_LIBRARY": LIB}
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode == 0:
        ok(desc)
    else:
        not_ok(desc, f"exit {proc.returncode}\n{proc.stdout[-1500:]}{proc.stderr[-3000:]}")


def run_c(doc, body, work):
    desc = f"{doc}: the C program compiles against include/ and liblamina.so, and runs"
    cc = shutil.which("cc")
    if not cc:
        skip(desc, "no cc")
        return
    c, exe = os.path.join(work, "doc_example.c"), os.path.join(work, "doc_example")
    with open(c, "w") as f:
        f.write(body)
    libdir = os.path.dirname(LIB)
    proc = subprocess.run([cc, "-std=c11", "-Wall", c, "-o", exe, "-I", os.path.join(SRC, "include"), LIB,
                           f"-Wl,-rpath,{libdir}", "-lm"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        not_ok(desc, f"cc: exit {proc.returncode}\n{proc.stderr}")
        return
    proc = subprocess.run([exe], cwd=work, capture_output=True, text=True, timeout=120)
    # what each of the guide's programs prints last, so a run that stops early does not pass
    want = "out[254]" if "out[254]" in body else "best epoch"
    if proc.returncode == 0 and want in proc.stdout:
        ok(desc)
    else:
        not_ok(desc, f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}")


# ---- docs/cli-spec.md against --help ------------------------------------------------------------

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Options of other programs that the guides show beside lamina's (README once held these, and README is not
# checked for options): torchrun's and mpirun's (scaling.md), pip's, venv's and cmake's (python.md, c-api.md,
# design.md), pkg-config's, ctest's, and python/examples/train_fashion_mnist.py's --limit.
OTHER_PROGRAMS_OPTIONS = {"--nproc-per-node", "--no-python", "--allow-run-as-root", "--no-build-isolation",
                          "--system-site-packages", "--build", "--install", "--prefix", "--cflags", "--libs",
                          "--test-dir", "--limit",
                          "--perf", "--sizes", "--only"}  # test_prims' kernel lab (docs/design.md, Tests)


def help_options(args):
    proc = subprocess.run([CLI] + args + ["--help"], capture_output=True, text=True, timeout=60)
    opts = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", proc.stdout, re.M))
    if args:
        opts.add("--help")  # every subcommand takes it, whether or not its text lists it
    else:
        opts |= {"--help", "--version"}
    return opts, proc.returncode


def check_cli_spec():
    spec_path = os.path.join(SRC, "docs", "cli-spec.md")
    proc = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "gen-cli-spec"), "--check", CLI],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        ok("docs/cli-spec.md: every generated block equals the command's --help")
    else:
        not_ok("docs/cli-spec.md: generated blocks", proc.stdout + proc.stderr)

    with open(spec_path, encoding="utf-8") as f:
        text = f.read()
    commands = {"": []}
    commands.update({c: c.split() for c in ("hidden", "train", "eval", "predict", "model", "export", "import", "data",
                                            "bench transfer", "info")})
    helps = {}
    for name, args in commands.items():
        opts, rc = help_options(args)
        if rc != 0 or not opts:
            not_ok(f"lamina {name} --help", f"exit {rc}, options {sorted(opts)}")
        helps[name] = opts
    every = set().union(*helps.values())

    for name, opts in helps.items():
        missing = sorted(o for o in opts if not re.search(re.escape(o) + r"(?![\w-])", text))
        if missing:
            not_ok(f"docs/cli-spec.md names every option of lamina {name} --help", f"missing: {missing}")
        else:
            ok(f"docs/cli-spec.md names every option of lamina {name} --help".replace("  ", " "))

    # the hand-written text: outside the generated blocks, section by section
    hand = re.sub(r"<!-- begin: lamina .*? -->.*?<!-- end: lamina [^>]*-->", "", text, flags=re.S)
    sections = re.split(r"^## lamina (.+)$", hand, flags=re.M)
    parts = [("", sections[0])] + list(zip(sections[1::2], sections[2::2]))
    for name, body in parts:
        name = name.strip()
        allowed = helps.get(name, every) if name else every
        unknown = sorted(set(OPTION.findall(body)) - allowed)
        where = f"the section 'lamina {name}'" if name else "the opening text"
        if unknown:
            not_ok(f"docs/cli-spec.md: every option {where} names exists", f"not in --help: {unknown}")
        else:
            ok(f"docs/cli-spec.md: every option {where} names exists")

    for doc in doc_files():
        if doc in ("README.md", "docs/cli-spec.md"):
            continue
        with open(os.path.join(SRC, doc), encoding="utf-8") as f:
            unknown = sorted(set(OPTION.findall(f.read())) - every - OTHER_PROGRAMS_OPTIONS)
        if unknown:
            not_ok(f"{doc}: every --option it names is a lamina option", f"unknown: {unknown}")
        else:
            ok(f"{doc}: every --option it names is a lamina option")


# ---- the layer list: the ops' own (lam_model_layers, in lamina model --help) against the README's table ----

def model_layers():
    """The usage of every layer, as `lamina model --help` prints them from the ops (src/nn/ops/)."""
    proc = subprocess.run([CLI, "model", "--help"], capture_output=True, text=True, timeout=60)
    text = proc.stdout.split("Model specs:", 1)[-1].split("  NAME: LAYER", 1)[0]
    return [m.group(1) for m in re.finditer(r"^  (\S.*?)  +\S", text, re.M)]


def check_layers():
    usages = model_layers()
    if len(usages) < 10:
        not_ok("lamina model --help lists the layers", f"found {usages}")
        return
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    table = re.search(r"^\| layer \| words \| e\.g\. \|\n\|[-|]+\|\n((?:\|.*\n)+)", readme, re.M)
    if not table:
        not_ok("README.md has the layer table", "no '| layer | words | e.g. |' table")
        return
    words = set()
    for row in table.group(1).splitlines():
        cells = re.split(r"(?<!\\)\|", row)
        if len(cells) > 2 and "`NAME:" not in cells[2]:  # the label row names no layer
            words |= {w.replace("\\|", "|") for w in re.findall(r"`([^`]+)`", cells[2])}
    missing = [u for u in usages if u not in words]
    extra = sorted(w for w in words if w not in usages)
    if missing or extra:
        not_ok("README.md's layer table is the ops' list (lamina model --help)",
               f"not in the table: {missing}; in the table but no layer's words: {extra}")
    else:
        ok(f"README.md's layer table is the ops' list ({len(usages)} layers)")
    names = {u.split()[0] for u in usages}
    with open(os.path.join(SRC, "docs", "guide", "safetensors.md"), encoding="utf-8") as f:
        rows = re.findall(r"^\| ([a-z][a-z, ]*?) +\| `i\.", f.read(), re.M)
    named = {n.strip() for r in rows for n in r.split(",")}
    unknown = sorted(named - names)
    if not named or unknown:
        not_ok("docs/guide/safetensors.md names layers that exist", f"its rows name {sorted(named)}; unknown: {unknown}")
    else:
        ok(f"docs/guide/safetensors.md names layers that exist ({', '.join(sorted(named))})")


# ---- the files the documents name ---------------------------------------------------------------

def repo_files():
    try:
        proc = subprocess.run(["git", "-C", SRC, "ls-files", "--cached", "--others", "--exclude-standard"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 and proc.stdout:
            return set(proc.stdout.splitlines()), "git ls-files"
    except OSError:
        pass
    files = set()
    for root, dirs, names in os.walk(SRC):
        dirs[:] = [d for d in dirs if d != ".git" and not d.startswith("build")]
        files |= {os.path.relpath(os.path.join(root, n), SRC) for n in names}
    return files, "the file system"


def check_paths():
    files, how = repo_files()
    dirs = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    top = {f.split("/")[0] for f in files}
    for doc in ["README.md", "BENCHMARKS.md", "docs/bench/JOURNAL.md"] + [d for d in doc_files() if d != "README.md"]:
        with open(os.path.join(SRC, doc), encoding="utf-8") as f:
            text = f.read()
        words = set()
        for span in re.findall(r"`([^`\n]+)`", text):
            words |= set(span.split())
        bad = []
        prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # links in prose, not code
        for link in re.findall(r"\]\(([^)\s]+)\)", prose):  # a relative link: from the document's folder
            target = link.split("#", 1)[0]
            if not target or "://" in target or target.startswith(("mailto:", "/")):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target)).replace(os.sep, "/")
            if not (path in files or path in dirs):
                bad.append(link)
        for w in sorted(words):
            w = w.strip("(),;:'\"").rstrip(".")
            if "/" not in w or "://" in w:
                continue
            if w.startswith("./"):
                w = w[2:]
            # a placeholder part (fuzz/corpus/TARGET/) stands for any name
            w = "/".join("*" if re.fullmatch(r"[A-Z][A-Z_]*", p) else p for p in w.split("/"))
            head = w.split("/")[0]
            if head.startswith("build") or not (head in top or head == ".." or head.startswith(".")):
                continue
            path = w.rstrip("/")
            if not (path in files or path in dirs or any(fnmatch.fnmatch(f, path) for f in files)):
                bad.append(w)
        if bad:
            not_ok(f"{doc}: every path it names is in the repository ({how})", f"not there: {bad}")
        else:
            ok(f"{doc}: every path it names is in the repository ({how})")


def check_readme_build():
    """README.md against the build: the packages it says `make` installs are the Makefile's DEB_PACKAGES,
    and the test count it says `make test` ends with is what ctest lists for this build (with CUDA or
    without: README gives both). README once said 45 tests (there were 47) and left MPI's packages out."""
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(SRC, "Makefile"), encoding="utf-8") as f:
        make = re.search(r"^DEB_PACKAGES\s*:?=((?:.*\\\n)*.*)$", f.read(), re.M)
    said = re.search(r"installs only what is missing \(`([^`]*)`\)", readme)
    if not make or not said:
        not_ok("README.md names the packages the Makefile installs",
               "no DEB_PACKAGES in the Makefile" if not make else "no 'installs only what is missing (`...`)' in README.md")
    else:
        want, got = set(make.group(1).replace("\\", " ").split()), set(said.group(1).split())
        if want == got:
            ok(f"README.md names the {len(want)} packages the Makefile's DEB_PACKAGES installs")
        else:
            not_ok("README.md names the packages the Makefile installs",
                   f"missing from README: {sorted(want - got)}; not in the Makefile: {sorted(got - want)}")
    count = re.search(r"0 tests failed out of (\d+)`, (\d+) in a build without CUDA", readme)
    ctest = shutil.which("ctest")
    build = os.path.dirname(CLI)
    if not count:
        not_ok("README.md says how many tests make test runs", "no '0 tests failed out of N`, M in a build without CUDA'")
        return
    if not ctest or not os.path.exists(os.path.join(build, "CTestTestfile.cmake")):
        skip("README.md's test count", f"no ctest, or {build} is not a build folder")
        return
    proc = subprocess.run([ctest, "--test-dir", build, "-N"], capture_output=True, text=True, timeout=120)
    listed = re.search(r"Total Tests: (\d+)", proc.stdout)
    info = subprocess.run([CLI, "info", "--json"], capture_output=True, text=True, timeout=60).stdout
    with_cuda = '"cuda":true' in info.replace(" ", "")
    want = int(count.group(1) if with_cuda else count.group(2))
    kind = "with CUDA" if with_cuda else "without CUDA"
    # The README counts what `make test` gives on a machine it set up, valgrind included (DEB_PACKAGES); a build
    # that found no valgrind (the GPU machine has none) lacks test_data_valgrind, and with video files
    # test_video_valgrind and fuzz_video_replay_valgrind too.
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
        if re.search(r"^LAMINA_VALGRIND:FILEPATH=.*NOTFOUND$", f.read(), re.M):
            want -= 3 if HAS_VIDEO else 1
            kind += ", without valgrind"
    if listed and int(listed.group(1)) == want:
        ok(f"README.md's test count for a build {kind} ({want}) is what ctest lists")
    else:
        not_ok(f"README.md's test count for a build {kind}",
               f"README says {want}, ctest -N lists {listed.group(1) if listed else 'nothing'} in {build}")


def main():
    for p in (CLI, LIB):
        if not os.path.exists(p):
            sys.exit(f"test_docs: {p} does not exist")
    proc = subprocess.run([CLI, "info", "--json"], capture_output=True, text=True, timeout=60)
    has_cuda = '"devices":[]' not in proc.stdout.replace(" ", "")
    global HAS_VIDEO
    HAS_VIDEO = '"video":false' not in proc.stdout.replace(" ", "")
    print(f"# lamina {CLI}; CUDA device: {'yes' if has_cuda else 'no'}")
    check_cli_spec()
    check_layers()
    check_paths()
    check_readme_build()
    with tempfile.TemporaryDirectory(prefix="lamina-docs-") as work:
        tiny = os.path.join(work, "tiny-data")
        write_tiny(tiny)
        env_saved = {k: os.environ.pop(k) for k in ("LAMINA_DEVICE", "LAMINA_DATA_DIR") if k in os.environ}
        try:
            run_commands(work, tiny, has_cuda)
        finally:
            os.environ.update(env_saved)
    print(f"# {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
