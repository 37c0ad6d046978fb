import { describe, expect, it } from "vitest";
import { FOLLOWED, indexJobCells } from "../src/transforms/indexJobs";

const job = { id: 7, status: "running", passages_done: 0, passages_total: 0, rate: null, eta_s: null, error: "" };

describe("indexJobCells", () => {
  it("shows a job as the server renders its row", () => {
    expect(indexJobCells(job)).toEqual({ status: "running", passages: " 0 / 0", rate: "", done: 0, total: 1 });
    const going = { ...job, passages_done: 400, passages_total: 1000, rate: 812.4, eta_s: 0.74 };
    expect(indexJobCells(going)).toEqual({
      status: "running",
      passages: " 400 / 1000",
      rate: "812/s, 1 s left",
      done: 400,
      total: 1000,
    });
  });
  it("names a failed job's error and stops following an ended one", () => {
    const failed = { ...job, status: "failed", error: "the index could not be built (OSError)" };
    expect(indexJobCells(failed).status).toBe("failed: the index could not be built (OSError)");
    expect(FOLLOWED).toEqual(["queued", "running"]);
    expect(FOLLOWED.includes("done")).toBe(false);
  });
});
