//! Write a synthetic job as one Chrome/Kineto JSON per rank and one merged
//! Perfetto trace: `cargo run -p gputrace-viewer --example export_synth -- DIR
//! [RANKS] [STEPS]`. SYNTHETIC data, not a GPU measurement.

use gputrace_format::{Rank, TraceFile};
use gputrace_synth::{schedule, write_rank, JobConfig};
use gputrace_viewer::{ChromeJson, Exporter, Filter, Job, Perfetto};
use std::io::BufWriter;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: export_synth DIR [RANKS] [STEPS]")?);
    let ranks = args.next().map_or(Ok(4), |v| v.parse())?;
    let steps = args.next().map_or(Ok(6), |v| v.parse())?;
    let cfg = JobConfig {
        ranks,
        steps,
        ..JobConfig::default()
    };
    let sched = schedule(&cfg);
    let traces = (0..ranks)
        .map(|r| {
            Ok(TraceFile::from_bytes(
                format!("rank{r}"),
                write_rank(&cfg, &sched, r, Vec::new())?.0,
            )?)
        })
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    std::fs::create_dir_all(&dir)?;
    let job = Job::new(traces.iter());
    for r in 0..ranks {
        let path = dir.join(format!("rank{r}.json"));
        let filter = Filter {
            ranks: vec![Rank(r)],
            ..Filter::default()
        };
        let stats = ChromeJson.export(&job, &filter, BufWriter::new(std::fs::File::create(&path)?))?;
        println!("{}: {} events, {} bytes", path.display(), stats.walk.events, stats.bytes);
    }
    let path = dir.join("job.pftrace");
    let stats = Perfetto::default().export(&job, &Filter::default(), BufWriter::new(std::fs::File::create(&path)?))?;
    println!("{}: {} events, {} bytes", path.display(), stats.walk.events, stats.bytes);
    Ok(())
}
