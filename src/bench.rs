//! `arden bench`: time repeated calls of one entry point.
//!
//! The program and its arguments are loaded as `arden run` loads them; the
//! entry is prepared for a backend (for C: generated, compiled or found in
//! the cache, loaded), called once to warm up, then timed call by call
//! until both the number of runs and the minimum time are reached.

use super::{Outcome, bind_args, check_program_file, choose_entry, print_out};
use clap::ValueEnum;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Time an entry point.
#[derive(clap::Args, Debug)]
#[command(
    about = "Time repeated calls of an entry point (compile time, min / median / mean per call)",
    long_about = "Load a program and its arguments as `arden run` does, prepare the entry for a \
backend (C: generate, compile or find in the cache, load), call it once to warm up, then call \
it again and again, timing each call, until both --runs calls and --min-seconds seconds are \
reached. Prints the compile time (and whether the C library came from the cache), the number \
of timed calls, the minimum, median and mean time per call and, for the C backend, the peak \
bytes of arrays allocated by one call. The result itself is not printed (`arden run` prints \
it).\n\n\
With --json, prints one JSON object on stdout instead, with the fields backend, entry, threads, \
frontend_ms (parse, check, lower, differentiate, optimise), compile_ms (C: generate, compile or load from \
the cache; 0 for the interpreter), cached, runs, total_s, min_ns, median_ns, mean_ns and \
peak_bytes (null for the interpreter).\n\n\
A run-time error in the entry is reported as `arden run` reports it (exit status 1).\n\n\
Examples:\n  \
arden bench dot.ard --entry dot --arg @a.npy --arg @b.npy\n  \
arden bench logsumexp.ard --entry lse --arg @x.npy --threads 1 --runs 20 --json\n  \
arden bench dot.ard --entry dot --arg '[1, 2]' --arg '[3, 4]' --backend interp --runs 3 --min-seconds 0"
)]
pub struct BenchArgs {
    /// The program (a `.ard` file), e.g. `dot.ard`.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// The entry point to time, e.g. `--entry dot`.
    ///
    /// May be left out when the program has exactly one entry point.
    #[arg(long, short = 'e', value_name = "NAME")]
    entry: Option<String>,

    /// One argument per parameter, in order, as for `arden run`, e.g.
    /// `--arg '[1, 2, 3]'` or `--arg @x.npy`.
    #[arg(long = "arg", short = 'a', value_name = "VALUE", allow_hyphen_values = true)]
    args: Vec<String>,

    /// The backend to time: `c` or `interp`.
    ///
    /// Default: `c` when a C compiler is found (`$CC` or `cc`), else the
    /// interpreter, with a note on stderr.
    #[arg(long, value_enum, value_name = "BACKEND")]
    backend: Option<Backend>,

    /// Threads for the C backend, e.g. `--threads 2` (default:
    /// `ARDEN_NUM_THREADS`, else every core, fewer while other processes
    /// keep cores busy; `ARDEN_DYNAMIC_THREADS=0|1` turns that off or on).
    /// `--threads 1` runs without OpenMP.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,

    /// Let the C compiler reassociate floating-point arithmetic, as
    /// `arden run --fast-math` does (C backend only): sums vectorise, results
    /// differ in the last bits. Compare with and without it in one session.
    #[arg(long)]
    fast_math: bool,

    /// The least number of timed calls (after one warm-up call), e.g. `--runs 20`.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    runs: u64,

    /// Keep calling until the timed calls add up to at least this many
    /// seconds (and --runs is reached), e.g. `--min-seconds 0` for exactly
    /// --runs calls.
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = parse_min_seconds)]
    min_seconds: f64,

    /// Print one JSON object on stdout (for scripts) instead of a table.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    opt: super::OptArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// C with OpenMP, compiled and loaded (fast).
    C,
    /// The reference interpreter.
    Interp,
}

/// A number of seconds, zero or more.
fn parse_min_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x >= 0.0 && x.is_finite() && x < 1e9 => Ok(x),
        _ => Err(format!("`{text}` is not a number of seconds (e.g. 1 or 0.5 or 0)")),
    }
}

/// What one benchmark measured.
#[derive(Debug, Clone, PartialEq)]
struct Report {
    backend: &'static str,
    entry: String,
    threads: usize,
    /// whether parallel loops took fewer threads while the machine was
    /// busy, and over the calls the fewest and most threads a call's
    /// loops took at most
    dynamic: bool,
    threads_used: Option<(usize, usize)>,
    frontend: Duration,
    compile: Duration,
    cached: bool,
    times: Vec<Duration>,
    peak_bytes: Option<i64>,
}

/// Minimum, median and mean of a non-empty list of call times, in ns.
fn summary(times: &[Duration]) -> (u128, u128, u128) {
    let mut ns: Vec<u128> = times.iter().map(|t| t.as_nanos()).collect();
    ns.sort_unstable();
    let n = ns.len();
    let median = if n % 2 == 1 { ns[n / 2] } else { (ns[n / 2 - 1] + ns[n / 2]) / 2 };
    let mean = ns.iter().sum::<u128>() / n as u128;
    (ns[0], median, mean)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A time per call with a unit that keeps 3-4 significant digits.
fn human_ns(ns: u128) -> String {
    let x = ns as f64;
    if x < 1e3 {
        format!("{ns} ns")
    } else if x < 1e6 {
        format!("{:.3} µs", x / 1e3)
    } else if x < 1e9 {
        format!("{:.3} ms", x / 1e6)
    } else {
        format!("{:.3} s", x / 1e9)
    }
}

fn human_bytes(b: i64) -> String {
    let x = b as f64;
    if x < 1024.0 {
        format!("{b} B")
    } else if x < 1024.0 * 1024.0 {
        format!("{:.1} KiB", x / 1024.0)
    } else if x < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", x / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", x / (1024.0 * 1024.0 * 1024.0))
    }
}

impl Report {
    fn to_json(&self) -> String {
        let (min, median, mean) = summary(&self.times);
        let total: f64 = self.times.iter().map(Duration::as_secs_f64).sum();
        serde_json::json!({
            "backend": self.backend,
            "entry": self.entry,
            "threads": self.threads,
            "dynamic": self.dynamic,
            "threads_used": self.threads_used.map(|(lo, hi)| [lo, hi]),
            "frontend_ms": ms(self.frontend),
            "compile_ms": ms(self.compile),
            "cached": self.cached,
            "runs": self.times.len(),
            "total_s": total,
            "min_ns": min as u64,
            "median_ns": median as u64,
            "mean_ns": mean as u64,
            "peak_bytes": self.peak_bytes,
        })
        .to_string()
    }

    fn to_table(&self, file: &str) -> String {
        let (min, median, mean) = summary(&self.times);
        let total: f64 = self.times.iter().map(Duration::as_secs_f64).sum();
        let mut threads = if self.threads == 1 { "1 thread".to_string() } else { format!("{} threads", self.threads) };
        if let (true, Some((lo, hi))) = (self.dynamic, self.threads_used)
            && (lo, hi) != (self.threads, self.threads)
        {
            let used = if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") };
            threads = format!("up to {threads}, {used} used (other processes kept cores busy)");
        }
        let compile = match self.backend {
            "c" => format!(
                "{:.1} ms ({}; generate C, {} and load)",
                ms(self.compile),
                if self.cached { "cached" } else { "compiled" },
                if self.cached { "find in the cache" } else { "run the C compiler" }
            ),
            _ => "none (interpreter)".to_string(),
        };
        let mut t = format!(
            "bench {file} --entry {}: backend {}, {threads}\n\
             \x20 front end   {:.1} ms (parse, check, lower, differentiate, optimise)\n\
             \x20 compile     {compile}\n\
             \x20 runs        {} timed (after 1 warm-up), {total:.3} s\n\
             \x20 min         {}\n\
             \x20 median      {}\n\
             \x20 mean        {}\n",
            self.entry,
            self.backend,
            ms(self.frontend),
            self.times.len(),
            human_ns(min),
            human_ns(median),
            human_ns(mean),
        );
        if let Some(p) = self.peak_bytes {
            t.push_str(&format!("  peak        {} ({p} bytes of arrays per call)\n", human_bytes(p)));
        }
        t
    }
}

pub fn bench(a: &BenchArgs) -> Outcome {
    check_program_file(&a.file)?;
    let t0 = Instant::now();
    let prog = a.opt.load_for(&a.file, a.entry.as_deref())?;
    let frontend = t0.elapsed();
    let name = choose_entry(&a.file, &prog.entry_names(), a.entry.as_deref(), "bench")?;
    let func = prog.entry(&name)?.function();
    let args = bind_args(func, &a.args)?;
    let backend = match a.backend {
        Some(b) => b,
        None if arden::backend::c::find_compiler().is_some() => Backend::C,
        None => {
            eprintln!("note: no C compiler found, timing the interpreter (install gcc or set $CC for the C backend)");
            Backend::Interp
        }
    };
    if backend == Backend::Interp && a.threads.is_some() {
        eprintln!("note: --threads applies to the C backend only; the interpreter runs on one thread");
    }
    if backend == Backend::Interp && a.fast_math {
        eprintln!("note: --fast-math applies to the C backend only; the interpreter computes exactly as written");
    }
    let compiled = match backend {
        // (only the entry is compiled, as `arden run` does; without
        // --backend, a failure falls back to the interpreter with a note)
        Backend::C => match super::compile_entry(&prog, &name, a.backend.is_some(), a.fast_math)? {
            Some(c) => c,
            None => prog.compile(arden::Backend::Interp)?,
        },
        Backend::Interp => prog.compile(arden::Backend::Interp)?,
    };
    let mut options = compiled.options();
    if let Some(n) = a.threads {
        options.threads = n as usize;
        options.team = arden::backend::c::Team::dynamic_if(arden::backend::c::default_dynamic(false));
    }
    let entry = compiled.entry(&name)?;
    // Calls as the Python package makes them (`call_borrowed`): arguments
    // read in place, array results kept in the buffer the backend made.
    // `call_with` copies every array result into a fresh `Vec` inside the
    // timed call: for the 10 MB gradient of logsumexp that copy and its
    // page faults were a third of the time measured (perf: memmove under
    // exc_page_fault), work that no caller of the library pays.
    let arg_refs: Vec<arden::api::ArgRef> = args.iter().map(|v| v.as_arg()).collect();
    // The warm-up call: first-touch page faults, OpenMP's thread pool.
    drop(entry.call_borrowed(&arg_refs, &options, None)?);
    let min_time = Duration::from_secs_f64(a.min_seconds);
    let mut times = vec![];
    let mut total = Duration::ZERO;
    let mut peak = None;
    let mut used = None;
    while (times.len() as u64) < a.runs || total < min_time {
        let t = Instant::now();
        let (value, stats) = entry.call_borrowed(&arg_refs, &options, None)?;
        let dt = t.elapsed();
        // dropped outside the timed region
        drop(value);
        times.push(dt);
        total += dt;
        if let Some(s) = stats {
            peak = Some(peak.unwrap_or(0).max(s.peak_bytes));
            used = Some(used.map_or((s.threads, s.threads), |(lo, hi): (usize, usize)| (lo.min(s.threads), hi.max(s.threads))));
        }
    }
    let (compile, cached) = match compiled.library() {
        Some(lib) => (lib.build_time, !lib.compiled),
        None => (Duration::ZERO, false),
    };
    let report = Report {
        backend: if backend == Backend::C { "c" } else { "interp" },
        entry: name,
        threads: if backend == Backend::C { options.threads } else { 1 },
        dynamic: backend == Backend::C && matches!(options.team, arden::backend::c::Team::Dynamic),
        threads_used: used,
        frontend,
        compile,
        cached,
        times,
        peak_bytes: peak,
    };
    if a.json { print_out(&format!("{}\n", report.to_json())) } else { print_out(&report.to_table(&a.file.display().to_string())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_times() {
        let t = |n: u64| Duration::from_nanos(n);
        assert_eq!(summary(&[t(5)]), (5, 5, 5));
        assert_eq!(summary(&[t(9), t(1), t(5)]), (1, 5, 5));
        assert_eq!(summary(&[t(4), t(1), t(3), t(10)]), (1, 3, 4));
    }

    #[test]
    fn units() {
        assert_eq!(human_ns(999), "999 ns");
        assert_eq!(human_ns(1_500), "1.500 µs");
        assert_eq!(human_ns(2_345_678), "2.346 ms");
        assert_eq!(human_ns(3_000_000_000), "3.000 s");
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert!(parse_min_seconds("0").is_ok());
        assert!(parse_min_seconds("-1").is_err());
        assert!(parse_min_seconds("nan").is_err());
    }

    #[test]
    fn json_fields() {
        let r = Report {
            backend: "c",
            entry: "dot".into(),
            threads: 2,
            dynamic: true,
            threads_used: Some((1, 2)),
            frontend: Duration::from_millis(3),
            compile: Duration::from_millis(12),
            cached: true,
            times: vec![Duration::from_nanos(10), Duration::from_nanos(30)],
            peak_bytes: Some(64),
        };
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(j["backend"], "c");
        assert_eq!(j["threads"], 2);
        assert_eq!(j["runs"], 2);
        assert_eq!(j["min_ns"], 10);
        assert_eq!(j["median_ns"], 20);
        assert_eq!(j["mean_ns"], 20);
        assert_eq!(j["cached"], true);
        assert_eq!(j["peak_bytes"], 64);
        assert_eq!(j["compile_ms"], 12.0);
        assert!(r.to_table("dot.ard").contains("peak"));
        assert_eq!(j["dynamic"], true);
        assert_eq!(j["threads_used"], serde_json::json!([1, 2]));
        assert!(r.to_table("dot.ard").contains("up to 2 threads, 1-2 used"), "{}", r.to_table("dot.ard"));
        let all = Report { threads_used: Some((2, 2)), ..r };
        assert!(all.to_table("dot.ard").contains("backend c, 2 threads\n"), "{}", all.to_table("dot.ard"));
    }
}
