/** The runs list's bulk cancel: the server renders the table, filters and per-row actions; this adds a select-all
 * box and cancels the selected runs one by one through the API. */

import { Api, describeError } from "../api";
import { byTestId } from "../dom";

export function listPage(root: HTMLElement, api: Api): void {
  const button = root.querySelector<HTMLButtonElement>('[data-testid="bulk-cancel"]');
  if (!button) return; // a viewer's list has no boxes and no button
  const boxes = [...root.querySelectorAll<HTMLInputElement>('input[name="select-run"]')];
  const all = byTestId<HTMLInputElement>(root, "select-all");
  const status = byTestId(root, "bulk-status");
  const sync = () => {
    const count = boxes.filter((box) => box.checked).length;
    button.disabled = count === 0;
    button.textContent = count ? `Cancel ${count} selected` : "Cancel selected";
    all.checked = count > 0 && count === boxes.length;
    all.indeterminate = count > 0 && count < boxes.length;
  };
  all.disabled = boxes.length === 0;
  all.addEventListener("change", () => {
    for (const box of boxes) box.checked = all.checked;
    sync();
  });
  for (const box of boxes) box.addEventListener("change", sync);
  button.addEventListener("click", async () => {
    const ids = boxes.filter((box) => box.checked).map((box) => box.value);
    button.disabled = true;
    status.textContent = `Cancelling ${ids.length} runs…`;
    const failures: string[] = [];
    for (const id of ids) {
      try {
        await api.post(`runs/${id}/cancel/`);
      } catch (error) {
        failures.push(`${id}: ${describeError(error)}`);
      }
    }
    if (failures.length) {
      status.textContent = `Cancelled ${ids.length - failures.length} of ${ids.length}. ${failures.join("; ")}`;
      sync();
    } else {
      window.location.reload();
    }
  });
  sync();
}
