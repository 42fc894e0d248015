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

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The flags every library is compiled with (no fast-math: NaN and
/// infinities keep their IEEE meaning; no contraction into FMA, so results
/// match the interpreter's operation by operation).
pub const FLAGS: &[&str] = &["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-ffp-contract=off", "-std=gnu99", "-w"];

/// What `--fast-math` adds: the C compiler may reassociate floating-point
/// arithmetic (a sum in several partial sums, so that it vectorises) and
/// ignore the sign of zero; results change in rounding (and where the order
/// decides an overflow), and `x - x` may fold to 0 even for ∞ or NaN. No
/// `-ffinite-math-only`: `isnan` and comparisons with ∞ keep their meaning
/// (arden's own NaN tests, such as logsumexp's, must still see them), and
/// there is still no contraction into FMA.
pub const FAST_MATH_FLAGS: &[&str] = &["-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fno-math-errno"];

const MAGIC: &[u8; 8] = b"ARDENSO1";

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

/// `ARDEN_CACHE_DIR`, or the user cache directory's `arden` folder.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ARDEN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("arden")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What [`build`] did.
pub struct Built {
    pub path: PathBuf,
    /// false when the library came from the cache
    pub compiled: bool,
}

/// Does `path` hold a complete library with a valid trailer?
pub fn valid_cached(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else { return false };
    if bytes.len() < 40 {
        return false;
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 40);
    trailer[..8] == MAGIC[..] && trailer[8..] == Sha256::digest(body)[..]
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn unique_tmp(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    dir.join(format!(".{stem}.{}.{n}.{t}.tmp.{ext}", std::process::id()))
}

/// The cached library for `source`, compiling it first when it is missing
/// or corrupt. `extra` flags are appended (and part of the key).
pub fn build(cc: &Compiler, source: &str, extra: &[String]) -> Result<Built, String> {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0u8]);
    h.update(cc.identity.as_bytes());
    for f in FLAGS.iter().map(|s| s.to_string()).chain(extra.iter().cloned()) {
        h.update([0u8]);
        h.update(f.as_bytes());
    }
    let key = hex(&h.finalize()[..16]);
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the cache directory {}: {e}", dir.display()))?;
    let so = dir.join(format!("{key}.so"));
    if valid_cached(&so) {
        return Ok(Built { path: so, compiled: false });
    }
    let c_tmp = unique_tmp(&dir, &key, "c");
    let so_tmp = unique_tmp(&dir, &key, "so");
    std::fs::write(&c_tmp, source).map_err(|e| format!("cannot write {}: {e}", c_tmp.display()))?;
    let out = Command::new(&cc.argv[0])
        .args(&cc.argv[1..])
        .args(FLAGS)
        .args(extra)
        .arg("-o")
        .arg(&so_tmp)
        .arg(&c_tmp)
        .arg("-lm")
        .output();
    let result = (|| {
        let out = out.map_err(|e| format!("cannot run the C compiler `{}`: {e}", cc.argv[0]))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let head: Vec<&str> = err.lines().take(20).collect();
            return Err(format!("the C compiler failed ({}):\n{}", out.status, head.join("\n")));
        }
        let mut bytes = std::fs::read(&so_tmp).map_err(|e| format!("cannot read {}: {e}", so_tmp.display()))?;
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&digest);
        std::fs::write(&so_tmp, &bytes).map_err(|e| format!("cannot write {}: {e}", so_tmp.display()))?;
        std::fs::rename(&so_tmp, &so).map_err(|e| format!("cannot rename into {}: {e}", so.display()))?;
        // keep the source beside the library, for reading and debugging
        let c_final = dir.join(format!("{key}.c"));
        let _ = std::fs::rename(&c_tmp, &c_final);
        Ok(Built { path: so.clone(), compiled: true })
    })();
    let _ = std::fs::remove_file(&c_tmp);
    let _ = std::fs::remove_file(&so_tmp);
    result
}
