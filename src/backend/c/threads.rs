//! How many threads a parallel region runs on when the user did not fix the
//! number: all it asked for, unless this process's threads wait for a core, and
//! then the cores other processes leave free (at least one).
//!
//! Why: OpenMP's threads wait for each other at every barrier. On a machine
//! whose cores are all busy, a thread the kernel took off its core holds up
//! the whole team until it runs again, once per parallel loop: the RK4
//! gradient (hundreds of parallel loops a call) took 8.1 s on 16 threads
//! beside 16 busy processes against 0.33 s on an idle machine
//! (bench/notes.md, session 9). Spinning less (`GOMP_SPINCOUNT`) helped
//! under load but cost 3.3× on an idle machine, and libgomp's `OMP_DYNAMIC`
//! counts the team's own spinning threads as load.
//!
//! The signal: how long this process's threads waited in the kernel's run
//! queue against how long they ran (`/proc/self/task/*/schedstat`) since
//! the last reading. A busy machine shows there only where it slows this
//! process: processes of lower priority (`nice`) take little from it, and
//! counting them as load halved the RK4 gradient's speed on 2 threads
//! beside a niced test run. When the threads waited more than [`WAITED`] of
//! their running time, regions get the cores the other runnable tasks leave
//! free (the machine's runnable tasks, `procs_running` in `/proc/stat`,
//! less this process's own) for a while ([`Mode`]), then try all the
//! threads asked again: on fewer threads the process cannot see whether
//! more would still wait, and the scheduler may have moved the others.
//!
//! A reading costs some 10-100 µs (a file per thread), so it is taken at
//! most every [`RESAMPLE`] and reused meanwhile. Where `/proc` cannot be
//! read (not Linux), every region gets the threads asked for.
//! The C runtime asks before each region (rt.h's `ard_team`), not once a
//! call: a call of thousands of regions then follows the load within it,
//! and a try of all the threads costs one reading's worth of regions, not a
//! whole slowed call (8 s for that RK4 gradient). The thread
//! count never changes a result's bits (docs/LANGUAGE.md §10), only its
//! time.

use rustc_hash::FxHashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a reading stays valid.
pub const RESAMPLE: Duration = Duration::from_millis(100);

/// Threads that waited for a core this share of the time they ran are
/// slowed by other processes (on 2 cores beside 2 busy processes each
/// thread waited 0.9-1.1× its run time; beside niced ones, 0-0.66×).
pub const WAITED: f64 = 0.75;

/// The run-queue figures since the last reading count only when the
/// threads ran at least this long meanwhile (a few wake-ups are noise).
const MIN_RUN_NS: u64 = 1_000_000;

/// How long regions first stay on the free cores once slowed, before one
/// reading's worth of regions tries all the threads asked again; each try
/// that is slowed doubles it, up to [`LONGEST_BACKOFF`]. Short, since a
/// competitor may be brief (a program starting up beside a benchmark).
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const LONGEST_BACKOFF: Duration = Duration::from_secs(64);

/// Where the regions stand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// every region gets the threads it asked for
    Open,
    /// slowed: regions get the free cores until `until`
    Reduced { until: Instant, backoff: Duration },
    /// after `Reduced`: the regions of one reading get all they asked for
    Trying { backoff: Duration },
}

impl Mode {
    /// The mode after a reading at `now` that found this process `slowed`.
    pub fn next(self, slowed: bool, now: Instant) -> Mode {
        match (self, slowed) {
            (Mode::Open, false) => Mode::Open,
            (Mode::Open, true) => Mode::Reduced { until: now + FIRST_BACKOFF, backoff: FIRST_BACKOFF },
            (Mode::Reduced { until, backoff }, _) if now < until => Mode::Reduced { until, backoff },
            (Mode::Reduced { backoff, .. }, _) => Mode::Trying { backoff },
            (Mode::Trying { .. }, false) => Mode::Open,
            (Mode::Trying { backoff }, true) => {
                let backoff = (backoff * 2).min(LONGEST_BACKOFF);
                Mode::Reduced { until: now + backoff, backoff }
            }
        }
    }
}

/// What the last reading saw.
struct Reading {
    at: Instant,
    mode: Mode,
    /// the threads a region gets until the next reading (before the cap by
    /// the count asked)
    free: usize,
    /// per thread id: nanoseconds run, nanoseconds waited in the run queue
    seen: FxHashMap<u64, (u64, u64)>,
}

static LAST: Mutex<Option<Reading>> = Mutex::new(None);

/// The threads for a region that may use at most `asked`.
pub fn for_region(asked: usize) -> usize {
    if asked <= 1 {
        return 1;
    }
    let now = Instant::now();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = last.as_ref()
        && now.duration_since(r.at) < RESAMPLE
    {
        return r.free.clamp(1, asked);
    }
    let (mode, previous) = last.take().map_or((Mode::Open, FxHashMap::default()), |r| (r.mode, r.seen));
    // (nothing to read: every region gets what it asked for)
    let (seen, slowed) = own_threads(&previous).unwrap_or_default();
    let mode = mode.next(slowed, now);
    let free = match mode {
        Mode::Reduced { .. } => free_cores().unwrap_or(usize::MAX),
        Mode::Open | Mode::Trying { .. } => usize::MAX,
    };
    *last = Some(Reading { at: now, mode, free, seen });
    free.clamp(1, asked)
}

/// [`for_region`] for the C runtime (rt.h's `ard_team`).
pub extern "C" fn team_for_region(asked: std::ffi::c_int) -> std::ffi::c_int {
    for_region(asked.max(1) as usize) as std::ffi::c_int
}

/// This process's threads' run-queue figures, and whether together they
/// waited more than [`WAITED`] of their running time since `previous` (the
/// first reading is a baseline: what the threads waited before, starting
/// up or compiling, says little about the regions to come). Together: beside
/// niced processes one thread at a time waited up to 0.66× its run, on 2
/// busy cores every thread about 1×.
fn own_threads(previous: &FxHashMap<u64, (u64, u64)>) -> Option<(FxHashMap<u64, (u64, u64)>, bool)> {
    let mut seen = FxHashMap::default();
    let (mut ran, mut waited) = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else { continue };
        // a thread that ended meanwhile has no figures any more
        let Some((run, wait)) = std::fs::read_to_string(task.path().join("schedstat")).ok().as_deref().and_then(run_and_wait) else { continue };
        // a thread new since then (OpenMP's, made at the first parallel
        // loop) only gives its baseline: its start waited for a core
        if let Some(&(run0, wait0)) = previous.get(&tid) {
            ran += run.saturating_sub(run0);
            waited += wait.saturating_sub(wait0);
        }
        seen.insert(tid, (run, wait));
    }
    Some((seen, waited_too_long(ran, waited)))
}

/// Whether threads that ran `run` ns and waited `wait` ns for a core were
/// slowed by other processes.
pub fn waited_too_long(run: u64, wait: u64) -> bool {
    run >= MIN_RUN_NS && wait as f64 > WAITED * run as f64
}

/// The first two fields of a `schedstat` file: nanoseconds on a core and
/// nanoseconds waiting in the run queue.
pub fn run_and_wait(schedstat: &str) -> Option<(u64, u64)> {
    let mut it = schedstat.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// The cores no other process wants now: the machine's cores less the
/// runnable tasks that are not this process's threads.
pub fn free_cores() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let (cores, running) = cores_and_running(&stat)?;
    Some(cores.saturating_sub(running.saturating_sub(own_running_threads()?)))
}

/// The number of `cpuN` lines and the `procs_running` count of
/// `/proc/stat`'s text.
pub fn cores_and_running(stat: &str) -> Option<(usize, usize)> {
    let cores = stat.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count();
    let running = stat.lines().find_map(|l| l.strip_prefix("procs_running "))?.trim().parse().ok()?;
    (cores > 0).then_some((cores, running))
}

/// This process's threads in state `R` (running or runnable).
fn own_running_threads() -> Option<usize> {
    let mut n = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        n += usize::from(task_state(&stat) == Some('R'));
    }
    Some(n)
}

/// The state letter of a `/proc/<pid>/task/<tid>/stat` line: the field
/// after the command name, which is in parentheses and may hold spaces and
/// parentheses itself.
pub fn task_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cores_and_runnable_tasks() {
        let stat = "cpu  10 0 5 100 0 0 0 0 0 0\ncpu0 5 0 2 50 0 0 0 0 0 0\ncpu1 5 0 3 50 0 0 0 0 0 0\nintr 1\nctxt 9\nprocs_running 3\nprocs_blocked 0\n";
        assert_eq!(cores_and_running(stat), Some((2, 3)));
        assert_eq!(cores_and_running("cpu  1 2 3\nprocs_running 1\n"), None);
        assert_eq!(cores_and_running("cpu0 1 2 3\n"), None);
    }

    #[test]
    fn reads_a_task_state_past_odd_command_names() {
        assert_eq!(task_state("1234 (arden) R 1 2 3"), Some('R'));
        assert_eq!(task_state("1234 (a) b) (c) S 1 2 3"), Some('S'));
        assert_eq!(task_state("garbage"), None);
    }

    #[test]
    fn reads_run_and_wait_times() {
        assert_eq!(run_and_wait("341707562 3308583 32\n"), Some((341707562, 3308583)));
        assert_eq!(run_and_wait("12"), None);
        assert_eq!(run_and_wait("x 1 2"), None);
    }

    #[test]
    fn a_thread_is_slowed_when_it_waited_most_of_its_run() {
        assert!(!waited_too_long(100_000_000, 3_000_000), "a niced neighbour");
        assert!(!waited_too_long(100_000_000, 60_000_000), "a niced neighbour's wake-ups");
        assert!(waited_too_long(100_000_000, 90_000_000), "a busy core shared");
        assert!(!waited_too_long(10_000, 90_000), "too short a run to tell");
    }

    #[test]
    fn slowed_calls_back_off_then_try_again() {
        let t0 = Instant::now();
        let s = |x: u64| t0 + Duration::from_millis(x);
        assert_eq!(Mode::Open.next(false, s(0)), Mode::Open);
        let reduced = Mode::Open.next(true, s(0));
        assert_eq!(reduced, Mode::Reduced { until: s(200), backoff: FIRST_BACKOFF });
        // it stays reduced, slowed or not, until the backoff ends
        assert_eq!(reduced.next(false, s(100)), reduced);
        assert_eq!(reduced.next(true, s(199)), reduced);
        let trying = reduced.next(false, s(200));
        assert_eq!(trying, Mode::Trying { backoff: FIRST_BACKOFF });
        // a try that is not slowed opens; one that is doubles the backoff
        assert_eq!(trying.next(false, s(300)), Mode::Open);
        assert_eq!(trying.next(true, s(300)), Mode::Reduced { until: s(700), backoff: 2 * FIRST_BACKOFF });
        let mut m = Mode::Trying { backoff: LONGEST_BACKOFF };
        m = m.next(true, s(0));
        assert_eq!(m, Mode::Reduced { until: s(64_000), backoff: LONGEST_BACKOFF });
    }

    #[test]
    fn a_region_gets_between_one_and_the_threads_asked() {
        for asked in [1, 2, 3, 16] {
            let t = for_region(asked);
            assert!((1..=asked).contains(&t), "{asked} asked, {t} given");
        }
        assert_eq!(for_region(0), 1);
    }
}
