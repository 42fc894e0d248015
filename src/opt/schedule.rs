//! The schedule text syntax (parsed by `parse`, printed by `Display`).
