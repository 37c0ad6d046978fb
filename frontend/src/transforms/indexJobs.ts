/** A dataset page's index job as its table row shows it: the status (with the error of a failed one), passages done
 * of all, the rate and the time left, from `GET /api/v1/index-jobs/<id>/`. Knows nothing about the DOM. */

export interface IndexJobState {
  id: number;
  status: string;
  passages_done: number;
  passages_total: number;
  rate: number | null;
  eta_s: number | null;
  error: string;
}

/** A job in these states still changes: its row follows it. */
export const FOLLOWED = ["queued", "running"];

export interface IndexJobCells {
  status: string;
  passages: string;
  rate: string;
  /** The progress bar's value and maximum (1 before the total is known, as the server renders it). */
  done: number;
  total: number;
}

/** The row's cells, as the server renders them (`data/detail.html`). */
export function indexJobCells(job: IndexJobState): IndexJobCells {
  const rate = job.rate ? `${Math.round(job.rate)}/s` : "";
  const left = job.eta_s !== null ? `, ${Math.round(job.eta_s)} s left` : "";
  return {
    status: job.error ? `${job.status}: ${job.error}` : job.status,
    passages: ` ${job.passages_done} / ${job.passages_total}`,
    rate: rate + left,
    done: job.passages_done,
    total: job.passages_total || 1,
  };
}
