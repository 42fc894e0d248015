//! Elaboration into core IR.
