//! The Prometheus text exposition format (version 0.0.4): families of samples, each
//! family's `# HELP` and `# TYPE` once, its samples together, label values escaped.

use std::collections::HashMap;
use std::fmt::Write;

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// Only goes up (names end in `_total`).
    Counter,
    /// A value that may go up and down.
    Gauge,
}

impl MetricType {
    fn name(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
        }
    }
}

/// One family: a name, its help text and type, and its samples (label set, value).
#[derive(Clone, Debug)]
pub struct Family {
    /// The metric name (`gputrace_gpu_seconds_total`).
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: MetricType,
    /// Samples: the label set already rendered (`a="1",b="2"`, may be empty) and the value.
    pub samples: Vec<(String, f64)>,
}

/// A label set under construction, rendered as `name="value",...` with values escaped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(String);

impl Labels {
    /// No labels.
    pub fn new() -> Labels {
        Labels::default()
    }

    /// This set plus `name="value"`. `name` must be a valid label name (the callers'
    /// names are constants); `value` is any text and is escaped.
    pub fn with(&self, name: &str, value: impl std::fmt::Display) -> Labels {
        debug_assert!(valid_name(name) && !name.contains(':'), "label name {name}");
        let mut s = self.0.clone();
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str(name);
        s.push_str("=\"");
        escape_label_value(&value.to_string(), &mut s);
        s.push('"');
        Labels(s)
    }

    /// The rendered set (no braces).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Escape a label value as the format requires: backslash, double quote and line feed.
/// Any other control character (an ESC in a host or kernel name) would reach the
/// terminal of whoever reads the exposition: it becomes the visible text `\x1b`
/// (`gputrace_format::text`), whose backslash is escaped in turn.
pub fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if gputrace_format::text::is_unsafe(c) => {
                let mut buf = [0u8; 4];
                for v in gputrace_format::text::escape(c.encode_utf8(&mut buf)).chars() {
                    if v == '\\' {
                        out.push_str("\\\\");
                    } else {
                        out.push(v);
                    }
                }
            }
            c => out.push(c),
        }
    }
}

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Families in the order they are first declared.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Add a sample to family `name` (declared on first use; later uses must agree on
    /// help and type). Non-finite values are left out: they mean "not measured" here.
    pub fn add(&mut self, name: &'static str, kind: MetricType, help: &'static str, labels: &Labels, value: f64) {
        debug_assert!(valid_name(name), "metric name {name}");
        debug_assert!(kind != MetricType::Counter || name.ends_with("_total"), "counter {name}");
        if !value.is_finite() {
            return;
        }
        let family = match self.families.iter().position(|f| f.name == name) {
            Some(i) => &mut self.families[i],
            None => {
                self.families.push(Family {
                    name,
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.families.last_mut().expect("just pushed")
            }
        };
        debug_assert_eq!(family.kind, kind, "{name} declared twice with different types");
        family.samples.push((labels.as_str().to_owned(), value));
    }

    /// The families, in declaration order.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// Raise every counter sample to the highest value `memory` has seen for its series,
    /// and remember the result: a counter never goes down between two expositions of a
    /// growing trace, even when work delivered late moves time between categories.
    pub fn hold_counters(&mut self, memory: &mut CounterMemory) {
        for f in self.families.iter_mut().filter(|f| f.kind == MetricType::Counter) {
            for (labels, value) in &mut f.samples {
                let key = format!("{}{{{labels}}}", f.name);
                let seen = memory.0.entry(key).or_insert(*value);
                if *value < *seen {
                    *value = *seen;
                } else {
                    *seen = *value;
                }
            }
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help.replace('\\', "\\\\").replace('\n', "\\n"));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
            for (labels, value) in &f.samples {
                if labels.is_empty() {
                    let _ = writeln!(out, "{} {value}", f.name);
                } else {
                    let _ = writeln!(out, "{}{{{labels}}} {value}", f.name);
                }
            }
        }
        out
    }
}

/// The highest value each counter series has had (see [`Exposition::hold_counters`]).
#[derive(Clone, Debug, Default)]
pub struct CounterMemory(HashMap<String, f64>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_once_with_escaped_labels() {
        let mut e = Exposition::new();
        let l = Labels::new().with("host", "a\"b\\c\nd");
        e.add("x_total", MetricType::Counter, "X.", &l, 1.5);
        e.add("y", MetricType::Gauge, "Y.", &Labels::new(), 2.0);
        e.add("x_total", MetricType::Counter, "X.", &l.with("k", "v"), 3.0);
        e.add("y", MetricType::Gauge, "Y.", &Labels::new().with("z", 1), f64::NAN);
        assert_eq!(
            e.render(),
            "# HELP x_total X.\n# TYPE x_total counter\nx_total{host=\"a\\\"b\\\\c\\nd\"} 1.5\n\
             x_total{host=\"a\\\"b\\\\c\\nd\",k=\"v\"} 3\n# HELP y Y.\n# TYPE y gauge\ny 2\n"
        );
    }

    #[test]
    fn counters_never_go_down_gauges_may() {
        let mut memory = CounterMemory::default();
        let mut first = Exposition::new();
        first.add("c_total", MetricType::Counter, "C.", &Labels::new(), 10.0);
        first.add("g", MetricType::Gauge, "G.", &Labels::new(), 10.0);
        first.hold_counters(&mut memory);
        let mut second = Exposition::new();
        second.add("c_total", MetricType::Counter, "C.", &Labels::new(), 7.0);
        second.add("g", MetricType::Gauge, "G.", &Labels::new(), 7.0);
        second.hold_counters(&mut memory);
        assert_eq!(second.families()[0].samples[0].1, 10.0);
        assert_eq!(second.families()[1].samples[0].1, 7.0);
        let mut third = Exposition::new();
        third.add("c_total", MetricType::Counter, "C.", &Labels::new(), 12.0);
        third.hold_counters(&mut memory);
        assert_eq!(third.families()[0].samples[0].1, 12.0);
    }

    #[test]
    fn names() {
        assert!(valid_name("gputrace_gpu_seconds_total") && valid_name("a:b"));
        assert!(!valid_name("") && !valid_name("1a") && !valid_name("a-b"));
    }
}
