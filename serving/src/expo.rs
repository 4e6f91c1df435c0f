//! The Prometheus text exposition format (0.0.4) and the OpenMetrics text
//! that `prometheus_client` writes when a scraper negotiates it: enough of
//! both to read samples (`name{labels} value [timestamp]`).
//!
//! Lines that do not parse are counted and skipped, never fatal: one odd
//! family from a server must not cost the others.

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name as written (`vllm:e2e_request_latency_seconds_bucket`).
    pub name: String,
    /// Its labels, in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if the sample has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The samples of a page whose names `keep` accepts, and how many lines did not parse.
pub fn parse(text: &str, keep: impl Fn(&str) -> bool) -> (Vec<Sample>, u64) {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_line(trimmed) {
            Some(s) if keep(&s.name) => out.push(s),
            Some(_) => {}
            None => bad += 1,
        }
    }
    (out, bad)
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

/// `name{k="v",...} value [timestamp] [# exemplar]`.
fn parse_line(line: &str) -> Option<Sample> {
    let end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let name = line[..end].to_string();
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = parse_labels(r, &mut labels)?;
    }
    // The value is the first field after the name and labels; a timestamp or
    // an OpenMetrics exemplar (` # {...} v`) may follow.
    let mut fields = rest.split_ascii_whitespace();
    let value = parse_value(fields.next()?)?;
    Some(Sample { name, labels, value })
}

/// Labels up to and including the closing brace; returns what follows it.
fn parse_labels<'a>(mut s: &'a str, out: &mut Vec<(String, String)>) -> Option<&'a str> {
    loop {
        s = s.trim_start();
        if let Some(r) = s.strip_prefix('}') {
            return Some(r);
        }
        let end = s.char_indices().find(|&(i, c)| !is_name_char(c, i == 0) || c == ':')?.0;
        if end == 0 {
            return None;
        }
        let key = s[..end].to_string();
        s = s[end..].trim_start().strip_prefix('=')?.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    other => {
                        value.push('\\');
                        value.push(other);
                    }
                },
                c => value.push(c),
            }
        };
        out.push((key, value));
        s = s[close + 1..].trim_start();
        if let Some(r) = s.strip_prefix(',') {
            s = r;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_text_and_openmetrics_lines() {
        let page = "# HELP vllm:num_requests_running Number of requests.\n\
                    # TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{model_name=\"m\"} 3.0\n\
                    vllm:e2e_request_latency_seconds_bucket{le=\"0.3\",model_name=\"a \\\"q\\\" \\\\ b\\n\"} 17.0 1700000000000\n\
                    vllm_e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4.0 # {trace_id=\"x\"} 0.5 1.7e9\n\
                    plain_total 1e3\n\
                    \n\
                    # EOF\n";
        let (s, bad) = parse(page, |_| true);
        assert_eq!(bad, 0);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "vllm:num_requests_running");
        assert_eq!(s[0].label("model_name"), Some("m"));
        assert_eq!(s[0].value, 3.0);
        assert_eq!(s[1].label("le"), Some("0.3"));
        assert_eq!(s[1].label("model_name"), Some("a \"q\" \\ b\n"));
        assert_eq!(s[1].value, 17.0);
        assert_eq!(s[2].name, "vllm_e2e_request_latency_seconds_bucket");
        assert_eq!(s[2].label("le"), Some("+Inf"));
        assert_eq!(s[2].value, 4.0);
        assert_eq!(s[3].value, 1000.0);
    }

    #[test]
    fn special_values_and_filter() {
        let (s, _) = parse("a +Inf\nb -Inf\nc NaN\nd{} 2\n", |n| n != "d");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].value, f64::INFINITY);
        assert_eq!(s[1].value, f64::NEG_INFINITY);
        assert!(s[2].value.is_nan());
    }

    #[test]
    fn bad_lines_are_counted_not_fatal() {
        let page = "ok 1\n{le=\"1\"} 2\nx{le=\"1\" 2\nx{le=1} 2\ny notanumber\nz{a=\"unterminated} 1\n9bad 1\nok2{a=\"b\",} 5\n";
        let (s, bad) = parse(page, |_| true);
        assert_eq!(s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["ok", "ok2"]);
        assert_eq!(bad, 6);
    }
}
