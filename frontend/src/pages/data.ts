/** The Data page's upload: sends the form to the API with a progress bar, then shows what the server made of the
 * file (the version and its records) or the first bad record it named. Without this script the form posts as is. */

import { cookie } from "../api";

export function dataPage(root: HTMLElement): void {
  const form = root.querySelector<HTMLFormElement>('[data-testid="upload-form"]');
  const bar = root.querySelector<HTMLProgressElement>('[data-testid="upload-progress"]');
  const status = root.querySelector<HTMLElement>('[data-testid="upload-status"]');
  if (!form || !bar || !status) return;
  const api = root.dataset.api ?? "/api/v1/";
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const body = new FormData(form); // the team's option values are slugs, as the API takes them
    body.delete("csrfmiddlewaretoken");
    const request = new XMLHttpRequest();
    request.open("POST", `${api}datasets/`);
    request.setRequestHeader("X-CSRFToken", cookie("csrftoken") ?? "");
    request.setRequestHeader("Accept", "application/json");
    bar.hidden = false;
    bar.value = 0;
    status.textContent = "Uploading…";
    request.upload.addEventListener("progress", (progress) => {
      if (progress.lengthComputable) bar.value = Math.round((100 * progress.loaded) / progress.total);
      if (progress.loaded === progress.total) status.textContent = "Checking every record…";
    });
    request.addEventListener("load", () => {
      status.textContent = uploadOutcome(request.status, request.responseText);
      if (request.status === 200 || request.status === 201) {
        const body = JSON.parse(request.responseText) as { dataset: { id: number } };
        window.location.assign(`/data/${body.dataset.id}/`);
      }
    });
    request.addEventListener("error", () => {
      status.textContent = "The upload did not reach the server; nothing was kept.";
    });
    request.send(body);
  });
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
  return `Refused (${status}): ${messages.join("; ")} Nothing was kept.`;
}
