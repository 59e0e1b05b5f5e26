// The checkout's pytrain inside a check page's Pyodide (kernels_check.html, webgpu_check.html), after its
// window.__pyodide is set:
//   await window.__loadSources(["pytrain/__init__.py", ...]);   // paths under the served root
//   window.__py("python code")                 // runPython; the last expression's value
window.__loadSources = async (paths) => {
  const pyodide = window.__pyodide;
  const FS = pyodide._module.FS;
  const files = await Promise.all(paths.map(async (p) => {
    const r = await fetch("/" + p);
    if (!r.ok) throw new Error(`fetch ${p}: ${r.status}`);
    return [p, new Uint8Array(await r.arrayBuffer())];
  }));
  for (const [p, bytes] of files) {
    let dir = "/tmp/src";
    for (const part of p.split("/").slice(0, -1)) {
      dir += "/" + part;
      if (!FS.analyzePath(dir).exists) FS.mkdirTree(dir);
    }
    FS.writeFile("/tmp/src/" + p, bytes);
  }
  pyodide.runPython("import sys\nif '/tmp/src' not in sys.path: sys.path.insert(0, '/tmp/src')");
  return files.length;
};

window.__py = (code) => {
  const out = window.__pyodide.runPython(code);
  return out && out.toJs ? out.toJs() : out;
};
