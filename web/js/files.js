// Reading uploads and offering downloads, without any network.

/** The files of an <input type=file> as {name, path, type, data: ArrayBuffer}. */
export async function readFiles(input) {
  const out = [];
  for (const f of Array.from(input.files || [])) {
    out.push({ name: f.name, path: f.webkitRelativePath || f.name, type: f.type, data: await f.arrayBuffer() });
  }
  return out;
}

/** The first chosen file's text, or null. */
export async function readText(input) {
  const f = input.files && input.files[0];
  return f ? { name: f.name, text: await f.text() } : null;
}

/** The first chosen file's bytes, or null. */
export async function readBytes(input) {
  const f = input.files && input.files[0];
  return f ? { name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) } : null;
}

/** Save bytes as a file through a temporary object URL (stays in the tab, no request). */
export function download(bytes, filename, type = "application/octet-stream") {
  const url = URL.createObjectURL(new Blob([bytes], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  a.style.display = "none";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
