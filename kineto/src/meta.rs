//! The top-level members of a Kineto trace other than `traceEvents`:
//! base time, `distributedInfo`, `deviceProperties`, versions. They become
//! the gputrace [`Header`].

use crate::error::{Fail, Position};
use gputrace_format::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// What the first pass learns about a trace.
#[derive(Debug, Default)]
pub(crate) struct TraceMeta {
    /// `baseTimeNanoseconds`: event `ts` values are relative to it (0 if absent).
    pub base_ns: u64,
    /// Global rank from `distributedInfo`.
    pub rank: Option<u32>,
    /// World size from `distributedInfo`.
    pub world_size: Option<u32>,
    pub devices: Vec<DeviceInfo>,
    pub cuda: CudaVersions,
    pub hostname: String,
    /// The profiled process's id: the pid of the first CPU-side trace
    /// event (see `Mapper::host_pid`); 0 when there is none.
    pub pid: u32,
    /// Facts for `Header.extra`, keys prefixed `kineto.`.
    pub extra: BTreeMap<String, String>,
    /// Whether a `traceEvents` member was seen.
    pub has_events: bool,
}

impl TraceMeta {
    /// Take in one top-level member. `at` is where its value starts.
    pub(crate) fn add(&mut self, key: &str, value: Value, at: Position) -> Result<(), Fail> {
        let wrong = |what: &str| Fail::WrongType {
            at,
            what: format!("\"{key}\" {what}"),
        };
        match key {
            "baseTimeNanoseconds" => {
                // Read from the text so that values above 2^53 stay exact.
                let text = match &value {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.clone(),
                    _ => return Err(wrong("must be an integer number of nanoseconds")),
                };
                self.base_ns = crate::number::unsigned(&text).ok_or_else(|| wrong("must be a non-negative integer"))?;
                self.extra.insert("kineto.baseTimeNanoseconds".into(), self.base_ns.to_string());
            }
            "distributedInfo" => {
                let Value::Object(info) = &value else {
                    return Err(wrong("must be an object"));
                };
                let num = |k: &str| info.get(k).and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok());
                self.rank = num("rank");
                self.world_size = num("world_size");
                for (k, v) in info {
                    if let Some(s) = scalar_text(v) {
                        self.extra.insert(format!("kineto.distributedInfo.{k}"), s);
                    }
                }
            }
            "deviceProperties" => {
                let Value::Array(devs) = &value else {
                    return Err(wrong("must be an array"));
                };
                for d in devs {
                    let n = |k: &str| d.get(k).and_then(Value::as_u64).unwrap_or(0);
                    self.devices.push(DeviceInfo {
                        ordinal: DeviceId(n("id") as u32),
                        uuid: String::new(),
                        name: d.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                        sm_count: n("numSms") as u32,
                        memory_bytes: n("totalGlobalMem"),
                        compute_capability: (n("computeMajor") as u32, n("computeMinor") as u32),
                        pci_bus_id: String::new(),
                    });
                }
            }
            "cuda_driver_version" => self.cuda.driver = value.as_u64().map(|v| v as u32),
            "cuda_runtime_version" => self.cuda.runtime = value.as_u64().map(|v| v as u32),
            "cupti_version" => self.cuda.cupti = value.as_u64().map(|v| v as u32),
            "host_name" | "hostname" => self.hostname = value.as_str().unwrap_or_default().to_string(),
            _ => {
                // Keep short scalar facts (schemaVersion, trace_id, traceName, ...);
                // large members such as log lines are not copied.
                if let Some(s) = scalar_text(&value).filter(|s| s.len() <= 256) {
                    self.extra.insert(format!("kineto.{key}"), s);
                }
            }
        }
        Ok(())
    }

    /// The gputrace header for the imported file.
    pub(crate) fn header(&self, source_name: &str) -> Header {
        let mut extra = self.extra.clone();
        extra.insert("import.source".into(), source_name.to_string());
        extra.insert("import.format".into(), "kineto".into());
        Header {
            producer: Producer::Import,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            hostname: self.hostname.clone(),
            pid: self.pid,
            rank: RankInfo {
                rank: self.rank.map(Rank),
                local_rank: None,
                world_size: self.world_size,
                source: self.rank.map(|_| "kineto distributedInfo".to_string()),
            },
            command: Vec::new(),
            start_clock: ClockPair::default(),
            // Kineto converts GPU times to the host's wall clock.
            time_domain: TimeDomain::Realtime,
            cuda: self.cuda,
            devices: self.devices.clone(),
            extra,
        }
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
