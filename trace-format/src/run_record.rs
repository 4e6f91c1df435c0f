//! The run record: what `gputrace run` knows of the command it ran, written
//! beside the trace files as `gputrace-run.<host>.<pid>.json` when the
//! command starts and completed when it ends (one per `gputrace run`, so
//! one per node under `srun` or a per-node `torchrun`).
//!
//! A trace file says what one process did; only the launcher sees how the
//! command ended (an `atexit` handler cannot read the exit status, and a
//! killed process runs none). The analysis uses the record to tell failed
//! work from productive work.

use serde::{Deserialize, Serialize};

/// Version of the run record's JSON (bumped on an incompatible change).
pub const RUN_RECORD_FORMAT: u32 = 1;

/// File names of run records start with this and end with `.json`.
pub const RUN_RECORD_PREFIX: &str = "gputrace-run.";

/// The header key of the run id `gputrace run` gives every trace of one run.
pub const RUN_ID_KEY: &str = "gputrace.run_id";

/// How the command that `gputrace run` ran ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// [`RUN_RECORD_FORMAT`] of the writer.
    pub format: u32,
    /// Host name of the machine `gputrace run` ran on.
    pub host: String,
    /// pid of `gputrace run` itself.
    pub pid: u32,
    /// The command and its arguments (lossy UTF-8).
    pub command: Vec<String>,
    /// Wall-clock start, ns since the Unix epoch (CLOCK_REALTIME).
    pub start_realtime_ns: u64,
    /// Wall-clock end, ns since the Unix epoch; 0 while the command runs
    /// (the record is written when it starts and completed when it ends,
    /// so one still at 0 after `gputrace run` is gone says it was killed).
    pub end_realtime_ns: u64,
    /// Exit code when the command exited (None when a signal ended it).
    pub exit_code: Option<i32>,
    /// Signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// The run's `gputrace.run_id` (the header key its traces carry); absent
    /// in records of launchers older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The launcher's host sampling, when it was on (docs/host.md): the
    /// launcher writes the samples into the traces after the command ends,
    /// and sets `written` once it has; a record left with `written` false
    /// says the traces of this run are owed samples they will never get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_samples: Option<HostSampling>,
}

/// The launcher's host sampling, as its run record states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSampling {
    /// Samples per second asked for (never 0 here: off is no [`HostSampling`]).
    pub hz: u32,
    /// The pid of the command's first process: the root of the sampled tree.
    pub root_pid: u32,
    /// The launcher finished writing the samples into the traces.
    pub written: bool,
}

impl RunRecord {
    /// The command exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.signal.is_none()
    }

    /// Whether the record was completed: `gputrace run` saw the command end.
    pub fn completed(&self) -> bool {
        self.end_realtime_ns != 0
    }

    /// "exit 0", "exit 3", "signal 9" for reports.
    pub fn outcome(&self) -> String {
        match (self.exit_code, self.signal) {
            (_, Some(s)) => format!("signal {s}"),
            (Some(c), None) => format!("exit {c}"),
            (None, None) if !self.completed() => "not completed: gputrace run was killed before the command ended".into(),
            (None, None) => "unknown".into(),
        }
    }

    /// The record's file name: host reduced to `[A-Za-z0-9._-]` (at most 64
    /// characters, never empty, never starting with a dot), so a hostile
    /// host name cannot leave the output directory.
    pub fn file_name(host: &str, pid: u32) -> String {
        let mut safe: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        if safe.is_empty() || safe.starts_with('.') {
            safe.insert(0, 'h');
        }
        format!("{RUN_RECORD_PREFIX}{safe}.{pid}.json")
    }

    /// The host samples this record's launcher owed a trace with `header` and
    /// never wrote: `Some(hz)` when the record is of the trace's run (same host
    /// and `gputrace.run_id`) and says sampling was on and not written. The
    /// caller checks that the trace holds no host samples.
    pub fn unwritten_host_samples(&self, header: &crate::Header) -> Option<u32> {
        let h = self.host_samples.filter(|h| !h.written)?;
        let run_id = self.run_id.as_deref()?;
        (self.host == header.hostname && header.extra.get(RUN_ID_KEY).is_some_and(|id| id == run_id)).then_some(h.hz)
    }

    /// Is this file name a run record's?
    pub fn is_record_name(name: &str) -> bool {
        name.starts_with(RUN_RECORD_PREFIX) && name.ends_with(".json")
    }

    /// Parse a record; the error says what is wrong (the caller names the file).
    pub fn from_json(bytes: &[u8]) -> Result<RunRecord, RunRecordError> {
        let r: RunRecord = serde_json::from_slice(bytes).map_err(RunRecordError::NotARecord)?;
        if r.format > RUN_RECORD_FORMAT {
            return Err(RunRecordError::Newer { format: r.format });
        }
        Ok(r)
    }
}

/// Why a run record could not be read (without the file name: the caller adds it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunRecordError {
    /// The bytes are not a run record's JSON.
    #[error("not a gputrace run record: {0}")]
    NotARecord(#[source] serde_json::Error),
    /// Written by a newer gputrace, in a format this one does not read.
    #[error("run record format {format} is newer than this gputrace reads ({RUN_RECORD_FORMAT})")]
    Newer {
        /// The record's [`RunRecord::format`].
        format: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_safe_and_recognised() {
        assert_eq!(RunRecord::file_name("node-01.cluster", 42), "gputrace-run.node-01.cluster.42.json");
        assert_eq!(RunRecord::file_name("../../etc/x", 1), "gputrace-run.h.._.._etc_x.1.json");
        assert_eq!(RunRecord::file_name("", 7), "gputrace-run.h.7.json");
        assert!(RunRecord::file_name(&"a/".repeat(100), 1).len() < 100);
        assert!(RunRecord::is_record_name(&RunRecord::file_name("x", 1)));
        assert!(!RunRecord::is_record_name("rank0.pt.trace.json"));
    }

    #[test]
    fn outcome_round_trips_and_rejects_newer_formats() {
        let r = RunRecord {
            format: RUN_RECORD_FORMAT,
            host: "n".into(),
            pid: 1,
            command: vec!["python".into(), "train.py".into()],
            start_realtime_ns: 1,
            end_realtime_ns: 2,
            exit_code: None,
            signal: Some(9),
            run_id: None,
            host_samples: None,
        };
        let back = RunRecord::from_json(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(!r.succeeded());
        assert_eq!(r.outcome(), "signal 9");
        let newer = serde_json::to_string(&RunRecord { format: 99, ..r }).unwrap();
        let err = RunRecord::from_json(newer.as_bytes()).unwrap_err();
        assert!(matches!(err, RunRecordError::Newer { format: 99 }));
        assert_eq!(err.to_string(), "run record format 99 is newer than this gputrace reads (1)");
        assert!(RunRecord::from_json(b"{}").is_err());
    }

    #[test]
    fn unwritten_host_samples_need_the_same_run_and_an_unfinished_write() {
        let old =
            br#"{"format":1,"host":"n","pid":1,"command":[],"start_realtime_ns":1,"end_realtime_ns":0,"exit_code":null,"signal":null}"#;
        let mut r = RunRecord::from_json(old).unwrap();
        assert_eq!(
            (r.run_id.as_deref(), r.host_samples),
            (None, None),
            "a record without the fields still reads"
        );
        let mut h = crate::Header {
            hostname: "n".into(),
            ..Default::default()
        };
        h.extra.insert(RUN_ID_KEY.into(), "7-1".into());
        assert_eq!(r.unwritten_host_samples(&h), None);
        r.run_id = Some("7-1".into());
        r.host_samples = Some(HostSampling {
            hz: 100,
            root_pid: 5,
            written: false,
        });
        assert_eq!(r.unwritten_host_samples(&h), Some(100));
        h.extra.insert(RUN_ID_KEY.into(), "8-1".into());
        assert_eq!(r.unwritten_host_samples(&h), None, "another run's trace");
        h.extra.insert(RUN_ID_KEY.into(), "7-1".into());
        r.host_samples = Some(HostSampling {
            written: true,
            ..r.host_samples.unwrap()
        });
        assert_eq!(r.unwritten_host_samples(&h), None, "written");
    }
}
