/** The New run form: keeps the chosen preset's values in view — the summary under the preset select, each empty
 * input's placeholder and each select's "(preset: …)" choice — and updates them when the preset changes. The server
 * renders the first summary, so the form reads the same without this script. */

import { parsePresets, presetView } from "../transforms/presets";

export function newRunPage(root: HTMLElement): void {
  const presets = parsePresets(root.dataset.presets);
  const select = root.querySelector<HTMLSelectElement>('select[name="preset"]');
  const summary = root.querySelector<HTMLElement>('[data-testid="preset-summary"]');
  if (!select || !summary) return;
  const show = () => {
    summary.dataset.preset = select.value;
    for (const view of presetView(presets, select.value)) {
      const value = summary.querySelector(`dd[data-field="${view.field}"]`);
      if (value) value.textContent = view.text;
      const input = root.querySelector(`[name="${view.field}"]`);
      if (input instanceof HTMLInputElement) input.placeholder = view.placeholder;
      if (input instanceof HTMLSelectElement) {
        const keep = input.querySelector<HTMLOptionElement>('option[value=""]');
        if (keep) keep.textContent = view.choice;
      }
    }
  };
  select.addEventListener("change", show);
  show();
}
