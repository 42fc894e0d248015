//! The C emitter of `arden build` on random well-typed programs whose
//! entry, size and parameter names are C keywords, libc names, the
//! generated code's own names, primed names and random identifiers, with
//! hostile file names and several prefixes (the generator is
//! `tests/c_build/gen.rs`, shared with the deterministic test
//! `random_programs_with_hostile_names_compile` of `tests/c_build.rs`).
//! Each library is built through `emit_library` (what `arden build` runs)
//! and compiled and linked with a C file that includes libc's headers and
//! the library's with `cc -Wall -Werror`; a compiler error is a crash.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/c_build/gen.rs"]
mod hostile_gen;

fuzz_target!(|data: &[u8]| {
    let (src, file, prefix) = hostile_gen::program(&mut hostile_gen::Bytes::new(data));
    let dir = std::env::temp_dir().join(format!("arden-fuzz-c-emitter-{}", std::process::id()));
    if let Err(e) = hostile_gen::build_and_compile(&src, &file, &prefix, &dir) {
        panic!("{e}");
    }
});
