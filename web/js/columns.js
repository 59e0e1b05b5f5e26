// "Your table": which columns feed the model, and what happens to missing values and text columns.

const SEPARATORS = { ",": "comma", ";": "semicolon", "\t": "tab", "|": "vertical bar" };

export function separatorName(d) { return SEPARATORS[d] || JSON.stringify(d); }

/**
 * Render one checkbox per column (all but the label) into `box`, saying what each one is: numbers,
 * text the model gets one-hot encoded, or text it cannot use (unticked, disabled, with the reason).
 */
export function renderColumns(box, details, label, onChange) {
  box.innerHTML = "";
  const legend = document.createElement("p");
  legend.className = "help small";
  legend.textContent = "Columns the model uses (untick to leave one out):";
  box.appendChild(legend);
  for (const c of details) {
    if (c.name === label) continue;
    const row = document.createElement("label");
    row.className = "col";
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = c.name;
    const name = document.createElement("span");
    name.className = "col-name";
    name.textContent = c.name;
    const note = document.createElement("span");
    note.className = "col-note";
    const notes = [];
    if (c.numeric) notes.push("numbers");
    else if (c.encodable) notes.push(`text, ${c.values} values: one 0/1 column per value`);
    else notes.push(c.values > 0 ? `text with ${c.values} different values: too many to encode, left out`
      : "text mixed with numbers: left out");
    if (c.missing) notes.push(`${c.missing} missing`);
    note.textContent = ` (${notes.join(", ")})`;
    input.checked = c.numeric || c.encodable;
    input.disabled = !(c.numeric || c.encodable);
    input.onchange = onChange;
    row.append(input, " ", name, note);
    box.appendChild(row);
  }
  box.hidden = false;
}

/** The names of the columns the user left out (or that cannot be used). */
export function excludedColumns(box) {
  return Array.from(box.querySelectorAll("input[type=checkbox]")).filter((i) => !i.checked).map((i) => i.value);
}
