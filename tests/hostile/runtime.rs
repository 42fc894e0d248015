//! Hostile input: run-time readers and the command line (issue 8, items 9,
//! 12, 13 and the argument part of 15).
use super::*;
use std::path::Path;

#[test]
fn harness_reports_usage_error() {
    let o = run_limited(&["run"], b"", DEFAULT);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
}

/// A short time limit: every case here should end in well under a second.
const QUICK: Limits = Limits { memory_mb: 1024, seconds: 10 };

const VEC_PROG: &str = "entry total [n] (a: [n]f64) : f64 = sum a\n";

/// A program file; every call gets a file of its own (tests run in parallel).
fn prog(name: &str, text: &str) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    scratch(&format!("{k}_{name}"), text.as_bytes()).display().to_string()
}

fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut buf = b"\x93NUMPY\x01\x00".to_vec();
    buf.extend_from_slice(&(header.len() as u16).to_le_bytes());
    buf.extend_from_slice(header.as_bytes());
    buf.extend_from_slice(data);
    buf
}

fn run_total_on(file: &Path) -> Outcome {
    let p = prog("rt_total.ard", VEC_PROG);
    let arg = format!("@{}", file.display());
    run_limited(&["run", &p, "--arg", &arg], b"", QUICK)
}

/// Item 9: a small `.npy` whose header dict value is a deep nest of
/// brackets sent npyz's header parser into exponential backtracking.
#[test]
fn npy_nested_bracket_header_is_refused_quickly() {
    // 122 bytes in all, as in the report.
    let hdr = format!("{{'descr': {}", "[".repeat(122 - 10 - 10));
    let bytes = npy(&hdr, b"");
    assert_eq!(bytes.len(), 122);
    let f = scratch("rt_nested.npy", &bytes);
    let o = run_total_on(&f);
    assert_user_error(&o, "rt_nested.npy: not a valid .npy file", false);
    assert!(o.stderr.contains("structured dtypes"), "{}", o.stderr);
    assert!(o.elapsed.as_secs() < 5, "took {:?}", o.elapsed);
    // Brackets in the shape, and a long header of them.
    let hdr = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {}}}", "([".repeat(30_000));
    let f = scratch("rt_nested2.npy", &npy(&hdr, b""));
    let o = run_total_on(&f);
    assert_user_error(&o, "rt_nested2.npy: not a valid .npy file", false);
    assert!(o.elapsed.as_secs() < 5, "took {:?}", o.elapsed);
}

#[test]
fn npy_truncated_and_trailing_data() {
    let hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n";
    let f = scratch("rt_short.npy", &npy(hdr, &[0; 20]));
    let o = run_total_on(&f);
    assert_user_error(&o, "rt_short.npy: the data section is too short", false);
    let f = scratch("rt_trailing.npy", &npy(hdr, &[0; 32]));
    let o = run_total_on(&f);
    assert_user_error(&o, "rt_trailing.npy: 8 bytes of trailing data", false);
    // The exact length runs.
    let data: Vec<u8> = [1.0f64, 2.0, 4.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    let f = scratch("rt_exact.npy", &npy(hdr, &data));
    let o = run_total_on(&f);
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "7.5");
}

#[test]
fn npy_huge_shapes() {
    for (k, shape) in
        ["(4611686018427387904,)", "(1000000, 1000000, 1000000, 1000000)", "(123456789012345678901234567890,)", "(1000000000,)"].iter().enumerate()
    {
        let hdr = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}\n");
        let name = format!("rt_huge{k}.npy");
        let f = scratch(&name, &npy(&hdr, &[0; 64]));
        let o = run_limited(&["run", &prog("rt_total.ard", VEC_PROG), "--arg", &format!("@{}", f.display())], b"", QUICK);
        assert_user_error(&o, &format!("{name}: "), false);
    }
}

/// Item 12: `--arg @/dev/zero` read until memory ran out.
#[test]
fn device_and_fifo_arguments_are_refused() {
    let p = prog("rt_total.ard", VEC_PROG);
    let small = Limits { memory_mb: 512, seconds: 10 };
    for dev in ["@/dev/zero", "@/dev/urandom"] {
        let o = run_limited(&["run", &p, "--arg", dev], b"", small);
        assert_user_error(&o, &format!("cannot read {}: it is not a regular file", &dev[1..]), false);
    }
    // Through a symlink named .npy, so the .npy reader is the one asked.
    let dir = scratch("rt_dummy", b"").with_file_name("rt_links");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("zero.npy");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let o = run_limited(&["run", &p, "--arg", &format!("@{}", link.display())], b"", small);
    assert_user_error(&o, "zero.npy: it is not a regular file", false);
    // A FIFO with no writer: opening it would block forever.
    let fifo = dir.join("pipe.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let o = run_limited(&["run", &p, "--arg", &format!("@{}", fifo.display())], b"", small);
    assert_user_error(&o, "pipe.json: it is not a regular file", false);
    // A directory.
    let o = run_limited(&["run", &p, "--arg", &format!("@{}", dir.display())], b"", small);
    assert_user_error(&o, "it is a directory", false);
}

#[test]
fn input_files_over_the_size_limit_are_refused() {
    // A sparse file one byte over the default limit of 1 GiB: no disk used.
    let f = scratch("rt_big.json", b"");
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_len((1 << 30) + 1).unwrap();
    drop(file);
    let o = run_limited(&["run", &prog("rt_total.ard", VEC_PROG), "--arg", &format!("@{}", f.display())], b"", Limits { memory_mb: 512, seconds: 10 });
    std::fs::remove_file(&f).unwrap();
    assert_user_error(&o, "rt_big.json: it is 1073741825 bytes, over the input limit of 1073741824 bytes", false);
    assert!(o.stderr.contains("ARDEN_MAX_INPUT_BYTES"), "{}", o.stderr);
}

#[test]
fn input_size_limit_is_configurable() {
    let f = scratch("rt_limit.json", b"[1, 2, 3]");
    let p = prog("rt_total.ard", VEC_PROG);
    let arg = format!("@{}", f.display());
    let exe = env!("CARGO_BIN_EXE_arden");
    let run = |limit: &str| std::process::Command::new(exe).args(["run", &p, "--arg", &arg]).env("ARDEN_MAX_INPUT_BYTES", limit).output().unwrap();
    let o = run("8");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("it is 9 bytes, over the input limit of 8 bytes"), "{err}");
    let o = run("9");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "6.0");
    let o = run("lots");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ARDEN_MAX_INPUT_BYTES must be a number of bytes"));
}

/// Run arden with a file-size limit (`ulimit -f`, 512-byte blocks in sh)
/// and SIGXFSZ ignored, so a write past the limit fails with EFBIG.
fn run_with_file_limit(args: &[&str], blocks: u32) -> std::process::Output {
    let exe = env!("CARGO_BIN_EXE_arden");
    let script = format!("trap '' XFSZ; ulimit -f {blocks}; exec \"$0\" \"$@\"");
    std::process::Command::new("sh").arg("-c").arg(script).arg(exe).args(args).output().unwrap()
}

/// Item 13: a failed `--output` write left a truncated file in place of
/// the old one.
#[test]
fn failed_output_write_keeps_the_old_file() {
    let p = prog("rt_iota.ard", "entry big (n: i64) : [n]f64 = for (i < n). f64 i\n");
    let dir = scratch("rt_dummy", b"").with_file_name("rt_out");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["out.npy", "out.json"] {
        let out = dir.join(name);
        let old = b"the old contents".repeat(10);
        std::fs::write(&out, &old).unwrap();
        let out_s = out.display().to_string();
        // 100,000 elements: far more than 8 blocks of 512 bytes.
        let o = run_with_file_limit(&["run", &p, "--arg", "100000", "--output", &out_s], 8);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("cannot write {out_s}")), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), old, "{name} was damaged");
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
        // A small result replaces the file.
        let o = run_with_file_limit(&["run", &p, "--arg", "3", "--output", &out_s], 8);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert_ne!(std::fs::read(&out).unwrap(), old);
        std::fs::remove_file(&out).unwrap();
    }
}

#[test]
fn output_path_errors_name_the_path() {
    let p = prog("rt_iota.ard", "entry big (n: i64) : [n]f64 = for (i < n). f64 i\n");
    let file = scratch("rt_plainfile", b"x");
    let bad = file.join("out.npy").display().to_string();
    let o = run_limited(&["run", &p, "--arg", "3", "--output", &bad], b"", QUICK);
    assert_user_error(&o, &format!("cannot write {bad}"), false);
    let dir = file.with_file_name("rt_outdir.npy");
    std::fs::create_dir_all(&dir).unwrap();
    let o = run_limited(&["run", &p, "--arg", "3", "--output", &dir.display().to_string()], b"", QUICK);
    assert_user_error(&o, "it is a directory", false);
}

/// Item 15: an f32 argument overflowing to infinity; `-0` for an integer.
#[test]
fn argument_conversions_are_checked() {
    let p = prog("rt_f32.ard", "entry twice (x: f32) : f32 = x + x\n");
    let o = run_limited(&["run", &p, "--arg", "1e39"], b"", QUICK);
    assert_user_error(&o, "argument 1 (`x`): the number 1e39 is out of range for f32", false);
    let o = run_limited(&["run", &p, "--arg", "-3e38"], b"", QUICK);
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "-Infinity");
    let p = prog("rt_i64.ard", "entry inc (k: i64) : i64 = k + 1\n");
    let o = run_limited(&["run", &p, "--arg", "-0"], b"", QUICK);
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "1");
    let o = run_limited(&["run", &p, "--arg", "9223372036854775808"], b"", QUICK);
    assert_user_error(&o, "does not fit in i64", false);
    let o = run_limited(&["run", &p, "--arg", "-1e19"], b"", QUICK);
    assert_user_error(&o, "does not fit in i64", false);
    let o = run_limited(&["run", &p, "--arg", "2.5"], b"", QUICK);
    assert_user_error(&o, "expected an integer, got 2.5", false);
    let o = run_limited(&["run", &p, "--arg", "NaN"], b"", QUICK);
    assert_user_error(&o, "expected an integer (i64), got NaN", false);
    let p = prog("rt_i32.ard", "entry inc (k: i32) : i32 = k\n");
    let o = run_limited(&["run", &p, "--arg", "[1]"], b"", QUICK);
    assert_user_error(&o, "expected an integer (i32), got a 1-d array", false);
    let o = run_limited(&["run", &p, "--arg", "4294967296"], b"", QUICK);
    assert_user_error(&o, "does not fit in i32", false);
}

/// Item 12 for the program itself: `arden run /dev/zero` read forever.
#[test]
fn program_file_must_be_a_regular_file() {
    let small = Limits { memory_mb: 512, seconds: 10 };
    for cmd in ["run", "check", "ir"] {
        let o = run_limited(&[cmd, "/dev/zero"], b"", small);
        assert_user_error(&o, "cannot read /dev/zero: it is not a regular file", false);
    }
    let o = run_limited(&["check", "/tmp"], b"", small);
    assert_user_error(&o, "cannot read /tmp: it is a directory", false);
}

/// Atomic replacement must not rename over a device or a symbolic link.
#[test]
fn output_to_devices_and_links() {
    let p = prog("rt_three.ard", "entry three : f64 = 3.0\n");
    let o = run_limited(&["run", &p, "--output", "/dev/null"], b"", QUICK);
    assert_ok(&o);
    assert!(!std::fs::metadata("/dev/null").unwrap().is_file(), "/dev/null was replaced");
    let o = run_limited(&["run", &p, "--output", "/dev/stdout"], b"", QUICK);
    assert_ok(&o);
    assert!(o.stdout.starts_with("\u{93}NUMPY") || o.stdout.contains("NUMPY"), "{:?}", o.stdout);
    let dir = scratch("rt_dummy", b"").with_file_name("rt_link_out");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join("real.json");
    std::fs::write(&real, "old").unwrap();
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = run_limited(&["run", &p, "--output", &link.display().to_string()], b"", QUICK);
    assert_ok(&o);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "3.0\n");
}

/// A large JSON argument is streamed into its array: about 10 bytes per
/// number at the peak instead of ~40 through a JSON tree (15 million numbers
/// needed over 600 MB before).
#[test]
fn large_json_argument_memory_is_bounded() {
    let n = 15_000_000;
    let mut text = String::with_capacity(2 * n + 2);
    text.push('[');
    for i in 0..n {
        text.push_str(if i == 0 { "1" } else { ",1" });
    }
    text.push(']');
    let f = scratch("rt_large.json", text.as_bytes());
    drop(text);
    let p = prog("rt_total.ard", VEC_PROG);
    let o = run_limited(&["run", &p, "--arg", &format!("@{}", f.display())], b"", Limits { memory_mb: 900, seconds: 30 });
    std::fs::remove_file(&f).unwrap();
    assert_ok(&o);
    assert_eq!(o.stdout.trim(), "15000000.0");
}

/// A `.npy` header for an empty f64 array of `shape`.
fn empty_npy(shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let hdr = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({},), }}\n", dims.join(", "));
    npy(&hdr, b"")
}

const BACKENDS: [&str; 2] = ["interp", "c"];

/// Issue 23, item 7: an empty array whose inner dimensions multiply past
/// i64 (shape (0, 2^62, 4) and (0, 3037000500, 3037000500)) flattened row
/// by row. The interpreter said "size arithmetic overflows i64"; C printed
/// `[]` for the first and a negative dimension for the second. One rule
/// now: size arithmetic is checked on both backends, also for empty arrays.
#[test]
fn overflowing_sizes_of_empty_arrays_fail_alike_on_both_backends() {
    let p = prog("rt_flatten_rows.ard", "entry f [a][b][c] (x: [a][b][c]f64) : [a][b*c]f64 = for i. flatten x[i]\n");
    for (k, shape) in [[0u64, 1 << 62, 4], [0, 3037000500, 3037000500]].iter().enumerate() {
        let f = scratch(&format!("rt_overflow_{k}.npy"), &empty_npy(shape));
        let arg = format!("@{}", f.display());
        for be in BACKENDS {
            let o = run_limited(&["run", &p, "--arg", &arg, "--backend", be], b"", QUICK);
            assert_user_error(&o, "size arithmetic overflows i64", false);
        }
    }
}

/// Issue 23, item 6: 10^18 empty rows is "too large", located, on both
/// backends (the interpreter aborted trying to print them).
#[test]
fn too_many_empty_rows_are_a_located_error_on_both_backends() {
    let p = prog("rt_empty_rows.ard", "entry e (n: i64) : [n][0]f64 = replicate n (replicate 0 0.0)\n");
    for be in BACKENDS {
        let o = run_limited(&["run", &p, "--arg", "1000000000000000000", "--backend", be], b"", QUICK);
        assert_user_error(&o, "array of shape [1000000000000000000][0] is too large", true);
    }
}

/// Issue 23, item 6: a result is printed as it is written, never held as
/// one string (3·10^9 empty rows aborted the printer asking for 8 GB).
/// 10^8 empty rows are 400 MB of text; the interpreter (which needs about
/// 300 MB of address space to start) stays under a 450 MB limit only if
/// the text is streamed, to stdout and to `--output`.
#[test]
fn results_are_streamed_to_stdout_and_files() {
    let p = prog("rt_stream_rows.ard", "entry e (n: i64) : [n][0]f64 = replicate n (replicate 0 0.0)\n");
    let rows = 100_000_000u64;
    let dir = std::env::temp_dir().join(format!("arden-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (stdout_file, output_file) = (dir.join("stdout.json"), dir.join("output.json"));
    let run = |extra: &str| {
        let script = format!("ulimit -v {}; exec \"$0\" run '{p}' --arg {rows} --backend interp {extra} > '{}'", 450 * 1024, stdout_file.display());
        let o = Command::new("sh").arg("-c").arg(script).arg(env!("CARGO_BIN_EXE_arden")).output().expect("run arden");
        assert!(o.status.success(), "{extra}: {}", String::from_utf8_lossy(&o.stderr));
    };
    run("");
    let text_len = 4 * rows + 1; // `[]` and `, ` per row, the brackets and a newline
    assert_eq!(std::fs::metadata(&stdout_file).unwrap().len(), text_len);
    let mut head = [0u8; 8];
    std::io::Read::read_exact(&mut std::fs::File::open(&stdout_file).unwrap(), &mut head).unwrap();
    assert_eq!(&head, b"[[], [],");
    run(&format!("--output '{}'", output_file.display()));
    assert_eq!(std::fs::metadata(&output_file).unwrap().len(), text_len);
    let _ = std::fs::remove_dir_all(&dir);
}
