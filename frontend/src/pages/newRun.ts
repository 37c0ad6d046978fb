/** The New run form: each field shows the chosen preset's value where it is — an empty input's placeholder, a
 * select's "(preset: …)" choice, the note beside a group of checkboxes — and follows the preset when it changes; a
 * name still the default one (`<preset>-<yyyymmdd-hhmm>`) follows it too. The server renders the first preset's, so
 * the form reads the same without this script. */

import type { Api } from "../api";
import { parsePresets, presetView, renamedDefault } from "../transforms/presets";
import { followReach } from "./reachWarning";
import { followIndexStatus } from "./indexStatus";

export function newRunPage(root: HTMLElement, api: Api): void {
  const presets = parsePresets(root.dataset.presets);
  const select = root.querySelector<HTMLSelectElement>('select[name="preset"]');
  const name = root.querySelector<HTMLInputElement>('input[name="name"]');
  if (!select) return;
  let shown = select.value;
  const show = () => {
    for (const view of presetView(presets, select.value)) {
      const note = root.querySelector(`.preset-value[data-field="${view.field}"]`);
      if (note) note.textContent = `Preset: ${view.text === "—" ? "none" : view.text}.`;
      const input = root.querySelector(`[name="${view.field}"]`);
      if (input instanceof HTMLInputElement && input.type !== "checkbox") input.placeholder = view.placeholder;
      if (input instanceof HTMLSelectElement) {
        const keep = input.querySelector<HTMLOptionElement>('option[value=""]');
        if (keep) keep.textContent = view.choice;
      }
    }
    if (name) name.value = renamedDefault(name.value, shown, select.value);
    shown = select.value;
  };
  select.addEventListener("change", show);
  show();
  followReach(root, api);
  followIndexStatus(root);
}
