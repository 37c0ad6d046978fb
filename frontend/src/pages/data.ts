/** The Data page's upload, see, confirm: sends the form to the API's preview with a progress bar, then shows the
 * file's first rows as runs will read them (its detected shape, where its ids come from), and keeps it only when
 * the person confirms. A refused file shows the first bad record the server named; one of no known shape opens the
 * field mapping. Without this script the form posts to the server's own preview page. */

import { cookie } from "../api";
import { byTestId, fill, h } from "../dom";

/** What `POST datasets/preview/` answers. */
export interface Staged {
  id: string;
  name: string;
  kind: "questions" | "corpus";
  split: string;
  source_name: string;
  detected_shape: string;
  ids_from: string;
  mapping: Record<string, string>;
  records: number;
  size_bytes: number;
  rows: Record<string, unknown>[];
  existing: { reference: string; number: number } | null;
}

export function dataPage(root: HTMLElement): void {
  const form = root.querySelector<HTMLFormElement>('[data-testid="upload-form"]');
  const bar = root.querySelector<HTMLProgressElement>('[data-testid="upload-progress"]');
  const status = root.querySelector<HTMLElement>('[data-testid="upload-status"]');
  const section = root.querySelector<HTMLElement>('[data-testid="staged"]');
  if (!form || !bar || !status || !section) return;
  const api = root.dataset.api ?? "/api/v1/";
  const mapping = root.querySelector<HTMLDetailsElement>('[data-testid="mapping-fields"]');
  const picker = form.querySelector<HTMLInputElement>('input[type="file"]');
  let staged: Staged | null = null;
  const refuse = (text: string) => {
    showRefusal(status, bar, text);
    picker?.focus(); // ready for another file (or the same one, with the mapping filled in)
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const body = new FormData(form); // the team's option values are slugs, as the API takes them
    body.delete("csrfmiddlewaretoken");
    const request = new XMLHttpRequest();
    request.open("POST", `${api}datasets/preview/`);
    request.setRequestHeader("X-CSRFToken", cookie("csrftoken") ?? "");
    request.setRequestHeader("Accept", "application/json");
    bar.hidden = false;
    bar.value = 0;
    section.hidden = true;
    showProgress(status, bar, "Uploading…");
    request.upload.addEventListener("progress", (progress) => {
      if (progress.lengthComputable) bar.value = Math.round((100 * progress.loaded) / progress.total);
      if (progress.loaded === progress.total) status.textContent = "Checking every record…";
    });
    request.addEventListener("load", () => {
      if (request.status === 201) {
        staged = JSON.parse(request.responseText) as Staged;
        status.textContent = "Checked: nothing is kept until you confirm.";
        showStaged(section, staged);
        return;
      }
      if (mapping && needsMapping(request.responseText)) mapping.open = true;
      refuse(uploadOutcome(request.status, request.responseText));
    });
    request.addEventListener("error", () => {
      refuse("The upload did not reach the server. Nothing was kept.");
    });
    request.send(body);
  });

  byTestId(section, "confirm-upload").addEventListener("click", () => {
    if (!staged) return;
    showProgress(status, bar, "Keeping it…");
    void send(`${api}datasets/staged/${staged.id}/confirm/`, "POST").then(({ code, text }) => {
      if (code !== 200 && code !== 201) {
        refuse(uploadOutcome(code, text));
        return;
      }
      status.textContent = uploadOutcome(code, text);
      const body = JSON.parse(text) as { dataset: { id: number } };
      window.location.assign(`/data/${body.dataset.id}/`);
    });
  });
  byTestId(section, "discard-upload").addEventListener("click", () => {
    if (!staged) return;
    void send(`${api}datasets/staged/${staged.id}/`, "DELETE").then(({ code }) => {
      section.hidden = true;
      staged = null;
      status.textContent = code === 204 ? "Discarded; nothing was kept." : `The server answered ${code}.`;
    });
  });
}

/** The upload's status as work in progress: plain text, the bar no longer marked failed. */
function showProgress(status: HTMLElement, bar: HTMLProgressElement, text: string): void {
  status.className = "muted";
  status.removeAttribute("role");
  status.textContent = text;
  bar.classList.remove("failed");
  delete bar.dataset.state;
}

/** A refusal as an error: red, with an icon, announced, and the progress bar marked failed. */
function showRefusal(status: HTMLElement, bar: HTMLProgressElement, text: string): void {
  status.className = "error upload-refused";
  status.setAttribute("role", "alert");
  fill(status, h("span", { class: "error-icon", "aria-hidden": "true" }, "✖ "), text);
  bar.classList.add("failed");
  bar.dataset.state = "failed";
  bar.setAttribute("aria-label", "upload failed");
}

async function send(url: string, method: string): Promise<{ code: number; text: string }> {
  try {
    const response = await fetch(url, {
      method,
      credentials: "same-origin",
      headers: { "X-CSRFToken": cookie("csrftoken") ?? "", Accept: "application/json" },
    });
    return { code: response.status, text: await response.text() };
  } catch {
    return { code: 0, text: "" };
  }
}

/** Fills the staged section: what the file was read as, and its first rows. */
export function showStaged(section: HTMLElement, staged: Staged): void {
  fill(byTestId(section, "staged-shape"), ...stagedSummary(staged));
  const existing = byTestId(section, "staged-existing");
  existing.hidden = staged.existing === null;
  existing.textContent = staged.existing
    ? `The same content is already ${staged.existing.reference} version ${staged.existing.number}: ` +
      "confirming keeps nothing new."
    : "";
  const table = byTestId<HTMLTableElement>(section, "staged-rows");
  const columns = staged.kind === "corpus" ? ["id", "contents"] : ["id", "question", "golden_answers"];
  fill(table.tHead!, h("tr", {}, ...columns.map((c) => h("th", { scope: "col" }, c.replace("_", " ")))));
  fill(table.tBodies[0], ...staged.rows.map((row) => h("tr", {}, ...columns.map((c) => h("td", {}, cell(row[c]))))));
  byTestId(section, "confirm-upload").textContent = `Keep it as data:${staged.name}`;
  section.hidden = false;
}

/** The sentence above the rows: records, the shape (and the mapping used), where the ids come from. */
export function stagedSummary(staged: Staged): string[] {
  const used = Object.entries(staged.mapping).filter(([, path]) => path);
  const mapping = used.length ? ` (${used.map(([field, path]) => `${field} ${path}`).join(", ")})` : "";
  return [
    `${staged.source_name}: ${staged.records} records, read as ${staged.detected_shape}${mapping}; ` +
      `ids from ${staged.ids_from}; for data:${staged.name} (${staged.split}).`,
  ];
}

function cell(value: unknown): string {
  if (Array.isArray(value)) return value.map(String).join(" · ");
  return value === undefined || value === null ? "" : String(value);
}

/** Whether a refusal is about the file's shape (it names the mapping fields). */
export function needsMapping(text: string): boolean {
  return text.includes("question_field");
}

/** `text` ending as a sentence does, so what follows it reads apart. */
function sentence(text: string): string {
  const trimmed = text.trim();
  return /[.!?]$/.test(trimmed) ? trimmed : `${trimmed}.`;
}

/** What to tell the person about the server's answer to an upload. */
export function uploadOutcome(status: number, text: string): string {
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return `The server answered ${status}; nothing was kept.`;
  }
  if (status === 201 || status === 200) {
    const name = (body.dataset as { reference?: string } | undefined)?.reference ?? "the dataset";
    const again = status === 200 ? " (the same content was already there)" : "";
    return `${name} version ${String(body.number)}: ${String(body.records)} records${again}.`;
  }
  const messages = Object.entries(body).map(([field, value]) =>
    field === "detail" ? String(value) : `${field}: ${Array.isArray(value) ? value.join(" ") : String(value)}`,
  );
  return `Refused (${status}): ${sentence(messages.join("; "))} Nothing was kept.`;
}
