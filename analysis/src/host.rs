//! What the host was doing while the GPU waited: host samples (format 1.4,
//! `gputrace run`'s sampler) joined to idle gaps.
//!
//! Each sample run of a thread stands for its time span; the part of it
//! inside a GPU idle window is its weight. Over a window, the main thread's
//! time by scheduler state, the CPU time of the process's other threads and
//! of its child processes (data-loader workers), and the main thread's
//! Python stacks weighted by idle time (not wall time) make a [`HostView`],
//! and the view's [`HostCause`] says what the samples prove.
//!
//! The main thread is the thread whose id is the trace's pid; a thread of
//! another process in the trace belongs to a descendant process whose
//! samples the launcher put into this trace (a loader worker).

use gputrace_format::host::{HostRun, HostSamples, ThreadState};
use gputrace_format::{Header, TraceFile};
use serde::Serialize;
use std::collections::HashMap;

/// Stacks listed per view.
const TOP_STACKS: usize = 5;

/// What the samples prove the host was doing during GPU idle time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostCause {
    /// The main thread was blocked waiting for input while loader workers
    /// ran, or it was inside the data loader's `__next__`.
    InputBound,
    /// The main thread itself was on a CPU (Python overhead, preprocessing
    /// on the main thread, the framework's own work).
    HostCompute,
    /// The main thread was in uninterruptible disk wait a fifth of the time
    /// or more (checkpoint writes, reads from storage, swapping): a compute
    /// loop is almost never in disk wait.
    IoWait,
    /// The main thread slept, and no loader worker was busy (a sleep, a
    /// lock, a queue or socket waiting on something else); or, whatever the
    /// state, its stack was in `time.sleep` half the time or more.
    Sleep,
    /// The main thread's stack was in the garbage collector (`gc.collect`,
    /// a `<gc>` frame) half the time or more.
    Gc,
    /// Python stacks without thread state or CPU time (a Kineto trace
    /// recorded with `with_stack=True`), and nothing in them says more:
    /// the site and stacks say where the main thread was.
    StacksOnly,
    /// Too little of the window was sampled to say.
    #[default]
    Unsampled,
}

impl HostCause {
    /// Name used in text output.
    pub fn name(self) -> &'static str {
        match self {
            HostCause::InputBound => "input-bound",
            HostCause::HostCompute => "host compute",
            HostCause::IoWait => "I/O wait",
            HostCause::Sleep => "sleep/wait",
            HostCause::Gc => "GC",
            HostCause::StacksOnly => "Python stacks only",
            HostCause::Unsampled => "not sampled",
        }
    }
}

/// The host during a window of GPU idle time (one gap, or all of them).
///
/// `main_*_ns` are the main thread's sampled time in the window by state;
/// their sum is `sampled_ns` (at most `window_ns`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostView {
    /// What the samples prove.
    pub cause: HostCause,
    /// The window's length (summed over its gaps).
    pub window_ns: u64,
    /// Of it, the time the main thread was sampled.
    pub sampled_ns: u64,
    /// Main thread running (`R`).
    pub main_running_ns: u64,
    /// Main thread sleeping (`S`).
    pub main_sleeping_ns: u64,
    /// Main thread in disk wait (`D`).
    pub main_disk_wait_ns: u64,
    /// Main thread in another state.
    pub main_other_ns: u64,
    /// CPU time the main thread used in the window.
    pub main_cpu_ns: u64,
    /// CPU time the process's other threads used.
    pub threads_cpu_ns: u64,
    /// CPU time the threads of its child processes (loader workers) used.
    pub workers_cpu_ns: u64,
    /// Time the child processes' threads spent in disk wait (summed over threads).
    pub workers_disk_wait_ns: u64,
    /// Child processes with samples in the window.
    pub workers: u32,
    /// Where the main thread was, by idle time: its innermost frame, and the
    /// innermost frame of the user's own code when that is another
    /// (`__next__ (dataloader.py:631) ← train (train.py:57)`).
    pub site: Option<String>,
    /// Share of `sampled_ns` the site's innermost function (any line) covers.
    pub site_share: f64,
    /// The main thread's Python stacks by time in the window, most first.
    pub stacks: Vec<WeightedStack>,
    /// Whether thread states and CPU time were sampled; false for Python
    /// stacks traced by Kineto (`python_function` events), whose states
    /// are `other` and CPU times 0.
    pub thread_state: bool,
}

/// A Python stack and the idle time it covers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WeightedStack {
    /// Frames, outermost first, each `function (file:line)`; empty: the
    /// thread had no Python stack (native code, or not a Python process).
    pub frames: Vec<String>,
    /// Idle time the main thread spent in it.
    pub idle_ns: u64,
    /// The state it was in most of that time.
    pub state: ThreadState,
}

/// A trace's host samples, summed (`report --json`'s `host`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostSummary {
    /// Samples per second asked for.
    pub hz: u32,
    /// Samples recorded.
    pub samples: u64,
    /// Samples lost, all causes (`info` lists them).
    pub lost: u64,
    /// Threads sampled.
    pub threads: u32,
    /// Processes they belong to.
    pub processes: u32,
    /// Over every idle gap of every device (null without GPU activity).
    pub gpu_idle: Option<HostView>,
    /// Over the whole sampled time, by wall time (for a trace without GPU activity).
    pub wall: HostView,
    /// Every main-thread stack (folded: outermost first, `;`-joined) and its
    /// GPU-idle time in µs (wall time without GPU activity); see [`folded`].
    #[serde(skip)]
    pub folded: Vec<(String, u64)>,
}

/// Which thread a run belongs to, for the views.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Main,
    Thread,
    Worker,
}

/// A window's sums, before they become a [`HostView`].
#[derive(Default)]
struct Acc {
    window: u64,
    state: [u64; 4],
    main_cpu: u128,
    threads_cpu: u128,
    workers_cpu: u128,
    workers_disk: u64,
    workers: Vec<u32>,
    /// (stack + 1, or 0 for none) → time by state.
    stacks: HashMap<u32, [u64; 4]>,
}

/// The host samples of `file` joined to `windows` (disjoint, sorted by
/// start): one [`HostView`] per window.
pub(crate) struct Joiner<'a> {
    file: &'a TraceFile,
    samples: HostSamples,
    roles: Vec<Role>,
}

impl<'a> Joiner<'a> {
    /// `None` when the trace has no host samples.
    pub(crate) fn new(file: &'a TraceFile) -> gputrace_format::Result<Option<Joiner<'a>>> {
        let Some(samples) = file.host_samples()? else { return Ok(None) };
        let roles = roles(file.header(), &samples);
        Ok(Some(Joiner { file, samples, roles }))
    }

    /// The summary, with the view over `idle` (every gap of every device,
    /// each list sorted by start; gaps of several devices may overlap and
    /// count once per device).
    pub(crate) fn summary(&self, idle: &[Vec<(u64, u64)>]) -> HostSummary {
        let mut pids: Vec<u32> = self.samples.threads.iter().map(|t| t.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let gpu_idle = (!idle.iter().all(Vec::is_empty)).then(|| {
            let mut total = Acc::default();
            for windows in idle {
                self.accumulate(windows, |_| 0, std::slice::from_mut(&mut total));
            }
            self.view(total)
        });
        let span = self
            .samples
            .runs
            .first()
            .map(|f| (f.start.0, self.samples.runs.iter().map(|r| r.end.0).max().unwrap_or(f.start.0)));
        let mut wall = Acc::default();
        let whole: Vec<(u64, u64)> = span.into_iter().collect();
        self.accumulate(&whole, |_| 0, std::slice::from_mut(&mut wall));
        let folded = if gpu_idle.is_some() {
            self.folded(idle)
        } else {
            self.folded(&[whole])
        };
        HostSummary {
            hz: self.samples.hz,
            samples: self.samples.sample_count(),
            lost: self.samples.lost(),
            threads: self.samples.threads.len() as u32,
            processes: pids.len() as u32,
            gpu_idle,
            wall: self.view(wall),
            folded,
        }
    }

    /// One view per window of `windows` (disjoint, sorted by start).
    pub(crate) fn views(&self, windows: &[(u64, u64)]) -> Vec<HostView> {
        let mut accs: Vec<Acc> = (0..windows.len()).map(|_| Acc::default()).collect();
        self.accumulate(windows, |i| i, &mut accs);
        accs.into_iter().map(|a| self.view(a)).collect()
    }

    /// Folded stacks (`frame;frame;frame weight`) of the main thread over
    /// `windows` (every device's gaps), weight in microseconds of idle time.
    pub(crate) fn folded(&self, idle: &[Vec<(u64, u64)>]) -> Vec<(String, u64)> {
        let mut total = Acc::default();
        for windows in idle {
            self.accumulate(windows, |_| 0, std::slice::from_mut(&mut total));
        }
        let mut out: Vec<(String, u64)> = total
            .stacks
            .iter()
            .map(|(&s, by_state)| {
                let frames = self.frames(s);
                let name = if frames.is_empty() {
                    "(no Python stack)".to_string()
                } else {
                    frames.join(";")
                };
                (name, by_state.iter().sum::<u64>() / 1000)
            })
            .filter(|(_, w)| *w > 0)
            .collect();
        out.sort();
        out
    }

    /// Add every run's overlap with `windows` to `accs[slot(window index)]`.
    fn accumulate(&self, windows: &[(u64, u64)], slot: impl Fn(usize) -> usize, accs: &mut [Acc]) {
        for (i, &(a, b)) in windows.iter().enumerate() {
            accs[slot(i)].window += b.saturating_sub(a);
        }
        for r in &self.samples.runs {
            // The first window that ends after the run starts.
            let mut i = windows.partition_point(|&(_, b)| b <= r.start.0);
            while let Some(&(a, b)) = windows.get(i) {
                if a >= r.end.0 {
                    break;
                }
                let overlap = b.min(r.end.0).saturating_sub(a.max(r.start.0));
                if overlap > 0 {
                    self.add(&mut accs[slot(i)], r, overlap);
                }
                i += 1;
            }
        }
    }

    fn add(&self, acc: &mut Acc, r: &HostRun, overlap: u64) {
        let len = r.end.0.saturating_sub(r.start.0).max(1);
        let cpu = u128::from(r.cpu_ns) * u128::from(overlap) / u128::from(len);
        match self.roles[r.thread as usize] {
            Role::Main => {
                acc.state[r.state as usize] += overlap;
                acc.main_cpu += cpu;
                acc.stacks.entry(r.stack.map_or(0, |s| s + 1)).or_default()[r.state as usize] += overlap;
            }
            Role::Thread => acc.threads_cpu += cpu,
            Role::Worker => {
                acc.workers_cpu += cpu;
                if r.state == ThreadState::DiskWait {
                    acc.workers_disk += overlap;
                }
                let pid = self.samples.threads[r.thread as usize].pid;
                if !acc.workers.contains(&pid) {
                    acc.workers.push(pid);
                }
            }
        }
    }

    fn view(&self, acc: Acc) -> HostView {
        let sampled: u64 = acc.state.iter().sum();
        let mut stacks: Vec<(u32, u64, ThreadState)> = acc
            .stacks
            .iter()
            .map(|(&s, by_state)| {
                let (state, _) = [
                    ThreadState::Running,
                    ThreadState::Sleeping,
                    ThreadState::DiskWait,
                    ThreadState::Other,
                ]
                .into_iter()
                .map(|st| (st, by_state[st as usize]))
                .max_by_key(|&(st, t)| (t, std::cmp::Reverse(st)))
                .expect("four states");
                (s, by_state.iter().sum(), state)
            })
            .collect();
        stacks.sort_by_key(|&(s, t, _)| (std::cmp::Reverse(t), s));
        let (site, site_share) = match self.top_function(&stacks) {
            Some((s, t)) if sampled > 0 => (self.site(s), t as f64 / sampled as f64),
            _ => (None, 0.0),
        };
        let mut view = HostView {
            cause: HostCause::Unsampled,
            thread_state: self.samples.hz > 0,
            window_ns: acc.window,
            sampled_ns: sampled,
            main_running_ns: acc.state[ThreadState::Running as usize],
            main_sleeping_ns: acc.state[ThreadState::Sleeping as usize],
            main_disk_wait_ns: acc.state[ThreadState::DiskWait as usize],
            main_other_ns: acc.state[ThreadState::Other as usize],
            main_cpu_ns: acc.main_cpu as u64,
            threads_cpu_ns: acc.threads_cpu as u64,
            workers_cpu_ns: acc.workers_cpu as u64,
            workers_disk_wait_ns: acc.workers_disk,
            workers: acc.workers.len() as u32,
            site,
            site_share,
            stacks: stacks
                .iter()
                .take(TOP_STACKS)
                .map(|&(s, t, state)| WeightedStack {
                    frames: self.frames(s),
                    idle_ns: t,
                    state,
                })
                .collect(),
        };
        let top = self.top_function(&stacks);
        let in_loader = top.is_some_and(|(s, _)| self.stack_in_data_loader(s - 1));
        // The stack names the cause when its heaviest innermost function
        // covers half the sampled time or more.
        let stack_says = top
            .filter(|&(_, t)| sampled > 0 && t * 2 >= sampled)
            .and_then(|(s, _)| self.stack_cause(s - 1));
        view.cause = cause(&view, in_loader, stack_says);
        view
    }

    /// The innermost function (by name and file, any line) with the most
    /// time over `stacks` ((stack + 1, time, state), heaviest first): its
    /// heaviest stack (+ 1) and its time. `None` if no stack has frames.
    fn top_function(&self, stacks: &[(u32, u64, ThreadState)]) -> Option<(u32, u64)> {
        let mut by_function: HashMap<(u32, u32), (u64, u32)> = HashMap::new();
        for &(s, t, _) in stacks {
            if s == 0 {
                continue;
            }
            let Some(&inner) = self.samples.stacks[(s - 1) as usize].first() else {
                continue;
            };
            let f = self.samples.frames[inner as usize];
            // `stacks` is heaviest first: the first stack seen stays the representative.
            by_function.entry((f.function.0, f.file.0)).or_insert((0, s)).0 += t;
        }
        by_function
            .into_iter()
            .map(|(_, (t, s))| (s, t))
            .max_by_key(|&(s, t)| (t, std::cmp::Reverse(s)))
    }

    /// Frames of stack `s + 1` (0: none), outermost first.
    fn frames(&self, s: u32) -> Vec<String> {
        if s == 0 {
            return Vec::new();
        }
        let stack = &self.samples.stacks[(s - 1) as usize];
        stack.iter().rev().map(|&f| self.frame_name(f)).collect()
    }

    fn frame_name(&self, f: u32) -> String {
        let fr = self.samples.frames[f as usize];
        let file = self.file.name(fr.file);
        if file.is_empty() {
            // A builtin (Kineto names C functions without a file).
            return self.file.name(fr.function).to_string();
        }
        let base = file.rsplit('/').next().unwrap_or(&file);
        format!("{} ({base}:{})", self.file.name(fr.function), fr.line)
    }

    /// What the innermost frame of stack `s` proves on its own: the
    /// garbage collector or a sleep.
    fn stack_cause(&self, s: u32) -> Option<HostCause> {
        let &inner = self.samples.stacks[s as usize].first()?;
        let f = self.samples.frames[inner as usize];
        stack_cause(&self.file.name(f.function), &self.file.name(f.file))
    }

    /// The innermost frame of stack `s + 1`, and the innermost frame of the
    /// user's own code if that is another one.
    fn site(&self, s: u32) -> Option<String> {
        let stack = &self.samples.stacks[(s - 1) as usize];
        let &inner = stack.first()?;
        let own = stack
            .iter()
            .copied()
            .find(|&f| is_own_code(&self.file.name(self.samples.frames[f as usize].file)));
        Some(match own {
            Some(o) if o != inner => format!("{} ← {}", self.frame_name(inner), self.frame_name(o)),
            _ => self.frame_name(inner),
        })
    }

    fn stack_in_data_loader(&self, s: u32) -> bool {
        self.samples.stacks[s as usize].iter().any(|&f| {
            let file = self.file.name(self.samples.frames[f as usize].file);
            file.contains("torch/utils/data/")
        })
    }
}

/// What an innermost frame proves on its own: CPython's collector
/// (`gc.collect` as Kineto names it, a `<gc>` frame as samplers that show
/// the collector name it) or a sleep (`time.sleep`).
fn stack_cause(function: &str, file: &str) -> Option<HostCause> {
    let is = |name: &str, module: &str| {
        function == format!("<built-in function {name}>") || (function == name && (file == module || file == format!("<{module}>")))
    };
    if function == "<gc>" || function == "gc.collect" || is("collect", "gc") {
        Some(HostCause::Gc)
    } else if function == "time.sleep" || is("sleep", "time") {
        Some(HostCause::Sleep)
    } else {
        None
    }
}

/// What the samples of `v` prove, from the main thread's states and what
/// its stack says (see [`HostCause`]).
fn cause(v: &HostView, in_loader: bool, stack_says: Option<HostCause>) -> HostCause {
    if v.window_ns == 0 || v.sampled_ns * 2 < v.window_ns {
        return HostCause::Unsampled;
    }
    let share = |t: u64| t as f64 / v.sampled_ns as f64;
    if share(v.main_disk_wait_ns) >= 0.2 {
        HostCause::IoWait
    } else if let Some(c) = stack_says {
        c
    } else if !v.thread_state {
        if in_loader {
            HostCause::InputBound
        } else {
            HostCause::StacksOnly
        }
    } else if in_loader || (share(v.main_running_ns) < 0.5 && v.workers_cpu_ns * 2 >= v.sampled_ns) {
        // Waiting in the loader, or asleep while the workers used at least
        // half a CPU on average.
        HostCause::InputBound
    } else if share(v.main_running_ns) >= 0.5 {
        HostCause::HostCompute
    } else {
        HostCause::Sleep
    }
}

/// Whether `file` is the user's code rather than Python's or a library's.
fn is_own_code(file: &str) -> bool {
    !(file.starts_with('<')
        || file.contains("site-packages/")
        || file.contains("dist-packages/")
        || file.contains("/lib/python")
        || file.contains("/lib64/python"))
}

fn roles(header: &Header, s: &HostSamples) -> Vec<Role> {
    s.threads
        .iter()
        .map(|t| match (t.pid == header.pid, t.tid == t.pid) {
            (true, true) => Role::Main,
            (true, false) => Role::Thread,
            (false, _) => Role::Worker,
        })
        .collect()
}

/// Fill `report`'s host summary and its longest gaps' host views from
/// `file`'s host samples (nothing without them). `idle` holds every gap of
/// each device, in the order of `report.devices`.
pub(crate) fn attach(file: &TraceFile, report: &mut crate::RankReport, idle: &[Vec<(u64, u64)>]) -> crate::Result<()> {
    let Some(j) = Joiner::new(file)? else { return Ok(()) };
    report.host = Some(j.summary(idle));
    for (dev, gaps) in report.devices.iter_mut().zip(idle) {
        slow_steps(&j, &mut dev.steps, gaps);
    }
    for dev in &mut report.devices {
        let mut order: Vec<usize> = (0..dev.longest_gaps.len()).collect();
        order.sort_by_key(|&i| dev.longest_gaps[i].start_ns);
        let windows: Vec<(u64, u64)> = order
            .iter()
            .map(|&i| (dev.longest_gaps[i].start_ns, dev.longest_gaps[i].end_ns))
            .collect();
        for (view, &i) in j.views(&windows).into_iter().zip(&order) {
            dev.longest_gaps[i].host = Some(view);
        }
    }
    Ok(())
}

/// The host view of `file` over `windows` (any order, overlaps counted
/// once), e.g. the time a rank was late to its collectives (`compare`);
/// `None` when the trace has no host samples.
pub fn view_over(file: &TraceFile, windows: &[(u64, u64)]) -> crate::Result<Option<HostView>> {
    let Some(j) = Joiner::new(file)? else { return Ok(None) };
    let mut sorted: Vec<(u64, u64)> = windows.iter().copied().filter(|(a, b)| b > a).collect();
    sorted.sort_unstable();
    let mut disjoint: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (a, b) in sorted {
        match disjoint.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => disjoint.push((a, b)),
        }
    }
    let mut acc = Acc::default();
    j.accumulate(&disjoint, |_| 0, std::slice::from_mut(&mut acc));
    Ok(Some(j.view(acc)))
}

/// A step is slow at this many times the median step of its device.
pub const SLOW_STEP_FACTOR: f64 = 1.5;

/// Give each slow step of a device the host view of its idle time (the
/// device's gaps, each sorted by start, clipped to the step).
fn slow_steps(j: &Joiner<'_>, steps: &mut [crate::StepReport], gaps: &[(u64, u64)]) {
    if steps.len() < 3 {
        return;
    }
    let mut durations: Vec<u64> = steps.iter().map(|s| s.duration_ns).collect();
    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    for s in steps
        .iter_mut()
        .filter(|s| s.duration_ns as f64 >= SLOW_STEP_FACTOR * median as f64)
    {
        let first = gaps.partition_point(|&(_, b)| b <= s.start_ns);
        let windows: Vec<(u64, u64)> = gaps[first..]
            .iter()
            .take_while(|&&(a, _)| a < s.end_ns)
            .map(|&(a, b)| (a.max(s.start_ns), b.min(s.end_ns)))
            .filter(|(a, b)| b > a)
            .collect();
        if windows.is_empty() {
            continue;
        }
        let mut acc = Acc::default();
        j.accumulate(&windows, |_| 0, std::slice::from_mut(&mut acc));
        s.host = Some(j.view(acc));
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.0}%", 100.0 * part as f64 / whole as f64)
}

fn cpus(cpu_ns: u64, window_ns: u64) -> String {
    if window_ns == 0 {
        return "-".into();
    }
    format!("{:.2} CPUs", cpu_ns as f64 / window_ns as f64)
}

/// One line on what the host did in a view: cause, main thread states,
/// CPU use, and where the main thread was.
pub fn view_line(v: &HostView) -> String {
    if v.cause == HostCause::Unsampled {
        return format!(
            "not sampled ({} of {} sampled)",
            gputrace_format::Nanos(v.sampled_ns),
            gputrace_format::Nanos(v.window_ns)
        );
    }
    let s = v.sampled_ns;
    if !v.thread_state {
        // Traced stacks: no states or CPU time to show.
        let mut line = match v.cause {
            HostCause::StacksOnly => "Python stacks only (no thread state)".to_string(),
            c => format!("{} (from Python stacks only, no thread state)", c.name()),
        };
        if let Some(site) = &v.site {
            line.push_str(&format!("; in {site} {:.0}%", 100.0 * v.site_share));
        }
        return line;
    }
    let mut line = format!(
        "{}: main thread running {}, sleeping {}, disk wait {}; CPU main {}, other threads {}",
        v.cause.name(),
        pct(v.main_running_ns, s),
        pct(v.main_sleeping_ns, s),
        pct(v.main_disk_wait_ns, s),
        cpus(v.main_cpu_ns, v.window_ns),
        cpus(v.threads_cpu_ns, v.window_ns),
    );
    if v.workers > 0 {
        line.push_str(&format!(
            ", {} worker process(es) {}",
            v.workers,
            cpus(v.workers_cpu_ns, v.window_ns)
        ));
    }
    if let Some(site) = &v.site {
        line.push_str(&format!("; in {site} {:.0}%", 100.0 * v.site_share));
    }
    line
}

/// Folded stacks (Brendan Gregg's format: `outer;…;inner weight`) of the
/// main thread of each trace with host samples, weighted by GPU-idle time
/// in microseconds (by wall time for a trace without GPU activity); frames
/// are `function (file:line)`, and each line starts with `rank N;`.
pub fn folded(report: &crate::Report) -> String {
    let mut out = String::new();
    for rk in &report.ranks {
        let Some(h) = &rk.host else { continue };
        for (stack, w) in &h.folded {
            out.push_str(&format!("rank {};{stack} {w}\n", rk.rank));
        }
    }
    out
}

/// A finding naming what the host did during the GPU's idle time, for the
/// trace with the most sampled idle time (none without host samples).
pub(crate) fn findings(r: &crate::Report) -> Vec<crate::Finding> {
    let best = r
        .ranks
        .iter()
        .filter_map(|rk| Some((rk.rank, rk.host.as_ref()?.gpu_idle.as_ref()?)))
        .filter(|(_, v)| v.cause != HostCause::Unsampled)
        .max_by_key(|(rank, v)| (v.window_ns, std::cmp::Reverse(*rank)));
    let Some((rank, v)) = best else { return Vec::new() };
    let site = v.site.as_deref().map_or(String::new(), |s| {
        format!(" in {s} ({:.0}% of the idle time)", 100.0 * v.site_share)
    });
    let next_step = match v.cause {
        HostCause::InputBound => {
            "The main thread waits for batches: more DataLoader workers (num_workers), pin_memory=True, prefetch_factor, \
             persistent_workers=True, or cheaper per-sample preprocessing (decode and augment on the GPU: DALI, torchvision.v2 on \
             CUDA tensors)."
        }
        HostCause::HostCompute => {
            "The main thread computes while the GPU waits: move that work off the critical path (into DataLoader workers, a \
             background thread, or onto the GPU), cut Python overhead per step (torch.compile, CUDA graphs, larger batches)."
        }
        HostCause::IoWait => {
            "The main thread waits on storage: write checkpoints asynchronously (torch.distributed.checkpoint async_save, a \
             background thread), less often, or to faster local storage; read data through workers with prefetch."
        }
        HostCause::Sleep => {
            "The main thread sleeps with nothing else busy: a sleep, a lock, a barrier, a queue or a socket. The named frame is \
             where it waits; look for what it waits on (another rank, a server, a timer)."
        }
        HostCause::Gc => {
            "The main thread collects garbage while the GPU waits: gc.freeze() after setup, gc.disable() in the loop and \
             gc.collect() at step boundaries the GPU does not wait on, fewer Python objects per step."
        }
        HostCause::StacksOnly => {
            "The trace has the main thread's Python stacks but not its CPU state: the named frame is where it was while the \
             GPU waited. Record under `gputrace run` (host samples) to tell computing, waiting on input and sleeping apart."
        }
        HostCause::Unsampled => "",
    };
    vec![crate::Finding {
        rule: crate::FindingRule::HostDuringIdle,
        severity: crate::Severity::Medium,
        title: format!("While the GPU was idle the host was {}", v.cause.name()),
        evidence: format!(
            "rank {rank}: over {} of GPU idle time{site}; {}",
            gputrace_format::Nanos(v.window_ns),
            view_line(v)
        ),
        next_step: next_step.to_string(),
        values: [
            (crate::Value::IdleNs, v.window_ns as f64),
            (crate::Value::SampledNs, v.sampled_ns as f64),
            (crate::Value::MainRunningNs, v.main_running_ns as f64),
            (crate::Value::MainSleepingNs, v.main_sleeping_ns as f64),
            (crate::Value::MainDiskWaitNs, v.main_disk_wait_ns as f64),
            (crate::Value::WorkersCpuNs, v.workers_cpu_ns as f64),
            (crate::Value::SiteShare, v.site_share),
        ]
        .into(),
    }]
}
