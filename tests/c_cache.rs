//! The C backend's cache: two processes compiling the same program at once
//! both succeed; a warm compile does not run the compiler; a corrupt cached
//! library is detected and rebuilt, not loaded.
//!
//! Its trust model (issue 23): a cache directory someone else can write is
//! not used (a planted library with a valid trailer must not run); a cached
//! file that is a symbolic link, a FIFO, too large, another user's or
//! writable by others is rebuilt without being read or blocking; a file
//! that passes its trailer check but does not load is rebuilt, also by
//! concurrent writers. Every such scenario runs as this user and, when the
//! tests run as root, again as the unprivileged uid 65534.

mod common;
use common::c_compiler_or_skip;

use arden::api::Backend;
use arden::{Program, Value};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A new directory of mode 0700 (whatever the umask: a group-writable
/// cache directory would be refused).
fn fresh_dir(tag: &str) -> PathBuf {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cache-{tag}-{}-{t}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    chmod(&d, 0o700);
    d
}

#[test]
fn concurrent_processes_share_the_cache() {
    if !c_compiler_or_skip("concurrent_processes_share_the_cache") {
        return;
    }
    let dir = fresh_dir("conc");
    let prog = dir.join("p.ard");
    // a unique program, so both processes must compile it
    let stamp = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(&prog, format!("-- {stamp}\nentry f [n] (x: [n]f64) : f64 = sum (for i. x[i] * x[i])\n")).unwrap();
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_arden"))
            .args(["run", prog.to_str().unwrap(), "--backend", "c", "--stats", "--arg", "[1, 2, 3]"])
            .env("ARDEN_CACHE_DIR", &dir)
            .output()
            .unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(spawn);
        let b = s.spawn(spawn);
        (a.join().unwrap(), b.join().unwrap())
    });
    for o in [&a, &b] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "14.0\n");
    }
    let so: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "so")).collect();
    assert_eq!(so.len(), 1, "{so:?}");
    // no temporary files left behind
    let tmp: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".tmp.")).collect();
    assert!(tmp.is_empty());
    // a third run is warm
    let c = spawn();
    assert!(String::from_utf8_lossy(&c.stderr).contains("(cached)"), "{}", String::from_utf8_lossy(&c.stderr));
}

#[test]
fn corrupt_library_is_rebuilt() {
    if !c_compiler_or_skip("corrupt_library_is_rebuilt") {
        return;
    }
    let dir = fresh_dir("corrupt");
    // SAFETY: the only test in this binary that reads the variable in-process.
    unsafe { std::env::set_var("ARDEN_CACHE_DIR", &dir) };
    let stamp = format!("{:?}", std::time::SystemTime::now());
    let src = format!("-- {stamp}\nentry f (x: f64) : f64 = x * 2.0 + 1.0\n");
    let prog = Program::from_source("c.ard", &src).unwrap();
    let first = prog.compile(Backend::C).unwrap();
    assert!(first.library().unwrap().compiled);
    let path = first.library().unwrap().path.clone();
    let second = prog.compile(Backend::C).unwrap();
    assert!(!second.library().unwrap().compiled, "a warm compile must come from the cache");
    // corrupt it (a new file renamed over it, as a crash or a bad disk might leave it)
    for damage in 0..2 {
        let mut bytes = std::fs::read(&path).unwrap();
        if damage == 0 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
        } else {
            bytes.truncate(bytes.len() / 3);
        }
        let tmp = dir.join("damaged");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(!arden::backend::c::valid_cached(&path));
        let again = prog.compile(Backend::C).unwrap();
        assert!(again.library().unwrap().compiled, "a corrupt library must be rebuilt");
        assert!(arden::backend::c::valid_cached(&path));
        let v = again.entry("f").unwrap().call(&[Value::F64(3.0)]).unwrap();
        assert_eq!(v, Value::F64(7.0));
    }
}

// ---------------------------------------------------------------------------
// Trust model (issue 23)

/// The unprivileged user the scenarios also run as when the tests are root.
const NOBODY: u32 = 65534;

fn euid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
}

/// `bytes` followed by a trailer arden accepts: a valid checksum of them.
fn with_trailer(mut bytes: Vec<u8>) -> Vec<u8> {
    let digest = Sha256::digest(&bytes);
    bytes.extend_from_slice(b"ARDENSO1");
    bytes.extend_from_slice(&digest);
    bytes
}

/// A shared library whose constructor writes the file `$ARDEN_TEST_MARKER`,
/// with a valid trailer: what an attacker would plant in a cache.
fn planted_library() -> &'static [u8] {
    static LIB: OnceLock<Vec<u8>> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = fresh_dir("planted");
        let c = dir.join("planted.c");
        std::fs::write(
            &c,
            "#include <stdio.h>\n#include <stdlib.h>\n__attribute__((constructor)) static void planted(void) {\n\
             const char *p = getenv(\"ARDEN_TEST_MARKER\");\n FILE *f = p ? fopen(p, \"w\") : NULL;\n\
             if (f) { fputs(\"the planted library ran\\n\", f); fclose(f); }\n}\n",
        )
        .unwrap();
        let so = dir.join("planted.so");
        let cc = arden::backend::c::find_compiler().unwrap();
        let st = Command::new(&cc.argv[0]).args(&cc.argv[1..]).args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c).status().unwrap();
        assert!(st.success(), "cannot build the planted library");
        with_trailer(std::fs::read(&so).unwrap())
    })
}

/// What one `arden run` did.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
    /// the peak resident memory of the process (or of the compiler it ran)
    max_rss_mib: i64,
}

/// Waits for `child` until `deadline` (then kills it: None): whether it
/// succeeded, and its peak memory. `wait4` rather than std's wait, for the
/// memory.
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> Option<(bool, i64)> {
    let pid = child.id() as libc::pid_t;
    loop {
        // SAFETY: rusage is plain integers, for which zero is valid.
        let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
        // SAFETY: valid pointers; `pid` is our unreaped child.
        match unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) } {
            0 if Instant::now() > deadline => {
                let _ = child.kill();
                // SAFETY: as above; reaps the killed child.
                unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
                return None;
            }
            0 => std::thread::sleep(Duration::from_millis(20)),
            r => {
                assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
                let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                return Some((ok, usage.ru_maxrss / 1024));
            }
        }
    }
}

/// Who runs arden, and in which laboratory: this process's user, or the
/// unprivileged uid 65534 (only when the tests run as root, which can
/// switch to it). Its files live under `base`, which that user can read.
struct Lab {
    uid: Option<u32>,
    base: PathBuf,
    arden: PathBuf,
    /// where planted constructors write (writable by the user)
    markers: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// The users a scenario runs as: this one, and uid 65534 when we are root.
fn labs(tag: &str) -> Vec<Lab> {
    let mut labs = vec![Lab::as_self(tag)];
    if euid() == 0 {
        labs.push(Lab::as_nobody(tag));
    } else {
        eprintln!("note: not running as root: scenario `{tag}` runs as this (unprivileged) user only");
    }
    labs
}

impl Lab {
    fn as_self(tag: &str) -> Lab {
        let base = fresh_dir(&format!("lab-{tag}"));
        let markers = base.join("markers");
        std::fs::create_dir(&markers).unwrap();
        Lab { uid: None, base, arden: PathBuf::from(env!("CARGO_BIN_EXE_arden")), markers }
    }

    /// A laboratory under the system's temporary directory (sticky, so its
    /// ancestors pass the check) with its own copy of the binary, which
    /// the target directory may not let uid 65534 reach.
    fn as_nobody(tag: &str) -> Lab {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let base = std::fs::canonicalize(std::env::temp_dir()).unwrap().join(format!("arden-lab-{tag}-{}-{t}", std::process::id()));
        std::fs::create_dir(&base).unwrap();
        chmod(&base, 0o755);
        let arden = base.join("arden");
        std::fs::copy(env!("CARGO_BIN_EXE_arden"), &arden).unwrap();
        chmod(&arden, 0o755);
        let markers = base.join("markers");
        std::fs::create_dir(&markers).unwrap();
        chmod(&markers, 0o1777);
        eprintln!("note: scenario `{tag}` runs again as the unprivileged uid {NOBODY}");
        Lab { uid: Some(NOBODY), base, arden, markers }
    }

    fn uid(&self) -> u32 {
        self.uid.unwrap_or_else(euid)
    }

    /// A uid that is not the running user's (for root tests only: to chown).
    fn other_uid(&self) -> u32 {
        if self.uid() == 0 { NOBODY } else { 0 }
    }

    /// A new directory for the user: theirs, mode 0700.
    fn private_dir(&self, name: &str) -> PathBuf {
        let d = self.base.join(name);
        std::fs::create_dir(&d).unwrap();
        self.give(&d, 0o700);
        d
    }

    /// Hands `p` to the running user with `mode`.
    fn give(&self, p: &Path, mode: u32) {
        if let Some(uid) = self.uid {
            chown(p, uid);
        }
        chmod(p, mode);
    }

    /// A program of its own (so each scenario compiles), readable by the user.
    fn program(&self, name: &str) -> PathBuf {
        let p = self.base.join(format!("{name}.ard"));
        let stamp = format!("{:?} {}", std::time::SystemTime::now(), p.display());
        std::fs::write(&p, format!("-- {stamp}\nentry f [n] (x: [n]f64) : f64 = sum (for i. x[i] * x[i])\n")).unwrap();
        chmod(&p, 0o644);
        p
    }

    /// The command `arden run PROG` with `cache` as its cache directory,
    /// as the lab's user, with an address-space limit (so that reading a
    /// device without end fails in seconds, not by exhausting the machine).
    fn command(&self, prog: &Path, cache: &Path, marker: &Path) -> Command {
        let mut cmd = Command::new(&self.arden);
        cmd.args(["run", prog.to_str().unwrap(), "--backend", "c", "--threads", "1", "--stats", "--arg", "[1, 2, 3]"])
            .env("ARDEN_CACHE_DIR", cache)
            .env("ARDEN_TEST_MARKER", marker)
            .env_remove("ARDEN_CFLAGS")
            .env("HOME", &self.base);
        let uid = self.uid;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit { rlim_cur: 3 << 30, rlim_max: 3 << 30 };
                libc::setrlimit(libc::RLIMIT_AS, &limit);
                if let Some(uid) = uid
                    && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(uid) != 0 || libc::setuid(uid) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    fn run(&self, prog: &Path, cache: &Path, marker: &Path) -> Run {
        self.run_all(prog, cache, marker, 1).pop().unwrap()
    }

    /// `n` runs at once, each given 120 s (a FIFO opened for reading would
    /// block for ever: the timeout turns that into a failure).
    fn run_all(&self, prog: &Path, cache: &Path, marker: &Path, n: usize) -> Vec<Run> {
        let outs: Vec<(PathBuf, PathBuf)> = (0..n).map(|k| (self.base.join(format!(".out{k}")), self.base.join(format!(".err{k}")))).collect();
        let mut children: Vec<_> = outs
            .iter()
            .map(|(o, e)| {
                let (o, e) = (std::fs::File::create(o).unwrap(), std::fs::File::create(e).unwrap());
                self.command(prog, cache, marker).stdout(Stdio::from(o)).stderr(Stdio::from(e)).spawn().unwrap()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        let waited: Vec<_> = children.iter_mut().map(|c| wait_until(c, deadline)).collect();
        waited
            .into_iter()
            .zip(&outs)
            .map(|(w, (o, e))| {
                let mut stderr = std::fs::read_to_string(e).unwrap();
                if w.is_none() {
                    stderr.push_str("\n[killed after 120 s]");
                }
                let (ok, max_rss_mib) = w.unwrap_or((false, 0));
                Run { ok, stdout: std::fs::read_to_string(o).unwrap(), stderr, max_rss_mib }
            })
            .collect()
    }

    fn marker(&self, name: &str) -> PathBuf {
        self.markers.join(name)
    }
}

#[track_caller]
fn assert_computed(r: &Run) {
    assert!(r.ok, "arden failed:\n{}", r.stderr);
    assert_eq!(r.stdout, "14.0\n", "{}", r.stderr);
}

#[track_caller]
fn assert_not_run(marker: &Path) {
    assert!(!marker.exists(), "the planted library's constructor ran ({} exists)", marker.display());
}

/// The one library in `dir` (after a first run compiled it there).
fn the_library(dir: &Path) -> PathBuf {
    let so: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "so")).collect();
    assert_eq!(so.len(), 1, "{so:?}");
    so[0].clone()
}

/// A private cache holding the program's library, compiled by the user.
fn warm_cache(lab: &Lab, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (prog, cache) = (lab.program(name), lab.private_dir(name));
    assert_computed(&lab.run(&prog, &cache, &lab.marker("unused")));
    let so = the_library(&cache);
    (prog, cache, so)
}

/// Replaces `so` with the planted library (a new file, like an attacker's).
fn plant(so: &Path) {
    let _ = std::fs::remove_file(so);
    std::fs::write(so, planted_library()).unwrap();
    chmod(so, 0o644);
}

#[track_caller]
fn assert_rebuilt(lab: &Lab, so: &Path) {
    let meta = std::fs::symlink_metadata(so).unwrap();
    assert!(meta.file_type().is_file(), "{} was not replaced", so.display());
    assert_eq!(meta.uid(), lab.uid());
    assert_eq!(meta.mode() & 0o022, 0, "mode {:o}", meta.mode());
    assert!(arden::backend::c::valid_cached(so) || lab.uid.is_some());
    assert_ne!(std::fs::read(so).unwrap(), planted_library());
}

#[test]
fn a_cache_directory_others_can_write_is_not_used() {
    if !c_compiler_or_skip("a_cache_directory_others_can_write_is_not_used") {
        return;
    }
    for lab in labs("writable") {
        for (mode, why) in [(0o1777, "writable by others (mode 1777)"), (0o777, "writable by others (mode 777)"), (0o770, "writable by its group (mode 770)")] {
            let (prog, cache, so) = warm_cache(&lab, &format!("w{mode:o}"));
            plant(&so);
            chmod(&cache, mode);
            let marker = lab.marker(&format!("w{mode:o}"));
            let r = lab.run(&prog, &cache, &marker);
            assert_not_run(&marker);
            assert_computed(&r);
            assert!(r.stderr.contains("not using the C cache directory") && r.stderr.contains(why), "{}", r.stderr);
            assert!(r.stderr.contains("ARDEN_CACHE_DIR"), "the warning says what to do: {}", r.stderr);
            // nothing written into the refused directory
            assert_eq!(std::fs::read(&so).unwrap(), planted_library());
            assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 2, "only KEY.so and KEY.c");
        }
    }
}

#[test]
fn a_cache_directory_inside_a_directory_others_can_write_needs_the_sticky_bit() {
    if !c_compiler_or_skip("a_cache_directory_inside_a_directory_others_can_write_needs_the_sticky_bit") {
        return;
    }
    for lab in labs("ancestor") {
        // sticky (as /tmp): others cannot rename our directory away, so it is used
        let (prog, cache, _) = warm_cache(&lab, "sticky-parent");
        let parent = lab.base.join("parent");
        std::fs::create_dir(&parent).unwrap();
        chmod(&parent, 0o1777);
        let moved = parent.join("cache");
        std::fs::rename(&cache, &moved).unwrap();
        let r = lab.run(&prog, &moved, &lab.marker("unused"));
        assert_computed(&r);
        assert!(r.stderr.contains("(cached)"), "{}", r.stderr);
        // not sticky: anyone could put their own directory in its place
        plant(&the_library(&moved));
        chmod(&parent, 0o777);
        let marker = lab.marker("ancestor");
        let r = lab.run(&prog, &moved, &marker);
        assert_not_run(&marker);
        assert_computed(&r);
        assert!(r.stderr.contains("writable by others without the sticky bit (mode 777)"), "{}", r.stderr);
        // reached through a symbolic link: the directory it resolves to is what counts
        chmod(&parent, 0o755);
        let link = lab.base.join("link");
        std::os::unix::fs::symlink(&moved, &link).unwrap();
        let prog2 = lab.program("via-link");
        assert_computed(&lab.run(&prog2, &link, &lab.marker("unused")));
        let r = lab.run(&prog2, &link, &lab.marker("unused"));
        assert!(r.stderr.contains("(cached)"), "{}", r.stderr);
    }
}

#[test]
fn a_cache_directory_of_another_user_is_not_used() {
    if !c_compiler_or_skip("a_cache_directory_of_another_user_is_not_used") {
        return;
    }
    if euid() != 0 {
        // no way to plant a file in another user's directory: check only
        // that such a directory (owned by root, say) is refused, not written
        let Some(theirs) = ["/", "/usr", "/etc"].iter().map(Path::new).find(|d| std::fs::metadata(d).is_ok_and(|m| m.uid() != euid())) else {
            eprintln!("note: no directory of another user found: test skipped");
            return;
        };
        let lab = Lab::as_self("foreign");
        let r = lab.run(&lab.program("foreign"), theirs, &lab.marker("unused"));
        assert_computed(&r);
        assert!(r.stderr.contains("is owned by uid"), "{}", r.stderr);
        return;
    }
    for lab in labs("foreign") {
        let (prog, cache, so) = warm_cache(&lab, "foreign");
        plant(&so);
        let other = lab.other_uid();
        chown(&so, other);
        chown(&cache, other);
        chmod(&cache, 0o755);
        let marker = lab.marker("foreign");
        let r = lab.run(&prog, &cache, &marker);
        assert_not_run(&marker);
        assert_computed(&r);
        assert!(r.stderr.contains(&format!("is owned by uid {other}, not by you (uid {})", lab.uid())), "{}", r.stderr);
        // nor through a symbolic link of the user's own
        let link = lab.base.join("mine");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        let r = lab.run(&prog, &link, &marker);
        assert_not_run(&marker);
        assert_computed(&r);
        assert!(r.stderr.contains(&format!("resolves to {}, which is owned by uid {other}", cache.display())), "{}", r.stderr);
    }
}

#[test]
fn a_cached_file_others_can_write_or_own_is_rebuilt() {
    if !c_compiler_or_skip("a_cached_file_others_can_write_or_own_is_rebuilt") {
        return;
    }
    for lab in labs("file") {
        let mut cases = vec![("writable", "is writable by others (mode 666)")];
        let other = if euid() == 0 { format!("is owned by uid {}", lab.other_uid()) } else { String::new() };
        if euid() == 0 {
            cases.push(("owned", &other));
        }
        for (name, why) in cases {
            let (prog, cache, so) = warm_cache(&lab, name);
            plant(&so);
            if name == "writable" {
                lab.give(&so, 0o666);
            } else {
                chown(&so, lab.other_uid());
            }
            let marker = lab.marker(name);
            let r = lab.run(&prog, &cache, &marker);
            assert_not_run(&marker);
            assert_computed(&r);
            assert!(r.stderr.contains("not loading the cached library") && r.stderr.contains(why), "{}", r.stderr);
            assert_rebuilt(&lab, &so);
        }
    }
}

#[test]
fn a_cached_symbolic_link_to_dev_zero_is_not_read() {
    if !c_compiler_or_skip("a_cached_symbolic_link_to_dev_zero_is_not_read") {
        return;
    }
    for lab in labs("symlink") {
        let (prog, cache, so) = warm_cache(&lab, "symlink");
        std::fs::remove_file(&so).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &so).unwrap();
        let r = lab.run(&prog, &cache, &lab.marker("unused"));
        assert_computed(&r);
        assert!(r.max_rss_mib < 1024, "{} MiB of /dev/zero read", r.max_rss_mib);
        assert!(r.stderr.contains("is a symbolic link"), "{}", r.stderr);
        assert_rebuilt(&lab, &so);
    }
}

#[test]
fn a_cached_fifo_does_not_block() {
    if !c_compiler_or_skip("a_cached_fifo_does_not_block") {
        return;
    }
    for lab in labs("fifo") {
        let (prog, cache, so) = warm_cache(&lab, "fifo");
        std::fs::remove_file(&so).unwrap();
        let c = std::ffi::CString::new(so.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        lab.give(&so, 0o600);
        let t0 = Instant::now();
        let r = lab.run(&prog, &cache, &lab.marker("unused"));
        assert_computed(&r);
        assert!(t0.elapsed() < Duration::from_secs(60));
        assert!(r.stderr.contains("is not a regular file"), "{}", r.stderr);
        assert_rebuilt(&lab, &so);
    }
}

#[test]
fn garbage_with_a_valid_trailer_is_rebuilt_by_concurrent_runs() {
    if !c_compiler_or_skip("garbage_with_a_valid_trailer_is_rebuilt_by_concurrent_runs") {
        return;
    }
    for lab in labs("garbage") {
        let (prog, cache, so) = warm_cache(&lab, "garbage");
        let garbage = with_trailer(b"not a shared library, but its checksum is right".repeat(100));
        std::fs::remove_file(&so).unwrap();
        std::fs::write(&so, &garbage).unwrap();
        lab.give(&so, 0o644);
        assert!(lab.uid.is_some() || arden::backend::c::valid_cached(&so), "the trailer check passes");
        let runs = lab.run_all(&prog, &cache, &lab.marker("unused"), 4);
        for r in &runs {
            assert_computed(r);
        }
        assert!(runs.iter().any(|r| r.stderr.contains("does not load") && r.stderr.contains("rebuilding it")), "{}", runs[0].stderr);
        assert_rebuilt(&lab, &so);
        let tmp: Vec<_> = std::fs::read_dir(&cache).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".tmp.")).collect();
        assert!(tmp.is_empty(), "{tmp:?}");
        let r = lab.run(&prog, &cache, &lab.marker("unused"));
        assert!(r.stderr.contains("(cached)"), "{}", r.stderr);
    }
}

#[test]
fn a_cache_directory_arden_creates_is_private() {
    if !c_compiler_or_skip("a_cache_directory_arden_creates_is_private") {
        return;
    }
    for lab in labs("create") {
        let parent = lab.private_dir("home");
        let cache = parent.join("new").join("cache");
        let prog = lab.program("create");
        assert_computed(&lab.run(&prog, &cache, &lab.marker("unused")));
        for d in [&cache, &parent.join("new")] {
            let meta = std::fs::metadata(d).unwrap();
            assert_eq!((meta.mode() & 0o777, meta.uid()), (0o700, lab.uid()), "{}", d.display());
        }
        let r = lab.run(&prog, &cache, &lab.marker("unused"));
        assert!(r.stderr.contains("(cached)"), "{}", r.stderr);
        assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    }
}

#[test]
fn a_cached_file_over_the_size_bound_is_not_read() {
    let dir = fresh_dir("huge");
    let so = dir.join("huge.so");
    // sparse: zeros up to the bound, then a valid trailer of them
    let body = arden::backend::c::MAX_LIBRARY_BYTES;
    let mut h = Sha256::new();
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..body / chunk.len() as u64 {
        h.update(&chunk);
    }
    let f = std::fs::File::create(&so).unwrap();
    f.set_len(body).unwrap();
    drop(f);
    let mut f = std::fs::OpenOptions::new().append(true).open(&so).unwrap();
    std::io::Write::write_all(&mut f, b"ARDENSO1").unwrap();
    std::io::Write::write_all(&mut f, &h.finalize()).unwrap();
    drop(f);
    assert!(!arden::backend::c::valid_cached(&so));
    std::fs::remove_dir_all(&dir).unwrap();
}
