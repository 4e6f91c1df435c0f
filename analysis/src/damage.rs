//! One line saying what a trace lost, for every command that reads traces
//! to say where its output is read (text, JSON, the metrics exposition), so
//! that no number from a damaged or lossy trace passes as whole.

use crate::report::Losses;
use gputrace_format::LossSource;

/// What `l` lost, in one line (`damaged at byte 22473: chunk cut off (8707
/// bytes unread); no trailer (the writer did not finish); records lost: 3
/// cupti-dropped`), or `None` when the trace is whole ([`Losses::any`]).
pub fn describe_losses(l: &Losses) -> Option<String> {
    if !l.any() {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(d) = &l.damage {
        parts.push(format!("damaged {d} ({} bytes unread)", l.damaged_bytes));
    }
    if l.trailer_missing {
        parts.push("no trailer (the writer did not finish: the end of the run is missing)".to_string());
    }
    let mut lost: Vec<String> = l
        .lost_records
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    // Totals only the trailer has (its loss records were not read back).
    let quiet = [LossSource::IMPORT, LossSource::COUNTER_FAILED, LossSource::COUNTER_OVERFLOW].map(|s| s.name());
    for (source, n) in &l.trailer_losses {
        if *n > 0 && !quiet.contains(&source.as_str()) && !l.lost_records.contains_key(source) {
            lost.push(format!("{n} {source}"));
        }
    }
    if !lost.is_empty() {
        parts.push(format!("records lost: {}", lost.join(", ")));
    }
    if let Some(h) = &l.host_samples_unwritten {
        parts.push(h.what.clone());
    }
    Some(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_trace_says_nothing_and_a_damaged_one_everything() {
        assert_eq!(describe_losses(&Losses::default()), None);
        let mut l = Losses {
            trailer_missing: true,
            damage: Some("at byte 10: chunk cut off".into()),
            damaged_bytes: 7,
            ..Losses::default()
        };
        l.lost_records.insert("cupti-dropped".into(), 3);
        l.trailer_losses.insert("queue-overflow".into(), 2);
        l.trailer_losses.insert("import".into(), 9);
        assert_eq!(
            describe_losses(&l).unwrap(),
            "damaged at byte 10: chunk cut off (7 bytes unread); no trailer (the writer did not finish: the end of the run is missing); \
             records lost: 3 cupti-dropped, 2 queue-overflow"
        );
    }
}
