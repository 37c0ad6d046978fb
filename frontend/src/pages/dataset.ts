/** A dataset's page: each index job that is queued or running follows its job (`GET index-jobs/<id>/` every
 * POLL_MS) until it ends, so the table shows the build's progress without a reload. The server renders every row,
 * so the page reads the same without this script, as of its loading. */

import type { Api } from "../api";
import { ApiError } from "../api";
import { FOLLOWED, type IndexJobState, indexJobCells } from "../transforms/indexJobs";

const POLL_MS = 1500;

export function datasetPage(root: HTMLElement, api: Api): void {
  for (const row of root.querySelectorAll<HTMLTableRowElement>('[data-testid="index-job"]')) {
    if (FOLLOWED.includes(row.dataset.status ?? "")) void follow(row, api);
  }
}

async function follow(row: HTMLTableRowElement, api: Api): Promise<void> {
  for (;;) {
    await new Promise((resolve) => window.setTimeout(resolve, POLL_MS));
    let job: IndexJobState;
    try {
      job = await api.get<IndexJobState>(`index-jobs/${row.dataset.job ?? ""}/`);
    } catch (problem) {
      if (problem instanceof ApiError && problem.status === 404) return; // deleted with its dataset
      continue; // the server is busy or restarting: ask again
    }
    show(row, job);
    if (!FOLLOWED.includes(job.status)) return;
  }
}

function show(row: HTMLTableRowElement, job: IndexJobState): void {
  const cells = indexJobCells(job);
  row.dataset.status = job.status;
  const status = row.querySelector<HTMLElement>('[data-cell="status"]');
  if (status) {
    status.textContent = cells.status;
    status.className = `status status-${job.status}`;
  }
  const bar = row.querySelector("progress");
  if (bar) {
    bar.max = cells.total;
    bar.value = cells.done;
  }
  const passages = row.querySelector('[data-cell="passages"]');
  if (passages) passages.textContent = cells.passages;
  const rate = row.querySelector('[data-cell="rate"]');
  if (rate) rate.textContent = cells.rate;
}
