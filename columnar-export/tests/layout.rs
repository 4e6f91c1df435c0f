//! The export's layout on a synthetic job whose event counts are known by
//! construction: one file per table and rank, every event in exactly one
//! row, several row groups once a table passes `ROW_GROUP_ROWS`, the schema
//! version in the metadata, and the clock shift applied.

use gputrace_columnar::{export, RankSource, ROW_GROUP_ROWS, SCHEMA_VERSION, TABLES};
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
    let stats = export(dir.path(), "j", &sources, None).unwrap();
    assert_eq!(stats.files, 10, "5 event tables × 2 ranks (no breakdown without a report)");
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
        let path = dir.path().join(TABLES[0].name).join(format!("rank={rank}")).join("part-0.parquet");
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
        assert_eq!(row.get_string(0).unwrap(), "j");
        assert_eq!(row.get_long(2).unwrap(), i64::from(rank));
        let start_col = 4 + 6; // common columns, then kind..name
        assert_eq!(
            row.get_long(start_col).unwrap(),
            first.start().0 as i64 + if i == 1 { shift } else { 0 }
        );
    }
}
