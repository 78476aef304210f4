"""The served Python packages import one way: the modules of
python/{horovod,hvdshim_torch} (every import, module level or in a
function) as a graph; prints its circles ("a <-> b; ..."), nothing when
there is none.  A submodule using its own package is not a circle.
Usage: pyimports.py ROOT PACKAGE...  (tests/unit/layers.sh)"""
import ast, os, sys
root = sys.argv[1]
mods = {}
for pkg in sys.argv[2:]:
    for d, _, fs in os.walk(os.path.join(root, pkg)):
        for f in fs:
            if f.endswith('.py'):
                p = os.path.join(d, f)
                m = os.path.relpath(p, root)[:-3].replace(os.sep, '.')
                if m.endswith('.__init__'): m = m[:-9]
                mods[m] = p
def resolve(cur, is_pkg, level, name):
    if level == 0: return name
    base = cur.split('.') if is_pkg else cur.split('.')[:-1]
    base = base[:len(base) - (level - 1)]
    return '.'.join(base + ([name] if name else []))
g = {}
for m, p in mods.items():
    is_pkg = p.endswith('__init__.py')
    for node in ast.walk(ast.parse(open(p).read())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            b = resolve(m, is_pkg, node.level, node.module)
            targets = [b] + [b + '.' + a.name for a in node.names]
        for t in targets:
            while t and t not in mods: t = t.rpartition('.')[0]
            if t and t != m and not m.startswith(t + '.'):
                g.setdefault(m, set()).add(t)
index, low, stack, on, out = {}, {}, [], set(), []
def scc(v, n=[0]):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in g.get(v, ()):
        if w not in index: scc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: out.append(' <-> '.join(sorted(c)))
for v in sorted(g):
    if v not in index: scc(v)
print('; '.join(out))
