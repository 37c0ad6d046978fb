/** Entry point: mounts the page named by the root element's `data-page` (the Django template decides). */

import "./styles.css";
import { Api } from "./api";
import { comparePage } from "./pages/compare";
import { dataPage } from "./pages/data";
import { datasetPage } from "./pages/dataset";
import { experimentPage } from "./pages/experiment";
import { lineagePage } from "./pages/lineage";
import { listPage } from "./pages/list";
import { newExperimentPage } from "./pages/newExperiment";
import { newRunPage } from "./pages/newRun";
import { runPage } from "./pages/run";
import { trajectoriesPage } from "./pages/trajectories";

const PAGES: Record<string, (root: HTMLElement, api: Api) => Promise<void> | void> = {
  run: runPage,
  lineage: lineagePage,
  trajectories: trajectoriesPage,
  compare: comparePage,
  list: listPage,
  new: newRunPage,
  experiment: experimentPage,
  "new-experiment": newExperimentPage,
  data: dataPage,
  dataset: datasetPage,
};

const root = document.getElementById("app");
const page = root?.dataset.page;
if (root && page && page in PAGES) {
  // `data-ready` tells browser tests and the load benchmark that the first data is drawn (or its error shown).
  void Promise.resolve(PAGES[page](root, new Api(root.dataset.api ?? "/api/v1/"))).finally(() => {
    root.dataset.ready = "true";
  });
}
