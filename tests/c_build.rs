//! `arden build`: the generated library and header compile with a small C
//! `main` (using the header's one-line command) and give the interpreter's
//! results and errors.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_calls_the_library() {
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    if arden::backend::c::find_compiler().is_none() {
        eprintln!("note: no C compiler: skipped");
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
    assert!(header.contains("int arden_scale(int64_t n, const double *x, double k, double **out_0, int64_t out_0_dims[1], double *out_1, int nthreads, char *err, size_t errlen);"), "{header}");
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
