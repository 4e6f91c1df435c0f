//! Duty-cycled capture: CUPTI activity on for the first `on` of every
//! `period`, off in between (`GPUTRACE_DUTY="ON_MS/PERIOD_MS"`, set by
//! `gputrace run --duty 2s/60s`).
//!
//! This module is the schedule only, a pure state machine: given the time
//! since capture started, [`Schedule::poll`] says whether capture must be
//! turned off or on now. The writer thread acts on its answers (never a
//! CUPTI callback); see `session/capture.rs`.

use std::time::Duration;

/// A duty cycle: capture for `on` at the start of every `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duty {
    /// How long each capture window lasts.
    pub on: Duration,
    /// Time from one window's start to the next's.
    pub period: Duration,
}

/// Why a `GPUTRACE_DUTY` value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DutyError {
    /// Not `ON_MS/PERIOD_MS` with two integers.
    Syntax(String),
    /// The window is empty or not shorter than the period.
    Range(String),
}

impl std::fmt::Display for DutyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DutyError::Syntax(v) => write!(f, "GPUTRACE_DUTY={v:?} is not ON_MS/PERIOD_MS (e.g. 2000/60000)"),
            DutyError::Range(v) => write!(
                f,
                "GPUTRACE_DUTY={v:?}: the capture window must be longer than 0 and shorter than the period"
            ),
        }
    }
}

impl std::error::Error for DutyError {}

impl Duty {
    /// Parse `ON_MS/PERIOD_MS`, as `gputrace run --duty` writes it.
    pub fn parse(value: &str) -> Result<Duty, DutyError> {
        let syntax = || DutyError::Syntax(value.to_string());
        let (on, period) = value.trim().split_once('/').ok_or_else(syntax)?;
        let on: u64 = on.trim().parse().map_err(|_| syntax())?;
        let period: u64 = period.trim().parse().map_err(|_| syntax())?;
        if on == 0 || on >= period {
            return Err(DutyError::Range(value.to_string()));
        }
        Ok(Duty {
            on: Duration::from_millis(on),
            period: Duration::from_millis(period),
        })
    }

    /// The schedule as `gputrace run --duty` takes it: `2s/60s`, `500ms/90s`.
    pub fn label(&self) -> String {
        format!("{}/{}", human(self.on), human(self.period))
    }
}

/// `60s`, `2s`, `1500ms` (whole seconds when exact, else milliseconds).
fn human(d: Duration) -> String {
    match d.as_millis() {
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// What to do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The window ended: turn capture off (and close the window).
    Off,
    /// A new window began: turn capture on.
    On,
}

/// Where the schedule is: capture on or off, in cycle `n` (cycle `n` runs
/// from `n × period` to `(n + 1) × period`, its window is the first `on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    On(u64),
    Off(u64),
}

/// The schedule of one session. Capture is on when it is made (cycle 0's
/// window starts at time 0: the agent enables CUPTI before the schedule
/// exists).
#[derive(Clone, Debug)]
pub struct Schedule {
    duty: Duty,
    state: State,
}

impl Schedule {
    /// A schedule at time 0, capture on.
    pub fn new(duty: Duty) -> Schedule {
        Schedule { duty, state: State::On(0) }
    }

    /// The transition due at `now` (time since capture started), if any.
    /// Call it again until it returns `None`: when the caller was late by
    /// more than a period, a window that ended and the next one that began
    /// are two transitions. A window whose whole `on` time was missed is
    /// skipped (never opened just to be closed).
    pub fn poll(&mut self, now: Duration) -> Option<Transition> {
        let (on, period) = (self.duty.on.as_nanos(), self.duty.period.as_nanos());
        let now = now.as_nanos();
        let cycle = |n: u64| u128::from(n) * period;
        match self.state {
            State::On(n) => (now >= cycle(n) + on).then(|| {
                self.state = State::Off(n);
                Transition::Off
            }),
            State::Off(n) => {
                if now < cycle(n + 1) {
                    return None;
                }
                let current = u64::try_from(now / period).unwrap_or(u64::MAX);
                if now - cycle(current) < on {
                    self.state = State::On(current);
                    Some(Transition::On)
                } else {
                    self.state = State::Off(current);
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn parses_ms_pairs_and_refuses_the_rest() {
        assert_eq!(
            Duty::parse("2000/60000"),
            Ok(Duty {
                on: ms(2000),
                period: ms(60000)
            })
        );
        assert_eq!(Duty::parse(" 5 / 10 ").map(|d| d.period), Ok(ms(10)));
        for bad in ["", "2000", "2s/60s", "-1/10", "1/2/3", "a/b"] {
            assert!(matches!(Duty::parse(bad), Err(DutyError::Syntax(_))), "{bad}");
        }
        for bad in ["0/100", "100/100", "200/100"] {
            assert!(matches!(Duty::parse(bad), Err(DutyError::Range(_))), "{bad}");
        }
    }

    #[test]
    fn labels_read_like_the_command_line() {
        let label = |a, b| Duty { on: ms(a), period: ms(b) }.label();
        assert_eq!(label(2000, 60000), "2s/60s");
        assert_eq!(label(500, 90000), "500ms/90s");
        assert_eq!(label(1500, 30000), "1500ms/30s");
    }

    /// The transitions of a schedule polled at `times`.
    fn run(duty: Duty, times: &[u64]) -> Vec<(u64, Transition)> {
        let mut s = Schedule::new(duty);
        let mut out = Vec::new();
        for &t in times {
            while let Some(x) = s.poll(ms(t)) {
                out.push((t, x));
            }
        }
        out
    }

    #[test]
    fn on_for_the_first_part_of_every_period() {
        let d = Duty { on: ms(2), period: ms(10) };
        let times: Vec<u64> = (0..=31).collect();
        use Transition::*;
        assert_eq!(run(d, &times), [(2, Off), (10, On), (12, Off), (20, On), (22, Off), (30, On)]);
        let mut s = Schedule::new(d);
        assert_eq!(s.poll(ms(1)), None);
        assert_eq!(s.poll(ms(2)), Some(Off));
        assert_eq!(s.poll(ms(3)), None);
    }

    #[test]
    fn a_late_caller_closes_then_opens_and_skips_missed_windows() {
        use Transition::*;
        let d = Duty { on: ms(2), period: ms(10) };
        // Polled at 1 then 21: window 0 ended, window 2 is open.
        assert_eq!(run(d, &[1, 21]), [(21, Off), (21, On)]);
        // Polled at 1 then 25: window 0 ended; windows 1 and 2 were missed whole.
        assert_eq!(run(d, &[1, 25, 29, 30]), [(25, Off), (30, On)]);
        // Never polled before a far time: no transition storm.
        assert_eq!(run(d, &[1_000_000_005]), [(1_000_000_005, Off)]);
    }
}
