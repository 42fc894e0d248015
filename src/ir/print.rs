//! Stable, readable printer of the core IR (to be written).
