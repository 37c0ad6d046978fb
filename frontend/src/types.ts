/** The JSON shapes the pages read from /api/v1/: each interface has the fields of its output serializer in
 * webapp/runs/outputs.py, as the OpenAPI schema documents them (tests/webapp/test_api_types.py holds the two to the
 * same fields). */

export type RunStatus = "pending" | "queued" | "running" | "cancelling" | "finished" | "cancelled" | "failed";

export const ACTIVE_STATUSES: readonly RunStatus[] = ["pending", "queued", "running", "cancelling"];

/** RunOutputSerializer. */
export interface Run {
  id: string;
  team: string;
  creator: string | null;
  name: string;
  tags: string[];
  status: RunStatus;
  backend: string;
  queue: string;
  preset: string;
  seed: number;
  config: Record<string, unknown>;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  heartbeat_at: string | null;
  step: number;
  total_steps: number;
  progress: number;
  error: string;
  attempts: number;
  best_instruction_id: string | null;
  cloned_from: string | null;
}

/** One config field whose value differs between configs: its value in each, by the config's label (a run's id in a
 * comparison; `preset` and `run` in a run's `preset_diff`), null where a config lacks it. */
export interface ConfigDiff {
  field: string;
  values: Record<string, unknown>;
}

/** RunDetailOutputSerializer: `GET runs/<id>/`. */
export interface RunDetail extends Run {
  /** What the config changed from its preset; null when the run names no known preset. */
  preset_diff: ConfigDiff[] | null;
  /** Where the run stands, its evaluations counted beside its steps. */
  activity: RunActivity;
}

/** EvaluationInProgressOutputSerializer. */
export interface EvaluationInProgress {
  step: number;
  done: number;
  total: number;
}

/** RunActivityOutputSerializer: the phase, the share of the work done and the time left, evaluations included. */
export interface RunActivity {
  phase: "waiting" | "evaluating" | "training" | "ended";
  /** "evaluating the untrained policy: 23 / 64 questions", "training step 3 / 12". */
  text: string;
  fraction: number;
  eta_seconds: number | null;
  step_seconds: number | null;
  question_seconds: number | null;
  remaining_steps: number;
  remaining_questions: number | null;
  evaluation: EvaluationInProgress | null;
}

export interface Page<T> {
  count: number;
  next: string | null;
  previous: string | null;
  results: T[];
}

/** Fig. 2's series of a run, one value per stored step (CompareSeriesOutputSerializer). */
export interface CompareSeries {
  step: number[];
  reward_mean: (number | null)[];
  tool_calls_mean: (number | null)[];
  instruction_length_mean: (number | null)[];
  response_length_mean: (number | null)[];
}

/** Every metric of a run, one value per stored step (MetricSeriesOutputSerializer). */
export interface MetricSeries extends CompareSeries {
  phase: string[];
  reward_std: (number | null)[];
  kl: (number | null)[];
  entropy: (number | null)[];
  clip_fraction: (number | null)[];
  lr: (number | null)[];
  grad_norm: (number | null)[];
  pg_loss: (number | null)[];
  /** Share of the step's rollouts whose answer is an exact match; null at steps recorded before it was kept. */
  em: (number | null)[];
  /** Share of the step's rollouts that were well-formed. */
  well_formed: (number | null)[];
  /** The mean reward's part earned for the form (format, protocol credit) and for what the answers say. */
  reward_format: (number | null)[];
  reward_correct: (number | null)[];
  /** Seconds per stage of each step, by stage. */
  timings: Record<string, (number | null)[]>;
}

/** One instruction's statistics over the snapshots it spans: element i belongs to snapshot `start + i`; null where it
 * was not a member in between. The arrays end at its last membership. */
export interface InstructionColumns {
  id: string;
  start: number;
  weight: (number | null)[];
  probability: (number | null)[];
  samples: (number | null)[];
  mean_reward: (number | null)[];
  /** The mean of its per-step mean rewards over the steps its weight counts, its 95 % interval and the questions
   * behind it; null in runs recorded before they were kept. */
  recent_reward: (number | null)[];
  recent_low: (number | null)[];
  recent_high: (number | null)[];
  recent_samples: (number | null)[];
}

/** The population history, column-wise (webapp/runs/outputs.py PopulationOutputSerializer): one array per snapshot
 * field in step order, and per instruction, in order of first membership, one array per statistic. */
export interface PopulationHistory {
  snapshots: {
    step: number[];
    reason: string[];
    best_id: (string | null)[];
    time: string[];
  };
  instructions: InstructionColumns[];
}

/** One instruction's row in one snapshot. */
export interface Member {
  id: string;
  weight: number;
  probability: number;
  samples: number;
  mean_reward: number | null;
}

export interface LineageNode {
  id: string;
  text: string;
  origin: string;
  author: string | null;
  pinned: boolean;
  parent_id: string | null;
  birth_step: number;
  verify_score: number | null;
  round_id: string | null;
  critique: string | null;
  retired_step: number | null;
  retired_reason: string | null;
}

export interface Failure {
  question?: string;
  response?: string;
  golden_answers?: string[];
  reward?: number;
}

export interface Candidate {
  text: string;
  valid: boolean;
  score: number | null;
  accepted: boolean;
  reason: string | null;
  instruction_id: string | null;
}

export interface Round {
  id: string;
  step: number;
  round: number;
  proposer: string;
  parent_id: string | null;
  critique: string;
  failures: Failure[];
  optimizer_model: string;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number | null;
  parent_score: number | null;
  n_questions: number | null;
  candidates: Candidate[];
}

/** Parent → child. */
export interface Edge {
  source: string;
  target: string;
}

export interface Lineage {
  nodes: LineageNode[];
  edges: Edge[];
  rounds: Round[];
}

export interface Trajectory {
  instruction_id: string | null;
  question: string;
  golden_answers: string[];
  response: string;
  answer: string | null;
  reward: number;
  /** Whether the answer is an exact match of a gold answer (a reward above 0 may be format credit only). */
  correct: boolean;
  tool_calls: number;
  response_tokens: number;
  error: string | null;
}

export interface TrajectoryPage {
  step: number | null;
  trajectories: Trajectory[];
}

export interface CompareRun {
  id: string;
  name: string;
  status: RunStatus;
  preset: string;
  backend: string;
  step: number;
  total_steps: number;
  tags: string[];
}

export interface BenchmarkRow {
  run_id: string;
  /** Per benchmark the newest evaluation's value, from its per-question results when it kept them. */
  values: Record<string, number>;
  /** Avg.: the unweighted mean over the table's columns; null unless the run has a value in every column. */
  average: number | null;
  /** Per benchmark, the step and the number of questions of its value. */
  steps: Record<string, number>;
  n: Record<string, number>;
}

export interface BenchmarkTable {
  metric: string;
  columns: string[];
  rows: BenchmarkRow[];
  /** Per column the runs tied for its highest value; a column where no run is ahead of another is left out. */
  best: Record<string, string[]>;
  /** Per column whether its runs were scored on the same questions (unrecorded: as many each, which not kept). */
  questions: Record<string, QuestionSets>;
}

export type QuestionSets = "same" | "different" | "unrecorded";

export interface Comparison {
  runs: CompareRun[];
  series: Record<string, CompareSeries>;
  benchmarks: BenchmarkTable;
  config_diff: ConfigDiff[];
  baseline: string | null;
  /** Per other run and column, its value minus the baseline's on the questions both scored. */
  deltas: Record<string, Record<string, number>>;
  /** Per other run and column, the questions its delta is over; null where which ones is unrecorded. */
  delta_questions: Record<string, Record<string, number | null>>;
}

export interface RunSummary {
  id: string;
  name: string;
  status: RunStatus;
  step: number;
}

export interface BestInstructionDetail {
  id: string;
  text: string;
  origin: string;
  birth_step: number;
  weight: number | null;
  verify_score: number | null;
  /** It, its parent, … back to the seed. */
  lineage: LineageNode[];
}

/** `GET runs/<id>/best-instruction/`. */
export interface BestInstruction {
  run: RunSummary;
  instruction: BestInstructionDetail;
  config: Record<string, unknown>;
}

/** DiversitySeriesOutputSerializer: one value per population record, in step order (several records may share a
 * step: the step's end, then pruned, evolved). Pairwise measures are null for a population of one. */
export interface DiversitySeries {
  step: number[];
  reason: string[];
  size: number[];
  cosine_mean: (number | null)[];
  cosine_min: (number | null)[];
  cosine_max: (number | null)[];
  jaccard_mean: (number | null)[];
  strategies: number[];
  entropy: number[];
  entropy_normalised: (number | null)[];
}

/** How the run measures diversity and when its alarm trips (its config's population fields). */
export interface DiversitySettings {
  diversity: boolean;
  strategy_cosine: number;
  collapse_cosine: number;
  collapse_entropy: number;
  collapse_steps: number;
}

/** A collapse of the population (AlarmOutputSerializer). */
export interface Alarm {
  id: number;
  step: number;
  since_step: number;
  reasons: ("cosine" | "entropy")[];
  cosine_min: number | null;
  entropy_normalised: number | null;
  collapse_cosine: number;
  collapse_entropy: number;
  cleared_step: number | null;
  active: boolean;
  acknowledged_by: string | null;
  acknowledged_at: string | null;
  time: string;
}

/** `GET runs/<id>/diversity/`. */
export interface Diversity {
  series: DiversitySeries;
  settings: DiversitySettings;
  alarms: Alarm[];
  /** The active alarm; null when the population is not collapsed. */
  collapsed: Alarm | null;
}

/** An instruction of a heatmap (a row); `retired_step` is null while it lives. */
export interface HeatmapRow {
  id: string;
  text: string;
  origin: string;
  retired_step: number | null;
}

/** A checkpoint of a heatmap (a column). */
export interface HeatmapColumn {
  step: number;
  checkpoint_id: number;
}

/** One instruction with one checkpoint's policy; its scores are null until the worker has scored it. */
export interface HeatmapCell {
  id: number;
  row: number;
  column: number;
  instruction_id: string;
  step: number;
  em: number | null;
  f1: number | null;
  answered: number | null;
  n: number;
  done: boolean;
}

export type HeatmapStatus = "queued" | "running" | "finished" | "failed";

/** `GET runs/<id>/heatmaps/` (a list of these) and `runs/<id>/heatmaps/<heatmap id>/`. */
export interface Heatmap {
  id: number;
  status: HeatmapStatus;
  benchmark: string;
  sample_size: number;
  sample_seed: number;
  questions: number | null;
  answers: number;
  cells_total: number;
  cells_done: number;
  requested_by: string | null;
  error: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  rows: HeatmapRow[];
  columns: HeatmapColumn[];
  cells: HeatmapCell[];
  /** Per checkpoint step, the instructions tied for the best EM where some other one scored less. */
  best: Record<string, string[]>;
}

/** `POST runs/<id>/heatmaps/` with `dry_run`: what it would evaluate and cost. */
export interface HeatmapPreview {
  dry_run: boolean;
  instructions: string[];
  steps: number[];
  benchmark: string;
  sample_size: number;
  cells: number;
  questions: number;
  answers: number;
  max_answers: number;
}

/** One greedy answer of a heatmap cell, with its own exact match and F1. */
export interface HeatmapAnswer extends Trajectory {
  question_id: string;
  em: number;
  f1: number;
}

/** `GET runs/<id>/heatmaps/<heatmap id>/cells/<cell id>/`. */
export interface HeatmapCellDetail extends HeatmapCell {
  instruction_text: string;
  trajectories: HeatmapAnswer[];
}

/** ExperimentOutputSerializer (webapp/experiments/outputs.py): `GET experiments/`, and the experiment in a detail. */
export interface Experiment {
  id: number;
  team: string;
  created_by: string | null;
  name: string;
  preset: string;
  overrides: Record<string, unknown>;
  arms: Record<string, Record<string, unknown>>;
  seeds: number[];
  evaluation: Record<string, unknown>;
  baseline: string;
  status: "running" | "cancelled";
  run_count: number;
  created_at: string;
}

/** One run of an experiment (ExperimentRunOutputSerializer). */
export interface ExperimentRun {
  id: string;
  name: string;
  arm: string;
  seed: number;
  status: RunStatus;
  step: number;
  total_steps: number;
  error: string;
}

export interface SeedsNeeded {
  difference: number;
  seeds: number | null;
  /** Why there is no count (one seed, no variance at all, the questions alone hide the difference). */
  reason: string | null;
}

/** An arm against the baseline arm: the mean EM difference (0–1) and its interval over seeds and questions. */
export interface VerdictComparison {
  mean: number;
  low: number;
  high: number;
  level: number;
  seeds: number;
  questions: number;
  /** For the average over several benchmarks: each one's questions (each benchmark weighs 1/B). */
  benchmark_questions: Record<string, number>;
  per_seed: Record<string, number>;
  method: string;
  excludes_zero: boolean;
  /** Every paired difference was the same: the interval has no width because nothing varied. */
  without_variance: boolean;
  seeds_needed: SeedsNeeded;
}

/** Training reward per step over an arm's seeds: mean and the band from the lowest to the highest seed. */
export interface RewardCurve {
  steps: number[];
  mean: number[];
  low: number[];
  high: number[];
  seeds: number[];
}

/** One benchmark of an arm, over the seeds that finished it, with its own verdict. */
export interface BenchmarkResult {
  benchmark: string;
  seeds: number[];
  mean_em: number | null;
  mean_f1: number | null;
  per_seed_em: Record<string, number>;
  questions: number;
  comparison: VerdictComparison | null;
  verdict: string | null;
}

/** An arm: with several benchmarks its numbers are those of their unweighted average (each one's in `benchmarks`). */
export interface ArmResult {
  arm: string;
  overrides: Record<string, unknown>;
  seeds: number[];
  mean_em: number | null;
  mean_f1: number | null;
  per_seed_em: Record<string, number>;
  questions: number;
  reward_last: number | null;
  reward_curve: RewardCurve;
  comparison: VerdictComparison | null;
  verdict: string | null;
  benchmarks: BenchmarkResult[];
}

export interface MissingRun {
  arm: string;
  seed: number;
}

/** Runs that recorded computing on the same machine (MachineGroupOutputSerializer). */
export interface MachineGroup {
  machine: Record<string, string> | null;
  described: string;
  runs: string[];
}

export interface ExperimentResults {
  baseline: string;
  level: number;
  benchmarks: string[];
  arms: ArmResult[];
  missing: MissingRun[];
  complete: boolean;
  machines: MachineGroup[];
  machines_warning: string | null;
}

/** ExperimentEstimateOutputSerializer: `GET experiments/estimate/?preset=…&arms=…&seeds=…`. */
export interface ExperimentEstimate {
  runs: number;
  minutes_per_run: number | null;
  basis: "team" | "preset" | "none" | "limit";
  measured_runs: number;
  text: string;
  minutes_low: number | null;
  minutes_high: number | null;
  worker_minutes: number[] | null;
  steps: number | null;
  questions: number | null;
  queue: "cpu" | "gpu";
  queue_runs: number;
  queue_minutes: number;
  slots: number;
  finish_minutes: number[] | null;
  method: string;
  at: string;
}

/** RunDurationOutputSerializer: one run's minutes. */
export interface RunDuration {
  id: string;
  arm: string;
  seed: number;
  status: string;
  worker_minutes: number | null;
  wait_minutes: number | null;
  total_minutes: number | null;
}

/** EstimateErrorOutputSerializer: what happened against the estimate kept at submission. */
export interface EstimateError {
  estimated: number;
  low: number;
  high: number;
  actual: number;
  error_minutes: number;
  error_percent: number | null;
  within_range: boolean;
}

/** ExperimentTimingOutputSerializer. */
export interface ExperimentTiming {
  estimate: Record<string, unknown> | null;
  runs: RunDuration[];
  worker_minutes: number | null;
  elapsed_minutes: number | null;
  remaining_minutes: number | null;
  queue_runs: number;
  worker_error: EstimateError | null;
  finish_error: EstimateError | null;
  text: string;
}

/** ExperimentDetailOutputSerializer: `GET experiments/<id>/`. */
export interface ExperimentDetail {
  experiment: Experiment;
  state: "running" | "finished" | "cancelled";
  runs: ExperimentRun[];
  counts: Record<string, number>;
  results: ExperimentResults;
  timing: ExperimentTiming;
  leakage: ExperimentLeakage[];
  exclude_overlap: boolean;
}

/** `ExperimentLeakageOutputSerializer`: one benchmark's evaluated questions also in a run's training split. */
export interface ExperimentLeakage {
  benchmark: string;
  questions: number;
  leaked: number;
  excluded: boolean;
  text: string;
}
