//! Surface types and declaration-level checks.
