//! Random well-typed programs with hostile identifiers for the C emitter of
//! `arden build`, and the check that their library compiles: shared by
//! `tests/c_build.rs` (seeded, in `cargo test`) and the cargo-fuzz target
//! `fuzz/fuzz_targets/c_emitter.rs` (fuzz bytes).
//!
//! A program has one to four entries whose names, size parameters and
//! parameters are drawn from C keywords, libc functions, macros and
//! types, the wrapper's and runtime's own names, primed names and random
//! identifiers; parameters are scalars, tuples and arrays; results are a
//! scalar, an array or a tuple. The file name and the prefix are drawn too
//! (file names with `*/`, newlines, quotes, trigraphs).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// The bytes that drive the choices (zeros when they run out).
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// Names that C, libc, the C++ header reader or the generated code use.
pub const HOSTILE_NAMES: &[&str] = &[
    "int",
    "double",
    "char",
    "return",
    "static",
    "struct",
    "void",
    "const",
    "auto",
    "register",
    "goto",
    "switch",
    "case",
    "default",
    "sizeof",
    "typedef",
    "union",
    "volatile",
    "inline",
    "restrict",
    "signed",
    "unsigned",
    "long",
    "short",
    "float",
    "extern",
    "main",
    "memset",
    "memcpy",
    "malloc",
    "free",
    "calloc",
    "realloc",
    "strncpy",
    "printf",
    "abort",
    "exit",
    "errno",
    "NULL",
    "INFINITY",
    "NAN",
    "EOF",
    "stdin",
    "int64_t",
    "size_t",
    "uint8_t",
    "M_PI",
    "assert",
    "isnan",
    "exp",
    "omp_get_num_threads",
    "ctx",
    "err",
    "errlen",
    "nthreads",
    "out",
    "out_0",
    "out_dims",
    "out_0_dims",
    "i",
    "v0",
    "v1",
    "v2",
    "a0_x",
    "s0_n",
    "ard_ctx",
    "ard_entry_0",
    "ard_fail",
    "ard_sizes",
    "ard_args",
    "arden_free",
    "arden_f",
    "arden_",
    "x_0",
    "x_1",
    "x",
    "n",
    "f",
    "f'",
    "f_",
    "f''",
    "f_'",
    "f'_",
    "a'b",
    "a_pb",
    "f_p",
    "f_u",
    "_",
    "_x",
    "_X",
    "__x",
    "x__",
    "class",
    "new",
    "delete",
    "this",
    "template",
    "bool",
    "true_",
    "complex",
    "_Bool",
    "p",
    "pu",
];

const PREFIXES: &[&str] = &["arden_", "arden_", "arden_", "p", "x_", "lib1_", "mylib", "f"];

/// File names (as given to `Program::from_source`: they reach source
/// locations in error messages and the header's comments).
const FILES: &[&str] = &["fuzz.ard", "a*/b.ard", "x\n#include <stdio.h>\n??/b.ard", "q\"\\.ard", "/*c*/.ard", "é\u{202e}.ard"];

fn name(b: &mut Bytes, taken: &[String]) -> String {
    {
        let n = if b.below(4) == 0 {
            let first = b.pick(&['a', 'x', 'f', 'Z', '_']);
            let len = b.below(5);
            let mut s = String::from(first);
            for _ in 0..len {
                s.push(b.pick(&['a', 'b', '0', '1', '_', '\'', 'p', 'u']));
            }
            s
        } else {
            b.pick(HOSTILE_NAMES).to_string()
        };
        if !taken.contains(&n) {
            return n;
        }
        // a fresh name when the choice is taken (and the bytes ran out)
        let mut k = taken.len();
        loop {
            let n = format!("{n}{k}'");
            if !taken.contains(&n) {
                return n;
            }
            k += 1;
        }
    }
}

#[derive(Clone, Copy)]
enum Ty {
    F64,
    I64,
    Pair,
    Arr(usize),
    ArrPair(usize),
}

/// A random program (source text), its file name and the prefix.
pub fn program(b: &mut Bytes) -> (String, String, String) {
    let mut src = String::new();
    let mut entries: Vec<String> = vec![];
    for _ in 0..1 + b.below(4) {
        let ename = name(b, &entries);
        entries.push(ename.clone());
        let mut scope: Vec<String> = vec!["ix'".into()];
        let sizes: Vec<String> = (0..b.below(3))
            .map(|_| {
                let n = name(b, &scope);
                scope.push(n.clone());
                n
            })
            .collect();
        let mut params = vec![];
        // every size is the dimension of a parameter (arden requires it)
        for k in 0..sizes.len() {
            let n = name(b, &scope);
            scope.push(n.clone());
            params.push((n, if b.below(2) == 0 { Ty::Arr(k) } else { Ty::ArrPair(k) }));
        }
        for _ in 0..b.below(4) {
            let n = name(b, &scope);
            scope.push(n.clone());
            let t = match b.below(if sizes.is_empty() { 3 } else { 5 }) {
                0 => Ty::F64,
                1 => Ty::I64,
                2 => Ty::Pair,
                3 => Ty::Arr(b.below(sizes.len())),
                _ => Ty::ArrPair(b.below(sizes.len())),
            };
            params.push((n, t));
        }
        if params.is_empty() {
            let n = name(b, &scope);
            params.push((n, Ty::F64));
        }
        let mut terms = vec![];
        let mut arr = None;
        for (n, t) in &params {
            terms.push(match t {
                Ty::F64 => n.clone(),
                Ty::I64 => format!("f64 {n}"),
                Ty::Pair => format!("{n}.0 * {n}.1"),
                Ty::Arr(s) => {
                    arr = Some((format!("{n}[ix']"), *s));
                    format!("sum {n}")
                }
                Ty::ArrPair(s) => {
                    arr = Some((format!("{n}.0[ix']"), *s));
                    format!("(sum {n}.0 + {n}.1)")
                }
            });
        }
        let e = terms.join(" + ");
        let ty = |t: &Ty| match t {
            Ty::F64 => "f64".to_string(),
            Ty::I64 => "i64".to_string(),
            Ty::Pair => "(f64, f64)".to_string(),
            Ty::Arr(s) => format!("[{}]f64", sizes[*s]),
            Ty::ArrPair(s) => format!("([{}]f64, f64)", sizes[*s]),
        };
        let (rty, body) = match (arr, b.below(3)) {
            (Some((elem, s)), 1) => (format!("[{}]f64", sizes[s]), format!("for ix'. {elem} * ({e})")),
            (Some((elem, s)), 2) => (format!("(f64, [{}]f64)", sizes[s]), format!("({e}, for ix'. {elem} - ({e}))")),
            _ => ("f64".to_string(), e),
        };
        let _ = write!(src, "entry {ename}");
        if !sizes.is_empty() {
            let _ = write!(src, " [{}]", sizes.join("]["));
        }
        for (n, t) in &params {
            let _ = write!(src, " ({n}: {})", ty(t));
        }
        let _ = writeln!(src, " : {rty} =\n  {body}");
    }
    (src, b.pick(FILES).to_string(), b.pick(PREFIXES).to_string())
}

/// Build `source` (as file `file`) as a library with `prefix` through the
/// API `arden build` uses, write it into `dir` and compile it with a C file
/// that includes libc's headers and then the library's, referring to every
/// exported function, with `-Wall -Werror`, linking both. `Ok(Err(why))`:
/// skipped, the program does not compile (a name arden rejects) or the
/// prefix spells a name of C (a reported error); `Err`: a C compiler error.
pub fn build_and_compile(source: &str, file: &str, prefix: &str, dir: &Path) -> Result<Result<(), String>, String> {
    let prog = match arden::Program::from_source(file, source) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let stem = Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "arden".into());
    let (c, h) = match arden::backend::c::emit::emit_library(prog.module(), file, &stem, prefix) {
        Ok(x) => x,
        Err(e) if e.contains("choose another --prefix") => return Ok(Err(e)),
        Err(e) => return Err(format!("emit_library: {e}\n{source}")),
    };
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("lib.c"), &c).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("lib.h"), &h).map_err(|e| e.to_string())?;
    let names = arden::backend::c::emit::exported_names(prog.module(), prefix);
    let mut main = String::from(
        "#include <stdlib.h>\n#include <string.h>\n#include <stdio.h>\n#include <math.h>\n#include <errno.h>\n#include <stdint.h>\n#include \"lib.h\"\n",
    );
    let refs: Vec<String> = names.iter().map(|n| format!("(void (*)(void)){n}")).collect();
    let _ = writeln!(main, "int main(void) {{\n    void (*const refs[])(void) = {{ (void (*)(void)){prefix}free, {} }};", refs.join(", "));
    main.push_str("    return refs[0] == 0;\n}\n");
    std::fs::write(dir.join("main.c"), &main).map_err(|e| e.to_string())?;
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    let mut argv: Vec<String> = cc.split_whitespace().map(str::to_string).collect();
    let prog_cc = argv.remove(0);
    let out = Command::new(prog_cc)
        .args(argv)
        .args(["-O0", "-Wall", "-Werror", "-fopenmp", "-ffp-contract=off", "-std=gnu99", "main.c", "lib.c", "-lm", "-o", "main"])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cc} -Wall -Werror failed:\n{}\nprogram (file {file:?}, prefix {prefix}):\n{source}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(Ok(()))
}
