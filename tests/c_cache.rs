//! The C backend's cache: two processes compiling the same program at once
//! both succeed; a warm compile does not run the compiler; a corrupt cached
//! library is detected and rebuilt, not loaded.

use arden::api::Backend;
use arden::{Program, Value};
use std::path::PathBuf;
use std::process::Command;

fn fresh_dir(tag: &str) -> PathBuf {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cache-{tag}-{}-{t}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn concurrent_processes_share_the_cache() {
    if arden::backend::c::find_compiler().is_none() {
        eprintln!("note: no C compiler found: C backend test skipped");
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
    if arden::backend::c::find_compiler().is_none() {
        eprintln!("note: no C compiler found: C backend test skipped");
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
