//! The tables: names, partitioning and columns. `docs/parquet.md` documents
//! every column; a change here that is not an addition bumps
//! [`crate::SCHEMA_VERSION`].

/// Physical type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// Signed 64-bit integer.
    Int64,
    /// UTF-8 string, dictionary encoded.
    String,
    /// 64-bit float.
    Float64,
    /// Boolean.
    Bool,
    /// Signed 64-bit integer that may be null (unknown).
    OptInt64,
    /// 64-bit float that may be null (unknown).
    OptFloat64,
}

impl ColumnType {
    /// Whether the column may hold nulls.
    pub fn nullable(self) -> bool {
        matches!(self, ColumnType::OptInt64 | ColumnType::OptFloat64)
    }
}

/// How a table's files are partitioned under its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partitioning {
    /// `<table>/job_id=<id>/rank=<N>/part-0.parquet`: one file per job and rank.
    JobRank,
    /// `<table>/job_id=<id>/part-0.parquet`: one file per job.
    Job,
}

/// A table: its name (the directory), partitioning and columns after the keys.
#[derive(Debug)]
pub struct Table {
    /// Directory name under the output directory.
    pub name: &'static str,
    /// Partition layout.
    pub partitioning: Partitioning,
    /// Columns after the partitioning's key columns ([`Table::keys`]).
    pub columns: &'static [(&'static str, ColumnType)],
}

impl Table {
    /// The columns every row of this table starts with.
    pub fn keys(&self) -> &'static [(&'static str, ColumnType)] {
        match self.partitioning {
            Partitioning::JobRank => RANK_KEYS,
            Partitioning::Job => JOB_KEYS,
        }
    }

    /// Every column, keys first.
    pub fn all_columns(&self) -> impl Iterator<Item = &'static (&'static str, ColumnType)> {
        self.keys().iter().chain(self.columns)
    }
}

use ColumnType::{Bool as B, Float64 as F, Int64 as I, OptFloat64 as OF, OptInt64 as OI, String as S};

/// Columns every per-rank table starts with.
pub const RANK_KEYS: &[(&str, ColumnType)] = &[("job_id", S), ("job", S), ("host", S), ("rank", I), ("pid", I)];

/// Columns every per-job table starts with.
pub const JOB_KEYS: &[(&str, ColumnType)] = &[("job_id", S), ("job", S)];

/// GPU activities: kernels, copies, memsets and syncs.
pub const GPU_ACTIVITIES: Table = Table {
    name: "gpu_activities",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("kind", S),
        ("device", I),
        ("context", I),
        ("stream", I),
        ("correlation", I),
        ("name", S),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
        ("grid_x", I),
        ("grid_y", I),
        ("grid_z", I),
        ("block_x", I),
        ("block_y", I),
        ("block_z", I),
        ("registers", I),
        ("static_shared_mem", I),
        ("dynamic_shared_mem", I),
        ("bytes", I),
        ("copy_kind", S),
        ("graph_id", I),
    ],
};

/// CUDA runtime/driver API calls.
pub const API_CALLS: Table = Table {
    name: "api_calls",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("thread", I),
        ("correlation", I),
        ("domain", S),
        ("cbid", I),
        ("name", S),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
        ("return_value", I),
    ],
};

/// NCCL collectives.
pub const COLLECTIVES: Table = Table {
    name: "collectives",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("comm", I),
        ("op", S),
        ("seq", I),
        ("count", I),
        ("datatype", S),
        ("bytes", I),
        ("comm_rank", I),
        ("nranks", I),
        ("root", I),
        ("algorithm", S),
        ("protocol", S),
        ("channels", I),
        ("device", I),
        ("stream", I),
        ("correlation", I),
        ("enqueue_ns", I),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
    ],
};

/// NVTX ranges and marks (and the steps recorded as markers).
pub const MARKERS: Table = Table {
    name: "markers",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("thread", I),
        ("domain", S),
        ("name", S),
        ("kind", S),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
    ],
};

/// Recorded data losses: the trace's loss records, and a row for a file
/// that is damaged (`damaged`) or was never finished (`unfinished`).
pub const LOSSES: Table = Table {
    name: "losses",
    partitioning: Partitioning::JobRank,
    columns: &[("time_ns", I), ("source", S), ("count", I), ("detail", S), ("lost_bytes", I)],
};

/// Samples of the GPU's counter series (NVML, CUPTI PM sampling, and any
/// other `<source>.<quantity>_<unit>` series the trace holds).
pub const COUNTERS: Table = Table {
    name: "counters",
    partitioning: Partitioning::JobRank,
    columns: &[("device", I), ("metric", S), ("time_ns", I), ("value", I)],
};

/// One row per sample of a `serving.*` series: the server's counters,
/// gauges and histogram buckets as scraped (cumulative where the server's are).
pub const SERVING: Table = Table {
    name: "serving",
    partitioning: Partitioning::JobRank,
    columns: &[("engine", S), ("url", S), ("series", S), ("time_ns", I), ("value", I)],
};

/// One row per request a server marked (`gputrace.request`), with its exact
/// latencies; a request marked by two processes has a row in each.
pub const REQUESTS: Table = Table {
    name: "requests",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("request_id", I),
        ("arrive_ns", OI),
        ("scheduled_ns", OI),
        ("first_token_ns", OI),
        ("end_ns", OI),
        ("failed", B),
        ("prompt_tokens", I),
        ("generation_tokens", I),
        ("ttft_ns", OI),
        ("queue_ns", OI),
        ("e2e_ns", OI),
        ("itl_ns", OF),
    ],
};

/// One row per rank × device of `gputrace report`'s breakdown.
pub const BREAKDOWN: Table = Table {
    name: "breakdown",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("device", I),
        ("device_name", S),
        ("span_ns", I),
        ("compute_ns", I),
        ("communication_ns", I),
        ("transfer_ns", I),
        ("exposed_communication_ns", I),
        ("exposed_transfer_ns", I),
        ("idle_ns", I),
    ],
};

/// Host samples (`gputrace run`'s sampler, or Python stacks imported from a
/// Kineto trace): one row per run of consecutive samples of a thread with
/// the same state and stack (`samples` says how many; `docs/host.md`).
pub const SAMPLES: Table = Table {
    name: "samples",
    partitioning: Partitioning::JobRank,
    columns: &[
        ("time_ns", I),
        ("end_ns", I),
        ("samples", I),
        ("thread_pid", I),
        ("tid", I),
        ("thread_name", S),
        ("main_thread", B),
        ("state", S),
        ("cpu_ns", I),
        ("stack_id", OI),
        ("stack", S),
        ("function", S),
        ("file", S),
        ("line", I),
    ],
};

/// One row per job: what its GPU-hours bought (`report --json`'s
/// `productive`), so the fleet's numbers are one query over many jobs.
pub const RUNS: Table = Table {
    name: "runs",
    partitioning: Partitioning::Job,
    columns: &[
        ("job_id_source", S),
        ("ranks", I),
        ("hosts", I),
        ("gpus", I),
        ("start_ns", I),
        ("end_ns", I),
        ("wall_ns", I),
        ("gpu_hours", F),
        ("productive_gpu_hours", F),
        ("failed_gpu_hours", F),
        ("productive_gpu_hour_rate", OF),
        ("steps", I),
        ("tokens", OI),
        ("samples", OI),
        ("gpu_hour_cost_usd", OF),
        ("cost_usd", OF),
        ("failed_cost_usd", OF),
        ("outcome", S),
        ("failed_ranks", I),
        ("outcome_detail", S),
        ("lossy", B),
        ("lost_records", I),
        ("damaged_ranks", I),
        ("unfinished_ranks", I),
    ],
};

/// Every table, in the order they are written and published.
/// `runs` is last: published after every other table, a job's `runs` row
/// means all its tables are in place.
pub const TABLES: [&Table; 11] = [
    &GPU_ACTIVITIES,
    &API_CALLS,
    &COLLECTIVES,
    &MARKERS,
    &LOSSES,
    &COUNTERS,
    &SERVING,
    &REQUESTS,
    &BREAKDOWN,
    &SAMPLES,
    &RUNS,
];

/// Index of the first table that is not made from a rank's events.
pub(crate) const EVENT_TABLES: usize = 6;
