//! `arden build`: the generated library and header compile with a small C
//! `main` (using the header's one-line command) and give the interpreter's
//! results and errors.

mod common;
use common::c_compiler_or_skip;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_calls_the_library() {
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    if !c_compiler_or_skip("c_program_calls_the_library") {
        return;
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("build-{}-{t}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("lib1.ard");
    std::fs::write(
        &src,
        "entry scale [n] (x: [n]f64) (k: f64) : ([n]f64, f64) =\n  let y = for i. x[i] * k\n  in (y, sum y)\n\
         entry at [n] (x: [n]f64) (i: i64) : f64 = x[i]\n\
         entry grad_sq [n] (x: [n]f64) : [n]f64 = grad (\\v -> sum (for i. v[i] * v[i])) x\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_arden")).args(["build", src.to_str().unwrap(), "-o", dir.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = std::fs::read_to_string(dir.join("lib1.h")).unwrap();
    assert!(header.contains("int arden_scale(int64_t s0_n, const double *a0_x, double a1_k, double **out_0, int64_t out_0_dims[1], double *out_1, int nthreads, char *err, size_t errlen);"), "{header}");
    assert!(header.contains("cc -O3 -march=native -fopenmp"), "{header}");
    std::fs::write(
        dir.join("main.c"),
        r#"#include <stdio.h>
#include "lib1.h"
int main(void) {
    double x[4] = {1, 2, 3, 4}, *y, s, v, *g;
    int64_t dims[1];
    char err[200];
    for (int threads = 1; threads <= 2; threads++) {
        if (arden_scale(4, x, 0.5, &y, dims, &s, threads, err, sizeof err)) { printf("error %s\n", err); return 1; }
        printf("%lld %g %g %g %g %g\n", (long long)dims[0], y[0], y[1], y[2], y[3], s);
        arden_free(y);
    }
    if (arden_at(4, x, 2, &v, 1, err, sizeof err)) return 1;
    printf("%g\n", v);
    if (arden_at(4, x, 7, &v, 1, err, sizeof err)) printf("error: %s\n", err);
    if (arden_grad_sq(4, x, &g, dims, 2, err, sizeof err)) return 1;
    printf("%g %g %g %g\n", g[0], g[1], g[2], g[3]);
    arden_free(g);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("main");
    let mut argv: Vec<String> = cc.split_whitespace().map(str::to_string).collect();
    let prog = argv.remove(0);
    let status = Command::new(prog)
        .args(argv)
        .args(["-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-std=gnu99", "main.c", "lib1.c", "-lm", "-o"])
        .arg(&exe)
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(status.success());
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stdout));
    let text = String::from_utf8_lossy(&run.stdout);
    let want_err = format!("error: index out of bounds at {}:4:", src.display());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "4 0.5 1 1.5 2 5");
    assert_eq!(lines[1], "4 0.5 1 1.5 2 5");
    assert_eq!(lines[2], "3");
    assert!(lines[3].starts_with(&want_err), "{text}");
    assert!(lines[3].ends_with("index 7 into an axis of size 4"), "{text}");
    assert_eq!(lines[4], "2 4 6 8");
}

#[path = "c_build/gen.rs"]
mod hostile_gen;

fn tmp_dir(tag: &str) -> PathBuf {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}-{t}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `cc ARGS` in `dir`; the compiler's messages on failure.
fn cc(dir: &std::path::Path, args: &[&str]) -> Result<(), String> {
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    let mut argv: Vec<String> = cc.split_whitespace().map(str::to_string).collect();
    let prog = argv.remove(0);
    let out = Command::new(prog).args(argv).args(args).current_dir(dir).output().unwrap();
    if out.status.success() { Ok(()) } else { Err(format!("cc {}:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr))) }
}

fn arden_build(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_arden")).arg("build").args(args).output().unwrap()
}

/// Issue 23 (8): entries `f'` and `f_`, a tuple `x` beside `x_0`, and
/// parameters and sizes named after libc functions, macros and types gave
/// C that did not compile. Now every exported name is the prefix and an
/// injective mangling, every parameter is tagged, and the library and its
/// header (after libc's headers) compile with `-Wall -Werror`, link, run,
/// and give the interpreter's results.
#[test]
fn hostile_names_give_a_library_that_compiles() {
    if !c_compiler_or_skip("hostile_names_give_a_library_that_compiles") {
        return;
    }
    let dir = tmp_dir("hostile-names");
    let src = dir.join("names.ard");
    std::fs::write(
        &src,
        "entry f' [memset] (malloc: [memset]f64) (int64_t: f64) : f64 = sum (for i. malloc[i] * int64_t)\n\
         entry f_ [size_t] (NULL: [size_t]f64) (x: (f64, f64)) (x_0: f64) : ([size_t]f64, f64) = (for i. NULL[i] + x.0, x.1 + x_0)\n\
         entry free (INFINITY: f64) (errno: f64) (ctx: f64) (out: f64) (err: i64) (nthreads: f64) : f64 = INFINITY + errno + ctx + out + f64 err + nthreads\n\
         entry int [int] (v1: [int]f64) (ard_ctx: f64) (i: f64) (errlen: f64) : [int]f64 = for j. v1[j] * ard_ctx + i + errlen\n\
         entry f'' (main: f64) (EOF: f64) (strncpy: f64) (char: f64) : f64 = main + EOF + strncpy + char\n",
    )
    .unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_arden")).args(["check", src.to_str().unwrap()]).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    for (prefix, args) in [("arden_", vec![]), ("nm_", vec!["--prefix", "nm_"])] {
        let mut argv: Vec<&std::ffi::OsStr> = vec![src.as_os_str(), "-o".as_ref(), dir.as_os_str()];
        argv.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        let out = arden_build(&argv);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let header = std::fs::read_to_string(dir.join("names.h")).unwrap();
        for want in [
            format!("int {prefix}0f_p(int64_t s0_memset, const double *a0_malloc, double a1_int64_t, double *out, int nthreads, char *err, size_t errlen);"),
            format!(
                "int {prefix}f_(int64_t s0_size_t, const double *a0_NULL, double a1_x_0, double a1_x_1, double a2_x_0, double **out_0, int64_t out_0_dims[1], double *out_1, int nthreads, char *err, size_t errlen);"
            ),
            format!("int {prefix}0free(double a0_INFINITY, double a1_errno,"),
            format!("void {prefix}free(void *p);"),
            format!("int {prefix}int(int64_t s0_int, const double *a0_v1,"),
            format!("int {prefix}0f_p_p(double a0_main,"),
        ] {
            assert!(header.contains(&want), "{want}\n{header}");
        }
        std::fs::write(
            dir.join("main.c"),
            format!(
                r#"#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <errno.h>
#include "names.h"
int main(void) {{
    double m[3] = {{1, 2, 3}}, r, *y, s;
    int64_t dims[1];
    char e[200];
    if ({prefix}0f_p(3, m, 2, &r, 1, e, sizeof e)) return 1;
    printf("%g\n", r);
    if ({prefix}f_(3, m, 10, 20, 5, &y, dims, &s, 2, e, sizeof e)) return 1;
    printf("%lld %g %g %g %g\n", (long long)dims[0], y[0], y[1], y[2], s);
    {prefix}free(y);
    if ({prefix}0free(1, 2, 3, 4, 5, 6, &r, 1, e, sizeof e)) return 1;
    printf("%g\n", r);
    if ({prefix}int(3, m, 2, 1, 0.5, &y, dims, 1, e, sizeof e)) return 1;
    printf("%g %g %g\n", y[0], y[1], y[2]);
    {prefix}free(y);
    if ({prefix}0f_p_p(1, 2, 3, 4, &r, 1, e, sizeof e)) return 1;
    printf("%g\n", r);
    return 0;
}}
"#
            ),
        )
        .unwrap();
        cc(&dir, &["-O0", "-Wall", "-Werror", "-fopenmp", "-ffp-contract=off", "-std=gnu99", "main.c", "names.c", "-lm", "-o", "main"]).unwrap();
        let run = Command::new(dir.join("main")).output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stdout));
        assert_eq!(String::from_utf8_lossy(&run.stdout), "12\n3 11 12 13 25\n21\n3.5 5.5 7.5\n10\n");
        // the header alone, with the strictest standard C reading
        cc(&dir, &["-Wall", "-Wextra", "-Werror", "-std=c99", "-pedantic", "-fsyntax-only", "names.h"]).unwrap();
    }
    // a prefix that is not a C identifier, and one that spells a name of C
    for (bad, msg) in [("a*/b", "invalid --prefix"), ("_x", "invalid --prefix"), ("", "invalid --prefix"), ("ard_", "invalid --prefix")] {
        let out = arden_build(&[src.as_os_str(), "-o".as_ref(), dir.as_os_str(), "--prefix".as_ref(), bad.as_ref()]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(msg), "{bad}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let clash = dir.join("clash.ard");
    std::fs::write(&clash, "entry oc (x: f64) : f64 = x\n").unwrap();
    let out = arden_build(&[clash.as_os_str(), "-o".as_ref(), dir.as_os_str(), "--prefix".as_ref(), "mall".as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`malloc` of entry `oc`"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 23 (9): `arden build 'a*/b.ard'` wrote the path into a comment
/// unescaped, so `*/` ended it and the rest compiled as C. Paths with `*/`,
/// `/*`, a newline and `#include`, a quote, a backslash and a trigraph now
/// give a header and library that compile with `-Wall -Werror` (trigraphs
/// on), and the path comes back unchanged in the library's error messages.
#[test]
fn hostile_paths_stay_in_comments_and_strings() {
    if !c_compiler_or_skip("hostile_paths_stay_in_comments_and_strings") {
        return;
    }
    let dir = tmp_dir("hostile-paths");
    for (k, (sub, file)) in [("a*", "b.ard"), ("x\n#include <nothing.h>\n??/", "b.ard"), ("q\"\\*", "c*\"\\??.ard"), ("d", "/*c*.ard")].iter().enumerate() {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).unwrap();
        let src = d.join(file.trim_start_matches('/'));
        std::fs::write(&src, "entry at [n] (x: [n]f64) (i: i64) : f64 = x[i]\n").unwrap();
        let out_dir = dir.join(format!("out{k}"));
        let out = arden_build(&[src.as_os_str(), "-o".as_ref(), out_dir.as_os_str()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stem = src.file_stem().unwrap().to_str().unwrap();
        std::fs::copy(out_dir.join(format!("{stem}.c")), out_dir.join("lib.c")).unwrap();
        std::fs::copy(out_dir.join(format!("{stem}.h")), out_dir.join("lib.h")).unwrap();
        let header = std::fs::read_to_string(out_dir.join("lib.h")).unwrap();
        let first = header.split("*/").next().unwrap();
        assert!(first.contains("generated by `arden build`") && first.contains("thread-safe."), "the first comment ends early:\n{header}");
        std::fs::write(
            out_dir.join("main.c"),
            "#include <stdio.h>\n#include \"lib.h\"\nint main(void) {\n    double x[2] = {1, 2}, v;\n    char e[300];\n    if (arden_at(2, x, 5, &v, 1, e, sizeof e)) fputs(e, stdout);\n    return 0;\n}\n",
        )
        .unwrap();
        cc(&out_dir, &["-O0", "-Wall", "-Werror", "-trigraphs", "-fopenmp", "-std=gnu99", "main.c", "lib.c", "-lm", "-o", "main"]).unwrap();
        let run = Command::new(out_dir.join("main")).output().unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(text.starts_with(&format!("index out of bounds at {}:1:", src.display())), "{text}");
    }
}

/// Issue 23 (8): the header and library of every corpus program (tests/
/// programs, tests/ad_programs, examples) compile with `-Wall -Werror`:
/// each library alone (`-O0 -c`), and all headers in one C file, each
/// library with its own `--prefix`.
#[test]
fn corpus_libraries_compile_with_wall_werror() {
    if !c_compiler_or_skip("corpus_libraries_compile_with_wall_werror") {
        return;
    }
    let dir = tmp_dir("corpus-wall");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![];
    for sub in ["tests/programs", "tests/ad_programs", "examples"] {
        let mut fs: Vec<PathBuf> =
            std::fs::read_dir(root.join(sub)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "ard")).collect();
        fs.sort();
        files.extend(fs);
    }
    assert!(files.len() >= 90, "{} corpus programs", files.len());
    let mut stems = vec![];
    let mut main = String::from("#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n#include <errno.h>\n");
    for (k, f) in files.iter().enumerate() {
        let stem = format!("l{k}");
        let lib = dir.join(format!("{stem}.ard"));
        std::fs::copy(f, &lib).unwrap();
        let prefix = format!("{stem}_");
        let out = arden_build(&[lib.as_os_str(), "-o".as_ref(), dir.as_os_str(), "--prefix".as_ref(), prefix.as_ref()]);
        assert!(out.status.success(), "{}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
        let _ = writeln!(main, "#include \"{stem}.h\"");
        stems.push((stem, f.clone()));
    }
    main.push_str("int main(void) { return 0; }\n");
    std::fs::write(dir.join("main.c"), main).unwrap();
    cc(&dir, &["-Wall", "-Wextra", "-Werror", "-std=c99", "-pedantic", "-c", "main.c", "-o", "main.o"]).unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(vec![]);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((stem, f)) = stems.get(k) else { break };
                    let (c, o) = (format!("{stem}.c"), format!("{stem}.o"));
                    if let Err(e) = cc(&dir, &["-O0", "-Wall", "-Werror", "-fopenmp", "-ffp-contract=off", "-std=gnu99", "-c", &c, "-o", &o]) {
                        failures.lock().unwrap().push(format!("{}: {e}", f.display()));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of {} libraries do not compile with -Wall -Werror:\n{}", failures.len(), stems.len(), failures.join("\n"));
}

/// The deterministic twin of the cargo-fuzz target `c_emitter`: random
/// well-typed programs whose names, sizes and parameters are C keywords,
/// libc names, the generated code's own names and primed names, with
/// hostile file names and several prefixes, built through the API of
/// `arden build` and compiled and linked with `-Wall -Werror`.
/// `ARDEN_C_EMITTER_CASES` (default 40), `ARDEN_FUZZ_SEED` (default 1).
#[test]
fn random_programs_with_hostile_names_compile() {
    if !c_compiler_or_skip("random_programs_with_hostile_names_compile") {
        return;
    }
    let cases: u64 = std::env::var("ARDEN_C_EMITTER_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("ARDEN_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let dir = tmp_dir("c-emitter");
    let (mut built, mut failures, mut skipped) = (0, vec![], vec![]);
    for case in 0..cases {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(case).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let bytes: Vec<u8> = (0..256)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        let (src, file, prefix) = hostile_gen::program(&mut hostile_gen::Bytes::new(&bytes));
        match hostile_gen::build_and_compile(&src, &file, &prefix, &dir.join(format!("case{case}"))) {
            Ok(Ok(())) => built += 1,
            Ok(Err(why)) => skipped.push(format!("{src}\n{why}")),
            Err(e) => failures.push(format!("case {case} (seed {seed}): {e}")),
        }
    }
    eprintln!("{built} of {cases} random programs built and compiled, {} skipped, {} failed", skipped.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(built * 2 >= cases, "only {built} of {cases} random programs compiled in arden: the generator is off:\n{}", skipped.join("\n\n"));
}

/// Issue 28 (8): two libraries made by `arden build` (different prefixes)
/// link into one program, compiled with `-Wall -Werror`: the runtime's and
/// the entries' own functions are `static` in a library (before, both
/// defined `ard_ctx_new`, `ard_entry_0`, … and the link failed).
#[test]
fn two_libraries_link_into_one_program() {
    if !c_compiler_or_skip("two_libraries_link_into_one_program") {
        return;
    }
    let dir = tmp_dir("two-libs");
    let first = dir.join("first.ard");
    let second = dir.join("second.ard");
    std::fs::write(&first, "entry dot [n] (a: [n]f64) (b: [n]f64) : f64 = sum (for i. a[i] * b[i])\n").unwrap();
    std::fs::write(&second, "entry dot [n] (a: [n]f64) (b: [n]f64) : f64 = maximum (for i. a[i] * b[i])\n").unwrap();
    for (src, prefix) in [(&first, "one_"), (&second, "two_")] {
        let out = arden_build(&[src.as_os_str(), "-o".as_ref(), dir.as_os_str(), "--prefix".as_ref(), prefix.as_ref()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::write(
        dir.join("main.c"),
        r#"#include <stdio.h>
#include "first.h"
#include "second.h"
int main(void) {
    double a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, s, m;
    char err[200];
    if (one_dot(3, a, b, &s, 2, err, sizeof err) || two_dot(3, a, b, &m, 2, err, sizeof err)) { printf("error %s\n", err); return 1; }
    printf("%g %g\n", s, m);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("main");
    let flags = ["-O2", "-fopenmp", "-ffp-contract=off", "-std=gnu99", "-Wall", "-Werror", "main.c", "first.c", "second.c", "-lm", "-o", exe.to_str().unwrap()];
    cc(&dir, &flags).unwrap();
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stdout));
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "32 18");
}
