/** The JSON shapes the pages read from /api/v1/ (see webapp/runs/selectors.py and apis.py). */

export type RunStatus = "queued" | "running" | "cancelling" | "finished" | "cancelled" | "failed";

export const ACTIVE_STATUSES: readonly RunStatus[] = ["queued", "running", "cancelling"];

export interface Run {
  id: string;
  team: string;
  creator: string | null;
  name: string;
  tags: string[];
  status: RunStatus;
  backend: string;
  preset: string;
  config: Record<string, unknown>;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  step: number;
  total_steps: number;
  progress: number;
  error: string;
  best_instruction_id: string | null;
}

export interface Page<T> {
  count: number;
  next: string | null;
  previous: string | null;
  results: T[];
}

export interface MetricSeries {
  step: number[];
  reward_mean: (number | null)[];
  tool_calls_mean: (number | null)[];
  instruction_length_mean: (number | null)[];
  response_length_mean: (number | null)[];
  timings?: Record<string, (number | null)[]>;
  [name: string]: unknown;
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
}

/** The population history, column-wise (webapp/runs/apis.py PopulationOutputSerializer): one array per snapshot
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

export interface Lineage {
  nodes: LineageNode[];
  edges: { source: string; target: string }[];
  rounds: Round[];
}

export interface Trajectory {
  instruction_id: string | null;
  question: string;
  golden_answers: string[];
  response: string;
  answer: string | null;
  reward: number;
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
  values: Record<string, number | null>;
  average: number | null;
}

export interface Comparison {
  runs: CompareRun[];
  series: Record<string, MetricSeries>;
  benchmarks: {
    metric: string;
    columns: string[];
    rows: BenchmarkRow[];
    /** Per column the runs tied for its highest value; a column where no run is ahead of another is left out. */
    best: Record<string, string[]>;
  };
  config_diff: { field: string; values: Record<string, unknown> }[];
  baseline: string | null;
  deltas: Record<string, Record<string, number | null>>;
}
