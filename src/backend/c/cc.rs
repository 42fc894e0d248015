//! Finding the C compiler, compiling, and the content-addressed cache of
//! shared libraries.
//!
//! The cache key is a SHA-256 of the generated C, the compiler's identity
//! (its resolved path, size and modification time: read from the file
//! system, so a warm run never starts the compiler) and the flags. A cached
//! library is the compiler's output followed by a trailer (`ARDENSO1` and
//! the SHA-256 of the bytes before it): a file whose trailer does not match
//! is corrupt and is rebuilt. Files are written under a unique temporary
//! name and renamed into place, so a concurrent reader never sees half a
//! file.
//!
//! # Trust
//! The trailer is a checksum, not an authentication: anyone who can write
//! a file into the cache can make arden load it, and loading a library runs
//! its code. So the cache directory is used only when no one else can write
//! into it: after resolving symbolic links it must be a directory owned by
//! the effective user and writable by no group or other, and each of its
//! ancestors must belong to that user or root and be writable by others
//! only with the sticky bit (as `/tmp`), or someone could rename it away
//! and put theirs in its place. A directory that fails is not used: a
//! warning says why, and the library is compiled into a fresh private
//! directory that is removed once it is loaded. A cached file is inspected
//! without following a symbolic link and without blocking on a FIFO; it is
//! loaded only when it is a regular file of ours, writable by no group or
//! other, of at most [`MAX_LIBRARY_BYTES`], with a valid trailer. Anything
//! else is rebuilt (with a warning, unless it is merely corrupt).

use sha2::{Digest, Sha256};
use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The flags every library is compiled with (no fast-math: NaN and
/// infinities keep their IEEE meaning; no contraction into FMA, so results
/// match the interpreter's operation by operation). `-fno-trapping-math`
/// changes no result (nothing reads the floating-point exception flags) but
/// lets gcc if-convert the selects of the vector math kernels below
/// AVX-512 (with AVX2 or SSE2 their loops are otherwise not vectorised).
pub const FLAGS: &[&str] = &["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-ffp-contract=off", "-fno-trapping-math", "-std=gnu99", "-w"];

/// What `--fast-math` adds: the C compiler may reassociate floating-point
/// arithmetic (a sum in several partial sums, so that it vectorises) and
/// ignore the sign of zero; results change in rounding (and where the order
/// decides an overflow), and `x - x` may fold to 0 even for ∞ or NaN. No
/// `-ffinite-math-only`: `isnan` and comparisons with ∞ keep their meaning
/// (arden's own NaN tests, such as logsumexp's, must still see them), and
/// there is still no contraction into FMA.
pub const FAST_MATH_FLAGS: &[&str] = &["-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fno-math-errno"];

const MAGIC: &[u8; 8] = b"ARDENSO1";

/// The largest cached library arden reads. Generated libraries are a few
/// MB; the bound keeps a huge file from being read into memory whole.
pub const MAX_LIBRARY_BYTES: u64 = 512 << 20;

#[derive(Clone, Debug)]
pub struct Compiler {
    /// the program and any arguments `$CC` carried (`CC="gcc -m64"`)
    pub argv: Vec<String>,
    pub path: PathBuf,
    /// path, size and modification time of the compiler binary
    pub identity: String,
}

fn which(prog: &str) -> Option<PathBuf> {
    let p = Path::new(prog);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|c| c.is_file())
}

/// `$CC` (split on whitespace, no shell) or `cc`, if it exists on `PATH`.
pub fn find_compiler() -> Option<Compiler> {
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    let argv: Vec<String> = cc.split_whitespace().map(str::to_string).collect();
    let path = which(argv.first()?)?;
    let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let meta = std::fs::metadata(&real).ok()?;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_nanos()).unwrap_or(0);
    let identity = format!("{} {} {} {}", argv.join(" "), real.display(), meta.len(), mtime);
    Some(Compiler { argv, path, identity })
}

/// `ARDEN_CACHE_DIR`, or the user cache directory's `arden` folder (as
/// configured: whether it is used is [`build`]'s decision).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ARDEN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("arden")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Why a file or directory with this metadata may be changed by someone
/// other than us: another owner, or write permission for group or others.
fn why_not_ours(meta: &Metadata) -> Option<String> {
    let (me, mode) = (euid(), meta.mode() & 0o7777);
    if meta.uid() != me {
        Some(format!("is owned by uid {}, not by you (uid {me})", meta.uid()))
    } else if mode & 0o002 != 0 {
        Some(format!("is writable by others (mode {mode:o})"))
    } else if mode & 0o020 != 0 {
        Some(format!("is writable by its group (mode {mode:o})"))
    } else {
        None
    }
}

/// Why someone else could replace what lies in the directory `a`: it
/// belongs to another user (root is trusted, as by ssh), or everyone may
/// write in it and the sticky bit does not stop them renaming our entries.
/// Group write is allowed here: with the common umask 002 and one group per
/// user, refusing it would refuse most home directories.
fn why_untrusted_ancestor(a: &Path) -> Option<String> {
    let meta = match std::fs::metadata(a) {
        Ok(m) => m,
        Err(e) => return Some(format!("is inside {}, which cannot be read ({e})", a.display())),
    };
    let mode = meta.mode() & 0o7777;
    if meta.uid() != euid() && meta.uid() != 0 {
        Some(format!("is inside {}, which is owned by uid {}", a.display(), meta.uid()))
    } else if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        Some(format!("is inside {}, which is writable by others without the sticky bit (mode {mode:o})", a.display()))
    } else {
        None
    }
}

/// Why the directory `dir` (symbolic links resolved) could hold a library
/// that someone else wrote, or None when only we can write there.
fn why_untrusted_dir(dir: &Path) -> Option<String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot be read ({e})")),
    };
    if !meta.is_dir() {
        return Some("is not a directory".into());
    }
    why_not_ours(&meta).or_else(|| dir.ancestors().skip(1).find_map(why_untrusted_ancestor))
}

/// `dir`, created if missing (private to us: mode 0700 whatever the
/// umask), with its symbolic links resolved, if only we can write there;
/// else why not. The resolved path is what is used afterwards, so a link
/// changed after the check cannot redirect us.
fn trusted_cache_dir(dir: &Path) -> Result<PathBuf, String> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("cannot be created ({e})"))?;
    let real = std::fs::canonicalize(dir).map_err(|e| format!("cannot be resolved ({e})"))?;
    match why_untrusted_dir(&real) {
        None => Ok(real),
        Some(why) if real == dir => Err(why),
        Some(why) => Err(format!("resolves to {}, which {why}", real.display())),
    }
}

/// A private directory for one build when the cache cannot be trusted;
/// removed when dropped (a loaded library stays mapped).
pub struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl ScratchDir {
    /// A new directory of mode 0700 under the temporary directory. `mkdir`
    /// fails on an existing name, so a name guessed and planted by someone
    /// else only costs another try.
    fn create() -> Result<ScratchDir, String> {
        let base = std::fs::canonicalize(std::env::temp_dir()).map_err(|e| format!("cannot resolve the temporary directory: {e}"))?;
        for attempt in 0..100u32 {
            let path = base.join(format!("arden-{}", random_name(attempt)));
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let dir = ScratchDir(path);
                    return match why_untrusted_dir(&dir.0) {
                        None => Ok(dir),
                        Some(why) => Err(format!("no private directory to compile into: {} {why}", dir.0.display())),
                    };
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create a private directory in {}: {e}", base.display())),
            }
        }
        Err(format!("cannot create a private directory in {}: every name tried exists", base.display()))
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Hard to guess (process id, clock, counter and an address, hashed).
fn random_name(attempt: u32) -> String {
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut h = Sha256::new();
    h.update(format!("{} {n} {t} {attempt} {:p}", std::process::id(), &n));
    hex(&h.finalize()[..8])
}

/// Prints `msg` on stderr the first time this process sees it (a program
/// compiles many libraries; one warning per refused directory suffices).
fn warn_once(msg: String) {
    static SEEN: std::sync::Mutex<std::collections::BTreeSet<String>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    if SEEN.lock().map(|mut seen| seen.insert(msg.clone())).unwrap_or(true) {
        eprintln!("{msg}");
    }
}

/// Where a build writes: the trusted cache directory, or a scratch
/// directory (with a warning saying why the cache is not used).
fn place_to_build() -> Result<(PathBuf, Option<ScratchDir>), String> {
    let dir = cache_dir();
    match trusted_cache_dir(&dir) {
        Ok(real) => Ok((real, None)),
        Err(why) => {
            warn_once(format!(
                "warning: not using the C cache directory {}: it {why}, so a library someone else put there would run as you. \
                 Compiling into a private temporary directory instead (nothing is cached); set ARDEN_CACHE_DIR to a directory \
                 only you can write (e.g. `mkdir -m 700 DIR`) to cache libraries",
                dir.display()
            ));
            let scratch = ScratchDir::create()?;
            Ok((scratch.0.clone(), Some(scratch)))
        }
    }
}

/// What [`build`] did.
pub struct Built {
    pub path: PathBuf,
    /// false when the library came from the cache
    pub compiled: bool,
    /// the private directory `path` is in when the cache was refused,
    /// removed when this is dropped: keep it until the library is loaded
    _scratch: Option<ScratchDir>,
}

/// What lies at a library's place in the cache.
enum Cached {
    Missing,
    Valid,
    /// a regular file of ours whose trailer does not match (a crash, a bad disk)
    Corrupt,
    /// something we would not have written there, and why
    Suspicious(String),
}

/// Opens a cached file for reading without following a symbolic link (a
/// link to `/dev/zero` would be read for ever) and without blocking (a FIFO
/// would wait for a writer for ever); std adds `O_CLOEXEC`.
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// Why this (opened) file is not one arden would load.
fn why_not_loadable(meta: &Metadata) -> Option<String> {
    if !meta.file_type().is_file() {
        return Some("is not a regular file".into());
    }
    if meta.len() > MAX_LIBRARY_BYTES {
        return Some(format!("is larger than {} MiB", MAX_LIBRARY_BYTES >> 20));
    }
    why_not_ours(meta)
}

fn inspect_cached(path: &Path) -> Cached {
    // refused before opening, so a device node is never opened (the
    // descriptor's own metadata below is what decides)
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Cached::Missing,
        Ok(m) if m.file_type().is_symlink() => return Cached::Suspicious("is a symbolic link".into()),
        Ok(m) if !m.file_type().is_file() => return Cached::Suspicious("is not a regular file".into()),
        _ => {}
    }
    let file = match open_no_follow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Cached::Missing,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Cached::Suspicious("is a symbolic link".into()),
        Err(e) => return Cached::Suspicious(format!("cannot be opened ({e})")),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Cached::Suspicious(format!("cannot be examined ({e})")),
    };
    if let Some(why) = why_not_loadable(&meta) {
        return Cached::Suspicious(why);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    match file.take(MAX_LIBRARY_BYTES + 1).read_to_end(&mut bytes) {
        Ok(n) if n as u64 <= MAX_LIBRARY_BYTES && has_valid_trailer(&bytes) => Cached::Valid,
        _ => Cached::Corrupt,
    }
}

fn has_valid_trailer(bytes: &[u8]) -> bool {
    if bytes.len() < 40 {
        return false;
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 40);
    trailer[..8] == MAGIC[..] && trailer[8..] == Sha256::digest(body)[..]
}

/// Does `path` hold a library arden would load: a regular file of ours,
/// writable by no one else, within the size bound, with a valid trailer?
pub fn valid_cached(path: &Path) -> bool {
    matches!(inspect_cached(path), Cached::Valid)
}

/// May the cached library at `so` be loaded? Says why on stderr when what
/// is there is suspicious rather than just corrupt.
fn reusable(so: &Path) -> bool {
    match inspect_cached(so) {
        Cached::Valid => true,
        Cached::Missing | Cached::Corrupt => false,
        Cached::Suspicious(why) => {
            eprintln!("warning: not loading the cached library {}: it {why}; rebuilding it", so.display());
            false
        }
    }
}

fn unique_tmp(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    dir.join(format!(".{stem}.{}.{n}.{t}.tmp.{ext}", std::process::id()))
}

fn cache_key(cc: &Compiler, source: &str, extra: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0u8]);
    h.update(cc.identity.as_bytes());
    for f in FLAGS.iter().map(|s| s.to_string()).chain(extra.iter().cloned()) {
        h.update([0u8]);
        h.update(f.as_bytes());
    }
    hex(&h.finalize()[..16])
}

/// The library for `source`: the cached one unless it is missing, corrupt
/// or suspicious, or `rebuild` (the cached one would not load), else
/// compiled now. `extra` flags are appended (and part of the key).
pub fn build(cc: &Compiler, source: &str, extra: &[String], rebuild: bool) -> Result<Built, String> {
    let key = cache_key(cc, source, extra);
    let (dir, scratch) = place_to_build()?;
    let so = dir.join(format!("{key}.so"));
    if !rebuild && reusable(&so) {
        return Ok(Built { path: so, compiled: false, _scratch: scratch });
    }
    compile_into(cc, source, extra, &dir, &key)?;
    Ok(Built { path: so, compiled: true, _scratch: scratch })
}

/// Writes `bytes` to a new file at `path` with `mode` exactly (not widened
/// by a umask such as 002, which would make the file one we refuse).
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
    f.write_all(bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Compiles `source` into `dir/KEY.so` (with its trailer, renamed into
/// place) and keeps the source as `dir/KEY.c`.
fn compile_into(cc: &Compiler, source: &str, extra: &[String], dir: &Path, key: &str) -> Result<(), String> {
    let c_tmp = unique_tmp(dir, key, "c");
    let out_tmp = unique_tmp(dir, key, "out");
    let so_tmp = unique_tmp(dir, key, "so");
    let so = dir.join(format!("{key}.so"));
    let result = (|| {
        write_new(&c_tmp, source.as_bytes(), 0o644)?;
        let out = Command::new(&cc.argv[0]).args(&cc.argv[1..]).args(FLAGS).args(extra).arg("-o").arg(&out_tmp).arg(&c_tmp).arg("-lm").output();
        let out = out.map_err(|e| format!("cannot run the C compiler `{}`: {e}", cc.argv[0]))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let head: Vec<&str> = err.lines().take(20).collect();
            return Err(format!("the C compiler failed ({}):\n{}", out.status, head.join("\n")));
        }
        let mut bytes = std::fs::read(&out_tmp).map_err(|e| format!("cannot read {}: {e}", out_tmp.display()))?;
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&digest);
        write_new(&so_tmp, &bytes, 0o755)?;
        std::fs::rename(&so_tmp, &so).map_err(|e| format!("cannot rename into {}: {e}", so.display()))?;
        // keep the source beside the library, for reading and debugging
        let _ = std::fs::rename(&c_tmp, dir.join(format!("{key}.c")));
        Ok(())
    })();
    for tmp in [&c_tmp, &out_tmp, &so_tmp] {
        let _ = std::fs::remove_file(tmp);
    }
    result
}
