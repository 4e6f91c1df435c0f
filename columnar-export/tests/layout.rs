//! The export's layout on a synthetic job whose event counts are known by
//! construction: one file per table and rank, every event in exactly one
//! row, several row groups once a table passes `ROW_GROUP_ROWS`, the schema
//! version in the metadata, and the clock shift applied.

use gputrace_columnar::{export, ColumnarError, ExportJob, JobId, JobIdSource, RankSource, ROW_GROUP_ROWS, SCHEMA_VERSION, TABLES};
use gputrace_format::{Event, TraceFile};
use gputrace_synth::{schedule, write_rank, JobConfig};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::RowAccessor;

fn job(cfg: &JobConfig) -> Vec<TraceFile> {
    let s = schedule(cfg);
    (0..cfg.ranks)
        .map(|r| TraceFile::from_bytes(format!("rank{r}.gtrace"), write_rank(cfg, &s, r, Vec::new()).unwrap().0).unwrap())
        .collect()
}

fn job_id(sources: &[RankSource<'_>]) -> JobId {
    JobId::of(&sources.iter().map(|s| (s.rank, s.trace)).collect::<Vec<_>>())
}

fn exported<'a>(id: &'a JobId, name: &'a str, ranks: &'a [RankSource<'a>]) -> ExportJob<'a> {
    ExportJob {
        id,
        name,
        ranks,
        report: None,
    }
}

fn sources(traces: &[TraceFile]) -> Vec<RankSource<'_>> {
    traces
        .iter()
        .enumerate()
        .map(|(i, t)| RankSource {
            trace: t,
            rank: i as u32,
            shift_ns: 0,
        })
        .collect()
}

/// The partition directories of `table` in `dir`: job_id=…/rank=…, sorted.
fn partitions(dir: &std::path::Path, table: &str) -> Vec<String> {
    let mut out = Vec::new();
    for job in std::fs::read_dir(dir.join(table)).unwrap() {
        let job = job.unwrap();
        for rank in std::fs::read_dir(job.path()).unwrap() {
            let rank = rank.unwrap();
            assert!(rank.path().join("part-0.parquet").is_file());
            out.push(format!(
                "{}/{}",
                job.file_name().to_string_lossy(),
                rank.file_name().to_string_lossy()
            ));
        }
    }
    out.sort();
    out
}

fn reader(path: &std::path::Path) -> SerializedFileReader<std::fs::File> {
    SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap()
}

#[test]
fn every_event_once_in_row_groups_with_version_and_shift() {
    let mut cfg = JobConfig {
        ranks: 2,
        steps: 1,
        layers: 8,
        ..JobConfig::default()
    };
    // Enough steps that one rank's GPU activities (about half its events) need several row groups.
    cfg.steps = (ROW_GROUP_ROWS as u64 * 3 / cfg.events_per_step() + 1) as u32;
    let traces = job(&cfg);
    let shift = 1_000_000_007i64;
    let sources: Vec<_> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| RankSource {
            trace: t,
            rank: i as u32 + 10,
            shift_ns: if i == 1 { shift } else { 0 },
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let id = job_id(&sources);
    let stats = export(dir.path(), &exported(&id, "j", &sources)).unwrap();
    assert_eq!(
        stats.files, 14,
        "6 event tables and samples × 2 ranks (no breakdown without a report)"
    );
    let events: u64 = traces.iter().map(|t| t.events().count() as u64).sum();
    assert_eq!(stats.events, events);
    assert_eq!(stats.rows.iter().sum::<u64>(), events, "{:?}", stats.rows);

    for (i, t) in traces.iter().enumerate() {
        let rank = i as u32 + 10;
        let gpu = t
            .events()
            .map(Result::unwrap)
            .filter(|e| matches!(e, Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_) | Event::Sync(_)))
            .count() as i64;
        let path = dir
            .path()
            .join(TABLES[0].name)
            .join(format!("job_id={id}"))
            .join(format!("rank={rank}"))
            .join("part-0.parquet");
        let r = reader(&path);
        let md = r.metadata();
        assert_eq!(md.file_metadata().num_rows(), gpu);
        assert!(md.num_row_groups() >= 2, "{gpu} rows in {} row groups", md.num_row_groups());
        assert!(md.row_groups().iter().all(|g| g.num_rows() as usize <= ROW_GROUP_ROWS));
        let kv = md.file_metadata().key_value_metadata().unwrap();
        assert!(kv
            .iter()
            .any(|k| k.key == "gputrace.schema_version" && k.value.as_deref() == Some(&SCHEMA_VERSION.to_string())));
        // First row: the trace's first GPU activity, shifted onto the job clock.
        let first = t
            .events()
            .map(Result::unwrap)
            .find(|e| matches!(e, Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_) | Event::Sync(_)))
            .unwrap();
        let row = r.get_row_iter(None).unwrap().next().unwrap().unwrap();
        assert_eq!(row.get_string(0).unwrap(), id.as_str());
        assert_eq!(row.get_string(1).unwrap(), "j");
        assert_eq!(row.get_long(3).unwrap(), i64::from(rank));
        let start_col = 5 + 6; // key columns, then kind..name
        assert_eq!(
            row.get_long(start_col).unwrap(),
            first.start().0 as i64 + if i == 1 { shift } else { 0 }
        );
    }
}

/// Issue #43 item 4: two jobs in one directory keep their own partitions; a
/// job exported again replaces its whole partition (ranks it no longer has
/// included) and touches no other job's.
#[test]
fn jobs_are_partitions_and_reexport_replaces_only_its_own() {
    let small = |seed, ranks| {
        job(&JobConfig {
            ranks,
            steps: 1,
            layers: 2,
            seed,
            ..JobConfig::default()
        })
    };
    let (a, b) = (small(1, 4), small(2, 2));
    let (sa, sb) = (sources(&a), sources(&b));
    let (ia, ib) = (job_id(&sa), job_id(&sb));
    assert_ne!(ia, ib);
    assert_eq!(ia.source(), JobIdSource::ContentHash);
    assert!(ia.as_str().starts_with("h-") && ia.as_str().len() == 18, "{ia}");
    assert_eq!(job_id(&sources(&small(1, 4))), ia, "the same traces, the same id");
    let dir = tempfile::tempdir().unwrap();
    assert!(!export(dir.path(), &exported(&ia, "a", &sa)).unwrap().replaced);
    assert!(!export(dir.path(), &exported(&ib, "b", &sb)).unwrap().replaced);
    let mut expect: Vec<String> = (0..4).map(|r| format!("job_id={ia}/rank={r}")).collect();
    expect.extend((0..2).map(|r| format!("job_id={ib}/rank={r}")));
    expect.sort();
    for t in TABLES.iter().take(6) {
        assert_eq!(partitions(dir.path(), t.name), expect, "{}", t.name);
    }
    // Job a again, with only two of its ranks given the id: its rank 2 and 3 go.
    let stats = export(dir.path(), &exported(&ia, "a", &sa[..2])).unwrap();
    assert!(stats.replaced);
    let mut expect: Vec<String> = (0..2).map(|r| format!("job_id={ia}/rank={r}")).collect();
    expect.extend((0..2).map(|r| format!("job_id={ib}/rank={r}")));
    expect.sort();
    assert_eq!(partitions(dir.path(), "gpu_activities"), expect);
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries.len(), 7, "the tables and no staging directory: {entries:?}");
}

#[test]
fn a_shared_run_id_names_the_job_and_a_bad_one_is_hashed() {
    let cfg = JobConfig {
        ranks: 2,
        steps: 1,
        layers: 1,
        ..JobConfig::default()
    };
    let s = schedule(&cfg);
    let with_run_id = |id: &str| -> Vec<TraceFile> {
        (0..2)
            .map(|r| {
                let mut h = gputrace_synth::rank_header(&cfg, &s, r);
                h.extra.insert(gputrace_columnar::RUN_ID_KEY.into(), id.into());
                let bytes = write_rank(&cfg, &s, r, Vec::new()).unwrap().0;
                let bytes = gputrace_format::retime(&bytes, &h, 0, &gputrace_format::WriterOptions::default()).unwrap();
                TraceFile::from_bytes(format!("r{r}"), bytes).unwrap()
            })
            .collect()
    };
    let good = with_run_id("4242-1790000000000000000");
    let id = job_id(&sources(&good));
    assert_eq!((id.as_str(), id.source()), ("run-4242-1790000000000000000", JobIdSource::RunId));
    let bad = with_run_id("../../etc");
    assert_eq!(job_id(&sources(&bad)).source(), JobIdSource::ContentHash);
}

#[test]
fn a_schema_v1_export_in_the_directory_is_refused() {
    let a = job(&JobConfig {
        ranks: 1,
        steps: 1,
        layers: 1,
        ..JobConfig::default()
    });
    let sa = sources(&a);
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("breakdown").join("rank=0");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("part-0.parquet"), b"old").unwrap();
    let e = export(dir.path(), &exported(&job_id(&sa), "a", &sa)).unwrap_err();
    assert!(matches!(e, ColumnarError::OldLayout { .. }), "{e}");
    assert!(e.to_string().contains("schema version 1"), "{e}");
    assert!(old.join("part-0.parquet").is_file(), "the old export is left alone");
    assert!(!dir.path().join("gpu_activities").exists());
}

/// Issue #43 item 4: the GPU's counter samples have their table (schema v1
/// counted them as not exported): every sample once, on the job clock.
#[test]
fn counter_samples_are_exported_to_their_table() {
    let cfg = JobConfig {
        ranks: 2,
        steps: 2,
        layers: 2,
        gpu_counters: true,
        ..JobConfig::default()
    };
    let traces = job(&cfg);
    let shift = -5_000i64;
    let mut srcs = sources(&traces);
    srcs[1].shift_ns = shift;
    let id = job_id(&srcs);
    let dir = tempfile::tempdir().unwrap();
    let stats = export(dir.path(), &exported(&id, "j", &srcs)).unwrap();
    let events: u64 = traces.iter().map(|t| t.events().count() as u64).sum();
    assert_eq!(stats.rows.iter().sum::<u64>(), events, "every event in a table: {:?}", stats.rows);
    let counters_index = TABLES.iter().position(|t| t.name == "counters").unwrap();
    for (i, t) in traces.iter().enumerate() {
        let samples: Vec<gputrace_format::Counter> = t
            .events()
            .map(Result::unwrap)
            .filter_map(|e| match e {
                Event::Counter(c) => Some(c),
                _ => None,
            })
            .collect();
        assert!(samples.len() > 10, "the synthetic job has NVML series");
        let path = dir
            .path()
            .join("counters")
            .join(format!("job_id={id}"))
            .join(format!("rank={i}"))
            .join("part-0.parquet");
        let r = reader(&path);
        assert_eq!(r.metadata().file_metadata().num_rows(), samples.len() as i64);
        let rows: Vec<_> = r.get_row_iter(None).unwrap().map(Result::unwrap).collect();
        for (row, c) in rows.iter().zip(&samples) {
            assert_eq!(row.get_long(5).unwrap(), i64::from(c.device.0));
            assert_eq!(row.get_string(6).unwrap(), t.string(c.metric).unwrap());
            assert_eq!(row.get_long(7).unwrap(), c.time.0 as i64 + if i == 1 { shift } else { 0 });
            assert_eq!(row.get_long(8).unwrap(), c.value as i64);
        }
    }
    assert_eq!(
        stats.rows[counters_index],
        traces
            .iter()
            .map(|t| t.event_counts().get(&gputrace_format::EventKind::Counter).copied().unwrap_or(0))
            .sum::<u64>()
    );
}

/// Issue #43 item 4: the `runs` row carries the report's productive numbers
/// (nulls where the report has none), published with the job.
#[test]
fn the_runs_row_is_the_reports_productive_layer() {
    let cfg = JobConfig {
        ranks: 2,
        steps: 3,
        layers: 2,
        ..JobConfig::default()
    };
    let traces = job(&cfg);
    let srcs = sources(&traces);
    let id = job_id(&srcs);
    let dir = tempfile::tempdir().unwrap();
    for (price, name) in [(Some(2.5), "priced"), (None, "unpriced")] {
        let opts = gputrace_analysis::Options {
            gpu_hour_cost: price,
            ..Default::default()
        };
        let report = gputrace_analysis::analyze(&traces, &opts).unwrap();
        let stats = export(
            dir.path(),
            &ExportJob {
                report: Some(&report),
                ..exported(&id, name, &srcs)
            },
        )
        .unwrap();
        assert_eq!(stats.rows[TABLES.len() - 1], 1);
        let path = dir.path().join("runs").join(format!("job_id={id}")).join("part-0.parquet");
        let r = reader(&path);
        let rows: Vec<_> = r.get_row_iter(None).unwrap().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 1, "one row per job, replaced on re-export");
        let row = &rows[0];
        let col = |name: &str| gputrace_columnar::RUNS.all_columns().position(|c| c.0 == name).unwrap();
        let p = &report.productive;
        assert_eq!(row.get_string(col("job")).unwrap(), name);
        assert_eq!(row.get_long(col("ranks")).unwrap(), 2);
        assert_eq!(row.get_long(col("gpus")).unwrap(), p.devices as i64);
        assert_eq!(row.get_double(col("gpu_hours")).unwrap(), p.gpu_hours);
        assert_eq!(row.get_double(col("productive_gpu_hours")).unwrap(), p.productive_gpu_hours);
        assert_eq!(row.get_string(col("outcome")).unwrap(), "succeeded");
        assert!(!row.get_bool(col("lossy")).unwrap());
        match price {
            Some(usd) => assert_eq!(row.get_double(col("cost_usd")).unwrap(), p.gpu_hours * usd),
            None => assert!(row.get_double(col("cost_usd")).is_err(), "null without a price"),
        }
    }
}
