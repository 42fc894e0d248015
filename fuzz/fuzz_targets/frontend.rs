//! The front end on arbitrary text: `Program::from_source` either compiles
//! (and the IR verifies) or returns located diagnostics; it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match arden::Program::from_source("fuzz.ard", text) {
        Ok(p) => {
            if let Err(e) = arden::ir::verify::verify_module(p.module()) {
                panic!("IR does not verify: {e}");
            }
        }
        Err(arden::Error::Compile { rendered, diagnostics }) => {
            assert!(!diagnostics.is_empty() && rendered.contains("fuzz.ard:"), "{rendered}");
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
});
