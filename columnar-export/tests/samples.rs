//! The `samples` table: a rank's host samples, one row per run, with its
//! thread, state, CPU time and folded stack, on the job's clock; a rank
//! without host samples has a file without rows.

use gputrace_columnar::{export, ExportJob, JobId, RankSource, SAMPLES, TABLES};
use gputrace_format::host::*;
use gputrace_format::*;
use gputrace_synth::{schedule, write_rank, JobConfig};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, RowAccessor};

/// `bytes` (a finished trace of process `pid`) with three runs: the main
/// thread in `train → load`, then in `train`; a worker process's thread
/// without a Python stack.
fn with_samples(mut bytes: Vec<u8>, pid: u32) -> Vec<u8> {
    let first = TraceFile::from_bytes("r.gtrace", bytes.clone()).unwrap().string_count();
    bytes.extend(encode_strings_chunk(
        first,
        &[
            "load",
            "/venv/site-packages/torch/utils/data/dataloader.py",
            "train",
            "/home/me/train.py",
        ],
    ));
    let s = |i: usize| StringId((first + i) as u32);
    let run = |start, end, thread, state, cpu_ns, stack, samples| HostRun {
        start: Nanos(start),
        end: Nanos(end),
        thread,
        state,
        cpu_ns,
        stack,
        samples,
    };
    let samples = HostSamples {
        hz: 100,
        threads: vec![
            HostThread {
                pid,
                tid: pid,
                name: "python".into(),
            },
            HostThread {
                pid: pid + 7,
                tid: pid + 7,
                name: "pt_data_worker".into(),
            },
        ],
        frames: vec![
            HostFrame {
                function: s(0),
                file: s(1),
                line: 631,
            },
            HostFrame {
                function: s(2),
                file: s(3),
                line: 57,
            },
        ],
        stacks: vec![vec![0, 1], vec![1]],
        runs: vec![
            run(1_000, 31_000, 0, ThreadState::Sleeping, 500, Some(0), 3),
            run(31_000, 41_000, 0, ThreadState::Running, 9_000, Some(1), 1),
            run(1_000, 41_000, 1, ThreadState::DiskWait, 2_000, None, 4),
        ],
        losses: Default::default(),
    };
    bytes.extend(encode_chunks(&samples, 100, 1).unwrap());
    bytes
}

#[test]
fn host_samples_become_rows_of_the_samples_table() {
    let cfg = JobConfig {
        ranks: 2,
        steps: 2,
        layers: 2,
        ..JobConfig::default()
    };
    let s = schedule(&cfg);
    let plain = |r| write_rank(&cfg, &s, r, Vec::new()).unwrap().0;
    let rank0 = TraceFile::from_bytes("rank0.gtrace", plain(0)).unwrap();
    let pid = rank0.header().pid;
    let traces = [
        TraceFile::from_bytes("rank0.gtrace", with_samples(plain(0), pid)).unwrap(),
        TraceFile::from_bytes("rank1.gtrace", plain(1)).unwrap(),
    ];
    let shift = 5_000i64;
    let sources: Vec<RankSource<'_>> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| RankSource {
            trace: t,
            rank: i as u32,
            shift_ns: if i == 0 { shift } else { 0 },
        })
        .collect();
    let id = JobId::of(&sources.iter().map(|s| (s.rank, s.trace)).collect::<Vec<_>>());
    let dir = tempfile::tempdir().unwrap();
    let stats = export(
        dir.path(),
        &ExportJob {
            id: &id,
            name: "j",
            ranks: &sources,
            report: None,
        },
    )
    .unwrap();
    let index = TABLES.iter().position(|t| t.name == "samples").unwrap();
    assert_eq!(stats.rows[index], 3);
    let part = |rank: u32| {
        dir.path()
            .join(SAMPLES.name)
            .join(format!("job_id={id}"))
            .join(format!("rank={rank}"))
            .join("part-0.parquet")
    };
    let empty = SerializedFileReader::new(std::fs::File::open(part(1)).unwrap()).unwrap();
    assert_eq!(
        empty.metadata().file_metadata().num_rows(),
        0,
        "a rank without host samples has an empty file"
    );
    let r = SerializedFileReader::new(std::fs::File::open(part(0)).unwrap()).unwrap();
    let names: Vec<String> = r
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let want: Vec<&str> = SAMPLES.all_columns().map(|(n, _)| *n).collect();
    assert_eq!(names, want);
    let col = |n: &str| names.iter().position(|c| c == n).unwrap();
    let rows: Vec<_> = r.get_row_iter(None).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 3);
    let by_start: Vec<(i64, i64, &str, i64)> = rows
        .iter()
        .map(|row| {
            (
                row.get_long(col("time_ns")).unwrap(),
                row.get_long(col("tid")).unwrap(),
                row.get_string(col("state")).unwrap().as_str(),
                row.get_long(col("cpu_ns")).unwrap(),
            )
        })
        .collect();
    let p = i64::from(pid);
    assert_eq!(
        by_start,
        [
            (1_000 + shift, p, "sleeping", 500),
            (1_000 + shift, p + 7, "disk wait", 2_000),
            (31_000 + shift, p, "running", 9_000),
        ]
    );
    let main = &rows[0];
    assert_eq!(main.get_long(col("end_ns")).unwrap(), 31_000 + shift);
    assert_eq!(main.get_long(col("samples")).unwrap(), 3);
    assert!(main.get_bool(col("main_thread")).unwrap());
    assert_eq!(main.get_string(col("thread_name")).unwrap(), "python");
    assert_eq!(
        main.get_string(col("stack")).unwrap(),
        "train (/home/me/train.py:57);load (/venv/site-packages/torch/utils/data/dataloader.py:631)"
    );
    assert_eq!(main.get_string(col("function")).unwrap(), "load");
    assert_eq!(main.get_long(col("line")).unwrap(), 631);
    let worker = &rows[1];
    assert!(!worker.get_bool(col("main_thread")).unwrap());
    assert_eq!(worker.get_long(col("thread_pid")).unwrap(), p + 7);
    assert_eq!(worker.get_string(col("stack")).unwrap(), "");
    assert!(matches!(worker.get_column_iter().nth(col("stack_id")).unwrap().1, Field::Null));
}
