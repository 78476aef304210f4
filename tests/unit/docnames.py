"""The names the docs give in backticks are the code's: prints one line for
each that is not found, nothing when all are.  Checked: file names (a
`path/to/file.c` or a bare `file.py`: a tracked file with that path, or
that name anywhere), C identifiers of the library (`hvd_*`: defined or
declared in a source file), and Python names of the adapter given as
`module.name` or `package.module.name` (hvdshim_torch's modules: a def,
class or assignment of that name in that module).
Usage: docnames.py SRCDIR FILE.md...  (tests/unit/doc-names.sh)"""
import os
import re
import subprocess
import sys

src, docs = sys.argv[1], sys.argv[2:]
try:
    files = subprocess.run(["git", "-C", src, "ls-files"], capture_output=True, text=True).stdout.split()
except OSError:  # no git (a stack's chroot)
    files = []
if not files:  # a tarball, or no git: every file under src (not the stacks' chroots)
    files = []
    for d, dirs, fs in os.walk(src):
        dirs[:] = [x for x in dirs if x not in ("stacks-cache", ".git")]
        files += [os.path.relpath(os.path.join(d, f), src) for f in fs]
names = {os.path.basename(f) for f in files}
paths = set(files)
for f in files:  # folders too
    p = os.path.dirname(f)
    while p:
        paths.add(p)
        p = os.path.dirname(p)
csrc = "".join(open(os.path.join(src, f), errors="replace").read()
               for f in files if f.endswith((".c", ".h", ".map")) and not f.startswith("tests/"))
pyroot = os.path.join(src, "python", "hvdshim_torch")
pymods = {}
for d, _, fs in os.walk(pyroot):
    for f in fs:
        if f.endswith(".py"):
            rel = os.path.relpath(os.path.join(d, f), pyroot)[:-3].replace(os.sep, ".")
            rel = rel[:-9] if rel.endswith(".__init__") else rel
            pymods[rel] = os.path.join(d, f)
EXTERNAL = {"nccl.h", "mpi.h", "cuda.h", "cuda_runtime_api.h", "Python.h"}  # headers of other projects
out = []
FILE = re.compile(r"^[\w./-]+\.(c|h|py|sh|am|ac|def|map|md)$")
for doc in docs:
    text = open(doc).read()
    for tok in sorted(set(re.findall(r"`([^`\n]+)`", text))):
        tok = tok.strip()
        if FILE.match(tok) and "*" not in tok and tok not in EXTERNAL:
            t = tok.lstrip("./")
            if "/" in t:
                if t not in paths and not any(p.endswith("/" + t) for p in paths):
                    out.append("%s: `%s`: no such file" % (doc, tok))
            elif t not in names:
                out.append("%s: `%s`: no file of that name" % (doc, tok))
            continue
        m = re.match(r"^(hvd_[a-z0-9_]+)(\(\))?$", tok)
        if m:
            if not re.search(r"\b%s\b" % m.group(1), csrc):
                out.append("%s: `%s`: not in the library's sources" % (doc, tok))
            continue
        m = re.match(r"^((?:[a-z_]+\.)*[a-z_]+)\.(\w+)(\(\))?$", tok)
        if m:
            mod, name = m.group(1), m.group(2)
            mod = mod[len("hvdshim_torch."):] if mod.startswith("hvdshim_torch.") else mod
            if mod in pymods:
                body = open(pymods[mod]).read()
                if not re.search(r"^\s*(def|class)\s+%s\b|^\s*%s\s*=|^from .* import .*\b%s\b" % (name, name, name),
                                 body, re.M):
                    out.append("%s: `%s`: %s has no %s" % (doc, tok, pymods[mod][len(src) + 1:], name))
print("\n".join(out))
