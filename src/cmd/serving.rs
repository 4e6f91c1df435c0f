//! `gputrace run`'s serving metrics scraper: started beside the job, finished
//! after it, one closing line (see docs/serving.md).

use super::run::{RunArgs, ServingMetrics};
use gputrace_format::{Header, RankInfo};
use gputrace_serving::{Config, Outcome, Scraper, Target};
use std::path::Path;
use std::time::Duration;

/// Deadline of one scrape: well under the interval, long enough for a busy server.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(800);

/// Start scraping for the job `pid` (unless `--serving-metrics off`).
pub fn start(args: &RunArgs, pid: u32, out_dir: &Path, run_id: &str) -> Option<Scraper> {
    let target = match &args.serving_metrics {
        Some(ServingMetrics::Off) => return None,
        Some(ServingMetrics::Url(u)) => Target::Url(u.clone()),
        None => Target::Discover {
            root: pid,
            proc_root: "/proc".into(),
            skip_ports: skip_ports(std::env::var("MASTER_PORT").ok().as_deref()),
        },
    };
    let interval = Duration::from_secs_f64(args.serving_interval);
    let mut header = Header {
        tool_version: env!("CARGO_PKG_VERSION").into(),
        hostname: super::run::hostname(),
        command: args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        rank: RankInfo::default(),
        ..Header::default()
    };
    header.extra.insert(crate::live::RUN_ID_KEY.into(), run_id.into());
    header.extra.insert("serving.job_pid".into(), pid.to_string());
    Some(Scraper::start(Config {
        target,
        interval,
        timeout: SCRAPE_TIMEOUT.min(interval),
        out_dir: out_dir.to_path_buf(),
        header,
    }))
}

/// Ports discovery never probes: PyTorch's TCPStore (`MASTER_PORT`, default 29500) and
/// torchrun's rendezvous (29400) speak their own protocol and must not get HTTP.
fn skip_ports(master_port: Option<&str>) -> Vec<u16> {
    let mut v = vec![29400, 29500];
    v.extend(master_port.and_then(|p| p.trim().parse::<u16>().ok()));
    v
}

/// Stop scraping and say, in one line, what came of it (nothing when
/// discovery found no endpoint: most jobs serve nothing).
pub fn finish(scraper: Option<Scraper>) {
    let Some(s) = scraper else { return };
    let o = s.finish();
    if let Some(line) = closing_line(&o) {
        eprintln!("{line}");
    }
}

fn closing_line(o: &Outcome) -> Option<String> {
    if let Some(e) = &o.write_error {
        return Some(format!(
            "gputrace: serving metrics: could not write the samples ({e}); the series stop there"
        ));
    }
    match (&o.file, &o.url) {
        (Some(file), Some(url)) => {
            let gaps = if o.failed > 0 {
                format!(
                    ", {} failed (gaps in the series; last: {})",
                    o.failed,
                    o.last_error.as_deref().unwrap_or("?")
                )
            } else {
                String::new()
            };
            Some(format!(
                "gputrace: serving metrics: {} scrape(s) of {url}{gaps} in {}",
                o.scrapes,
                file.display()
            ))
        }
        _ if o.failed_before_first > 0 => Some(format!(
            "gputrace: serving metrics: {} never answered with vllm: or sglang: metrics ({} tries; last: {}); no serving numbers",
            o.url.as_ref().map_or_else(|| "the endpoint".to_string(), |u| u.to_string()),
            o.failed_before_first,
            o.last_error.as_deref().unwrap_or("?")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_ports_are_never_probed() {
        assert_eq!(skip_ports(None), [29400, 29500]);
        assert_eq!(skip_ports(Some("12355")), [29400, 29500, 12355]);
        assert_eq!(skip_ports(Some("not a port")), [29400, 29500]);
    }
}
