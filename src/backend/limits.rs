//! Memory and time limits of a run.
//!
//! - **Memory**: every array buffer the interpreter builds is allocated by
//!   [`try_vec`] (or [`try_clone`]): a fallible allocation (`try_reserve`)
//!   checked first against the memory limit ([`set_max_memory`]; the CLI's
//!   `--max-memory`, by default the machine's available memory). When a
//!   [`CountingAlloc`] is the process's global allocator (the `arden`
//!   binary installs one) the check is against the bytes live in the whole
//!   process plus the request; otherwise against the request alone. Failure
//!   is an [`Oom`], which the interpreter reports as a run-time error naming
//!   the statement and the size asked for, never an abort.
//! - **Time and Ctrl-C**: the interpreter polls one atomic flag ([`stop`])
//!   at every iteration of a `loop`, a `for` and a user reduction; a
//!   watchdog thread ([`set_timeout`]) or a signal handler ([`interrupt`])
//!   raises it, and the run stops with an error naming the loop.
//! - **Compiled code** (the C backend) honours both: each call receives
//!   the limit, the bytes live when it starts and the address of the stop
//!   flag ([`stop_flag`]); its allocations are checked against the limit
//!   and its loops poll the flag (innermost `for` loops and built-in
//!   reductions between chunks of 2^16 iterations, so that each chunk stays
//!   free of checks and vectorises).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Bytes currently allocated through [`CountingAlloc`].
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Whether a [`CountingAlloc`] is counting (it is the global allocator).
static COUNTING: AtomicBool = AtomicBool::new(false);
/// The memory limit in bytes (`u64::MAX`: none).
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);
/// Why a run must stop: 0 it need not, [`INTERRUPTED`], [`TIMED_OUT`].
static STOP: AtomicU8 = AtomicU8::new(0);
/// The time limit in milliseconds, for messages.
static TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

pub const INTERRUPTED: u8 = 1;
pub const TIMED_OUT: u8 = 2;

/// A global allocator that counts the bytes live, so that the memory limit
/// is checked against what the process really holds. Install it with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

/// Set the memory limit in bytes (`None`: no limit but the machine's).
pub fn set_max_memory(bytes: Option<u64>) {
    LIMIT.store(bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The memory limit in bytes, if any.
pub fn max_memory() -> Option<u64> {
    match LIMIT.load(Ordering::Relaxed) {
        u64::MAX => None,
        b => Some(b),
    }
}

/// Bytes live in the process when a [`CountingAlloc`] counts them.
pub fn live_bytes() -> Option<usize> {
    COUNTING.load(Ordering::Relaxed).then(|| LIVE.load(Ordering::Relaxed))
}

/// The machine's available memory (`MemAvailable` in `/proc/meminfo`), in
/// bytes; `None` where it cannot be read.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Parse a memory size: a number of bytes with an optional unit `K`, `M`,
/// `G`, `T` (powers of 1024; `KB`, `KiB`, `MB`... accepted alike), e.g.
/// `512M`, `4G`, `1.5G`, `1000000`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        u => return Err(format!("unknown unit `{u}` in `{text}` (use a number of bytes, or K, M, G, T: e.g. 512M, 4G)")),
    };
    let x: f64 = num.parse().map_err(|_| format!("`{text}` is not a memory size (e.g. 512M, 4G, 1000000)"))?;
    let bytes = x * mult as f64;
    if !(1.0..1.8e19).contains(&bytes) {
        return Err(format!("memory size `{text}` is out of range"));
    }
    Ok(bytes as u64)
}

/// A size in bytes for messages: `8000000000 bytes (7.45 GiB)`.
pub fn bytes_str(b: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, u) in UNITS {
        if b >= u {
            return format!("{b} bytes ({:.2} {name})", b as f64 / u as f64);
        }
    }
    format!("{b} bytes")
}

/// An allocation the limit or the machine refused.
#[derive(Clone, Debug, PartialEq)]
pub struct Oom {
    /// Bytes asked for (saturated at `u64::MAX` when the count overflows).
    pub bytes: u64,
    /// Elements asked for and their type name (`f64`...).
    pub elems: u64,
    pub elem: &'static str,
    /// `Some(limit)` when the limit refused it, `None` when the machine did.
    pub limit: Option<u64>,
    /// Bytes live when it was refused (when counted).
    pub live: Option<usize>,
}

impl std::fmt::Display for Oom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "out of memory: an array of {} {} elements needs {}", self.elems, self.elem, bytes_str(self.bytes))?;
        if let Some(live) = self.live {
            write!(f, " with {} in use", bytes_str(live as u64))?;
        }
        match self.limit {
            Some(l) => write!(f, ", over the memory limit of {} (set it with --max-memory)", bytes_str(l)),
            None => write!(f, ", and the system refused the allocation"),
        }
    }
}

/// Requests below this many bytes are not checked against the limit (the
/// interpreter's small vectors; they still count as live).
const CHECK_FROM: u64 = 64 * 1024;

/// Check a request of `n` elements of `T` against the limit.
fn check<T>(n: usize, elem: &'static str) -> Result<(), Oom> {
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    if bytes < CHECK_FROM {
        return Ok(());
    }
    let limit = LIMIT.load(Ordering::Relaxed);
    let live = live_bytes();
    if (live.unwrap_or(0) as u64).saturating_add(bytes) > limit {
        return Err(Oom { bytes, elems: n as u64, elem, limit: Some(limit), live });
    }
    Ok(())
}

/// An empty vector with room for exactly `n` elements, or an [`Oom`].
pub fn try_vec<T>(n: usize, elem: &'static str) -> Result<Vec<T>, Oom> {
    check::<T>(n, elem)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Oom {
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        elems: n as u64,
        elem,
        limit: None,
        live: live_bytes(),
    })?;
    Ok(v)
}

/// A copy of `xs`, or an [`Oom`].
pub fn try_clone<T: Copy>(xs: &[T], elem: &'static str) -> Result<Vec<T>, Oom> {
    let mut v = try_vec(xs.len(), elem)?;
    v.extend_from_slice(xs);
    Ok(v)
}

// ---- stopping a run -------------------------------------------------------

/// Why the current run must stop: 0 (it need not), [`INTERRUPTED`] or
/// [`TIMED_OUT`]. One relaxed load: cheap enough for every loop iteration.
#[inline]
pub fn stop() -> u8 {
    STOP.load(Ordering::Relaxed)
}

/// The stop flag itself, for compiled code to poll (the C backend reads it
/// with a relaxed atomic load, as [`stop`] does).
pub fn stop_flag() -> *const u8 {
    STOP.as_ptr()
}

/// Ask the current run to stop (Ctrl-C).
pub fn interrupt() {
    STOP.store(INTERRUPTED, Ordering::Relaxed);
}

/// Make the next run start afresh (tests run several in one process).
pub fn clear_stop() {
    STOP.store(0, Ordering::Relaxed);
}

/// Stop the run with a time-out error after `limit` (a watchdog thread
/// raises the flag; it does nothing if the process ends first).
pub fn set_timeout(limit: Duration) {
    TIMEOUT_MS.store(limit.as_millis().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    let _ = std::thread::Builder::new().name("arden-timeout".into()).spawn(move || {
        std::thread::sleep(limit);
        let _ = STOP.compare_exchange(0, TIMED_OUT, Ordering::Relaxed, Ordering::Relaxed);
    });
}

/// The time limit set by [`set_timeout`], for messages.
pub fn timeout() -> Duration {
    Duration::from_millis(TIMEOUT_MS.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4gb"), Ok(4 << 30));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("-5M").is_err());
    }

    #[test]
    fn refused_allocations_are_errors() {
        let e = try_vec::<f64>(usize::MAX / 8, "f64").unwrap_err();
        assert_eq!(e.elem, "f64");
        assert!(e.to_string().contains("out of memory"), "{e}");
        assert!(try_vec::<f64>(10, "f64").is_ok());
    }
}
