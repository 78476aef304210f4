"""The served Python packages import one way.  The modules of
python/{hvdshim_torch,horovod} (every import, module level or in a function)
are read as a graph; prints one line for each thing against the layering,
nothing when there is none:
  circle: a <-> b ...      modules that import each other, directly or not
                           (a submodule using its own package is not one);
  up: a imports b          PACKAGEs are given lowest first, and a lower one
                           imports nothing of a higher one; a package whose
                           __init__ docstring has a map (lines "  name  ...",
                           "  name/  ..." for a subpackage, lowest first)
                           imports inside itself only down that map;
  unmapped: m              a module (or subpackage) its package's map lacks.
Usage: pyimports.py ROOT PACKAGE...  (tests/unit/layers.sh)"""
import ast, os, re, sys
root, pkgs = sys.argv[1], sys.argv[2:]
mods, maps = {}, {}
for pkg in pkgs:
    for d, _, fs in os.walk(os.path.join(root, pkg)):
        for f in fs:
            if f.endswith('.py'):
                p = os.path.join(d, f)
                m = os.path.relpath(p, root)[:-3].replace(os.sep, '.')
                if m.endswith('.__init__'):
                    m = m[:-9]
                    doc = ast.get_docstring(ast.parse(open(p).read())) or ''
                    names = re.findall(r'^  (\w+)/?  ', doc, re.M)
                    if names: maps[m] = names
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
out = []
index, low, stack, on = {}, {}, [], set()
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
        if len(c) > 1: out.append('circle: ' + ' <-> '.join(sorted(c)))
for v in sorted(g):
    if v not in index: scc(v)
def unit(pkg, m):  # m's place in pkg's map: the name right below pkg
    return m[len(pkg) + 1:].split('.')[0] if m.startswith(pkg + '.') else None
for pkg, names in sorted(maps.items()):
    for m in sorted(mods):
        u = unit(pkg, m)
        if u is not None and u not in names and 'unmapped: %s.%s' % (pkg, u) not in out:
            out.append('unmapped: %s.%s' % (pkg, u))
for m in sorted(g):
    for t in sorted(g[m]):
        top_m, top_t = m.split('.')[0], t.split('.')[0]
        if pkgs.index(top_t) > pkgs.index(top_m):
            out.append('up: %s imports %s (package %s is above %s)' % (m, t, top_t, top_m))
            continue
        for pkg, names in maps.items():
            um, ut = unit(pkg, m), unit(pkg, t)
            if um in names and ut in names and names.index(ut) > names.index(um):
                out.append('up: %s imports %s (%s is above %s in %s\'s map)' % (m, t, ut, um, pkg))
print('\n'.join(out))
