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
            let ad = prog.module_at(arden::Stage::Ad);
            arden::ir::verify::verify_module(ad).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            insta::assert_snapshot!(format!("ir_{stem}"), arden::ir::print::print_module(ad));
            // what runs: after the optimiser
            arden::ir::verify::verify_module(prog.module()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            insta::assert_snapshot!(format!("opt_{stem}"), arden::ir::print::print_module(prog.module()));
        }
    });
}

/// The IR of one entry after the optimiser.
fn optimised(path: &str, entry: &str) -> String {
    let prog = arden::Program::from_file(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    arden::ir::print::print_function(prog.entry(entry).unwrap().function())
}

fn optimised_source(src: &str, entry: &str) -> String {
    let prog = arden::Program::from_source("snippet.ard", src).unwrap();
    arden::ir::print::print_function(prog.entry(entry).unwrap().function())
}

fn loops(ir: &str) -> usize {
    ir.matches(" < ").count()
}

/// Paper 001's derivations (forward mode), after the default pipeline.
#[test]
fn paper001_derivations() {
    with_big_stack(|| {
        let a20 = "tests/ad_programs/a20_paper001.ard";
        // (Mᵀ)ᵀ = M: its tangent is dM, with no loop left
        let t = optimised(a20, "d_transpose_twice");
        assert_eq!(loops(&t), 0, "{t}");
        insta::assert_snapshot!("opt_paper001_transpose_twice", t);
        // ∂(v1·v2)/∂v1 by jacfwd = v2: one loop, no inner sum
        for e in ["d_dot_v1", "d_dot_v1_loop"] {
            let t = optimised(a20, e);
            assert_eq!(loops(&t), 1, "{t}");
            insta::assert_snapshot!(format!("opt_paper001_{e}"), t);
        }
        // v × I = v: the Jacobian reads the identity, no loop over j left
        let t = optimised(a20, "d_times_identity");
        insta::assert_snapshot!("opt_paper001_times_identity", t);
        // the forward-mode gradient of a vector sum: n ones, no loop
        let t = optimised_source("entry g [n] (a: [n]f64) : [n]f64 = jacfwd (\\v -> sum v) a", "g");
        assert!(t.contains("replicate n 1.0") && loops(&t) == 0, "{t}");
        insta::assert_snapshot!("opt_paper001_jacfwd_sum", t);
        // and of logsumexp: the primal sum of exponentials leaves the loop
        // over directions (fission + LICM); the tangent of `maximum` still
        // reads the one-hot direction (a reduction no rule collapses yet)
        let t = optimised_source(
            "def lse [n] (x: [n]f64) : f64 = let m = maximum x in m + log (sum (for i. exp (x[i] - m)))\n\
             entry g [n] (a: [n]f64) : [n]f64 = jacfwd lse a",
            "g",
        );
        let outside = &t[..t.find("< n {\n    let onehot").expect("the direction loop")];
        assert!(outside.contains("exp"), "{t}");
        insta::assert_snapshot!("opt_paper001_jacfwd_logsumexp", t);
    });
}

/// Paper 000: the gradient of the self-convolution has no one-hot sum left.
#[test]
fn paper000_convolution_gradient() {
    with_big_stack(|| {
        let t = optimised("tests/ad_programs/r01_paper_conv.ard", "conv_grad");
        assert!(!t.contains("select"), "{t}");
        insta::assert_snapshot!("opt_paper000_conv_grad", t);
    });
}
