//! Snapshots of the lowered IR of the examples: a change in lowering shows up
//! as a reviewed diff of `arden ir` output, and every printed module verifies.

mod common;
use common::*;

#[test]
fn lowered_ir_of_examples_is_stable() {
    with_big_stack(|| {
        for path in ard_files("examples") {
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            let prog = arden::Program::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            arden::ir::verify::verify_module(prog.module()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            insta::assert_snapshot!(format!("ir_{stem}"), arden::ir::print::print_module(prog.module()));
        }
    });
}
