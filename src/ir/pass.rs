//! Checking the IR between passes, as Dex's `checkPass` does: with checking
//! on, what lowering, `ad` and each phase of the optimiser produce goes
//! through `ir::verify`, and a failure names the pass that produced it.
//! The verifier walks the whole function, so checking is off unless asked
//! for: `ARDEN_VERIFY_PASSES=1` (the test suite sets it in
//! `.cargo/config.toml`) or `--verify-passes` ([`set_checking`]).

use super::{Function, Module, verify};
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable that turns checking on (any value but empty or `0`).
pub const ENV_VAR: &str = "ARDEN_VERIFY_PASSES";

const UNDECIDED: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// Whether passes are checked; read from [`ENV_VAR`] on first use.
static CHECKING: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether the IR is verified after every pass.
pub fn checking() -> bool {
    match CHECKING.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::env::var_os(ENV_VAR).is_some_and(|v| !v.is_empty() && v != "0");
            CHECKING.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Turn checking on or off for the rest of the process, whatever
/// [`ENV_VAR`] says (`--verify-passes`).
pub fn set_checking(on: bool) {
    CHECKING.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

/// A pass produced IR the verifier rejects: a compiler bug.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("IR invalid after pass `{pass}`: {message}")]
pub struct Invalid {
    /// the pass that produced the IR (`lower`, `ad`, `opt phase 2: …`)
    pub pass: String,
    /// the verifier's message (function, statement, what is wrong)
    pub message: String,
}

/// Verify `f` as pass `pass` left it, whether or not checking is on.
pub fn verify_after(pass: &str, f: &Function) -> Result<(), Invalid> {
    verify::verify_function(f).map_err(|message| Invalid { pass: pass.to_string(), message })
}

/// With checking on, verify `f` as pass `pass` left it.
pub fn check_function(pass: &str, f: &Function) -> Result<(), Invalid> {
    if checking() { verify_after(pass, f) } else { Ok(()) }
}

/// With checking on, verify every function of `m` as pass `pass` left it.
pub fn check_module(pass: &str, m: &Module) -> Result<(), Invalid> {
    if !checking() {
        return Ok(());
    }
    verify::verify_module(m).map_err(|message| Invalid { pass: pass.to_string(), message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Expr;
    use crate::ir::verify::testkit::*;

    #[test]
    fn a_broken_function_is_reported_with_the_pass_that_made_it() {
        let mut nm = Names::default();
        let (x, y, z) = (nm.var("x"), nm.var("y"), nm.var("z"));
        // `y` is read but bound nowhere
        let body = block(vec![let1(z, f64t(), Expr::Atom(v(y)))], vec![v(z)]);
        let f = func("broken", nm, vec![], vec![bd(x, f64t())], vec![f64t()], body);
        let e = verify_after("opt phase 2: repeat(everywhere(horizontal))", &f).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("IR invalid after pass `opt phase 2: repeat(everywhere(horizontal))`: IR verification failed in function `broken`"), "{text}");
        assert!(verify_after("lower", &dot()).is_ok());
    }
}
